"""LRD112 `scheduler-restarted-on-resume`: Scheduler progress went backwards or restarted while updates continued

## Explanation
Between two checkpoints of one run the trainer's counters kept growing while the scheduler's
progress fell back, or counts only the updates since a resume: the scheduler state was not
saved or not restored, so the resumed run repeats warmup and the early, high-LR part of the
schedule. Reported by users of DeepSpeed (issues 3875, 5788), Lightning (11188),
transformers (27710) and torchtitan (PR 275).

## Example
checkpoint-20 -> checkpoint-40: global_step 20 -> 40 (+20) but scheduler.last_epoch 20 -> 20
(+0): the scheduler counts only the updates since checkpoint-20.

## Fix
Save and restore the scheduler's state_dict with the optimizer's (HF: keep scheduler.pt;
DeepSpeed: pass the scheduler to deepspeed.initialize or save it in client_state); repair
the checkpoint with `lrdoctor fix --policy nominal`, which sets scheduler progress to the
trainer's counters.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity
from lrdoctor.rules.common import IntervalEvidence

RULE = Rule.from_module(__name__, Severity.ERROR)


class SchedulerRestarted(IntervalEvidence, kw_only=True):
    """With ``restarted_near``: the update count the scheduler's progress restarted at
    (``resumed_from``: the checkpoint resumed from, when one matches)."""
