"""LRD211 `stepped-on-failed-update`: the scheduler is stepped when an update fails.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD211",
    name="stepped-on-failed-update",
    severity=Severity.WARNING,
    title="The scheduler is stepped when an update fails",
    explanation="Skipped or failed updates (overflow, NaN) still advance the scheduler.",
    example="10 skipped updates advanced the scheduler 10 times.",
    fix="Step the scheduler only after a successful optimizer step.",
)
