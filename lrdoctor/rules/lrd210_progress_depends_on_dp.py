"""LRD210 `progress-depends-on-dp`: scheduler progress depends on the data-parallel size.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD210",
    name="progress-depends-on-dp",
    severity=Severity.ERROR,
    title="Scheduler progress depends on the data-parallel size",
    explanation=("After a world-size change the scheduler advances a different amount per global"
                 " batch: its increment counts micro-batches per rank rather than samples."),
    example="dp 4 -> 8: scheduler advance per step halves.",
    fix="Increment the scheduler by the global batch (samples) or once per update.",
)
