"""LRD115 `scheduler-state-missing`: A checkpoint saves no scheduler state while its optimizer LR shows a schedule

## Explanation
The optimizer's param-group `lr` is not the peak LR, so a scheduler was moving it, but the
checkpoint holds no scheduler state: a resume from it builds a fresh scheduler that starts
from step 0 (warmup again, the peak LR again). DeepSpeed issues 3875/5788 (a client
scheduler not passed to `deepspeed.initialize`), Lightning 11188, transformers 27710.

## Example
global_step2: optimizer lr 6.9e-4 is 0.69x the initial_lr 1e-3, no lr_scheduler state saved.

## Fix
Save the scheduler with the checkpoint (pass it to `deepspeed.initialize`, return it from
`configure_optimizers`, keep `scheduler.pt`), or rebuild it on resume with `last_epoch` set
to the restored step.
"""

from __future__ import annotations

from typing import Any

from lrdoctor.core.findings import Evidence, Rule, Severity, optional

RULE = Rule.from_module(__name__, Severity.WARNING)


class SchedulerStateMissing(Evidence):
    checkpoint: str
    optimizer_lrs: list[float]
    peak_lr: float
    peak_from: str
    #: ``{counter, value, unit}``: where the checkpoint is in the run.
    updates: dict[str, Any] | None = optional()
    #: The nearest checkpoint that has a scheduler, and its progress ``{counter, value}``.
    checkpoint_with_scheduler: str | None = optional()
    scheduler_there: dict[str, Any] | None = optional()
