"""LRD116 `progress-ratio-changes`: Scheduler progress per update changes over the run

## Explanation
Between some checkpoints the scheduler advances at a different rate per update than before:
its step count depends on something that changed during the run (dynamic batch composition,
the accumulation or world size after a resume, a stepping rule that changed).

## Example
checkpoint-10 -> checkpoint-20: the scheduler advanced 2 per update where the run so far
advanced 1.

## Fix
Drive the scheduler by the nominal progress (samples or planned updates) so its rate does
not depend on batching; repair with `lrdoctor fix --policy nominal`.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity
from lrdoctor.rules.common import IntervalEvidence

RULE = Rule.from_module(__name__, Severity.WARNING)


class ProgressRatioChanges(IntervalEvidence, kw_only=True):
    """The first interval that differs, with every interval's ratio, the run's rate before
    (``ratio_before``) and the interval's (``ratio_in_interval``)."""
