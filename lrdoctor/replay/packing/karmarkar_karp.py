"""verl's and OpenRLHF's dynamic batch size: Karmarkar-Karp balanced partitions."""

from __future__ import annotations

import heapq

import numpy as np

from lrdoctor.replay.packing.common import (
    MicroBatch,
    StepPlan,
    _mb_from_rank_lists,
    _mini_batches_per_rank,
    _note_over_cap,
    _rank_shards,
)

# Both stop the run on one sequence longer than the cap (read in their source, 2026-11):
# verl's rearrange_micro_batches asserts max_token_len >= the batch's sequence length
# (the padded width, so already at the longest sequence); OpenRLHF's
# get_minimum_num_micro_batch_size raises ValueError past max_tokens_per_gpu.
ASSERTS_ON_LONG_SEQUENCE = {
    "verl": "verl's rearrange_micro_batches asserts max_token_len >= the sequence length",
    "verl_ceildiv": "verl's rearrange_micro_batches asserts max_token_len >= the sequence length",
    "openrlhf": "OpenRLHF's get_minimum_num_micro_batch_size raises ValueError",
}


class _Desc:
    """Reverses comparison so a min-heap prefers the larger item list (tie-break only)."""

    __slots__ = ("v",)

    def __init__(self, v):
        self.v = v

    def __lt__(self, other: _Desc) -> bool:
        return self.v > other.v

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Desc) and self.v == other.v


def _kk_entry(sets: list[tuple[int, int, list]]) -> tuple:
    """Heap entry for one partial state of k sets ``(sum, size, items)``.

    The sets are kept largest first with plain tuple order (sum, then size, then
    items: verl's Set ordering). The heap pops the larger spread first, then
    the state whose biggest set is larger.
    """
    sets.sort(reverse=True)
    top = sets[0]
    return (top[0] - sets[-1][0], -top[0], -top[1], _Desc(top[2]), sets)


def karmarkar_karp(values, k: int, equal_size: bool = False) -> list[list[int]]:
    """Largest differencing method for k-way balanced partitioning.

    Same procedure and tie-breaking as verl / OpenRLHF: items sorted ascending;
    with ``equal_size`` each initial state takes k consecutive sorted items;
    repeatedly merge the two states of largest spread, pairing the largest set
    of one with the smallest of the other. Returns k sorted index lists.
    """
    vals = [int(v) for v in values]
    n = len(vals)
    if n < k:
        raise ValueError(f"{n} items cannot fill {k} partitions")
    ordered = sorted((v, i) for i, v in enumerate(vals))
    heap: list[tuple] = []
    if equal_size:
        if n % k:
            raise ValueError(f"equal_size needs {n} divisible by {k}")
        for off in range(0, n, k):
            heap.append(_kk_entry([(v, 1, [(i, v)]) for v, i in ordered[off : off + k]]))
    else:
        empties = [(0, 0, [])] * (k - 1)
        for v, i in ordered:
            heap.append(_kk_entry([(v, 1, [(i, v)]), *empties]))
    # Spread is the first key but the heap must pop the LARGEST spread first.
    heap = [(-e[0], *e[1:]) for e in heap]
    heapq.heapify(heap)
    while len(heap) > 1:
        a = heapq.heappop(heap)[-1]
        b = heapq.heappop(heap)[-1]
        merged = [
            (x[0] + y[0], x[1] + y[1], x[2] + y[2]) for x, y in zip(a, reversed(b), strict=True)
        ]
        e = _kk_entry(merged)
        heapq.heappush(heap, (-e[0], *e[1:]))
    parts = [sorted(i for i, _ in items) for _, _, items in heap[0][-1]]
    if any(not p for p in parts):
        raise ValueError("an empty partition")
    return parts


def verl_workload(lens: np.ndarray) -> np.ndarray:
    """verl's attention-aware cost per sequence (7B calibration): 24576*s + s^2."""
    lens = lens.astype(np.int64)
    return 24576 * lens + lens * lens


def first_fit_count(lens, cap: int) -> int:
    """OpenRLHF's micro-batch count: first-fit in log order, no sorting."""
    bins: list[int] = []
    for ln in lens:
        for i, b in enumerate(bins):
            if b + ln <= cap:
                bins[i] = b + ln
                break
        else:
            bins.append(ln)
    return len(bins)


VERL_FLAVORS = ("verl", "verl_ceildiv")


def _verl_parts(rows, tokens, k, equal_size):
    """verl's micro-batches of one rank: KK on the workload, heaviest in the middle."""
    weights = verl_workload(tokens[rows])
    parts = karmarkar_karp(weights.tolist(), k, equal_size=equal_size and len(rows) % k == 0)
    w = weights.tolist()
    parts.sort(key=lambda p: (sum(w[i] for i in p), p[0]), reverse=True)
    return parts[::2][::-1] + parts[1::2]


