"""LRD213 `config-key-not-modelled`: A framework config key changes step accounting but is not replayed

## Explanation
replay translated the framework's own config; this key (dynamic sampling, critic warmup, a
launcher-set world size, ...) changes how many samples or updates a step has, and the replay
does not model it, so its numbers hold only without it.

## Example
verl trainer.critic_warmup: 10: the actor and its LR do not move for 10 steps.

## Fix
Check the key's effect by hand, or replay a batch log recorded from the run.
"""

from __future__ import annotations

from typing import Any

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity

RULE = Rule.from_module(__name__, Severity.WARNING)


class ConfigKeyNotModelled(Evidence):
    key: str
    value: Any


def findings(items: list[dict[str, Any]]) -> list[Finding]:
    """One finding per key of a framework's own config that changes step accounting and
    is not replayed (the translator lists them with why)."""
    return [RULE.finding(f"{it['key']} = {it['value']!r}: {it['why']}.",
                         ConfigKeyNotModelled(key=it["key"], value=it["value"]),
                         location=it["key"])
            for it in items]
