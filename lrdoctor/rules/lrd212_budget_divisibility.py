"""LRD212 `budget-divisibility`: mini-batch boundaries do not divide the train batch.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD212",
    name="budget-divisibility",
    severity=Severity.ERROR,
    title="Mini-batch boundaries do not divide the train batch",
    explanation=("With a variable number of sequences per prompt, fixed-size sequence mini-"
                 "batches crash on divisibility or take extra optimizer steps."),
    example="SkyRL step-wise: 37 sequences, mini-batch 16: 3 updates instead of 2.",
    fix="Cut mini-batches at prompt boundaries.",
)
