"""LRD108 `scheduler-behind`: Scheduler progress is behind the optimizer's update count

## Explanation
The scheduler advanced fewer times than the optimizer updated: steps skipped on overflow or
stepped once per rollout/epoch. By design in verl and NeMo-RL (once per rollout step); a bug
elsewhere. An error when, at the scheduler's rate so far, its decay cannot finish by the
planned end (the finding gives the step where it would, and the share of the decay left at
the planned end).

## Example
DeepSpeed: `last_batch_iteration`+1 = 90, `global_steps` 100, `skipped_steps` 0.

## Fix
Step the scheduler on every successful optimizer update.
"""

from __future__ import annotations

from collections.abc import Sequence

from lrdoctor.core.findings import Finding, Rule, Severity
from lrdoctor.core.state import RunState
from lrdoctor.rules.common import ProgressEvidence, fmt, off_nominal_gap

# torch schedulers commonly stepped once per epoch, where "behind" is by design.
EPOCH_STYLE = frozenset({"StepLR", "MultiStepLR", "ExponentialLR", "ReduceLROnPlateau"})

RULE = Rule.from_module(__name__, Severity.WARNING)


class SchedulerBehind(ProgressEvidence):
    against = "the nominal progress"


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """The scheduler advanced less than the trainer's counters (info for a per-epoch
    torch scheduler, where that is the design)."""
    gap = off_nominal_gap(state)
    if gap is None or gap.ratio > 1:
        return []
    ev, prog, nominal, ratio = gap.evidence, gap.progress, gap.nominal, gap.ratio
    severity = None
    if state.schedule is not None and state.schedule.kind in EPOCH_STYLE:
        severity = Severity.INFO
    return [RULE.finding(
        f"{prog.name} = {fmt(prog.value)} is only {ratio:.3g}x {nominal.source} = "
        f"{fmt(nominal.value)}.", SchedulerBehind(**ev.raw()), severity=severity)]
