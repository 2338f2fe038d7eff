"""A schedule fitted to logged (step, LR) points: the one home for every reader that has them.

A torch ``LambdaLR`` saves no lambda, so its schedule cannot be rebuilt from the
checkpoint. When the run logged its LR (Hugging Face ``trainer_state.json``
``log_history``, Lightning's ``LearningRateMonitor`` in a ``CSVLogger``
``metrics.csv``), the schedule is fitted to those points here, the same way for
every source: the transformers ``get_scheduler`` kinds that need no extra kwargs,
the warmup searched around the logged peak, each logged LR reproduced to 1e-6
relative. ``label`` names the source in the spec's ``source`` and in the notes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from lrdoctor.core.state import Counter, ScheduleSpec, Unit
from lrdoctor.read.layouts import _common

# Kinds tried when fitting a log (the ones whose lambdas need no extra kwargs).
FIT_KINDS = ("linear", "cosine", "constant_with_warmup", "constant")
FIT_TOLERANCE = 1e-6  # relative; logged LRs are floats rounded by JSON/CSV, so near-exact


def _horizons(kind: str, w: int, points: list[tuple[float, float]]) -> Sequence[int | None]:
    """The horizons ``kind`` with warmup ``w`` could have, solved from the last point in
    its decay (0 < factor < 1, past the warmup): linear ``f = (T - n) / (T - w)``, cosine
    ``f = (1 + cos(pi (n - w) / (T - w))) / 2``; the integer either side of the solution.
    [None] for the kinds that need no horizon, [] when no point lies in the decay."""
    from lrdoctor.schedules import hf as hf_sched

    if kind not in hf_sched.NEEDS_HORIZON:
        return [None]
    decay = [(n, f) for n, f in points if n > w and 1e-9 < f < 1 - 1e-9]
    if not decay:
        return []
    n, f = decay[-1]
    if kind == "linear":
        t = (n - f * w) / (1 - f)
    else:  # cosine, num_cycles 0.5
        t = w + (n - w) / (math.acos(2 * f - 1) / math.pi)
    if not math.isfinite(t) or t > _common.MAX_MAGNITUDE:
        return []
    return sorted({max(w + 1, math.floor(t)), max(w + 1, math.ceil(t))})


FIT_MAX_WARMUPS = 4096  # warmups tried one by one; a wider span is sampled (see _warmups)


def _warmups(lo: int, hi: int, scale: float) -> list[int]:
    """The warmups to try: every step between the logged points either side of the peak
    (``lo``, ``hi``, in logged steps), in the scheduler's counter (``scale`` calls per
    step). The span comes from saved values (a step, a last_epoch of 2**31): never more
    than :data:`FIT_MAX_WARMUPS` candidates. Past that, the steps a k-times-stepped
    scheduler can hit (k x a logged-step count) where those are few, else an even grid:
    a warmup between grid points is then not found, and the fit says "no schedule"
    rather than run for minutes."""
    a, b = max(0, lo - 1), hi
    if scale != 1:  # in the scheduler's counter, for either logging offset
        a, b = int(max(0, lo - 1) * scale), int(math.ceil(hi * scale))
    if b + 1 - a <= FIT_MAX_WARMUPS:
        return sorted({0, *range(a, b + 1)})
    if scale != 1 and hi + 2 - max(0, lo - 1) <= FIT_MAX_WARMUPS:
        return sorted({0, *(int(round(x * scale)) for x in range(max(0, lo - 1), hi + 2))})
    stride = -(-(b + 1 - a) // FIT_MAX_WARMUPS)
    return sorted({0, *range(a, b + 1, stride), b})


def fit_schedule(history: list[tuple[int, float]], max_lr: float,
                 max_steps: int | None, anchor: tuple[float, float] | None = None,
                 scale: float = 1.0, label: str = "log_history") -> ScheduleSpec | None:
    """The HF schedule (kind, warmup) that reproduces the logged LRs, or None.

    transformers 5 logs at step s the LR that update s used, ``max_lr *
    lambda(s - 1)``; older versions logged after the scheduler stepped,
    ``lambda(s)`` (Lightning's LearningRateMonitor too: it logs before the batch,
    at ``step`` = the updates done so far). Both offsets are tried. Warmup is
    searched only around the logged peak, where it must lie; ties go to the first
    kind in FIT_KINDS. ``anchor`` = (last_epoch, LR there), ``lambda(last_epoch)``
    exactly: it tells kinds apart that a short log (still in warmup) cannot.

    ``scale``: scheduler calls per logged step. The schedule is a function of the
    *scheduler's* counter, so a run that stepped it k times per update (accelerate's
    ``AcceleratedScheduler``, a per-micro-batch step) is fitted at ``k x step``.

    ``max_steps`` None (Lightning saves no budget): the horizon is fitted too, solved
    from a logged point in the decay and checked against all the others like the rest.
    """
    from lrdoctor.schedules import hf as hf_sched

    if not history or max_lr <= 0:
        return None
    steps = [s for s, _ in history]
    peak_i = max(range(len(history)), key=lambda i: history[i][1])
    lo = steps[peak_i - 1] if peak_i > 0 else 0
    hi = steps[peak_i + 1] + 1 if peak_i + 1 < len(steps) else steps[peak_i] + 1
    candidates = _warmups(lo, hi, scale)
    best: tuple[float, str, int, float, int | None] | None = None
    for offset in _call_offsets(scale):
        points = [(s * scale - offset, lr / max_lr) for s, lr in history]
        if anchor is not None:
            points.append((anchor[0], anchor[1] / max_lr))
        for kind in FIT_KINDS:
            for w in candidates:
                horizons = [max_steps] if max_steps is not None else _horizons(kind, w, points)
                for t in horizons:
                    spec = ScheduleSpec(family="hf", kind=kind, max_lr=max_lr,
                                        unit=Unit.UPDATES, warmup=float(w),
                                        horizon=float(t) if t is not None else None)
                    err = max(abs(hf_sched.factor(spec, n) - f) for n, f in points)
                    if best is None or err < best[0] - 1e-15:
                        best = (err, kind, w, offset, t)
    if best is None:
        return None
    err, kind, w, offset, t = best
    if err > FIT_TOLERANCE:
        return None
    k = f"{scale:g} x " if scale != 1 else ""
    if offset == scale:
        when = f"lambda({k}(step - 1))"
    elif offset:
        when = f"lambda({k}step - {offset:g})"
    else:
        when = f"lambda({k}step)"
    fitted_t = "" if max_steps is not None else (
        "; no step budget saved, so the horizon is fitted too" if t is not None else
        "; no step budget saved and the log shows no decay: a decay that starts later "
        "would look the same")
    return ScheduleSpec(family="hf", kind=kind, max_lr=max_lr, unit=Unit.UPDATES,
                        warmup=float(w), horizon=float(t) if t is not None else None,
                        source=f"fitted from {label} ({len(history)} points logged as "
                               f"{when}" + (" + the scheduler's current LR" if anchor else "")
                               + f", max rel. error {err:.1e}{fitted_t})")


def _call_offsets(scale: float) -> list[float]:
    """Scheduler calls between the logged LR and ``scale x step``: one step (the LR the
    update used, ``scale``) or none (logged after stepping) for every source; a whole
    ``scale`` k adds each call in between (a loop stepping per micro-batch that logs
    inside its window: ``k x step - 1`` after the optimizer step but before the last
    scheduler call)."""
    out = [scale, 0.0]
    if scale != 1 and float(scale).is_integer() and scale <= 64:
        out += [float(j) for j in range(1, int(scale))]
    return out


def calls_per_step(progress: Counter | None, steps: Counter | None) -> float:
    """Scheduler calls per logged step: progress / steps (a whole k when near one)."""
    if progress is None or steps is None or steps.value <= 0 or progress.value <= 0:
        return 1.0
    ratio = progress.value / steps.value
    return float(round(ratio)) if abs(ratio - round(ratio)) < 1e-9 else ratio


def current_lr(progress: Counter | None, sched: _common.Loaded | None,
               optimizer_lrs: list[float]) -> tuple[float, float] | None:
    """(scheduler progress, the LR the scheduler computed there): one more point for the fit.

    The scheduler's own ``_last_lr`` is preferred to the optimizer's, which a user may
    have set by hand (that is LRD105's business, not the fit's).
    """
    if progress is None:
        return None
    last = (sched or {}).get("_last_lr")
    lrs = [v for x in last if (v := _common._side(x)) is not None] \
        if isinstance(last, (list, tuple)) and last else []
    lrs = lrs or [x for x in optimizer_lrs if _common._side(x) is not None]
    return (progress.value, float(lrs[0])) if lrs else None


def fit(history: list[tuple[int, float]], max_lr: float, max_steps: int | None, *,
        anchor: tuple[float, float] | None, scale: float, label: str) -> ScheduleSpec | None:
    """The fit every reader runs: with the scheduler's current LR, then at ``scale`` scheduler
    calls per step (issue 9: a k x stepped LambdaLR is fitted too), then the log alone (no
    schedule explains both: diagnose compares the scheduler's LR with the fitted one)."""
    spec = fit_schedule(history, max_lr, max_steps, anchor=anchor, label=label)
    if spec is None and scale != 1:
        spec = fit_schedule(history, max_lr, max_steps, anchor=anchor, scale=scale, label=label)
    if spec is None and anchor is not None:
        spec = fit_schedule(history, max_lr, max_steps, label=label)
    return spec
