"""LRD206 `variable-updates-per-train-step`: the number of optimizer updates varies between train steps.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD206",
    name="variable-updates-per-train-step",
    severity=Severity.WARNING,
    title="The number of optimizer updates varies between train steps",
    explanation=("Each train batch takes a different number of updates, so scheduler progress "
                 "per train step is data-dependent."),
    example="updates per pipeline step range 1..3.",
    fix="Advance the scheduler by nominal/actual per update.",
)
