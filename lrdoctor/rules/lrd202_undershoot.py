"""LRD202 `undershoot`: the loop takes fewer optimizer updates than the scheduler's budget.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD202",
    name="undershoot",
    severity=Severity.WARNING,
    title="The loop takes fewer optimizer updates than the scheduler's budget",
    explanation=("Short, densely packed sequences give fewer micro-batches than nominal: the "
                 "schedule never finishes its decay."),
    example="budget 1024 updates, 512 taken: the LR ends mid-curve.",
    fix="Make the budget follow the replayed update count.",
)
