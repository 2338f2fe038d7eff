"""LRD202 `undershoot`: The scheduler stops short of its horizon

## Explanation
Short, densely packed sequences (fewer updates than budgeted) or a horizon sized in another
unit leave the scheduler short of its horizon: the schedule never finishes its decay. Where
the LR does not move past warmup (a constant schedule) no update's LR changes, and the
finding is informational.

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
#: What it rests on (replay_context.with_provenance): the run's length, where the planned
#: end falls against the horizon; an assumed length (RLinf without its data) caps it.
RUN_LENGTH = True
#: Of the sample lengths, only the updates and the scheduler's progress.
LENGTHS = "progress"


class Undershoot(ReplayBudget, kw_only=True):
    """The replay's budget evidence: the scheduler stops short of its horizon."""


def check(c: ReplayContext) -> list[Finding]:
    """The scheduler stops short of its horizon: the LR never decays to its floor."""
    from lrdoctor.rules.replay_context import (
        REL_TOL,
        budget_cause,
        flat_lr,
        flat_lr_note,
        short,
        updates_vs_budget,
    )

    s = c.s
    ratio = s["progress_ratio"]
    if not ratio < 1 - REL_TOL:
        return []
    flat = flat_lr(c)
    return [RULE.finding(
        f"The replayed loop advances the scheduler to only {short(s['scheduler_progress_end'])} "
        f"of {short(s['horizon'])} {c.spec.unit.value} "
        f"({ratio:.1%}): {updates_vs_budget(s, 'less')}; the last LR is {short(s['lr_end'])}, the "
        f"floor {short(c.spec.min_lr)}{budget_cause(c)}."
        + (flat_lr_note(flat) if flat is not None else ""),
        Undershoot(**c.ev_core.raw()), fix=c.fix_tail, location="scheduler",
        severity=Severity.INFO if flat is not None else None)]
