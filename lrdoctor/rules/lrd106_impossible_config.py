"""LRD106 `impossible-config`: The schedule's configuration is impossible

## Explanation
Warmup at or past the decay horizon, `min_lr` above `max_lr`, a non-positive horizon or
negative LRs: the schedule cannot do what was meant.

## Example
`lr_warmup_steps` 3000 >= `lr_decay_steps` 2400.

## Fix
Correct the configuration.
"""

from __future__ import annotations

from collections.abc import Sequence

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity
from lrdoctor.core.state import RunState

RULE = Rule.from_module(__name__, Severity.ERROR)


class ImpossibleConfig(Evidence):
    schedule: str
    source: str


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """One finding per problem :func:`lrdoctor.schedules.problems` names."""
    spec = state.schedule
    if spec is None:
        return []
    from lrdoctor.schedules import problems

    return [RULE.finding(msg, ImpossibleConfig(schedule=spec.kind, source=spec.source))
            for msg in problems(spec)]
