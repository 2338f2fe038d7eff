"""What the replay rules (:data:`lrdoctor.rules.REPLAY`) read: :class:`ReplayContext`,
and the views of a replay's trace they share.

Why it lives with the rules: the rules judge, :mod:`lrdoctor.replay` replays and builds
this context (:func:`lrdoctor.replay.analysis.findings`). The dependency runs one way,
replay -> rules, as read -> rules does for a checkpoint's
:class:`~lrdoctor.core.state.RunState`; the replay's own types are named for the type
checker only. Whatever a rule needs that only the replay machinery can compute (the loss
divisor's LR scale needs the configured accumulation) the replay computes and hands over
in the context.

numpy is imported inside the functions: :mod:`lrdoctor.rules` is on ``inspect``'s path,
which stays light.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lrdoctor.core.numbers import number
from lrdoctor.rules.common import ReplayBudget

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from lrdoctor.core.state import ScheduleSpec
    from lrdoctor.replay.config import RunConfig
    from lrdoctor.replay.engine import Replay

    Array = NDArray[Any]

#: A replay's numbers are exact arithmetic: this is float noise, not a tolerance of
#: judgement (a checkpoint's saved values get :data:`lrdoctor.rules.common.REL_TOL`).
REL_TOL = 1e-6
#: How far an update's effective LR scale may sit from 1 before LRD215 counts it off
#: (:func:`lrdoctor.replay.loss_scale.scale` counts with it).
LOSS_SCALE_TOL = 0.02


def short(x: float | None) -> str:
    """Short human number: 1024, 0.5, 1e-06."""
    return number(x, grouping=False, whole_below=1e15, none="n/a")


def updates_vs_budget(s: dict[str, Any], way: str) -> str:
    """The replayed optimizer updates against the budget, in words that agree with a title
    saying the scheduler ran past (``way`` "more") or short (``way`` "less") of its horizon:
    "200 optimizer updates vs 200 budgeted" under "stops short" read as a contradiction
    when every budgeted update ran and each moved the scheduler less (a dp change)."""
    done, budget = s["actual_updates"], s["budget_updates"]
    if budget is not None and abs(done - budget) <= REL_TOL * max(abs(budget), 1):
        return (f"all {short(budget)} budgeted optimizer updates ran, but they advanced the "
                f"scheduler {way} than the horizon assumes")
    return f"{short(done)} optimizer updates vs {short(budget)} budgeted"


@dataclass
class ReplayContext:
    """What every replay rule reads: the replay, its summary, the memory-knob comparison,
    the shared fix text and budget evidence, and the loss divisor's LR scale
    (:func:`lrdoctor.replay.loss_scale.scale`; None without a configured divisor)."""

    rep: Replay
    s: dict[str, Any]
    knob: dict[str, Any] | None
    fix_tail: str
    ev_core: ReplayBudget
    loss_scale: dict[str, Any] | None = None

    @property
    def cfg(self) -> RunConfig:
        cfg: RunConfig = self.rep.cfg
        return cfg

    @property
    def spec(self) -> ScheduleSpec:
        return self.rep.spec

    @property
    def t(self) -> dict[str, Array]:
        return self.rep.trace


def per_step(rep: Replay) -> dict[str, Array]:
    """One row per train step: updates, scheduler advance, LR at its start (computed once
    per replay: the summary and several rules ask, and a run may have millions of steps)."""
    cache = getattr(rep, "cache", None)
    cached = cache.get("per_step") if isinstance(cache, dict) else None
    if cached is not None and cached[0] is rep.trace:
        hit: dict[str, Array] = cached[1]
        return hit
    out = _per_step(rep)
    if isinstance(cache, dict):
        cache["per_step"] = (rep.trace, out)
    return out


def _per_step(rep: Replay) -> dict[str, Array]:
    import numpy as np

    t = rep.trace
    steps = rep.cfg.train.steps
    ts = t["train_step"]
    updates = np.bincount(ts, weights=t["is_update"].astype(float), minlength=steps)
    mbs = np.bincount(ts, minlength=steps)
    end = np.full(steps, np.nan)
    first_lr = np.full(steps, np.nan)
    if len(ts):
        last_idx = np.flatnonzero(np.r_[ts[1:] != ts[:-1], True])
        first_idx = np.r_[0, last_idx[:-1] + 1]
        end[ts[last_idx]] = t["scheduler_progress"][last_idx]
        first_lr[ts[first_idx]] = t["lr"][first_idx]
    end = _ffill(end)
    start = np.r_[0.0, end[:-1]]
    dp = dp_by_step(rep.cfg, steps)
    return {"train_step": np.arange(steps), "updates": updates, "micro_batches": mbs,
            "progress_end": end, "advance": end - start, "lr": first_lr, "dp": dp}


def _ffill(a: Array) -> Array:
    """NaN replaced by the last value before it (0 before any), in numpy."""
    import numpy as np

    ok = ~np.isnan(a)
    idx = np.where(ok, np.arange(len(a)), -1)
    np.maximum.accumulate(idx, out=idx)
    return np.where(idx >= 0, a[np.maximum(idx, 0)], 0.0)


def dp_by_step(cfg: RunConfig, steps: int) -> Array:
    """The dp size of every train step (``dp.changes`` applied), in numpy."""
    import numpy as np

    out = np.full(steps, cfg.dp.size, dtype=np.int64)
    for ch in sorted(cfg.dp.changes, key=lambda c: c.at_step):
        out[ch.at_step:] = ch.size
    return out


def step_runs(infos: Any) -> list[tuple[int, int, Any]]:
    """A replay's planned steps as ``(first step, count, StepInfo)`` runs: the runs of a
    :class:`~lrdoctor.replay.planning.StepRuns` (a static run's identical steps), else one
    run per step. Whole-run readers loop over these, never over millions of steps."""
    runs = getattr(infos, "runs", None)
    if runs is not None:
        return list(runs)
    return [(i.step, 1, i) for i in infos]


def has_boundaries(rep: Replay) -> Array:
    """Per trace row: did its step's plan close windows itself (mini-batch, prompt-unit or
    document-target boundaries) rather than the accumulation rule?"""
    import numpy as np

    epochs = rep.cfg.train.epochs_per_step
    flags = [np.full(c * len(i.plan.micro_batches) * epochs, i.plan.boundaries is not None)
             for _, c, i in step_runs(rep.infos)]
    return np.concatenate(flags) if flags else np.zeros(0, dtype=bool)


def scheduler_calls_per_update(t: dict[str, Array]) -> float:
    """Mean number of scheduler advances per applied optimizer update."""
    import numpy as np

    prog = t["scheduler_progress"]
    moved = np.diff(np.r_[0.0, prog]) > 0
    ups = int(t["is_update"].sum())
    return float(moved.sum()) / ups if ups else 0.0


def notes(rep: Replay, key: str) -> list[tuple[int, Any]]:
    """The steps whose plan noted ``key`` (a packer's remark), with the note."""
    return [(a + j, i.plan.notes[key]) for a, c, i in step_runs(rep.infos)
            if key in (i.plan.notes or {}) for j in range(c)]


def budget_cause(c: ReplayContext) -> str:
    """What the budget counted, when it is not the scheduler's unit."""
    g, gen = c.ev_core.generation_batches_per_train_step, c.ev_core.generation_batches
    if c.cfg.budget.formula != "generation_steps" or g is None or gen is None:
        return ""
    return (f"; the budget counts generation batches ({short(gen)}), "
            f"the scheduler train steps ({c.cfg.train.steps}): {short(g)} generation batches "
            "per train step")


def divisibility(rep: Replay) -> tuple[str, int, Any] | None:
    """A step's samples that do not divide into the configured mini-batches or dp ranks
    (LRD212): the message, the steps affected and one example."""
    cfg = rep.cfg
    keys: tuple[str, ...] = ("fixed_size_not_divisible", "prompts_not_divisible",
                             "mini_batch_not_divisible_by_dp", "not_divisible_by_dp")
    if cfg.batching.strategy == "prompt_unit":
        # There the note says what fixed-size mini-batches *would* do: not a problem.
        keys = tuple(k for k in keys if k != "fixed_size_not_divisible")
    hits = [(k, st, v) for k in keys for st, v in notes(rep, k)]
    mini = cfg.train.mini_batch_size
    extra: list[tuple[int, int, int, int]] = []
    if mini and cfg.batching.strategy == "static":
        ps = per_step(rep)
        nominal = math.ceil((cfg.train.samples_per_step or mini) / mini) * cfg.train.epochs_per_step
        for a, c, info in step_runs(rep.infos):
            if info.samples % mini:
                extra.extend((st, info.samples, int(ps["updates"][st]), nominal)
                             for st in range(a, a + c))
    if not hits and not extra:
        return None
    if extra:
        st, n, got, nom = extra[0]
        msg = (f"Fixed-size mini-batches of {mini} sequences do not divide {len(extra)} train "
               f"step(s); e.g. step {st}: {n} sequences take {got} updates instead of {nom}.")
    else:
        k, st, v = hits[0]
        msg = f"Train step {st}: {k.replace('_', ' ')} ({v}); {len(hits)} step(s) affected."
    return msg, len(extra) or len(hits), extra[0] if extra else hits[0]


def flat_lr(c: ReplayContext) -> float | None:
    """The one LR every update sees past warmup, when the schedule does not move it over
    the replayed run nor up to its horizon (a ``constant`` schedule); None when it moves.

    Why LRD201/LRD202 ask: they say the run ends past or short of its horizon, which harms
    only through the LR. Where the LR after warmup is one value both over the progress the
    replay reached (read from the trace, exactly: every micro-batch's LR) and over the
    schedule up to its horizon (the family's ``lr_at`` on a 1,025-point grid and at the
    horizon itself), no update's LR depends on the drift, and an error would be false.
    The warmup is in the scheduler's unit either way, so it is compared out.
    """
    import numpy as np

    from lrdoctor.schedules import lr_or_none

    t, spec = c.t, c.spec
    lr = t["lr"]
    if not len(lr):
        return None
    prog = t["scheduler_progress"]
    before = np.r_[0.0, prog[:-1]]  # the progress each micro-batch's LR was set at
    past = lr[before > spec.warmup]
    if not len(past):
        return None
    value = float(past[0])
    tol = 1e-12 * max(abs(value), 1e-300)
    if float(np.max(np.abs(past - value))) > tol:
        return None
    hz = float(c.s["horizon"])
    if not math.isfinite(hz) or hz <= spec.warmup:
        return None
    grid = [*np.linspace(spec.warmup, hz, 1025)[1:].tolist(), hz]
    for p in grid:
        got = lr_or_none(spec, p)
        if got is None or abs(got - value) > tol:
            return None
    return value


def flat_lr_note(value: float) -> str:
    """What LRD201/LRD202 add when :func:`flat_lr` found the LR does not move."""
    return (f" The LR does not move past warmup ({short(value)} at every update the replay "
            "reached and up to the horizon, from the schedule's own formula), so no update's "
            "LR depends on this: informational, not an error.")
