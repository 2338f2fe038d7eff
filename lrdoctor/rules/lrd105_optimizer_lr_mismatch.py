"""LRD105 `optimizer-lr-mismatch`: Optimizer param-group `lr` disagrees with the schedule at the saved progress

## Explanation
The learning rate stored in the optimizer's param groups is not the LR the schedule gives at
the scheduler's saved progress: the schedule was changed, the LR was set by hand, or a
different scheduler drove the optimizer.

## Example
param group lr 1.0e-4, schedule says 3.0e-5 at `num_steps` 1200.

A torch scheduler whose ``last_epoch`` was advanced without its own ``step()`` (which
counts itself in ``_step_count``: still 1 past construction) was driven by a wrapper that
sets the LR from ``get_lr()`` and then increments ``last_epoch`` (PyTorch-Ignite's
``LRScheduler`` handler): the LR is the schedule one call behind the counter. When the
saved LR is exactly that, it is no mismatch: an info finding says so, with both numbers.

## Fix
`lrdoctor fix` rewrites the param-group `lr` to the schedule's value.
"""

from __future__ import annotations

from collections.abc import Sequence

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity
from lrdoctor.core.state import RunState
from lrdoctor.rules.common import fmt, lr_matches, set_then_advanced_lr

RULE = Rule.from_module(__name__, Severity.WARNING)


class OptimizerLrMismatch(Evidence):
    optimizer_lrs: list[float]
    schedule_lr: float
    scheduler_progress: float

    def headline(self) -> str | None:
        if not self.optimizer_lrs:
            return None
        if lr_matches(self.optimizer_lrs, self.schedule_lr):  # the info case: one call behind
            return (f"optimizer lr {self.optimizer_lrs[0]:.3g} = the schedule at "
                    f"{fmt(self.scheduler_progress)}, one call behind its counter")
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
    if lr_matches(state.optimizer_lrs, expected):
        return []
    behind = set_then_advanced_lr(state)
    if behind is not None and lr_matches(state.optimizer_lrs, behind):
        return [RULE.finding(
            f"The optimizer's param-group lr "
            f"{', '.join(f'{x:.6g}' for x in state.optimizer_lrs)} is the {spec.kind} "
            f"schedule one call behind {prog.name} = {fmt(prog.value)} (at "
            f"{fmt(prog.value - 1)}: {behind:.6g}): scheduler._step_count = "
            f"{fmt(float(state.extras['scheduler._step_count']))}, so the counter was advanced "
            "without the scheduler's step(), by a wrapper that sets the LR before advancing it "
            "(PyTorch-Ignite's LRScheduler handler does); consistent.",
            OptimizerLrMismatch(optimizer_lrs=list(state.optimizer_lrs), schedule_lr=behind,
                                scheduler_progress=prog.value - 1),
            severity=Severity.INFO, fix="Nothing to fix.")]
    return [RULE.finding(
        f"The optimizer's param-group lr is {', '.join(f'{x:.6g}' for x in state.optimizer_lrs)} "
        f"but the {spec.kind} schedule gives {expected:.6g} at {prog.name} = {fmt(prog.value)}.",
        OptimizerLrMismatch(optimizer_lrs=list(state.optimizer_lrs), schedule_lr=expected,
                            scheduler_progress=prog.value))]

