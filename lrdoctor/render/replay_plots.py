"""``replay``'s figures: the intended vs replayed LR and the window sizes (one run or a
sweep, with the run's events marked: dp changes, failed updates), and the report page's
updates per train step.

Split from :mod:`lrdoctor.render.plots` (``inspect``'s figures), whose headless pyplot and
atomic PNG writer these call through the module (one writer, patched in one place by the
tests). matplotlib and numpy are imported inside each function.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from lrdoctor.render import plots

if TYPE_CHECKING:
    from lrdoctor.replay.engine import Replay


def intended_lr(rep: Replay):
    """LR at the start of each train step if progress followed the budget evenly."""
    import numpy as np

    from lrdoctor.schedules import lr_at

    steps = rep.cfg.train.steps
    hz = float(rep.spec.horizon or 0.0)
    return np.array([lr_at(rep.spec, hz * s / steps) for s in range(steps + 1)])


#: What one "train step" of the replay is, per framework (the x axis of the replay's
#: figures): a plain loop's step is a data-loader batch, not a rollout.
STEP_AXIS: dict[str, str] = {
    "roll": "pipeline step (ROLL max_steps)",
    "verl": "train step (verl: one rollout batch)",
    "skyrl": "train step (SkyRL: one rollout batch)",
    "openrlhf": "train step (OpenRLHF: one rollout batch)",
    "nemo-rl": "train step (NeMo-RL: one rollout batch)",
    "rlinf": "train step (RLinf: one rollout batch)",
    "slime": "rollout step (slime: one rollout batch)",
    "fast-llm": "training iteration (Fast-LLM)",
}


def step_axis(cfg: Any) -> str:
    """The x-axis name for ``cfg``'s train steps (:data:`STEP_AXIS`)."""
    name = (getattr(cfg, "framework", None) or "").split("==")[0].strip().lower()
    name = name.replace("_", "-").replace("skyrl-train", "skyrl")
    if not name and getattr(cfg, "_format", "") == "roll-yaml":
        name = "roll"
    return STEP_AXIS.get(name, "train step (one data-loader batch)")


