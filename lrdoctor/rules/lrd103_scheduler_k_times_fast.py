"""LRD103 `scheduler-k-times-fast`: scheduler progress is k times what the trainer's counters imply.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD103",
    name="scheduler-k-times-fast",
    severity=Severity.ERROR,
    title="Scheduler progress is k times what the trainer's counters imply",
    explanation=("The scheduler advanced k times as far as the trainer's own counters (optimizer"
                 " updates, global_step, nominal budget) say it should: it is stepped on every "
                 "micro-batch of a gradient-accumulation window, wrapped by accelerate's "
                 "`AcceleratedScheduler` (which steps `num_processes` times per call), or "
                 "stepped per dynamic micro-batch window while its budget came from nominal "
                 "batches."),
    example="`scheduler.last_epoch` 400 while AdamW `step` is 100 and `global_step` 100: k = 4.",
    fix=("Step the scheduler only when the optimizer steps (inside the accumulation branch), or "
         "divide the budget by k; repair the checkpoint with `lrdoctor fix --policy rescale`."),
)
