"""LRD109 `deepspeed-skip-mismatch`: deepSpeed scheduler and step counters disagree.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD109",
    name="deepspeed-skip-mismatch",
    severity=Severity.ERROR,
    title="DeepSpeed scheduler and step counters disagree",
    explanation=("DeepSpeed's invariant `last_batch_iteration + 1 == global_steps - "
                 "skipped_steps` does not hold."),
    example="`last_batch_iteration` 119, `global_steps` 100, `skipped_steps` 0.",
    fix="Repair the scheduler state with `lrdoctor fix --policy nominal`.",
)
