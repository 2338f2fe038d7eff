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


def _minis_then_ranks(n: int, dp: int, mini_per_rank: int, notes: dict):
    """SkyRL since PR 1376 (``MeshDispatch.stage_chunks``, skyrl 0.2.0): slice the
    step into mini-batches of ``mini_per_rank * dp`` rows first, then chunk each
    mini-batch contiguously over the dp ranks. Returns per rank, per mini-batch rows."""
    size = mini_per_rank * dp
    out: list[list[np.ndarray]] = [[] for _ in range(dp)]
    for a in range(0, n, size):
        rows = np.arange(a, min(a + size, n))
        chunk = -(-len(rows) // dp)
        if len(rows) % dp:
            notes["not_divisible_by_dp"] = {"samples": len(rows), "dp": dp}
        for k in range(dp):
            out[k].append(rows[k * chunk : (k + 1) * chunk])
    return out


def plan_balanced_first_fit(
    fr, dp, max_tokens, *, mini_per_rank=None, round_to=1, flavor="skyrl"
) -> StepPlan:
    """SkyRL token-based micro-batches: each rank packs its own chunk, count synced to the max.

    Which rows a rank holds depends on the release: since PR 1376 (skyrl >= 0.2.0,
    ``flavor='skyrl'``) each mini-batch is sliced from the step first and then
    chunked over dp ranks; before it (``flavor='skyrl_rank_first'``) each rank took
    a contiguous shard of the whole step and cut its mini-batches inside it. A log
    with a ``rank`` column is taken as it is. Ranks with fewer bins run padding
    micro-batches (loss-masked); they appear here as empty rank lists and are
    counted in notes.
    """
    notes: dict = {}
    tokens = fr["tokens"]
    cap = int(max_tokens)
    if len(tokens) == 0:
        return StepPlan([], None, None, notes)
    if mini_per_rank and flavor != "skyrl_rank_first" and "rank" not in fr and dp > 1:
        minis = _minis_then_ranks(len(tokens), dp, mini_per_rank, notes)
    else:
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
