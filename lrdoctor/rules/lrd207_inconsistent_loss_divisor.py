"""LRD207 `inconsistent-loss-divisor`: the loss divisor is not the step's global document total.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD207",
    name="inconsistent-loss-divisor",
    severity=Severity.ERROR,
    title="The loss divisor is not the step's global document total",
    explanation=("With a document target, each micro-batch must divide by the global document "
                 "count of the whole step; a per-micro-batch or per-rank divisor weights "
                 "documents unequally."),
    example="divisor 8 on one micro-batch, 32 on the step.",
    fix="All-reduce the step's document count and broadcast it to every micro-batch.",
)