def replay_figure(results: list[tuple[Any, Replay]], key: str | None = None,
                  size: tuple[float, float] | None = None):
    """The replay's figure (one replay: ``[(None, rep)]``; a sweep over ``key``):

    - LR per train step, intended vs replayed (the floor and the horizon marked);
    - one replay: the first optimizer updates micro-batch by micro-batch (the LR each
      micro-batch saw, each accumulation window shaded): an LR that moves inside a
      window, or a short first window, shows at a glance;
    - one replay: micro-batches per update against k (bars; a short window is a short
      bar); a sweep: optimizer updates per train step for each value.
    """
    import numpy as np

    plt = plots._pyplot()

    from lrdoctor.replay.analysis import summarize
    from lrdoctor.rules.replay_context import per_step

    base = results[0][1]
    steps = base.cfg.train.steps
    x = np.arange(steps)
    xlabel = step_axis(base.cfg)
    if key is None:
        fig, (ax_lr, ax_mb, ax_w) = plt.subplots(
            3, 1, figsize=size or (10, 10), dpi=110,
            gridspec_kw={"height_ratios": [3, 2, 2]})
    else:
        fig, (ax_lr, ax_w) = plt.subplots(2, 1, figsize=size or (10, 7), dpi=110,
                                          gridspec_kw={"height_ratios": [3, 2]})
        ax_mb = None
    ax_lr.plot(np.arange(steps + 1), intended_lr(base), color="black", lw=2, ls="--",
               label="intended (budget followed evenly)")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    # Sweep values whose curves are equal must stay distinguishable: each value its own
    # dash pattern, the first drawn widest, so coinciding curves show as nested lines.
    dashes = ["-", (0, (6, 3)), (0, (2, 2)), (0, (8, 2, 2, 2)), (0, (1, 3))]
    n = len(results)
    floors = []
    for i, (val, rep) in enumerate(results):
        ps = per_step(rep)
        s = summarize(rep)
        label = "replayed" if key is None else f"{key.split('.')[-1]}={val}"
        c = colors[i % len(colors)]
        style = {} if key is None else {"ls": dashes[i % len(dashes)],
                                        "lw": 1.5 + 2.0 * (n - 1 - i) / max(1, n - 1)}
        ax_lr.plot(x, ps["lr"], color=c, **({"lw": 1.5} | style), label=label)
        if s["floor_step"] is not None and s["floor_step"] < steps:
            ax_lr.axvline(s["floor_step"], color=c, ls=":", lw=1)
            floors.append((s["floor_step"], c))
        if key is not None:
            # Over many steps a 0/1 per-step pattern is a solid block: the running total
            # stays readable (and where two values part is where progress differs).
            ys = ps["updates"].cumsum() if steps > 200 else ps["updates"]
            ax_w.step(x, ys, where="mid", color=c, label=label, **({"lw": 1.2} | style))
    # Each floor label at its own line, half-way up (clear of the min_lr line and of the
    # curves' tails); a sweep's values that reach the floor at one step share one label.
    at: dict[int, list[str]] = {}
    for j, (st, _) in enumerate(floors):
        at.setdefault(int(st), []).append(str(results[j][0]) if key else "")
    for st, vals in at.items():
        names = ", ".join(v for v in vals if v)
        ax_lr.annotate(f"floor at step {st}" + (f" ({names})" if names else ""),
                       (st, 0.06), xycoords=("data", "axes fraction"), rotation=90,
                       ha="right", va="bottom", fontsize=8, color="dimgray",
                       textcoords="offset points", xytext=(-3, 0))
    if key is None:
        _mark_run_events(ax_lr, base)
    ax_lr.axhline(base.spec.min_lr, color="grey", lw=0.8, ls="-.",
                  label=f"floor min_lr = {base.spec.min_lr:g}")
    ax_lr.axvline(steps, color="grey", lw=0.8, ls="--",
                  label=f"end of run: horizon {base.spec.horizon:g} {base.spec.unit.value} "
                        "reached here on budget")
    ax_lr.set_xlabel(xlabel)
    ax_lr.set_ylabel("learning rate (at the step's start)")
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax_lr.set_title(f"{base.spec.family} {base.spec.kind}: intended vs replayed LR",
                    fontsize=10)
    ax_lr.legend(fontsize=8, loc="upper right")
    ax_lr.grid(alpha=0.3)
    if key is None:
        _first_windows(ax_mb, base)
        _window_bars(ax_w, base)
    else:
        per = base.nominal_updates / steps
        if steps > 200:
            ax_w.plot(x, per * (x + 1), color="black", ls="--", lw=0.8, label="nominal")
            ax_w.set_ylabel("optimizer updates (cumulative)")
        else:
            ax_w.axhline(per, color="black", ls="--", lw=0.8, label="nominal")
            ax_w.set_ylabel("optimizer updates (per step)")
        ax_w.set_xlabel(xlabel)
        # A running total climbs to the top right: its legend goes top left.
        ax_w.legend(fontsize=8, loc="upper left" if steps > 200 else "upper right")
        ax_w.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def _first_windows(ax, rep: Replay, updates: int = 6) -> None:
    """The first ``updates`` optimizer updates, micro-batch by micro-batch: the LR each
    micro-batch saw, every accumulation window shaded (alternating), k marked."""
    import numpy as np

    t = rep.trace
    upd = np.flatnonzero(t["is_update"])
    end = int(upd[updates - 1]) + 1 if len(upd) >= updates else len(t["lr"])
    end = max(1, min(end, 400))
    lr = t["lr"][:end]
    xs = np.arange(end)
    start = 0
    for j, u in enumerate(upd[upd < end]):
        ax.axvspan(start - 0.5, u + 0.5, color="#1f77b4" if j % 2 == 0 else "#ff7f0e",
                   alpha=0.12, lw=0)
        ax.annotate(f"{int(u) - start + 1}", ((start + u) / 2, 0.97),
                    xycoords=("data", "axes fraction"), ha="center", va="top",
                    fontsize=8, color="dimgray")
        start = int(u) + 1
    ax.step(xs, lr, where="mid", color="#d62728", lw=1.5, marker="o", ms=3,
            label="LR this micro-batch saw")
    ax.set_xlim(-0.5, end - 0.5)
    ax.set_xlabel("micro-batch (index from the start of the run)")
    ax.set_ylabel("learning rate (per micro-batch)")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    k = rep.cfg.train.gradient_accumulation
    ax.set_title(f"first {min(updates, len(upd))} optimizer updates: shaded = one "
                 f"accumulation window, its size at the top (k = {k})", fontsize=9)
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi + 0.15 * (hi - lo))  # room for the sizes above the curve
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)


