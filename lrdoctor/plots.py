"""Figures for ``inspect``: the intended curve and where the checkpoint sits on it."""

from __future__ import annotations

from pathlib import Path


def plot_inspect(reports, out: Path) -> Path:
    """Intended LR curve, the position the trainer's counters imply, and where the
    scheduler actually is; one panel per inspected checkpoint (the last of --all)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lrdoctor.model import ScheduleSpec, Unit
    from lrdoctor.schedules import lr_at

    report = reports[-1]
    st = report.state
    spec_d = st.get("schedule")
    if not spec_d:
        from lrdoctor.errors import UnusableInput

        raise UnusableInput("no schedule could be rebuilt, nothing to plot", str(out))
    spec = ScheduleSpec(**{**spec_d, "unit": Unit(spec_d["unit"])})
    sp, nom = st.get("scheduler_progress"), st.get("nominal_progress")
    planned = st.get("derived", {}).get("planned_end_in_schedule_units")
    xs_max = max(v for v in [spec.horizon or 0, sp["value"] if sp else 0,
                             nom["value"] if nom else 0, planned or 0, 1] if v is not None)
    xs_max *= 1.08
    n = 600
    xs = [xs_max * i / (n - 1) for i in range(n)]
    ys = [lr_at(spec, x) for x in xs]

    fig, ax = plt.subplots(figsize=(9, 5.4), dpi=110)
    ax.plot(xs, ys, color="#1f77b4", lw=2, label=f"intended {spec.family} {spec.kind} schedule")
    if spec.horizon:
        ax.axvline(spec.horizon, color="gray", ls="--", lw=1)
        ax.annotate("decay horizon", (spec.horizon, max(ys) * 0.95), rotation=90,
                    ha="right", va="top", fontsize=8, color="gray")
    ax.axhline(spec.min_lr, color="#d62728", ls=":", lw=1, label=f"floor min_lr = {spec.min_lr:g}")
    if planned:
        ax.axvline(planned, color="black", ls="-.", lw=1, label="planned end of training")
    if nom:
        ax.scatter([nom["value"]], [lr_at(spec, nom["value"])], s=80, color="#2ca02c", zorder=5,
                   label=f"trainer's counters imply {nom['value']:,.0f}")
    if sp:
        ax.scatter([sp["value"]], [lr_at(spec, sp["value"])], s=80, marker="X", color="#d62728",
                   zorder=6, label=f"scheduler is at {sp['value']:,.0f}")
    ax.set_xlabel(f"scheduler progress ({spec.unit.value})")
    ax.set_ylabel("learning rate (param group 0)")
    ax.set_title(f"{Path(report.target).name} ({report.format})", fontsize=10)
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax.set_ylim(bottom=min(0, spec.min_lr) if spec.min_lr >= 0 else spec.min_lr * 1.1)
    # Below the axes: inside, it sat on the curve (a torch cosine climbs back up on the right).
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3,
              frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    out = Path(out)
    tmp = out.with_name(f".{out.name}.tmp.png")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(tmp, format="png")
        tmp.replace(out)
    except OSError as exc:
        from lrdoctor.errors import UnusableInput

        raise UnusableInput(f"--plot: cannot write ({exc.strerror or exc})", str(out)) from None
    finally:
        plt.close(fig)
        if tmp.exists():
            tmp.unlink()
    return out
