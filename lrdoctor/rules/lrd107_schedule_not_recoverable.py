"""LRD107 `schedule-not-recoverable`: The intended schedule could not be recovered fully

## Explanation
The checkpoint does not save everything needed to rebuild the schedule (LambdaLR saves no
lambdas; HF keeps warmup in training_args.bin). lrdoctor says where what it used came from.

## Example
LambdaLR in a plain torch checkpoint with no budget saved.

## Fix
Give the schedule to `lrdoctor fix --schedule` (the replay config's schedule section, inline
or a YAML file) or `--from-replay` when repairing.
"""

from __future__ import annotations

from collections.abc import Sequence

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity, optional
from lrdoctor.core.state import RunState

RULE = Rule.from_module(__name__, Severity.INFO)


class ScheduleNotRecoverable(Evidence):
    """``format``: no schedule at all; ``source``: one fitted to logged LRs."""

    format: str | None = optional()
    source: str | None = optional()


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    spec = state.schedule
    if spec is None:
        why = "; ".join(state.notes) or "the checkpoint does not save the schedule"
        return [RULE.finding(f"No schedule could be rebuilt: {why}.",
                             ScheduleNotRecoverable(format=state.format))]
    if spec.source and "fitted" in spec.source:
        return [RULE.finding(f"Schedule {spec.kind!r} was {spec.source}; the schedule LRs "
                             "reported rest on that fit.",
                             ScheduleNotRecoverable(source=spec.source))]
    return []
