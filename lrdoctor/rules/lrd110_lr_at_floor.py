"""LRD110 `lr-at-floor`: the learning rate is at its floor.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD110",
    name="lr-at-floor",
    severity=Severity.INFO,
    title="The learning rate is at its floor",
    explanation="The scheduler is at or past its horizon at the end of planned training.",
    example="Healthy run that finished its schedule.",
    fix="Nothing to do.",
)
