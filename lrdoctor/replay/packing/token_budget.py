"""ROLL's and NeMo-RL's dynamic batching: sorted, dealt round-robin, one shared greedy walk."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from lrdoctor.replay.packing.common import (
    MicroBatch,
    Packer,
    PackerParams,
    StepPlan,
    _get,
    per_global_batch,
)

if TYPE_CHECKING:
    pass

# Both assert on one (rounded) sequence longer than the cap (read in their source,
# 2026-11): the real run stops there, so the replay's finding is an error.
ASSERTS = {
    "roll": "ROLL's dynamic_batching_shard asserts the padded sequence length "
            "<= max_tokens_per_microbatch_in_train",
    "nemo_rl": "NeMo-RL's dynamic batching (BatchedDataDict.shard_by_batch_size) asserts "
               "the padded sequence length <= max_tokens_per_microbatch",
}


def plan_token_budget(
    fr, dp, max_tokens, round_to=1, *, flavor="roll", mini_batch_size=None
) -> StepPlan:
    """ROLL's dynamic batching shard, or NeMo-RL's (``flavor='nemo_rl'``).

    Sort all lengths ascending (stable), deal them round-robin so rank r holds
    sorted[r::dp], then walk the shard position j: the position's length is the
    max over ranks rounded up to ``round_to``; a micro-batch grows while
    ``count * running_max <= max_tokens``. Boundaries are shared by every rank,
    so all ranks run the same number of micro-batches. ROLL does this once for
    the whole step (the running max starts at ``round_to``) and leaves the
    updates to gradient accumulation; NeMo-RL does it per global batch
    (``mini_batch_size`` rows, one optimizer step each; running max from 0,
    lengths clamped to the batch's padded width). Both assert when one rounded
    sequence is over the cap; here it sits alone in a micro-batch, reported in notes.
    """
    import numpy as np
    notes: dict = {}
    tokens = fr["tokens"]
    n = len(tokens)
    r = max(1, int(round_to))
    cap = int(max_tokens)
    if n == 0:
        return StepPlan([], None, None, notes)
    if flavor != "nemo_rl":
        mbs = _token_budget_core(np.arange(n), tokens, dp, cap, r, r, None, notes, "roll")
        return StepPlan(mbs, None, None, notes)
    width = int(tokens.max())
    return per_global_batch(n, mini_batch_size, notes, lambda rows: _token_budget_core(
        rows, tokens, dp, cap, r, 0, width, notes, "nemo_rl"))


def _token_budget_core(rows, all_tokens, dp, cap, r, floor, clamp, notes, flavor) -> list[MicroBatch]:
    """The sorted, dealt, greedy walk over ``rows`` (indices into the step frame)."""
    import numpy as np
    tokens = all_tokens[rows]
    n = len(rows)
    local = np.argsort(tokens, kind="stable")
    srt = tokens[local]
    order = rows[local]
    shard_size = -(-n // dp)
    pad = shard_size * dp - n
    if pad:
        notes["not_divisible_by_dp"] = {"samples": n, "dp": dp}
    # Ascending sort => the max at shard position j is the last element of group j.
    pos = srt[dp - 1 :: dp].tolist()
    if pad:
        pos.append(int(srt[-1]))
    if r > 1:
        pos = [-(-x // r) * r for x in pos]
    if clamp is not None:  # NeMo-RL: never wider than the padded batch tensor
        pos = [min(x, clamp) for x in pos]
    # ROLL starts the running max at round_to; positions ascend, so only the first needs it.
    if pos[0] < floor:
        pos[0] = floor
    if pos[-1] > cap:
        rec = notes.setdefault(
            "sequence_over_cap",
            {
                "count": 0,
                "max_len": 0,
                "cap": cap,
                "note": "the framework asserts on this; replayed as one sequence per micro-batch",
                "asserts": ASSERTS[flavor],
            },
        )
        rec["count"] += sum(1 for x in pos if x > cap)
        rec["max_len"] = max(rec["max_len"], pos[-1])
    # Greedy walk. Position lengths never decrease (ascending sort), so the running
    # max is the newest position's length and "count * max <= cap" is monotone in
    # the count: each micro-batch's size is found by binary search, not a scan.
    starts: list[int] = [0]
    lens_out: list[int] = []
    s0 = 0
    while s0 < shard_size:
        first = pos[s0]
        if first > cap:
            c = 1
        else:
            lo, hi = 1, min(cap // first, shard_size - s0)
            while lo < hi:  # largest c with c * pos[s0 + c - 1] <= cap
                mid = (lo + hi + 1) // 2
                if mid * pos[s0 + mid - 1] <= cap:
                    lo = mid
                else:
                    hi = mid - 1
            c = lo
        s0 += c
        lens_out.append(pos[s0 - 1])
        starts.append(s0)
    # Rank k holds order[k::dp]: shard position j of rank k is order[j*dp + k].
    if pad:
        ordp = np.concatenate((order, np.full(pad, -1, np.int64))).reshape(shard_size, dp).T
        lenp = np.concatenate((srt, np.zeros(pad, np.int64))).reshape(shard_size, dp)
    else:
        ordp = order.reshape(shard_size, dp).T
        lenp = srt.reshape(shard_size, dp)
    sums = np.add.reduceat(lenp, starts[:-1], axis=0).tolist()
    mbs: list[MicroBatch] = []
    nmb = len(lens_out)
    worst = 0
    for i in range(nmb):
        a, b = starts[i], starts[i + 1]
        if pad and i == nmb - 1:
            ranks = [x[x >= 0] for x in (ordp[k, a:b] for k in range(dp))]
        else:
            ranks = [ordp[k, a:b] for k in range(dp)]
        ln = lens_out[i]
        if (b - a) * ln > worst:
            worst = (b - a) * ln
        mbs.append(MicroBatch(ranks, [ln] * dp, sums[i]))
    notes["max_padded_tokens"] = max(worst, notes.get("max_padded_tokens", 0))
    return mbs


class TokenBudgetParams(PackerParams):
    max_tokens_per_microbatch: int = Field(..., ge=1)
    round_to: int = Field(1, ge=1)
    flavor: str = "roll"


def _plan(p: TokenBudgetParams, train, fr, dp) -> StepPlan:
    return plan_token_budget(fr, dp, p.max_tokens_per_microbatch, p.round_to, flavor=p.flavor,
                             mini_batch_size=_get(train, "mini_batch_size"))


PACKER = Packer("token_budget", "ROLL / NeMo-RL dynamic batching: sorted, dealt over ranks, "
                "one greedy token budget", TokenBudgetParams, _plan, packed=False,
                token_knob=True)
