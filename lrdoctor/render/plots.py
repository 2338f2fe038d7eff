"""``inspect``'s figures: the LR curve with the checkpoint on it, and a run's checkpoints
on their schedule. ``replay``'s figures are :mod:`lrdoctor.render.replay_plots`, which
shares this module's headless pyplot and atomic PNG writer.

matplotlib (Agg, so headless) and numpy are imported inside each function: the
metadata path never pays for them. Every PNG is written atomically.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lrdoctor.atomic import replacing


def _pyplot():
    """matplotlib's pyplot on the headless Agg backend, or one line naming the extra."""
    from lrdoctor.extras import need

    matplotlib = need("matplotlib", "drawing a figure (--plot, the report's figures)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path, parents: bool = False, **kw: Any) -> None:
    """``fig`` as a PNG at ``path``, atomically; the figure is closed either way."""
    import matplotlib.pyplot as plt

    try:
        with replacing(path, suffix=path.suffix or ".png", parents=parents) as tmp:
            fig.savefig(tmp, format="png", **kw)
    finally:
        plt.close(fig)


def plot_inspect(reports, out: Path) -> Path:
    """A run (two or more checkpoints): :func:`plot_run`. One checkpoint: the intended LR
    curve, the position the trainer's counters imply, and where the scheduler is."""
    run = (reports[-1].extra or {}).get("run") if reports else None
    if run and len(run.get("checkpoints") or []) > 1:
        return plot_run(reports, out)
    plt = _pyplot()

    from lrdoctor.core.state import ScheduleSpec, Unit
    from lrdoctor.schedules import lr_at

    report = reports[-1]
    st = report.state
    spec_d = st.get("schedule")
    if not spec_d:
        from lrdoctor.core.errors import UnusableInput

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
    # The schedule is intended up to its decay horizon; past it the curve is what the
    # scheduler computes there (torch's cosine climbs back, Megatron holds min_lr), not an
    # intention: drawn apart and named so.
    hz = spec.horizon or None
    cut = sum(1 for x in xs if hz is None or x <= hz)
    ax.plot(xs[:cut], ys[:cut], color="#1f77b4", lw=2,
            label=f"intended {spec.family} {spec.kind} schedule"
                  + (f" (decays over {hz:,.0f})" if hz else ""))
    if cut < len(xs):
        ax.plot(xs[cut - 1:], ys[cut - 1:], color="#1f77b4", lw=1.2, ls=":",
                label="past the decay horizon: what the scheduler computes there")
    ax.axhline(spec.min_lr, color="#d62728", ls=":", lw=1, label=f"floor min_lr = {spec.min_lr:g}")
    # One line, one name: the horizon and the planned end are each named in the legend
    # only, and one line when they are the same number.
    same = bool(hz and planned and math.isclose(hz, planned, rel_tol=1e-9))
    if hz:
        ax.axvline(hz, color="gray", ls="--", lw=1,
                   label=(f"decay horizon = planned end of training ({hz:,.0f})" if same
                          else f"decay horizon ({hz:,.0f})"))
    if planned and not same:
        ax.axvline(planned, color="black", ls="-.", lw=1,
                   label=f"planned end of training ({planned:,.0f})")
    # A hollow ring under a smaller cross: both stay visible when they coincide (healthy).
    if nom:
        ax.scatter([nom["value"]], [lr_at(spec, nom["value"])], s=220, facecolors="none",
                   edgecolors="#2ca02c", linewidths=2.2, zorder=5,
                   label=f"trainer's counters imply {nom['value']:,.0f}")
    if sp:
        ax.scatter([sp["value"]], [lr_at(spec, sp["value"])], s=70, marker="X", color="#d62728",
                   zorder=6, label=f"scheduler is at {sp['value']:,.0f}")
    counts = st.get("derived", {}).get("progress_unit") or spec.unit.value
    ax.set_xlabel(f"scheduler progress ({counts})")
    ax.set_ylabel("learning rate (param group 0)")
    ax.set_title(f"{Path(report.target).name} ({report.format})", fontsize=10)
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    # Room below 0: a marker at LR 0 (a finished cosine) must not sit on the x-axis.
    top_y = max(max(ys), spec.max_lr)
    ax.set_ylim(bottom=(min(0, spec.min_lr) if spec.min_lr >= 0 else spec.min_lr * 1.1)
                - 0.06 * top_y)
    # Below the axes: inside, it sat on the curve (a torch cosine climbs back up on the right).
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2,
              frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return _save_plot(fig, out)


def _save_plot(fig, out: Path) -> Path:
    """``--plot``: an unwritable path is unusable input (one line), not a traceback."""
    out = Path(out)
    try:
        _save(fig, out, parents=True)
    except OSError as exc:
        from lrdoctor.core.errors import UnusableInput

        raise UnusableInput(f"--plot: cannot write ({exc.strerror or exc})", str(out)) from None
    return out


def plot_run(reports, out: Path) -> Path:
    """The run's history: scheduler vs nominal progress per checkpoint (top) and the LR
    (bottom: the optimizer's saved LR, the schedule at the scheduler's progress and at
    the nominal progress), with the resumes the run-level findings point at marked."""
    plt = _pyplot()

    from lrdoctor.diagnose_run import RUN_CODES

    rows = reports[-1].extra["run"]["checkpoints"]
    have_x = all(r.get("updates") for r in rows)
    xs = [r["updates"]["value"] if have_x else i for i, r in enumerate(rows)]
    unit = next((r["updates"]["unit"] for r in rows if r.get("updates")), "")
    sunit = next((r["scheduler"]["unit"] for r in rows if r.get("scheduler")), unit)
    fig, (top, bot) = plt.subplots(2, 1, figsize=(9, 7.2), dpi=110, sharex=True)
    nom = [(x, r["updates"]["value"]) for x, r in zip(xs, rows, strict=True) if r.get("updates")]
    sch = [(x, r["scheduler"]["value"]) for x, r in zip(xs, rows, strict=True)
           if r.get("scheduler")]
    # Nominal wide and pale under the scheduler's dashed line: equal (healthy) lines
    # stay two visible lines.
    if nom:
        top.plot(*zip(*nom, strict=True), "o-", color="#2ca02c", lw=5, alpha=0.45, ms=13,
                 mfc="none", mew=2, label="nominal (trainer's counters)")
    if sch:
        top.plot(*zip(*sch, strict=True), "X--", color="#d62728", ms=8, label="scheduler's progress")
    ys = [y for _, y in nom + sch]
    top.set_ylim(-0.04 * max(ys or [1]), max(ys or [1]) * 1.15)
    if have_x:
        top.set_xlim(0, max(xs) * 1.06 or 1)
    for x in (x for x, r in zip(xs, rows, strict=True) if not r.get("scheduler")):
        top.axvline(x, color="#9467bd", ls=":", lw=1.5)
        top.annotate("no scheduler state saved", (x, 0), rotation=90, ha="left", va="bottom",
                     fontsize=8, color="#9467bd", textcoords="offset points", xytext=(3, 4))
    for x, r in zip(xs, rows, strict=True):
        top.annotate(r["checkpoint"], (x, r["scheduler"]["value"] if r.get("scheduler") else
                                       (r["updates"] or {}).get("value", 0)),
                     textcoords="offset points", xytext=(4, 6), fontsize=7, color="dimgray")
    # Each line's numbers by what they count (the rows' units): the scheduler's may be calls.
    top.set_ylabel(f"progress ({unit})" if sunit == unit or not unit
                   else f"progress ({unit}; scheduler: {sunit})")
    top.set_title(f"{Path(reports[-1].target).parent.name or reports[-1].target}: progress and "
                  f"LR per checkpoint ({reports[-1].format})", fontsize=10)
    # Resumes the run-level findings point at.
    resumes = set()
    for f in reports[-1].findings:
        if f.code not in RUN_CODES:
            continue
        ev = f.evidence
        if "restarted_near" in ev:
            resumes.add(float(ev["restarted_near"]))
        elif f.code in ("LRD113", "LRD114") and have_x:
            frm = next((x for x, r in zip(xs, rows, strict=True)
                        if r["path"] == ev.get("from_checkpoint")), None)
            if frm is not None:
                resumes.add(float(frm))
    for i, x in enumerate(sorted(resumes)):
        for ax in (top, bot):
            ax.axvline(x, color="black", ls="-.", lw=1,
                       label="resume (from the findings)" if i == 0 and ax is top else None)
    lr_max = 0.0
    curves = schedule_between(reports, xs, rows) if have_x else {}
    # Widest first, so lines that coincide (a healthy run) show as nested lines. Where the
    # schedule can be rebuilt, its curve is drawn between the checkpoints (a cosine is not
    # a straight segment) and the checkpoints are markers on it.
    for key, style, color, label, kw in (
            ("lr_at_updates", "o-", "#2ca02c", "schedule at the nominal progress",
             {"lw": 6, "alpha": 0.4, "ms": 14, "mfc": "none", "mew": 2}),
            # Saved at each checkpoint only: markers, never a segment between them.
            ("optimizer_lr", "s", "#1f77b4", "optimizer param-group lr (saved at the "
             "checkpoint)", {"ms": 8}),
            ("lr_at_scheduler", "X--", "#d62728", "schedule at the scheduler's progress",
             {"lw": 1.2, "ms": 6})):
        pts = [(x, r[key]) for x, r in zip(xs, rows, strict=True) if r.get(key) is not None]
        if pts and key in curves:
            cx, cy = curves[key]
            bot.plot(cx, cy, style.strip("osX"), color=color, label=label + " (curve)",
                     **{k: v for k, v in kw.items() if k in ("lw", "alpha")})
            bot.plot(*zip(*pts, strict=True), style[0], color=color, ls="none",
                     **{k: v for k, v in kw.items() if k not in ("lw",)})
            lr_max = max([lr_max, *(y for y in cy if y == y)])
        elif pts:
            bot.plot(*zip(*pts, strict=True), style, color=color, label=label, **kw)
        if pts:
            lr_max = max([lr_max, *(y for _, y in pts)])
    bot.set_ylabel("learning rate (param group 0)")
    bot.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    bot.set_xlabel(f"nominal progress ({unit}): where the trainer's counters say training is"
                   if have_x else "checkpoint (oldest first)")
    if not have_x:
        bot.set_xticks(xs, [r["checkpoint"] for r in rows], rotation=30, fontsize=8)
    for ax in (top, bot):
        ax.grid(alpha=0.3)
    top.legend(fontsize=8, loc="upper left", frameon=False)
    bot.set_ylim(bottom=-0.06 * (lr_max or 1))  # an LR of 0 must not sit on the x-axis
    bot.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=2,
               frameon=False)
    fig.tight_layout()
    return _save_plot(fig, out)


