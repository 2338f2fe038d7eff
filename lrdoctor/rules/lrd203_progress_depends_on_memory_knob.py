"""LRD203 `progress-depends-on-memory-knob`: scheduler progress depends on a memory knob.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD203",
    name="progress-depends-on-memory-knob",
    severity=Severity.WARNING,
    title="Scheduler progress depends on a memory knob",
    explanation=("Changing a memory setting such as `max_tokens_per_microbatch` changes how many"
                 " optimizer updates a train step takes, and so the LR curve."),
    example="max_tokens 8192 -> 2 updates per step; 16384 -> 1 update per step.",
    fix="Drive the scheduler by samples or nominal progress, not by update count.",
)