def _balance_dp(tokens, dp, mini_batch_size=None):
    """verl's ``_balance_batch``: equal-size KK of the step over dp ranks on the workload.

    With ``keep_minibatch`` (``mini_batch_size`` rows), each mini-batch is balanced
    over the ranks on its own and the ranks' lists are concatenated, so a mini-batch
    keeps its rows. Either way each rank's rows are then ordered light/heavy
    interleaved (verl sorts the whole rank list by workload, which reshuffles rows
    across mini-batches again: the order decides which rows share a mini-batch,
    since ranks cut their rows into consecutive mini-batches).
    """
    work = verl_workload(tokens).tolist()
    if mini_batch_size:
        lists: list[list[int]] = [[] for _ in range(dp)]
        for i in range(len(work) // mini_batch_size):
            off = i * mini_batch_size
            sub = work[off : off + mini_batch_size]
            for j, part in enumerate(karmarkar_karp(sub, dp, equal_size=True)):
                lists[j].extend(x + off for x in part)
    else:
        lists = karmarkar_karp(work, dp, equal_size=True)
    shards = []
    for p in lists:
        p.sort(key=lambda x: (work[x], x))
        shards.append(np.asarray(p[::2] + p[1::2][::-1], dtype=np.int64))
    return shards


def plan_karmarkar_karp(
    fr,
    dp,
    max_tokens,
    *,
    num_micro_batches=None,
    equal_size=False,
    flavor="verl",
    mini_per_rank=None,
    balance_dp=True,
    keep_minibatch=False,
    round_to=1,
) -> StepPlan:
    """verl / OpenRLHF dynamic batch size: balanced partitions.

    dp split: the log's ``rank`` column, else (verl's balance_batch) a KK
    equal-size partition of the step over dp ranks by workload (per mini-batch
    with ``keep_minibatch``), else contiguous chunks (OpenRLHF). Each rank's
    mini-batch is split into N micro-batches by KK, where N starts at
    ``ceil(sum/max_tokens)`` capped at the row count (verl) or OpenRLHF's
    first-fit count, then the max over dp ranks. verl >= 0.9.1 (``flavor='verl'``)
    then raises N, on every rank together, until every partition's token sum fits
    the cap; before 0.9.1 (``flavor='verl_ceildiv'``) and in OpenRLHF the
    balanced sums can exceed the cap: the largest micro-batch token sum is
    reported in notes.
    """
    notes: dict = {}
    tokens = fr["tokens"]
    n = len(tokens)
    cap = int(max_tokens)
    if n == 0:
        return StepPlan([], None, None, notes)
    verl = flavor in VERL_FLAVORS
    if "rank" in fr:
        shards = _rank_shards(fr, dp, notes)
    elif verl and balance_dp and n >= dp and n % dp == 0 and dp > 1:
        mini_global = mini_per_rank * dp if keep_minibatch and mini_per_rank else None
        shards = _balance_dp(tokens, dp, mini_global)
    else:
        shards = _rank_shards(fr, dp, notes)
    minis = _mini_batches_per_rank(shards, mini_per_rank)
    n_minis = max(len(m) for m in minis)
    mbs: list[MicroBatch] = []
    bounds: list[int] = []
    worst = 0
    raised = []
    for j in range(n_minis):
        rows_j = [m[j] if j < len(m) else np.zeros(0, np.int64) for m in minis]
        counts = []
        for rows in rows_j:
            lens = tokens[rows]
            if num_micro_batches:
                c = int(num_micro_batches)
            elif flavor == "openrlhf":
                c = first_fit_count(lens.tolist(), cap)
            else:
                c = -(-int(lens.sum()) // cap) if len(lens) else 0
            counts.append(min(c, len(lens)) if len(lens) else 0)
        c_all = max(counts)
        per_rank: list[list[np.ndarray]] = []
        if flavor == "verl" and cap and not num_micro_batches:
            per_rank = _verl_fit(rows_j, tokens, c_all, cap, equal_size, notes, raised)
        else:
            for rows in rows_j:
                if len(rows) == 0:
                    per_rank.append([])
                    continue
                k = min(c_all, len(rows))
                if verl:
                    parts = _verl_parts(rows, tokens, k, equal_size)
                else:
                    parts = karmarkar_karp(
                        tokens[rows].tolist(), k, equal_size=equal_size and len(rows) % k == 0
                    )
                per_rank.append([rows[np.asarray(p, dtype=np.int64)] for p in parts])
        part = _mb_from_rank_lists(per_rank, tokens, round_to)
        for mb in part:
            worst = max(worst, max(mb.tokens))
        mbs.extend(part)
        bounds.append(len(mbs) - 1)
    if raised:
        notes["partitions_raised"] = {
            "mini_batches": len(raised),
            "added": sum(raised),
            "note": "verl >= 0.9.1 adds micro-batches until every one fits the cap",
        }
    notes["max_micro_batch_tokens"] = worst
    if cap and worst > cap:
        notes["token_cap_exceeded"] = {
            "max_tokens": worst,
            "cap": cap,
            "micro_batches_over": sum(1 for mb in mbs if max(mb.tokens) > cap),
        }
    _note_over_cap(notes, tokens, cap, asserts=ASSERTS_ON_LONG_SEQUENCE.get(flavor))
    return StepPlan(mbs, bounds if mini_per_rank else None, None, notes)


def _verl_fit(rows_j, tokens, count, cap, equal_size, notes, raised):
    """verl >= 0.9.1: raise the shared count until every rank's partitions fit ``cap``.

    verl raises ``ValueError`` when the count would pass the smallest rank's row
    count (a sequence longer than the cap never fits); the replay then keeps the
    last tried count, capped per rank, and says so in notes.
    """
    live = [r for r in rows_j if len(r)]
    if not live:
        return [[] for _ in rows_j]
    min_rows = min(len(r) for r in live)
    start = count
    while True:
        k_try = min(count, min_rows)
        per_rank = [
            [
                rows[np.asarray(p, dtype=np.int64)]
                for p in _verl_parts(rows, tokens, k_try, equal_size)
            ]
            if len(rows)
            else []
            for rows in rows_j
        ]
        fits = count <= min_rows and all(
            int(tokens[p].sum()) <= cap for lst in per_rank for p in lst
        )
        if fits or count >= min_rows:
            break
        count += 1
    if not fits:
        rec = notes.setdefault(
            "verl_cannot_fit",
            {
                "mini_batches": 0,
                "note": "verl raises ValueError: the cap cannot be met with one sequence "
                "or more per micro-batch",
            },
        )
        rec["mini_batches"] += 1
    if count > start:
        raised.append(count - start)
    return per_rank
