"""LRD207 `inconsistent-loss-divisor`: The loss divisor is not the step's global document total

## Explanation
With a document target, each micro-batch must divide by the global document count of the
whole step; a per-micro-batch or per-rank divisor weights documents unequally.

## Example
divisor 8 on one micro-batch, 32 on the step.

## Fix
All-reduce the step's document count and broadcast it to every micro-batch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity

if TYPE_CHECKING:
    from lrdoctor.rules.replay_context import ReplayContext

RULE = Rule.from_module(__name__, Severity.ERROR)
#: What it rests on (replay_context.with_provenance): the documents per sample are read from the lengths' docs column.
LENGTHS = "tokens"


class InconsistentLossDivisor(Evidence):
    bad_updates: int
    weight_sum_min: float
    weight_sum_max: float


def check(c: ReplayContext) -> list[Finding]:
    """Documents are weighted by a divisor other than the window's global document total."""
    import numpy as np

    from lrdoctor.rules.replay_context import short

    t = c.t
    if not (t["loss_divisor"].size and not np.all(np.isnan(t["loss_divisor"]))):
        return []
    sums = t["window_weight_sum"][t["is_update"]]
    # A wrong divisor is off by whole documents; 1e-6 only absorbs float sums.
    bad = np.abs(sums - 1.0) > 1e-6
    if not bad.any():
        return []
    return [RULE.finding(
        f"{int(bad.sum())} of {len(sums)} updates weight their documents by a divisor "
        f"other than the step's global document total (loss-weight sums "
        f"{short(float(sums.min()))}..{short(float(sums.max()))}, should be 1).",
        InconsistentLossDivisor(bad_updates=int(bad.sum()), weight_sum_min=float(sums.min()),
                                weight_sum_max=float(sums.max())),
        location="batching.loss_divisor")]
