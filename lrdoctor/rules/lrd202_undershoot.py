"""LRD202 `undershoot`: The loop takes fewer optimizer updates than the scheduler's budget

## Explanation
Short, densely packed sequences give fewer micro-batches than nominal: the schedule never
finishes its decay.

## Example
budget 1024 updates, 512 taken: the LR ends mid-curve.

## Fix
Make the budget follow the replayed update count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lrdoctor.core.findings import Finding, Rule, Severity
from lrdoctor.rules.common import ReplayBudget

if TYPE_CHECKING:
    from lrdoctor.rules.replay_context import ReplayContext

RULE = Rule.from_module(__name__, Severity.WARNING)


class Undershoot(ReplayBudget, kw_only=True):
    """The replay's budget evidence: the loop takes fewer updates than budgeted."""


def check(c: ReplayContext) -> list[Finding]:
    """The scheduler stops short of its horizon: the LR never decays to its floor."""
    from lrdoctor.rules.replay_context import REL_TOL, budget_cause, short

    s = c.s
    ratio = s["progress_ratio"]
    if not ratio < 1 - REL_TOL:
        return []
    return [RULE.finding(
        f"The replayed loop advances the scheduler to only {short(s['scheduler_progress_end'])} "
        f"of {short(s['horizon'])} {c.spec.unit.value} "
        f"({ratio:.1%}): {s['actual_updates']} optimizer updates vs "
        f"{short(s['budget_updates'])} budgeted; the last LR is {short(s['lr_end'])}, the "
        f"floor {short(c.spec.min_lr)}{budget_cause(c)}.",
        Undershoot(**c.ev_core.raw()), fix=c.fix_tail, location="scheduler")]
