"""LRD105 `optimizer-lr-mismatch`: Optimizer param-group `lr` disagrees with the schedule at the saved progress

## Explanation
The learning rate stored in the optimizer's param groups is not the LR the schedule gives at
the scheduler's saved progress: the schedule was changed, the LR was set by hand, or a
different scheduler drove the optimizer.

## Example
param group lr 1.0e-4, schedule says 3.0e-5 at `num_steps` 1200.

## Fix
`lrdoctor fix` rewrites the param-group `lr` to the schedule's value.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity
from lrdoctor.core.state import RunState
from lrdoctor.rules.common import LR_RTOL, fmt

RULE = Rule.from_module(__name__, Severity.WARNING)


class OptimizerLrMismatch(Evidence):
    optimizer_lrs: list[float]
    schedule_lr: float
    scheduler_progress: float

    def headline(self) -> str | None:
        if not self.optimizer_lrs:
            return None
        return f"optimizer lr {self.optimizer_lrs[0]:.3g}, schedule {self.schedule_lr:.3g}"


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """No param-group LR is the schedule's LR at the scheduler's saved progress."""
    from lrdoctor.schedules import lr_or_none

    spec, prog = state.schedule, state.scheduler_progress
    if spec is None or prog is None or not state.optimizer_lrs:
        return []
    expected = lr_or_none(spec, prog.value)
    if expected is None:
        return []
    if any(math.isclose(lr, expected, rel_tol=LR_RTOL, abs_tol=1e-15)
           for lr in state.optimizer_lrs):
        return []
    return [RULE.finding(
        f"The optimizer's param-group lr is {', '.join(f'{x:.6g}' for x in state.optimizer_lrs)} "
        f"but the {spec.kind} schedule gives {expected:.6g} at {prog.name} = {fmt(prog.value)}.",
        OptimizerLrMismatch(optimizer_lrs=list(state.optimizer_lrs), schedule_lr=expected,
                            scheduler_progress=prog.value))]
