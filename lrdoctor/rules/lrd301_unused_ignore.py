"""LRD301 `unused-ignore`: An ignore in the lrdoctor configuration matched nothing

## Explanation
An ignored code produced no finding: the ignore is stale.

## Example
ignore LRD103 for ckpt/ but no LRD103 found there.

## Fix
Remove the ignore.
"""

from __future__ import annotations

from lrdoctor.core.findings import Evidence, Rule, Severity

RULE = Rule.from_module(__name__, Severity.WARNING)


class UnusedIgnore(Evidence):
    code: str
    config_key: str
    reason: str
