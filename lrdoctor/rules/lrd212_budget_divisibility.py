"""LRD212 `budget-divisibility`: Mini-batch boundaries do not divide the train batch

## Explanation
With a variable number of sequences per prompt, fixed-size sequence mini-batches crash on
divisibility or take extra optimizer steps.

## Example
SkyRL step-wise: 37 sequences, mini-batch 16: 3 updates instead of 2.

## Fix
Cut mini-batches at prompt boundaries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity

if TYPE_CHECKING:
    from lrdoctor.rules.replay_context import ReplayContext

RULE = Rule.from_module(__name__, Severity.ERROR)


class BudgetDivisibility(Evidence):
    steps: int
    #: The first case: (step, sequences, updates taken, nominal) or (note, step, value).
    example: tuple[Any, ...]


def check(c: ReplayContext) -> list[Finding]:
    """A step's samples do not divide into the configured mini-batches or dp ranks."""
    from lrdoctor.rules.replay_context import divisibility

    found = divisibility(c.rep)
    if found is None:
        return []
    msg, steps, example = found
    return [RULE.finding(msg, BudgetDivisibility(steps=steps, example=example),
                         location="train.mini_batch_size")]
