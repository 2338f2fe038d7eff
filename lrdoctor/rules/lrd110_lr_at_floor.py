"""LRD110 `lr-at-floor`: The learning rate is at its floor

## Explanation
The scheduler is at or past its horizon at the end of planned training.

## Example
Healthy run that finished its schedule.

## Fix
Nothing to do.
"""

from __future__ import annotations

from collections.abc import Sequence

from lrdoctor.core.findings import Finding, Rule, Severity
from lrdoctor.core.state import RunState
from lrdoctor.rules.common import PastHorizon, fmt, horizon, past_horizon

RULE = Rule.from_module(__name__, Severity.INFO)


class LrAtFloor(PastHorizon):
    pass


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """Past the horizon as planned (or with no plan saved to tell otherwise)."""
    h = horizon(state)
    if h is None or not h.past or not h.planned_run:
        return []
    prog, unit = h.progress, h.horizon_unit
    ev = LrAtFloor(**past_horizon(h).raw())
    if h.consistent and h.planned is not None:
        # Trainer and scheduler agree; training simply ran past its plan.
        return [RULE.finding(f"{prog.name} {fmt(prog.value)} is past the horizon "
                             f"{fmt(h.horizon)} {unit}, as are the trainer's counters.", ev)]
    return [RULE.finding(f"{prog.name} {fmt(prog.value)} is past the {h.spec.kind} "
                         f"horizon {fmt(h.horizon)} {unit}; the planned end of training is not "
                         "saved, so lrdoctor cannot tell whether that was the plan.", ev)]
