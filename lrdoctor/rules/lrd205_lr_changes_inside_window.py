"""LRD205 `lr-changes-inside-window`: the LR changes inside an accumulation window.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD205",
    name="lr-changes-inside-window",
    severity=Severity.ERROR,
    title="The LR changes inside an accumulation window",
    explanation=("The scheduler is stepped per micro-batch, so micro-batches of one window see "
                 "different LRs and the schedule runs k times too fast."),
    example="k=4: LR changes 3 times inside each window.",
    fix="Step the scheduler only when the optimizer steps; divide a micro-step budget by k.",
)
