"""LRD106 `impossible-config`: the schedule's configuration is impossible.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD106",
    name="impossible-config",
    severity=Severity.ERROR,
    title="The schedule's configuration is impossible",
    explanation=("Warmup at or past the decay horizon, `min_lr` above `max_lr`, a non-positive "
                 "horizon or negative LRs: the schedule cannot do what was meant."),
    example="`lr_warmup_steps` 3000 >= `lr_decay_steps` 2400.",
    fix="Correct the configuration.",
)
