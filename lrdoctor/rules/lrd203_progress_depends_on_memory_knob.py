"""LRD203 `progress-depends-on-memory-knob`: Scheduler progress depends on a memory knob

## Explanation
Changing a memory setting such as `max_tokens_per_microbatch` changes how many optimizer
updates a train step takes, and so the LR curve.

## Example
max_tokens 8192 -> 2 updates per step; 16384 -> 1 update per step.

## Fix
Drive the scheduler by samples or nominal progress, not by update count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity

if TYPE_CHECKING:
    from lrdoctor.rules.replay_context import ReplayContext

RULE = Rule.from_module(__name__, Severity.WARNING)


class MemoryKnob(Evidence):
    key: str
    #: (knob value, optimizer updates, scheduler progress at the end) per value tried.
    rows: list[tuple[Any, int, float]]


def check(c: ReplayContext) -> list[Finding]:
    """A memory knob (micro-batch size, token cap) changes scheduler progress."""
    from lrdoctor.rules.replay_context import short

    knob = c.knob
    if not (knob and knob.get("differs")):
        return []
    rows = "; ".join(f"{knob['key'].split('.')[-1]} {short(v)}: {short(u)} updates, "
                     f"progress {short(p)}" for v, u, p in knob["rows"])
    return [RULE.finding(
        f"Scheduler progress depends on {knob['key']} ({knob['source']}): {rows}.",
        MemoryKnob(key=knob["key"], rows=knob["rows"]), location=knob["key"])]