def schedule_between(reports, xs: list[float], rows: list[dict]) -> dict[str, tuple]:
    """The rebuilt schedule between a run's checkpoints, for the trend plot: x (nominal
    progress) -> LR, ``{"lr_at_scheduler": (x, lr), "lr_at_updates": (x, lr)}``.

    The scheduler's progress is taken as linear between two checkpoints (from 0 before
    the first); the nominal curve needs the schedule to count the nominal progress's unit.
    Empty when the latest checkpoint's schedule cannot be rebuilt."""
    from lrdoctor.core.state import ScheduleSpec, Unit
    from lrdoctor.schedules import lr_or_none

    spec_d = (reports[-1].state or {}).get("schedule") if reports else None
    if not spec_d:
        return {}
    try:
        spec = ScheduleSpec(**{**spec_d, "unit": Unit(spec_d["unit"])})
    except (TypeError, ValueError, KeyError):
        return {}
    pts = [(0.0, 0.0)] + [(float(x), float(r["scheduler"]["value"]))
                          for x, r in zip(xs, rows, strict=True) if r.get("scheduler")]
    out: dict[str, tuple] = {}
    cx: list[float] = []
    cy: list[float] = []
    for (x0, s0), (x1, s1) in zip(pts, pts[1:], strict=False):
        if x1 <= x0:
            continue
        for j in range(41):
            f = j / 40
            lr = lr_or_none(spec, s0 + f * (s1 - s0))
            cx.append(x0 + f * (x1 - x0))
            cy.append(float("nan") if lr is None else lr)
    if cx and any(y == y for y in cy):
        out["lr_at_scheduler"] = (cx, cy)
    units = {(r.get("updates") or {}).get("unit") for r in rows}
    if units == {spec.unit.value} and xs:
        nx = [max(xs) * j / 400 for j in range(401)]
        ny = [lr_or_none(spec, x) for x in nx]
        if all(y is not None for y in ny):
            out["lr_at_updates"] = (nx, ny)
    return out
