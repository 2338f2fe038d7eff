"""LRD108 `scheduler-behind`: scheduler progress is behind the optimizer's update count.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD108",
    name="scheduler-behind",
    severity=Severity.WARNING,
    title="Scheduler progress is behind the optimizer's update count",
    explanation=("The scheduler advanced fewer times than the optimizer updated: steps skipped "
                 "on overflow or stepped once per rollout/epoch. By design in verl and NeMo-RL "
                 "(once per rollout step); a bug elsewhere."),
    example="DeepSpeed: `last_batch_iteration`+1 = 90, `global_steps` 100, `skipped_steps` 0.",
    fix="Step the scheduler on every successful optimizer update.",
)
