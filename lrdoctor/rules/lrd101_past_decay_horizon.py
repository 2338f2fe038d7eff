"""LRD101 `past-decay-horizon`: Scheduler is past its decay horizon before the planned end of training

## Explanation
The scheduler's progress exceeds the horizon it decays over (Megatron `lr_decay_steps`, HF
`num_training_steps`, torch `T_max`/`total_steps`) while the trainer's own counters say
training is not over. Megatron silently clamps the LR to `min_lr` from there on, so the rest
of the run trains at the floor. A counter one past the horizon is no finding when the saved
LR is the schedule one call behind it and the torch state shows ``last_epoch`` advanced
without ``step()`` (``_step_count`` 1: PyTorch-Ignite's handlers set the LR, then advance).

## Example
ROLL checkpoint: `num_steps` 8429 vs `lr_decay_steps` 2400 at iteration 2400 of 2400 planned
updates: 72% of the progress happened at `min_lr`.

## Fix
Make scheduler progress follow the nominal budget (`lrdoctor fix --policy nominal`) or move
the horizon to the real update count (`--policy extend-horizon`, what `lrdoctor fix` does
when LRD101 is alone); at the source, advance the scheduler by nominal/actual per update or
compute the budget from the real micro-batch count. Next to LRD103/LRD104/LRD109 it follows
from that finding and is repaired with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from lrdoctor.core.findings import Finding, Rule, Severity
from lrdoctor.core.state import RunState
from lrdoctor.rules.common import (
    LiveEvidence,
    PastHorizon,
    fmt,
    horizon,
    lr_matches,
    past_horizon,
    set_then_advanced_lr,
)

RULE = Rule.from_module(__name__, Severity.ERROR)


class PastDecayHorizon(PastHorizon):
    pass


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """Past the horizon while the trainer's counters say training is not over."""
    h = horizon(state)
    if h is None or not h.past or h.planned_run:
        return []
    spec, prog = h.spec, h.progress
    behind = set_then_advanced_lr(state)
    if (behind is not None and lr_matches(state.optimizer_lrs, behind)
            and prog.value - 1 <= h.horizon):
        # The saved LR is the schedule one call behind the counter (a wrapper that sets the LR
        # and then advances last_epoch, PyTorch-Ignite's): the LR the updates got is at or
        # before the horizon, so nothing ran past it (LRD105 info names both numbers).
        return []
    base = past_horizon(h)
    lr_now = base.lr_at_scheduler_progress
    # Megatron/HF/DeepSpeed hold min_lr past the horizon; torch's CosineAnnealingLR climbs
    # back: the model says which (schedules.shape), the LR now says how far.
    from lrdoctor.schedules import shape

    holds = lr_now is None or not shape(spec).wraps or math.isclose(
        lr_now, spec.min_lr, rel_tol=1e-6, abs_tol=1e-15)
    trainer, end = state.trainer_progress, state.planned_end
    where = ""
    done = reached = None
    if trainer is not None and end is not None and end.value:
        done = trainer.value / end.value
        where = (f" at {trainer.name} {fmt(trainer.value)} of {fmt(end.value)}"
                 f" planned ({done:.0%} of training)")
        # Where in training the floor was reached, if progress grew linearly.
        reached = done * h.horizon / prog.value
        where += (f"; the LR reached its floor at about {reached:.0%} of training" if holds
                  else f"; the planned decay ended at about {reached:.0%} of training")
    at_floor = (prog.value - h.horizon) / prog.value
    tail = (f"{at_floor:.0%} of the scheduler's progress ran at min_lr {spec.min_lr:g}"
            if holds else
            f"{at_floor:.0%} of the scheduler's progress lies past the horizon, where "
            f"{spec.kind} does not hold min_lr {spec.min_lr:g}: it climbs back up (the LR is "
            f"{lr_now:.6g} now)")
    ev = PastDecayHorizon(**{
        **base.raw(),
        "training_fraction_done": None if done is None else round(done, 6),
        "floor_reached_at_training_fraction": None if reached is None else round(reached, 6),
        "ratio_to_nominal": round(h.ratio, 6) if h.ratio is not None and h.ratio > 1 else None})
    f = RULE.finding(
        f"{prog.name} = {fmt(prog.value)} is {prog.value / h.horizon:.2f}x the decay horizon "
        f"{fmt(h.horizon)} {h.horizon_unit}{where}: {tail}.", ev)
    if end is None:  # the title's "before the planned end" would claim a number no file holds
        f.title = "Scheduler is past its decay horizon (the checkpoint holds no planned end)"
    return [f]


class LiveHorizon(LiveEvidence, kw_only=True):
    """The live guard: the scheduler reached its horizon before the loop's last update."""

    scheduler_progress: float
    horizon: float
    optimizer_updates: int
    max_steps: float
