"""LRD114 `schedule-changed-between-checkpoints`: The horizon, planned end or a schedule parameter changed between checkpoints

## Explanation
Two checkpoints of one run disagree on the schedule: the horizon or planned end was
recomputed on resume with another batch size, accumulation or epoch count (transformers PR
43718 and `auto_find_batch_size`, NeMo PRs 7518/8744), so the LR jumps at the resume and the
decay ends somewhere else than planned. Or the plan changed (`max_steps` raised on resume)
while the restored scheduler kept its old horizon (`load_state_dict` brings back `T_max`):
the finding gives the harm with the numbers, where the decay ends against the new planned
end and the LR the kept schedule gives there (a cosine past `T_max` climbs back).

## Example
checkpoint-4 -> checkpoint-8: decay horizon 12 -> 48, planned end (max_steps) 12 -> 48; at
step 4 the LR jumps from 7.5e-4 to 9.9e-4.

## Fix
Resume with the batch size, accumulation and epoch count the run started with, or fix the
horizon in updates (`max_steps`) so it does not depend on them; `lrdoctor fix --policy
extend-horizon` rewrites a checkpoint's horizon.
"""

from __future__ import annotations

from typing import Any

from lrdoctor.core.findings import Evidence, Rule, Severity, optional

RULE = Rule.from_module(__name__, Severity.ERROR)


class ScheduleChanged(Evidence):
    from_checkpoint: str
    to_checkpoint: str
    #: ``{what, from, to[, unit]}`` per changed parameter.
    changes: list[dict[str, Any]]
    lr_at_resume_old_schedule: float | None = optional()
    lr_at_resume_new_schedule: float | None = optional()
    # the planned end changed while the restored scheduler kept its horizon
    restored_horizon: float | None = optional()
    planned_end_now: float | None = optional()
    lr_at_planned_end: float | None = optional()
