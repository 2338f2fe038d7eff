"""NeMo-RL sequence packing: bins of padded lengths per global batch, dealt round-robin.

What NeMo-RL does (``BatchedDataDict.shard_by_batch_size`` with
``sequence_packing_args``, ``nemo_rl/data/packing/algorithms.py``): each global
batch (``train_global_batch_size`` rows, one optimizer update) is packed on
its own; lengths are first rounded up to ``sequence_length_round``; the packer
(modified first-fit decreasing by default, or first-fit decreasing, or
concatenative) fills bins of ``train_mb_tokens``; the bin count is raised to at
least dp and to a multiple of dp by moving the last sequence of the fullest
bins into new bins; bin ``b`` goes to rank ``b % dp`` in order. Every rank
therefore runs the same number of micro-batches. A sequence longer than the cap
makes NeMo-RL raise; here it sits alone in a bin and the notes say so.
"""

from __future__ import annotations

from bisect import bisect
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from lrdoctor.replay.packing.common import (
    Packer,
    PackerParams,
    StepPlan,
    _get,
    _mb_from_rank_lists,
    per_global_batch,
)

if TYPE_CHECKING:
    pass

ALGORITHMS = ("modified_first_fit_decreasing", "first_fit_decreasing", "concatenative")


def _first_fit(items: list[tuple[int, int]], cap: int) -> list[list[int]]:
    bins: list[list[int]] = []
    room: list[int] = []
    for length, idx in items:
        for i, r in enumerate(room):
            if r >= length:
                bins[i].append(idx)
                room[i] -= length
                break
        else:
            bins.append([idx])
            room.append(cap - length)
    return bins


def _concatenative(lens: list[int], cap: int) -> list[list[int]]:
    bins: list[list[int]] = []
    cur: list[int] = []
    used = 0
    for i, ln in enumerate(lens):
        if used + ln > cap:
            if cur:
                bins.append(cur)
            cur, used = [i], ln
        else:
            cur.append(i)
            used += ln
    if cur:
        bins.append(cur)
    return bins


def _mffd(lens: list[int], cap: int) -> list[list[int]]:
    """Johnson & Garey's modified first-fit decreasing, in NeMo-RL's five phases."""
    large, medium, small, tiny = [], [], [], []
    for i, s in enumerate(lens):
        if s > cap / 2:
            large.append((i, s))
        elif s > cap / 3:
            medium.append((i, s))
        elif s > cap / 6:
            small.append((i, s))
        else:
            tiny.append((i, s))
    large.sort(key=lambda x: x[1], reverse=True)
    medium.sort(key=lambda x: x[1], reverse=True)
    small.sort(key=lambda x: x[1])
    tiny.sort(key=lambda x: x[1])
    bins = [[it] for it in large]
    for b in bins:  # one medium item per large bin, the largest that fits
        rem = cap - sum(s for _, s in b)
        for j, (_, s) in enumerate(medium):
            if s <= rem:
                b.append(medium.pop(j))
                break
    for b in reversed(bins):  # pairs of small items into bins without a medium one
        if any(cap / 3 < s <= cap / 2 for _, s in b) or len(small) < 2:
            continue
        rem = cap - sum(s for _, s in b)
        if small[0][1] + small[1][1] > rem:
            continue
        first = small.pop(0)
        second = None
        for j in range(len(small) - 1, -1, -1):
            if small[j][1] <= rem - first[1]:
                second = j
                break
        if second is not None:
            b.extend([first, small.pop(second)])
    rest = sorted(medium + small + tiny, key=lambda x: x[1], reverse=True)
    for b in bins:  # greedily top up each bin with the largest remaining item that fits
        while rest:
            rem = cap - sum(s for _, s in b)
            if rem < rest[-1][1]:
                break
            pick = next((j for j, (_, s) in enumerate(rest) if s <= rem), None)
            if pick is None:
                break
            b.append(rest.pop(pick))
    # Leftovers: NeMo-RL's sorted-bin first fit (bins kept ordered by fill, the
    # least-filled first; a new bin when the least-filled cannot take the item).
    ffd: list[list[tuple[int, int]]] = [[]]
    sizes: list[int] = [0]
    for idx, s in sorted(rest, key=lambda x: x[1], reverse=True):
        if s <= cap - sizes[0]:
            nb, ns = ffd.pop(0), sizes.pop(0)
        else:
            nb, ns = [], 0
        nb.append((idx, s))
        ns += s
        at = bisect(sizes, ns)
        ffd.insert(at, nb)
        sizes.insert(at, ns)
    bins.extend(ffd)
    return [[i for i, _ in b] for b in bins if b]


