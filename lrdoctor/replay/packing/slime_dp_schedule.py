"""slime's per-rollout schedule: pack the training step first, then hand micro-batches to ranks.

Transcribed from THUDM/slime at 624b824a898ab0ec1fcb4d373004c7f3852bf515
(``slime/utils/dp_schedule.py`` ``build_dp_schedule``, ``slime/utils/seqlen_balancing.py``
``first_fit_pack``, ``expand_bins_by_splitting``, ``_split_bin_by_tokens``), what
``RolloutManager._split_train_data_by_dp`` runs on every rollout:

1. the rollout's samples, in log order, cut into training steps of
   ``global_batch_size`` samples (one rollout = one sample, slime's common case);
   trailing samples that do not fill a step are dropped;
2. each step packed into ``K`` micro-batches by one first-fit pass in log order
   (``--use-dynamic-batch-size``, cap ``--max-tokens-per-gpu x cp``; a longer sample
   sits alone) or in fixed chunks of ``--micro-batch-size`` (static);
3. ``K`` raised to a multiple of dp (x the VPP group) by splitting the largest
   multi-sample micro-batch into two token-balanced halves (dynamic; the static path
   asserts instead);
4. ``K / dp`` micro-batches per rank: strided round-robin, or with
   ``--balance-data`` a Karmarkar-Karp partition of the micro-batches over ranks.

One optimizer update per training step (``train_one_step``), the scheduler stepped by
the step's sample count (``opt_param_scheduler.step(increment=step_global_batch_size)``).
With ``--balance-data`` slime weighs micro-batches by estimated FLOPs, which needs the
model's shape; the replay weighs them by tokens, so which rank holds which micro-batch
may differ from slime's while every count (micro-batches per rank, per step) is the same.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.packing.common import (
    Packer,
    PackerParams,
    StepPlan,
    _assemble_minis,
    _get,
    _note_over_cap,
)

if TYPE_CHECKING:
    import numpy as np


def first_fit_pack(lengths: list[int], cap: int) -> list[list[int]]:
    """slime's ``first_fit_pack``: each sample, in order, into the first bin it fits;
    else a new bin (an over-cap sample alone)."""
    bins: list[list[int]] = []
    sums: list[int] = []
    for idx, length in enumerate(lengths):
        for j, s in enumerate(sums):
            if s + length <= cap:
                bins[j].append(idx)
                sums[j] = s + length
                break
        else:
            bins.append([idx])
            sums.append(length)
    return bins


def _split_bin_by_tokens(bin_indices: list[int], lengths: list[int]) -> list[list[int]]:
    halves: list[list[int]] = [[], []]
    sums = [0, 0]
    for idx in sorted(bin_indices, key=lambda i: -lengths[i]):  # stable, as sorted() is
        h = 0 if sums[0] <= sums[1] else 1
        halves[h].append(idx)
        sums[h] += lengths[idx]
    return halves


def expand_bins_by_splitting(bins: list[list[int]], target: int, lengths: list[int]) -> None:
    """slime's ``expand_bins_by_splitting``: split the largest multi-sample bin (ties: the
    later one, as ``max`` over ``(sum, index)`` picks) until there are ``target`` bins."""
    while len(bins) < target:
        candidates = [(sum(lengths[i] for i in b), k) for k, b in enumerate(bins) if len(b) > 1]
        if not candidates:
            break
        _, k = max(candidates)
        left, right = _split_bin_by_tokens(bins[k], lengths)
        bins[k] = left
        bins.append(right)


def step_micro_batches(lengths: list[int], dp: int, *, cap: int | None,
                       micro_batch_size: int | None, align: int | None = None) -> list[list[int]]:
    """One training step's micro-batches (local indices), ``K`` a multiple of ``align``
    (dp by default), as ``build_dp_schedule`` steps 1-2 make them."""
    align = align or dp
    if cap is not None:
        step_mbs = first_fit_pack(lengths, cap)
    else:
        m = int(micro_batch_size or 1)
        step_mbs = [list(range(i, min(i + m, len(lengths)))) for i in range(0, len(lengths), m)]
    target = max(-(-len(step_mbs) // align) * align, align)
    if target != len(step_mbs):
        if cap is None:
            raise UnusableInput(
                f"slime's static batching asserts: {len(step_mbs)} micro-batches of "
                f"--micro-batch-size {micro_batch_size} are not a multiple of dp {align} "
                "(build_dp_schedule); the run stops at its first step")
        expand_bins_by_splitting(step_mbs, target, lengths)
        if len(step_mbs) != target:
            raise UnusableInput(
                f"slime asserts: a step of {len(lengths)} samples cannot make {target} "
                f"micro-batches (a multiple of dp {align}) by splitting (build_dp_schedule)")
    return step_mbs


def rank_assignment(bins: list[list[int]], lengths: list[int], dp: int,
                    balance: bool) -> list[list[int]]:
    """Which micro-batches each rank runs, in order: strided round-robin, or with
    ``--balance-data`` slime's equal-size Karmarkar-Karp partition (sorted per rank),
    weighed here by tokens."""
    k = len(bins)
    if not balance:
        return [list(range(r, k, dp)) for r in range(dp)]
    from lrdoctor.replay.packing.karmarkar_karp import karmarkar_karp

    weights = [sum(lengths[i] for i in b) for b in bins]
    parts = karmarkar_karp(weights, dp, equal_size=True)
    return [sorted(p) for p in parts]


def plan_slime(fr: dict, dp: int, *, global_batch_size: int | None, cap: int | None,
               micro_batch_size: int | None, balance: bool = False,
               round_to: int = 1) -> StepPlan:
    import numpy as np

    notes: dict = {}
    tokens = fr["tokens"]
    n = len(tokens)
    gbs = int(global_batch_size or n)
    steps = n // gbs if gbs else 0
    if steps < 1:
        raise UnusableInput(f"slime asserts: a rollout of {n} samples holds no training step "
                            f"of --global-batch-size {gbs} (build_dp_schedule)")
    if steps * gbs < n:
        notes["dropped_rows"] = n - steps * gbs  # trailing rollouts: dropped by slime
    per_rank: list[list[list[np.ndarray]]] = [[] for _ in range(dp)]
    for s in range(steps):
        rows = np.arange(s * gbs, (s + 1) * gbs)
        if len(rows) < dp:
            raise UnusableInput(f"slime asserts: a training step of {len(rows)} samples < dp "
                                f"{dp} (build_dp_schedule)")
        lengths = tokens[rows].tolist()
        bins = step_micro_batches(lengths, dp, cap=cap, micro_batch_size=micro_batch_size)
        for r, idx in enumerate(rank_assignment(bins, lengths, dp, balance)):
            per_rank[r].append([rows[bins[b]] for b in idx])
    mbs, bounds = _assemble_minis(per_rank, tokens, round_to)
    if cap is not None:
        _note_over_cap(notes, tokens, cap)
    return StepPlan(mbs, bounds, None, notes)


class SlimeParams(PackerParams):
    max_tokens_per_microbatch: int | None = Field(None, ge=1)
    balance_dp: bool = False
    round_to: int = Field(1, ge=1)


def _plan(p: SlimeParams, train, fr, dp) -> StepPlan:
    return plan_slime(fr, dp, global_batch_size=_get(train, "mini_batch_size"),
                      cap=p.max_tokens_per_microbatch,
                      micro_batch_size=_get(train, "micro_batch_size", 1),
                      balance=p.balance_dp, round_to=p.round_to)


PACKER = Packer("slime_dp_schedule", "slime build_dp_schedule: first-fit in log order per "
                "training step, split to a multiple of dp, strided or balanced over ranks",
                SlimeParams, _plan, packed=True, token_knob=True, mini_batch_windows=True)
