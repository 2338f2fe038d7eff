"""RLinf's dynamic batch size (``runner.enable_dynamic_batch_size``) on its Megatron actor.

Read from RLinf's code (github.com/RLinf/RLinf at a3816b5, the same file as the
``rlinf==0.3.0`` wheel): ``MegatronWorker.run_training`` splits each dp rank's rows
of a rollout step into ``algorithm.n_minibatches`` consecutive global batches
(``get_iterator_k_split``); each is one ``training_step``, one optimizer update.
There ``split_dynamic_batch_size`` -> ``rlinf/utils/data_iter_utils.py
get_iterator_dynamic`` micro-batches the rank's rows:

1. the count is ``len(get_seqlen_BFD_partitions(lens, cap))`` (best fit decreasing
   under ``cap = max_tokens_per_mbs x cp``), then the MAX over the ranks
   (``dist.all_reduce``), rounded up to a multiple of
   ``microbatch_group_size_per_vp_stage`` under virtual pipelining;
2. ``get_seqlen_balanced_partitions(lens, count, equal_size=False)``: Karmarkar-Karp
   on the raw lengths (:func:`lrdoctor.replay.packing.karmarkar_karp._kk_sets_capped`,
   verl's procedure, which RLinf's ``karmarkar_karp`` copies);
3. if any rank's partition sums past ``cap`` (MIN all-reduce of "valid"), every rank
   tries ``count + 1``.

RLinf stops the run where a sequence is longer than the cap (``ValueError`` in the
BFD) or the count passes a rank's rows (``assert`` in the partitioner): the replay
keeps going and says so in the step's notes. The count equals RLinf's own functions
on the same lengths (tests/replay/test_replay_rlinf.py).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from typing import TYPE_CHECKING, Any

from pydantic import Field

from lrdoctor.replay.packing.common import (
    Packer,
    PackerParams,
    StepPlan,
    _assemble_minis,
    _mini_batches_per_rank,
    _mini_per_rank,
    _note_over_cap,
    _rank_shards,
)
from lrdoctor.replay.packing.karmarkar_karp import _kk_sets_capped

if TYPE_CHECKING:
    import numpy as np


def bfd_count(lens: list[int], cap: int) -> int:
    """``len(get_seqlen_BFD_partitions(lens, cap))``: best fit decreasing.

    Each length, longest first, goes to the open group whose remaining capacity is the
    smallest that still holds it, else opens a group. Which of two groups with the same
    remaining capacity takes it (RLinf: the first) cannot change the count, so the
    remaining capacities are kept as a sorted list and searched by bisection. A length
    over ``cap`` opens a group of its own (RLinf raises; the caller notes it).
    """
    rem: list[int] = []  # remaining capacities, ascending
    groups = 0
    for x in sorted(lens, reverse=True):
        i = bisect_left(rem, x)
        if i < len(rem):
            r = rem.pop(i) - x
            insort(rem, r)
        else:
            groups += 1
            insort(rem, cap - x)
    return groups


def _round_up(n: int, m: int | None) -> int:
    return n if not m or m <= 1 else -(-n // m) * m


def fit_count(lens_by_rank: list[list[int]], cap: int, vpp_divisor: int | None = None
              ) -> tuple[int, list[list[list[int]]], dict[str, Any]]:
    """One global batch on every rank, as ``get_iterator_dynamic`` does it: the shared
    count and each rank's partitions (index lists into that rank's ``lens``, heaviest
    first), and what RLinf would have stopped on."""
    live = [ln for ln in lens_by_rank if ln]
    problems: dict[str, Any] = {}
    if not live:
        return 0, [[] for _ in lens_by_rank], problems
    count = max(bfd_count(ln, cap) for ln in live)
    count = _round_up(count, vpp_divisor)
    min_rows = min(len(ln) for ln in live)
    while True:
        k = min(count, min_rows)
        parts: list[list[list[int]]] = []
        valid = True
        for ln in lens_by_rank:
            if not ln:
                parts.append([])
                continue
            sets = _kk_sets_capped(ln, k, False, ln, cap)
            if sets is None:  # a partition over the cap on this rank
                valid = False
                sets = _kk_sets_capped(ln, k, False, ln, None)
                assert sets is not None
            parts.append([sorted(s[3]) for s in sets])
        if valid or count >= min_rows:
            if count > min_rows:
                problems["partitions_exceed_rows"] = {"count": count, "rows": min_rows}
            elif not valid:
                problems["cannot_fit"] = {"count": count, "cap": cap}
            return k, parts, problems
        count += 1


class RlinfDynamicParams(PackerParams):
    # runner.max_tokens_per_mbs x context-parallel size
    max_tokens_per_microbatch: int = Field(..., ge=1)
    # microbatch_group_size_per_vp_stage, only under virtual pipeline parallelism
    vpp_divisor: int | None = Field(None, ge=1)


def plan_rlinf_dynamic(p: RlinfDynamicParams, train: Any, fr: dict[str, np.ndarray],
                       dp: int) -> StepPlan:
    """One rollout step: per global batch (one update), RLinf's shared micro-batch count
    and Karmarkar-Karp partitions on every dp rank."""
    import numpy as np

    notes: dict = {}
    tokens = fr["tokens"]
    cap = p.max_tokens_per_microbatch
    _note_over_cap(notes, tokens, cap, asserts="get_seqlen_BFD_partitions raises ValueError")
    shards = _rank_shards(fr, dp, notes)
    minis = _mini_batches_per_rank(shards, _mini_per_rank(train, dp, notes))
    n_minis = max(len(m) for m in minis)
    per_rank_minis: list[list[list[np.ndarray]]] = [[] for _ in range(dp)]
    for j in range(n_minis):
        rows = [m[j] if j < len(m) else np.zeros(0, dtype=np.int64) for m in minis]
        lens = [tokens[r].tolist() for r in rows]
        _, parts, problems = fit_count(lens, cap, p.vpp_divisor)
        for key, val in problems.items():
            notes.setdefault(key, val)
        for r in range(dp):
            per_rank_minis[r].append([rows[r][np.asarray(q, dtype=np.int64)]
                                      for q in parts[r]])
    mbs, bounds = _assemble_minis(per_rank_minis, tokens, 1)
    return StepPlan(mbs, bounds, None, notes)


PACKER = Packer(
    "rlinf_dynamic",
    "RLinf (`runner.enable_dynamic_batch_size`): per global batch, best-fit-decreasing "
    "count under `max_tokens_per_mbs`, max over dp ranks, Karmarkar-Karp partitions, "
    "count + 1 until every partition fits",
    RlinfDynamicParams, plan_rlinf_dynamic, packed=True, token_knob=True,
    mini_batch_windows=True)
