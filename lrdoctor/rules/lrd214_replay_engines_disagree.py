"""LRD214 `replay-engines-disagree`: The real torch loop disagrees with the fast replay

## Explanation
With `--cross-check`, `replay` runs the fast path over the whole run and the real torch loop
(optimizer, scheduler, probe model) over a sample: the first train steps and a segment at
each dp change or failed update. Every sampled micro-batch's window, update, scheduler
progress, LR and loss weight must agree; where they do not, the fast path's numbers are not
backed by a real execution.

## Example
lr at trace row 96: fast 0.000412, torch 0.000398.

## Fix
Replay the whole run with `--torch` and report the config to lrdoctor.
"""

from __future__ import annotations

from typing import Any

from lrdoctor.core.findings import Evidence, Rule, Severity

RULE = Rule.from_module(__name__, Severity.WARNING)


class EnginesDisagree(Evidence):
    #: The cross-check as run: micro-batches compared, the columns that disagree, ...
    cross_check: dict[str, Any]
