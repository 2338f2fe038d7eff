"""LRD106 `impossible-config`: the schedule's configuration is impossible.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity
from lrdoctor.core.state import RunState

RULE = Rule(
    code="LRD106",
    name="impossible-config",
    severity=Severity.ERROR,
    title="The schedule's configuration is impossible",
    explanation=("Warmup at or past the decay horizon, `min_lr` above `max_lr`, a non-positive "
                 "horizon or negative LRs: the schedule cannot do what was meant."),
    example="`lr_warmup_steps` 3000 >= `lr_decay_steps` 2400.",
    fix="Correct the configuration.",
)


@dataclass(frozen=True)
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
