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
from lrdoctor.rules.common import ProgressEvidence, fmt, off_nominal, progress_evidence

# torch schedulers commonly stepped once per epoch, where "behind" is by design.
EPOCH_STYLE = frozenset({"StepLR", "MultiStepLR", "ExponentialLR", "ReduceLROnPlateau"})

RULE = Rule.from_module(__name__, Severity.WARNING)


class SchedulerBehind(ProgressEvidence):
    def headline(self) -> str | None:
        return self.versus("the nominal progress")


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """The scheduler advanced less than the trainer's counters (info for a per-epoch
    torch scheduler, where that is the design)."""
    ev = progress_evidence(state)
    prog, nominal = state.scheduler_progress, state.nominal_progress
    if ev is None or prog is None or nominal is None or not off_nominal(state) \
            or prog.value > nominal.value:
        return []
    ratio = prog.value / nominal.value
    severity = None
    if state.schedule is not None and state.schedule.kind in EPOCH_STYLE:
        severity = Severity.INFO
    return [RULE.finding(
        f"{prog.name} = {fmt(prog.value)} is only {ratio:.3g}x {nominal.source} = "
        f"{fmt(nominal.value)}.", SchedulerBehind(**ev.raw()), severity=severity)]
