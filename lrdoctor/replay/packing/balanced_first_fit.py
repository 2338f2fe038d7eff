"""SkyRL's token-based micro-batches: balanced first-fit per rank, count synced over dp."""

from __future__ import annotations

import heapq

import numpy as np

from lrdoctor.replay.packing.common import (
    StepPlan,
    _assemble_minis,
    _mini_batches_per_rank,
    _note_over_cap,
    _rank_shards,
)


def balanced_first_fit(lens, cap: int) -> list[list[int]]:
    """SkyRL's balanced packer: longest first, into the least-loaded bin if it fits.

    Stable descending sort; a sequence that does not fit the least-loaded bin
    opens a new bin (so an over-cap sequence sits alone; the cap is soft).
    """
    if not isinstance(lens, list):
        lens = [int(x) for x in lens]
    order = sorted(range(len(lens)), key=lens.__getitem__, reverse=True)
    bins: list[list[int]] = []
    heap: list[tuple[int, int]] = []
    for i in order:
        ln = lens[i]
        if heap and heap[0][0] + ln <= cap:
            tot, b = heap[0]
            bins[b].append(i)
            heapq.heapreplace(heap, (tot + ln, b))
        else:
            bins.append([i])
            heapq.heappush(heap, (ln, len(bins) - 1))
    return bins


def _bins_to_views(rows: np.ndarray, bins: list[list[int]]) -> list[np.ndarray]:
    """Bins of local positions -> row arrays, with one fancy index for all of them."""
    if not bins:
        return []
    flat = rows[[i for b in bins for i in b]]
    out = []
    a = 0
    for b in bins:
        out.append(flat[a : a + len(b)])
        a += len(b)
    return out


def plan_balanced_first_fit(fr, dp, max_tokens, *, mini_per_rank=None, round_to=1) -> StepPlan:
    """SkyRL token-based micro-batches: each rank packs its own chunk, count synced to the max.

    Ranks with fewer bins run padding micro-batches (loss-masked); they appear
    here as empty rank lists and are counted in notes.
    """
    notes: dict = {}
    tokens = fr["tokens"]
    cap = int(max_tokens)
    if len(tokens) == 0:
        return StepPlan([], None, None, notes)
    shards = _rank_shards(fr, dp, notes)
    minis = _mini_batches_per_rank(shards, mini_per_rank)
    per_rank_minis = []
    for m in minis:
        lst = []
        for rows in m:
            bins = balanced_first_fit(tokens[rows].tolist(), cap)
            lst.append(_bins_to_views(rows, bins))
        per_rank_minis.append(lst)
    mbs, bounds = _assemble_minis(per_rank_minis, tokens, round_to)
    pads = sum(1 for mb in mbs for r in mb.ranks if not len(r))
    if pads:
        notes["padding_micro_batches"] = pads
    _note_over_cap(notes, tokens, cap)
    return StepPlan(mbs, bounds if mini_per_rank else None, None, notes)
