"""LRD118 `decay-unfinished-at-planned-end`: The decay horizon lies past the planned end of training

## Explanation
Training ends before the schedule finishes its decay, so the last updates run at a higher LR
than planned. Megatron with `--rampup-batch-size` and iteration-based training sizes the
horizon as `lr_decay_iters x global_batch_size` (the final batch) while the ramp's early
iterations consume fewer samples (Megatron-Bridge issue 2609); lrdoctor computes the samples
along the ramp as megatron-core's ramp-up calculator does.

## Example
train_iters 40, global batch 16, ramp-up 4 -> 16 over 96 samples: 544 samples consumed,
horizon 640: training ends at 34% of the decay left.

## Fix
Size the horizon from the real progress at the planned end (Megatron: train by samples with
`--train-samples`/`--lr-decay-samples` under a ramp-up); `lrdoctor fix --policy
extend-horizon` rewrites a checkpoint's horizon.
"""

from __future__ import annotations

from collections.abc import Sequence

from lrdoctor.core.facts import Rampup
from lrdoctor.core.findings import Evidence, Finding, Rule, Severity, optional
from lrdoctor.core.state import RunState
from lrdoctor.rules.common import REL_TOL, fmt, planned_end_in_schedule_units, progress_ratio

RULE = Rule.from_module(__name__, Severity.ERROR)


class DecayUnfinished(Evidence):
    horizon: float
    planned_end: float
    planned_end_from: str
    unit: str
    lr_at_planned_end: float
    min_lr: float
    decay_left_fraction: float
    #: A scheduler stepped this many times per update reaches the planned end this far.
    scheduler_pace: float | None = optional()
    rampup: Rampup | None = optional()


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """The decay horizon lies past the planned end, so training ends with the LR still
    above its floor (a horizon of iterations x the final global batch under a batch-size
    ramp-up; a horizon sized for another run length)."""
    from lrdoctor.schedules import lr_or_none

    spec, end = state.schedule, state.planned_end
    planned = planned_end_in_schedule_units(state)
    if spec is None or end is None or planned is None or not spec.horizon or planned <= 0:
        return []
    # Where the scheduler will be at the planned end: a scheduler stepped k times per
    # update (LRD103's to report) gets there k times as far, the same pace
    # `fix --policy extend-horizon` sizes the horizon by.
    ratio = progress_ratio(state)
    pace = ratio if ratio is not None and ratio > 1 + REL_TOL else 1.0
    planned *= pace
    horizon = float(spec.horizon)
    if horizon <= planned * (1 + 1e-9):
        return []
    lr_end = lr_or_none(spec, planned)
    span = spec.max_lr - spec.min_lr
    if lr_end is None or span <= 0 or lr_end - spec.min_lr <= 0.01 * span:
        return []
    unit = state.horizon_counts() or spec.unit.value
    end_unit = state.unit_of(end)
    left = round((lr_end - spec.min_lr) / span, 6)
    ramp = state.facts.rampup
    why = ""
    fix = None
    if ramp is not None and ramp.samples_at_train_iters is not None:
        why = (f": {end.source.split(':')[-1]} takes {fmt(planned)} samples, while the "
               f"horizon counts lr_decay_iters x the final global batch "
               f"{ramp.global_batch_size}")
        fix = ("With a batch-size ramp-up train by samples (--train-samples, "
               "--lr-decay-samples), so the horizon counts what the ramp really consumes, or "
               f"set the decay horizon to {fmt(planned)} samples; `lrdoctor fix --policy "
               "extend-horizon` rewrites a checkpoint's horizon.")
    else:
        ramp = None
    return [RULE.finding(
        f"The decay horizon ({fmt(horizon)} {unit}) lies past the planned end of training "
        f"({end.name} = {fmt(planned / pace)} {end_unit}"
        + (f", where the scheduler, stepped {pace:.4g}x per update, reaches {fmt(planned)}"
           if pace != 1.0 else "")
        + f"){why}: training ends at LR {lr_end:.6g}, "
        f"{left:.0%} of the decay not done (min_lr {spec.min_lr:g}).",
        DecayUnfinished(horizon=horizon, planned_end=planned, planned_end_from=end.source,
                        unit=unit, lr_at_planned_end=lr_end, min_lr=spec.min_lr,
                        decay_left_fraction=left,
                        scheduler_pace=round(pace, 6) if pace != 1.0 else None, rampup=ramp),
        fix=fix)]
