"""LRD209 `token-cap-exceeded`: A micro-batch exceeds the token cap

## Explanation
Balanced partitioning (Karmarkar-Karp) keeps the partition count but can put more tokens in
one micro-batch than the cap (a warning). A single sequence longer than the cap is an error
where the framework asserts on it, because the real run stops there: ROLL's
`dynamic_batching_shard` and NeMo-RL's dynamic batching assert, verl's
`rearrange_micro_batches` asserts `max_token_len >= max_seq_len`, OpenRLHF raises
`ValueError`; SkyRL's balanced packer puts it alone in a micro-batch (a warning).

## Example
max_token_len 8192, micro-batch of 9500 tokens; ROLL: a 9000-token sequence with
`max_tokens_per_microbatch_in_train` 8192.

## Fix
Raise the cap (at least to the longest sequence) or let the partition count grow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity

if TYPE_CHECKING:
    from lrdoctor.rules.replay_context import ReplayContext

RULE = Rule.from_module(__name__, Severity.WARNING)
#: What it rests on (replay_context.with_provenance): the tokens per micro-batch are the sample lengths'.
LENGTHS = "tokens"


class TokenCapExceeded(Evidence):
    cap: int
    max_tokens: int
    measure: str
    micro_batches_over: int
    micro_batches: int
    steps: int
    longest_sequence: int | None
    #: The framework's own assertion on a sequence over the cap (the run stops there).
    framework_asserts: str | None

    def headline(self) -> str | None:
        return f"{self.max_tokens:,} tokens, cap {self.cap:,}"


def check(c: ReplayContext) -> list[Finding]:
    """A micro-batch on one rank is over the configured token cap."""
    import numpy as np

    from lrdoctor.rules.replay_context import notes

    cfg, t = c.cfg, c.t
    cap = cfg.batching.max_tokens_per_microbatch
    if not (cap and len(t["lr"])):
        return []
    # The trace's per-rank cost is real tokens when the framework packs (verl,
    # OpenRLHF, SkyRL) and rows x padded length when it pads (ROLL, static).
    first_pass = t["epoch"] == 0
    cost = t["max_rank_tokens"][first_pass]
    over = cost > cap
    if not over.any():
        return []
    packed = cfg.batching.is_packed
    what = ("real tokens (packed, no padding)" if packed
            else "tokens as rows x padded length")
    over_steps = np.unique(t["train_step"][first_pass][over])
    single = [(step, v) for step, v in notes(c.rep, "sequence_over_cap")
              if isinstance(v, dict)]
    longest = max((int(v.get("max_len", 0)) for _, v in single), default=0)
    why = (f"; {sum(int(v.get('count', 0)) for _, v in single)} single sequence(s) are "
           f"longer than the cap (up to {longest})" if longest > cap else
           "; the partitions are balanced, not capped" if cfg.batching.strategy
           == "karmarkar_karp" else "")
    # A sequence longer than the cap is not a soft overshoot where the framework
    # asserts on it (ROLL, NeMo-RL, verl, OpenRLHF): the real run stops at that step.
    asserts = next((v["asserts"] for _, v in single if v.get("asserts")), None)
    severity = fix = None
    if asserts and longest > cap:
        first = min(step for step, v in single if v.get("asserts"))
        severity = Severity.ERROR
        from lrdoctor.rules.replay_context import rests_on_assumed_lengths

        why += (f": {asserts}, so a run with sequences that long would stop at train step "
                f"{first}" if rests_on_assumed_lengths(cfg, LENGTHS) else
                f": {asserts}, so the real run stops at train step {first}")
        fix = (f"Raise the cap to at least {longest} (the longest sequence, rounded as the "
               "framework rounds it) or cut the sequences to the cap before training.")
    return [RULE.finding(
        f"A micro-batch holds up to {int(cost.max())} {what} on one rank, over the "
        f"cap of {cap}: {int(over.sum())} of {len(cost)} micro-batches in "
        f"{len(over_steps)} of {cfg.train.steps} train step(s){why}.",
        TokenCapExceeded(cap=cap, max_tokens=int(cost.max()),
                         measure="real tokens" if packed else "rows x padded length",
                         micro_batches_over=int(over.sum()), micro_batches=int(len(cost)),
                         steps=int(len(over_steps)), longest_sequence=longest or None,
                         framework_asserts=asserts if severity else None),
        severity=severity, fix=fix, location="batching.max_tokens_per_microbatch")]
