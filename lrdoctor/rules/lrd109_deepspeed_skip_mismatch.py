"""LRD109 `deepspeed-skip-mismatch`: DeepSpeed scheduler and step counters disagree

## Explanation
DeepSpeed's invariant `last_batch_iteration + 1 == global_steps - skipped_steps` does not
hold.

## Example
`last_batch_iteration` 119, `global_steps` 100, `skipped_steps` 0.

## Fix
Repair the scheduler state with `lrdoctor fix --policy nominal`.
"""

from __future__ import annotations

from collections.abc import Sequence

from lrdoctor.core.facts import Invariant
from lrdoctor.core.findings import Finding, Rule, Severity
from lrdoctor.core.state import RunState
from lrdoctor.rules.common import ProgressEvidence, law_broken

RULE = Rule.from_module(__name__, Severity.ERROR)


class DeepspeedSkipMismatch(ProgressEvidence):
    against = "global_steps - skipped_steps"


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """DeepSpeed's law ``last_batch_iteration + 1 == global_steps - skipped_steps`` does
    not hold."""
    broken = law_broken(state, Invariant.DEEPSPEED_STEPS)
    if broken is None:
        return []
    return [RULE.finding(
        broken.head()
        + (": engine.step() already steps the scheduler it was given, so the script "
           "steps it again" if broken.ratio > 1 else "") + ".",
        DeepspeedSkipMismatch(**broken.evidence.raw()))]