def _adjust(bins: list[list[int]], multiple: int, notes: dict) -> list[list[int]]:
    """Raise the bin count to >= dp and a multiple of dp (NeMo-RL's _adjust_bin_count)."""
    cur = len(bins)
    target = max(cur, multiple)
    if target % multiple:
        target += multiple - target % multiple
    if target == cur:
        return bins
    total = sum(len(b) for b in bins)
    if total < target:
        notes["too_few_sequences_for_dp"] = {"sequences": total, "bins_needed": target,
                                             "note": "NeMo-RL raises ValueError"}
        target = total - total % multiple if total >= multiple else total
        if target <= cur:
            return bins
    out = [list(b) for b in bins] + [[] for _ in range(target - cur)]
    order = sorted(((len(b), i) for i, b in enumerate(bins)), reverse=True)
    src = 0
    for new in range(cur, target):
        while src < len(order):
            i = order[src][1]
            if len(out[i]) > 1:
                out[new].append(out[i].pop())
                break
            src += 1
    return out


def pack(lens: list[int], cap: int, algorithm: str = "modified_first_fit_decreasing",
         multiple: int = 1, notes: dict | None = None) -> list[list[int]]:
    """Bins of positions for one global batch (lengths already rounded)."""
    notes = {} if notes is None else notes
    over = [x for x in lens if x > cap]
    if over:
        rec = notes.setdefault("sequence_over_cap", {"count": 0, "max_len": 0, "cap": cap})
        rec["count"] += len(over)
        rec["max_len"] = max(rec["max_len"], max(over))
        rec["asserts"] = "NeMo-RL's packer raises ValueError (sequence length exceeds bin capacity)"
    if algorithm == "concatenative":
        bins = _concatenative(lens, cap)
    elif algorithm == "first_fit_decreasing":
        bins = _first_fit(sorted(((ln, i) for i, ln in enumerate(lens)), reverse=True), cap)
    else:
        bins = _mffd(lens, cap)
    return _adjust(bins, multiple, notes)


def plan_sequence_packing(fr, dp, max_tokens, *, mini_batch_size=None, round_to=1,
                          algorithm="modified_first_fit_decreasing") -> StepPlan:
    """NeMo-RL ``policy.sequence_packing``: one update per global batch of packed bins."""
    import numpy as np
    notes: dict = {}
    tokens = fr["tokens"]
    n = len(tokens)
    if n == 0:
        return StepPlan([], None, None, notes)
    r = max(1, int(round_to))
    padded = -(-tokens // r) * r if r > 1 else tokens

    def plan(rows):
        bins = pack(padded[rows].tolist(), int(max_tokens), algorithm, dp, notes)
        per_rank = [[rows[np.asarray(b, dtype=np.int64)] for b in bins[k::dp]] for k in range(dp)]
        return _mb_from_rank_lists(per_rank, tokens, 1)

    return per_global_batch(n, mini_batch_size, notes, plan)


class SequencePackingParams(PackerParams):
    max_tokens_per_microbatch: int = Field(..., ge=1)
    round_to: int = Field(1, ge=1)
    algorithm: Literal["modified_first_fit_decreasing", "first_fit_decreasing",
                       "concatenative"] = "modified_first_fit_decreasing"


def _plan(p: SequencePackingParams, train, fr, dp) -> StepPlan:
    return plan_sequence_packing(fr, dp, p.max_tokens_per_microbatch,
                                 mini_batch_size=_get(train, "mini_batch_size"),
                                 round_to=p.round_to, algorithm=p.algorithm)


PACKER = Packer("sequence_packing", "NeMo-RL `policy.sequence_packing`: bins of the token "
                "cap per global batch", SequencePackingParams, _plan, packed=True,
                token_knob=True, mini_batch_windows=True)
