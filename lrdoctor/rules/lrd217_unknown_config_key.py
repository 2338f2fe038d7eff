"""LRD217 `unknown-config-key`: A config key is not in the framework's schema

A key of a known framework's config section that its schema does not have, close to one it
does: a misspelling. Only near misses are reported (a key far from every known one may be
a newer framework version's), each naming the nearest known key.

## Explanation
replay translated the framework's own config. This key is not a field of the section's
schema in the framework, but it is one or two letters from one that is: the setting the
key was meant to change keeps its default in the framework, and the replay (which reads
the schema's keys only) ran with that default too.

## Example
ROLL actor_train.use_dynamic_batching_in_trian: true: WorkerConfig has
use_dynamic_batching_in_train (default false), so dynamic batching stays off.

## Fix
Rename the key to the one the framework reads (the finding names it), or delete it.
"""

from __future__ import annotations

from typing import Any

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity

RULE = Rule.from_module(__name__, Severity.WARNING)


class UnknownConfigKey(Evidence):
    key: str
    value: Any
    nearest: str
    schema: str


def findings(items: list[dict[str, Any]]) -> list[Finding]:
    """One finding per near-miss key (the translator lists them with the nearest key)."""
    return [RULE.finding(
        f"{it['key']} = {it['value']!r} is not a key of {it['schema']}; the nearest one is "
        f"{it['nearest']}, which keeps its default (the replay ran with it too).",
        UnknownConfigKey(key=it["key"], value=it["value"], nearest=it["nearest"],
                         schema=it["schema"]),
        fix=f"Rename {it['key']} to {it['nearest']} if that is the setting meant, or delete it.",
        location=it["key"]) for it in items]