def _window_bars(ax, rep: Replay, first: int = 250) -> None:
    """Micro-batches per optimizer update against the nominal k, as bars: a short window
    is a short bar (a dot among thousands of dots was invisible). The whole run up to
    ``first`` updates (the first 60 of a 200-update run showed only 64s while the text
    said 32..64), else the first ``first``, said in the title; dp changes marked."""
    import numpy as np

    sizes = np.asarray(rep.trace["window_size"][rep.trace["is_update"]])
    ref, ref_label = nominal_windows(rep)
    ref = np.asarray(ref)
    m = min(len(sizes), first)
    idx = np.arange(m)
    short = sizes[:m] < ref[:m]
    ax.bar(idx[~short], sizes[:m][~short], width=0.8, color="#1f77b4",
           label="micro-batches in this update")
    if short.any():
        ax.bar(idx[short], sizes[:m][short], width=0.8, color="#d62728",
               label="fewer than nominal (short window)")
    ax.step(idx, ref[:m], where="mid", color="black", ls="--", lw=1, label=ref_label)
    n_short = int((sizes < ref).sum())
    more = f" (first {m} of {len(sizes)}; {n_short} short in all)" if len(sizes) > m \
        else f" ({n_short} short)"
    ax.set_title("window size per optimizer update" + more, fontsize=9)
    shown = [(u, ab) for u, ab in _dp_changes_by_update(rep) if u < m]
    for j, (u, _) in enumerate(shown):
        ax.axvline(u - 0.5, color="#9467bd", ls="--", lw=1,
                   label=_dp_label(shown, "update") if j == 0 else None)
    ax.set_xlabel("optimizer update (index)")
    ax.set_ylabel("window size (micro-batches)")
    # Room above the bars for the legend (up to four entries).
    ax.set_ylim(0, max(float(sizes[:m].max()) if m else 1, float(ref[:m].max()) if m else 1)
                * (1.6 if shown else 1.4))
    ax.legend(fontsize=8, loc="upper right")
    ax.grid(alpha=0.3, axis="y")


def _dp_changes(rep: Replay) -> list[tuple[int, tuple[int, int]]]:
    """The train steps where the data-parallel size changes (elastic scaling), with the
    sizes before and after, from the replay's own per-step dp."""
    from lrdoctor.rules.replay_context import per_step

    dp = [int(x) for x in per_step(rep)["dp"]]
    return [(s, (dp[s - 1], dp[s])) for s in range(1, len(dp)) if dp[s] != dp[s - 1]]


def _dp_changes_by_update(rep: Replay) -> list[tuple[int, tuple[int, int]]]:
    """The optimizer updates (index) where the trace's dp changes, with before and after."""
    import numpy as np

    t = rep.trace
    dps = np.asarray(t["dp"][t["is_update"]])
    return [(int(u), (int(dps[u - 1]), int(dps[u])))
            for u in np.flatnonzero(dps[1:] != dps[:-1]) + 1]


def _dp_label(changes: list[tuple[int, tuple[int, int]]], at: str) -> str:
    shown = "; ".join(f"{at} {x}: {a} -> {b}" for x, (a, b) in changes[:4])
    return f"dp changes ({shown}{'; ...' if len(changes) > 4 else ''})"


def _failed_steps(rep: Replay) -> list[int]:
    """The train steps holding an optimizer update that failed (its step was skipped)."""
    import numpy as np

    t = rep.trace
    if "failed" not in t:
        return []
    rows = np.asarray(t["is_update"]) & np.asarray(t["failed"])
    return sorted({int(s) for s in np.asarray(t["train_step"])[rows]})


def _mark_run_events(ax, rep: Replay) -> None:
    """On the LR panel: where dp changed (a line, "dp 4 -> 2") and the steps whose update
    failed (a cross on the replayed LR), from the replay's own trace."""
    from lrdoctor.rules.replay_context import per_step

    changes = _dp_changes(rep)
    for j, (st, _) in enumerate(changes):
        # Named once, in the legend: labels drawn at the lines hid under the legend.
        ax.axvline(st, color="#9467bd", ls="--", lw=1,
                   label=_dp_label(changes, "step") if j == 0 else None)
    failed = _failed_steps(rep)
    if failed:
        lr = per_step(rep)["lr"]
        ax.scatter(failed, [lr[s] for s in failed], marker="X", s=60, color="#d62728",
                   zorder=6, label=f"failed update ({len(failed)}: step "
                                   f"{', '.join(str(s) for s in failed[:6])}"
                                   f"{', ...' if len(failed) > 6 else ''})")


def plot_replay(results: list[tuple[Any, Replay]], path: str | Path,
                key: str | None = None) -> None:
    """One replay (``[(None, rep)]``) or a sweep over ``key``: :func:`replay_figure`."""
    fig = replay_figure(results, key)
    from lrdoctor.core.errors import UnusableInput

    path = Path(path)
    try:
        plots._save(fig, path, dpi=110)
    except OSError as exc:
        raise UnusableInput(f"--plot: cannot write: {exc.strerror or exc}", str(path)) from None


