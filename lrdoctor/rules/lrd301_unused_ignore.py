"""LRD301 `unused-ignore`: an ignore in the lrdoctor configuration matched nothing.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from dataclasses import dataclass

from lrdoctor.core.findings import Evidence, Rule, Severity

RULE = Rule(
    code="LRD301",
    name="unused-ignore",
    severity=Severity.WARNING,
    title="An ignore in the lrdoctor configuration matched nothing",
    explanation="An ignored code produced no finding: the ignore is stale.",
    example="ignore LRD103 for ckpt/ but no LRD103 found there.",
    fix="Remove the ignore.",
)


@dataclass(frozen=True)
class UnusedIgnore(Evidence):
    code: str
    config_key: str
    reason: str
