"""LRD201 `overshoot`: the loop takes more optimizer updates than the scheduler's budget.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD201",
    name="overshoot",
    severity=Severity.ERROR,
    title="The loop takes more optimizer updates than the scheduler's budget",
    explanation=("Dynamic micro-batching (or per-micro-step stepping) consumes more scheduler "
                 "progress per train step than the budget assumed: the LR reaches its floor "
                 "early."),
    example="ROLL: budget 1024 updates, 2 updates per pipeline step: floor at step 512 of 1024.",
    fix=("Advance the scheduler by nominal/actual per update, or make the budget follow the "
         "replayed update count."),
)
