"""LRD215 `loss-divisor-lr-scale`: The loss divisor changes the effective LR of updates

## Explanation
Under gradient accumulation and data parallelism the loss must be divided by the tokens of
the whole update (every micro-batch, every rank). Dividing each micro-batch by its own
tokens (then by k), or each rank by its own window, makes a short window train at a fraction
of the LR and weighs tokens unequally: transformers PR 34191 (`num_items_in_batch`) and
issue 37766. `replay` reports the effective LR scale per update the configured divisor
implies.

## Example
per_micro_batch_tokens, k 4: the last window of each epoch holds 1 micro-batch and trains at
0.25x; tokens weigh 0.4..2.6x inside one update.

## Fix
Divide by the update's global token count (all-reduce it across ranks, multiply the loss by
dp to undo DDP's mean), as `num_items_in_batch` does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity

if TYPE_CHECKING:
    from lrdoctor.rules.replay_context import ReplayContext

RULE = Rule.from_module(__name__, Severity.WARNING)
#: What it rests on (replay_context.with_provenance): the divisor counts the samples' tokens.
LENGTHS = "tokens"


class LossDivisorLrScale(Evidence):
    """The effective LR scale per update the configured divisor implies
    (:func:`lrdoctor.replay.loss_scale.scale`)."""

    strategy: str
    updates: int
    scale_per_update: dict[str, float]
    token_weight: dict[str, float]
    worst_update: int
    worst_scale: float
    updates_off: int


def check(c: ReplayContext) -> list[Finding]:
    """LRD215 when the configured divisor makes updates train at another LR than planned,
    or weights the tokens of one update unequally."""
    from lrdoctor.rules.replay_context import LOSS_SCALE_TOL as TOL

    strategy = getattr(c.cfg.batching, "loss_normalization", None)
    if strategy is None:
        return []
    sc = c.loss_scale
    if sc is None:
        return []
    sp, tw = sc["scale_per_update"], sc["token_weight"]
    off = sc["updates_off"] > 0
    spread = tw["max"] / tw["min"] if tw["min"] > 0 else float("inf")
    if not off and spread <= 1 + TOL:
        return []
    msg = (f"loss divided by {strategy.replace('_', ' ')}: the effective LR scale per update "
           f"ranges {sp['min']:.3g}..{sp['max']:.3g} (mean {sp['mean']:.3g}; "
           f"{sc['updates_off']} of {sc['updates']} updates off 1 by more than {TOL:.0%}, "
           f"update {sc['worst_update']} at {sc['worst_scale']:.3g}x), and a token weighs "
           f"{tw['min']:.3g}..{tw['max']:.3g}x what it should inside one update.")
    return [RULE.finding(msg, LossDivisorLrScale(**sc), location="batching.loss_normalization")]
