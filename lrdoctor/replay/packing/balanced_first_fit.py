"""SkyRL's token-based micro-batches: balanced first-fit per rank, count synced over dp."""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING

from pydantic import Field

from lrdoctor.replay.packing.common import (
    Packer,
    PackerParams,
    StepPlan,
    _assemble_minis,
    _get,
    _mini_batches_per_rank,
    _mini_per_rank,
    _note_over_cap,
    _rank_shards,
)

if TYPE_CHECKING:
    import numpy as np


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


def pack_chunk(tokens: np.ndarray, rows: np.ndarray, cap: int, pad_lens=()) -> list[np.ndarray]:
    """One rank's chunk packed as SkyRL's ``TokenBasedBatchIterator`` packs it.

    ``pad_lens``: token counts of the dispatch's padding copies at the chunk's tail
    (``stage_chunks`` pads a mini-batch to a multiple of dp). They are packed with
    the real rows, so they shape the bins (a copy can need a micro-batch of its
    own), then dropped from them: they are not samples and carry no loss.
    """
    lens = tokens[rows].tolist()
    bins = balanced_first_fit(lens + list(pad_lens), cap)
    if len(pad_lens):
        bins = [[i for i in b if i < len(lens)] for b in bins]
    return _bins_to_views(rows, bins)


def _stage_chunks(n: int, dp: int, mini_batch_size: int | None, notes: dict):
    """SkyRL since PR 1376 (``MeshDispatch.stage_chunks``, skyrl 0.2.0): slice the step
    into mini-batches of ``mini_batch_size`` rows (the whole step when unset), pad each
    to a multiple of dp with loss-masked copies of its first row, then chunk it
    contiguously over the ranks, so the last ranks hold the copies.

    Returns per rank, per mini-batch ``(rows, pad, first)``: the real rows, how many
    copies of the mini-batch's first row (``first``) follow them. The copies carry that row's
    tokens into the rank's packer (they can add a micro-batch) but no loss.
    """
    import numpy as np
    size = int(mini_batch_size) if mini_batch_size else n
    out: list[list[tuple[np.ndarray, int, int]]] = [[] for _ in range(dp)]
    pad_rows = 0
    for a in range(0, n, size):
        rows = np.arange(a, min(a + size, n))
        pad = (-len(rows)) % dp
        if pad:
            pad_rows += pad
            notes.setdefault("not_divisible_by_dp", {"samples": len(rows), "dp": dp,
                                                     "padding_rows": pad})
        chunk = (len(rows) + pad) // dp
        for k in range(dp):
            real = rows[k * chunk : (k + 1) * chunk]
            out[k].append((real, chunk - len(real), a))
    if pad_rows:
        notes["padding_rows"] = pad_rows
    return out


def plan_balanced_first_fit(
    fr, dp, max_tokens, *, mini_batch_size=None, round_to=1, flavor="skyrl"
) -> StepPlan:
    """SkyRL token-based micro-batches: each rank packs its own chunk, count synced to the max.

    Which rows a rank holds depends on the release: since PR 1376 (skyrl >= 0.2.0,
    ``flavor='skyrl'``) each mini-batch of ``mini_batch_size`` rows is sliced from
    the step first, padded to a multiple of dp and chunked over dp ranks
    (:func:`_stage_chunks`); before it (``flavor='skyrl_rank_first'``) each rank
    took a contiguous shard of the whole step and cut its mini-batches of
    ``mini_batch_size / dp`` rows inside it. A log with a ``rank`` column is taken
    as it is. Ranks with fewer bins run padding micro-batches (loss-masked); they
    appear here as empty rank lists and are counted in notes.
    """
    notes: dict = {}
    tokens = fr["tokens"]
    cap = int(max_tokens)
    if len(tokens) == 0:
        return StepPlan([], None, None, notes)
    if flavor != "skyrl_rank_first" and "rank" not in fr:
        staged = _stage_chunks(len(tokens), dp, mini_batch_size, notes)
        per_rank_minis = []
        for m in staged:
            lst = []
            for rows, pad, first in m:
                lst.append(pack_chunk(tokens, rows, cap, [int(tokens[first])] * pad))
            per_rank_minis.append(lst)
    else:
        mini_per_rank = _mini_per_rank({"mini_batch_size": mini_batch_size}, dp, notes)
        shards = _rank_shards(fr, dp, notes)
        per_rank_minis = [
            [_bins_to_views(rows, balanced_first_fit(tokens[rows].tolist(), cap)) for rows in m]
            for m in _mini_batches_per_rank(shards, mini_per_rank)
        ]
    mbs, bounds = _assemble_minis(per_rank_minis, tokens, round_to)
    pads = sum(1 for mb in mbs for r in mb.ranks if not len(r))
    if pads:
        notes["padding_micro_batches"] = pads
    _note_over_cap(notes, tokens, cap)
    return StepPlan(mbs, bounds if mini_batch_size else None, None, notes)


class BalancedFirstFitParams(PackerParams):
    max_tokens_per_microbatch: int = Field(..., ge=1)
    round_to: int = Field(1, ge=1)
    flavor: str = "skyrl"


def _plan(p: BalancedFirstFitParams, train, fr, dp) -> StepPlan:
    return plan_balanced_first_fit(fr, dp, p.max_tokens_per_microbatch,
                                   mini_batch_size=_get(train, "mini_batch_size"),
                                   round_to=p.round_to, flavor=p.flavor)


PACKER = Packer("balanced_first_fit", "SkyRL token-based micro-batches (balanced first-fit, "
                "soft cap)", BalancedFirstFitParams, _plan, packed=True, token_knob=True,
                mini_batch_windows=True)
