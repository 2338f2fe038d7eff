"""LRD113 `progress-double-counted-on-resume`: Scheduler progress jumped by more than the updates between two checkpoints

## Explanation
The scheduler advanced more between two checkpoints than the updates in between, by the
progress it had at the resume: the loop steps the restored scheduler by its own progress
again after `load_state_dict` (an extra `scheduler.step(iteration * global_batch_size)`,
THUDM/slime PR 1547, radixark/miles PR 1627), so every resume moves the LR ahead.

## Example
iter_0000010 -> iter_0000020: consumed samples 160 -> 320 (+160) but num_steps 160 -> 480
(+320): the excess 160 is the progress saved at iter_0000010.

## Fix
Do not step the scheduler after loading its state (the state already holds the progress);
repair the checkpoint with `lrdoctor fix --policy nominal`.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity
from lrdoctor.rules.common import IntervalEvidence

RULE = Rule.from_module(__name__, Severity.ERROR)


class ProgressDoubleCounted(IntervalEvidence, kw_only=True):
    """With ``excess`` and ``excess_matches`` (``{what, value, multiple}``): the progress
    the resume added again."""