def nominal_windows(rep: Replay):
    """The reference line of the window panel, per update, and its legend label.

    Windows the accumulation rule closes: the configured k of the update's dp size
    (RLinf-style loops recompute it on scaling). Windows a strategy sets (verl's and
    SkyRL's mini-batches of dynamic micro-batches): the micro-batches the update's own
    samples take at ``micro_batch_size`` per rank, as static batching would cut them,
    not the k = gradient_accumulation = 1 those frameworks leave unset.
    """
    import numpy as np

    from lrdoctor.replay.analysis import summarize
    from lrdoctor.replay.nominal import nominal_k

    t = rep.trace
    upd = t["is_update"]
    dps = t["dp"][upd]
    if summarize(rep).get("windows_by") != "strategy":
        k_of = {int(d): nominal_k(rep.cfg, int(d)) for d in np.unique(dps)}
        return [k_of[int(d)] for d in dps], "nominal micro-batches per update"
    rows = t["applied"]
    n_up = int(upd.sum())
    samples = np.bincount(t["window"][rows], weights=t["samples"][rows], minlength=n_up)[:n_up]
    mbs = rep.cfg.train.micro_batch_size
    per_rank = samples / np.maximum(dps, 1)
    return (np.ceil(per_rank / mbs).astype(int),
            f"static equivalent: the update's samples at micro_batch_size {mbs} per rank")


def updates_per_step_plot(replay: Any, path: Path) -> Path:
    """Updates each train step took, against the nominal count: where the budget drifts."""
    plt = plots._pyplot()

    from lrdoctor.rules.replay_context import per_step

    ps = per_step(replay)
    steps = replay.cfg.train.steps
    ups = ps["updates"]
    nominal = replay.nominal_updates / steps
    fig, (ax, ax_c) = plt.subplots(1, 2, figsize=(10, 3.6), dpi=110,
                                   gridspec_kw={"width_ratios": [3, 2]})
    if steps > 200:
        # A 0/1 pattern over thousands of steps draws a solid block: a running mean over
        # 1% of the run shows the rate that matters against the nominal one.
        import numpy as np

        w = max(2, steps // 100)
        mean = np.convolve(ups, np.ones(w) / w, mode="valid")
        ax.plot(range(w, len(ups) + 1), mean, color="#1f77b4", lw=3, alpha=0.7,
                label=f"replayed (mean over {w} steps)")
    else:
        ax.step(range(1, len(ups) + 1), ups, where="mid", color="#1f77b4", lw=1.2,
                label="replayed")
    ax.axhline(nominal, color="black", ls="--", lw=1, label=f"nominal {nominal:g}")
    ax.set_xlabel(step_axis(replay.cfg))
    ax.set_ylabel("optimizer updates (per train step)")
    ax.set_title("updates per train step", fontsize=10)
    ax_c.set_title("cumulative updates vs the scheduler's budget", fontsize=10)
    ax.yaxis.get_major_locator().set_params(integer=True)
    ax.set_ylim(bottom=0, top=max(float(ups.max()), nominal) * 1.15 + 0.01)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    cum = ups.cumsum()
    xs = range(1, len(cum) + 1)
    ax_c.plot(xs, cum, color="#1f77b4", lw=1.5, label="replayed (cumulative)")
    ax_c.plot(xs, [nominal * i for i in xs], color="black", ls="--", lw=1,
              label="nominal (cumulative)")
    ax_c.axhline(replay.budget_updates, color="#d62728", ls=":", lw=1,
                 label=f"scheduler budget {replay.budget_updates:g} updates")
    hit = next((i + 1 for i, c in enumerate(cum) if c >= replay.budget_updates), None)
    if hit is not None and hit < steps:
        ax_c.axvline(hit, color="#d62728", ls=":", lw=1)
        # Above the budget and left of the step where it ran out: the replayed total is
        # below the budget there and the nominal one below it, so the words cover no line
        # (below the budget line they sat on the nominal line's end).
        # (Early in the run the words would leave the axes on the left: right of the
        # line and under the budget, where the replayed total has passed it.)
        left = hit > 0.35 * steps
        ax_c.annotate(f"budget used up at step {hit} of {steps}", (hit, replay.budget_updates),
                      textcoords="offset points", xytext=(-4, 4) if left else (4, -4),
                      ha="right" if left else "left", va="bottom" if left else "top",
                      fontsize=8, color="#d62728")
        lo, hi = ax_c.get_ylim()  # room for the words above a budget reached late
        ax_c.set_ylim(lo, max(hi, replay.budget_updates + 0.15 * (hi - lo)))
    ax_c.set_xlabel(step_axis(replay.cfg))
    ax_c.set_ylabel("optimizer updates (cumulative)")
    ax_c.legend(fontsize=8, loc="lower right")
    ax_c.grid(alpha=0.3)
    fig.tight_layout()
    plots._save(fig, path)
    return path
