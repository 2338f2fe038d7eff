"""Micro-batching strategies, re-implemented from each framework's algorithm.

The replay needs the *number and shape* of micro-batches a framework builds from
one train step's samples, because that count is what the optimizer and the
scheduler consume. Each strategy below follows the framework's own rules
(sort order, rank assignment, cap test, cross-rank synchronisation), written
from reading their code, so the replayed count matches what the run did.

``frame`` is one train step's samples as a dict of numpy arrays (``tokens``
required; ``prompt_id``, ``docs``, ``rank`` optional); a pandas DataFrame is
accepted too and converted. Row indices in the plan are positions in that frame.
``batching_cfg`` and ``train_cfg`` may be pydantic models, plain objects or dicts.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from lrdoctor.errors import UnusableInput

STRATEGIES = (
    "static",
    "token_budget",
    "karmarkar_karp",
    "balanced_first_fit",
    "prompt_unit",
    "doc_target",
)


@dataclass
class MicroBatch:
    # per dp rank: row indices (int64 numpy arrays, list-like) in this micro-batch; may be empty
    ranks: list[np.ndarray]
    padded_len: list[int]  # per rank: padded (rounded) length; shape = (len(rows), padded_len)
    tokens: list[int]  # per rank: real token count

    @property
    def size(self) -> int:
        return sum(len(r) for r in self.ranks)


@dataclass
class StepPlan:
    micro_batches: list[MicroBatch]
    # None: the accumulation rule decides windows; else an optimizer step closes
    # after each of these micro-batch indices (0-based, ascending).
    boundaries: list[int] | None = None
    # doc_target: the divisor each micro-batch's loss is scaled by.
    loss_divisors: list[float] | None = None
    notes: dict = field(default_factory=dict)


# --------------------------------------------------------------------------- helpers


def _get(cfg: Any, key: str, default: Any = None) -> Any:
    if cfg is None:
        return default
    if isinstance(cfg, dict):
        val = cfg.get(key, default)
    else:
        val = getattr(cfg, key, default)
    return default if val is None else val


def as_frame(frame: Any) -> dict[str, np.ndarray]:
    """One step's samples as a dict of numpy arrays (accepts a DataFrame)."""
    if isinstance(frame, dict):
        out = {k: np.asarray(v) for k, v in frame.items()}
    elif hasattr(frame, "columns"):
        out = {str(c): frame[c].to_numpy() for c in frame.columns}
    else:
        raise TypeError(
            f"frame must be a dict of arrays or a DataFrame, got {type(frame).__name__}"
        )
    if "tokens" not in out:
        raise UnusableInput("batch frame has no 'tokens' column")
    out["tokens"] = out["tokens"].astype(np.int64, copy=False)
    return out


def split_steps(df: Any) -> list[tuple[int, dict[str, np.ndarray]]]:
    """Split a whole batch log into per-step frames (ordered by step, rows in log order).

    Vectorised: one stable argsort, then array slices; far cheaper than a
    DataFrame groupby when there are 10,000 steps.
    """
    cols = as_frame(df)
    step = cols["step"].astype(np.int64, copy=False)
    order = np.argsort(step, kind="stable")
    s_sorted = step[order]
    cuts = np.flatnonzero(np.diff(s_sorted)) + 1
    starts = np.concatenate(([0], cuts))
    ends = np.concatenate((cuts, [len(step)]))
    sorted_cols = {k: v[order] for k, v in cols.items() if k != "step"}
    out = []
    for a, b in zip(starts.tolist(), ends.tolist(), strict=False):
        out.append((int(s_sorted[a]), {k: v[a:b] for k, v in sorted_cols.items()}))
    return out


def _round_up(x: np.ndarray | int, r: int):
    if r <= 1:
        return x
    return ((x + r - 1) // r) * r


def _rank_layout(fr: dict[str, np.ndarray], dp: int, notes: dict) -> tuple[np.ndarray, list[int]]:
    """Rows of each dp rank as ``perm[bounds[k]:bounds[k+1]]``.

    The log's own ``rank`` column when present, else contiguous equal chunks,
    which is how ROLL's DataProto.chunk and SkyRL's dispatch hand a batch to dp
    ranks when nothing rebalances it.
    """
    n = len(fr["tokens"])
    if "rank" in fr:
        rk = fr["rank"].astype(np.int64, copy=False)
        if len(rk) and (rk.min() < 0 or rk.max() >= dp):
            notes["rank_out_of_range"] = {"max_rank": int(rk.max()), "dp": dp}
            rk = rk % dp
        perm = np.argsort(rk, kind="stable")
        bounds = [0, *np.cumsum(np.bincount(rk, minlength=dp)).tolist()]
        return perm, bounds
    if n % dp:
        notes["not_divisible_by_dp"] = {"samples": n, "dp": dp}
    per = -(-n // dp) if n else 0
    return np.arange(n), [min(k * per, n) for k in range(dp + 1)]


def _rank_shards(fr: dict[str, np.ndarray], dp: int, notes: dict) -> list[np.ndarray]:
    perm, bounds = _rank_layout(fr, dp, notes)
    return [perm[bounds[k] : bounds[k + 1]] for k in range(dp)]


def _note_over_cap(notes: dict, lens: np.ndarray, cap: int | None) -> None:
    if cap and len(lens):
        big = int(lens.max())
        if big > cap:
            rec = notes.setdefault("sequence_over_cap", {"count": 0, "max_len": 0, "cap": cap})
            rec["count"] += int((lens > cap).sum())
            rec["max_len"] = max(rec["max_len"], big)


_EMPTY = np.zeros(0, dtype=np.int64)


def _mb_from_rank_lists(
    per_rank: list[list[np.ndarray]], tokens: np.ndarray, round_to: int
) -> list[MicroBatch]:
    """Zip per-rank micro-batch lists into synchronised micro-steps.

    Ranks with fewer micro-batches get empty ones (frameworks pad the count
    to the max across dp so collectives line up). Token sums and max lengths
    come from one concatenation and two ``reduceat`` calls, not per-array numpy.
    """
    count = max((len(x) for x in per_rank), default=0)
    if count == 0:
        return []
    dp = len(per_rank)
    grid = [[lst[i] if i < len(lst) else _EMPTY for lst in per_rank] for i in range(count)]
    flat = [a for row in grid for a in row]
    sizes = np.fromiter((len(a) for a in flat), dtype=np.int64, count=len(flat))
    sums = np.zeros(len(flat), dtype=np.int64)
    maxs = np.zeros(len(flat), dtype=np.int64)
    if sizes.sum():
        lens = tokens[np.concatenate(flat)]
        offs = np.cumsum(sizes) - sizes
        ne = sizes > 0
        sums[ne] = np.add.reduceat(lens, offs[ne])
        maxs[ne] = np.maximum.reduceat(lens, offs[ne])
    maxs = _round_up(maxs, round_to)
    sums_l = sums.reshape(count, dp).tolist()
    maxs_l = maxs.reshape(count, dp).tolist()
    return [MicroBatch(grid[i], maxs_l[i], sums_l[i]) for i in range(count)]


def _mini_batches_per_rank(shards: list[np.ndarray], mini_per_rank: int | None):
    """Split each rank's rows into consecutive mini-batches of ``mini_per_rank`` rows."""
    if not mini_per_rank:
        return [[s] for s in shards]
    return [
        [s[i : i + mini_per_rank] for i in range(0, len(s), mini_per_rank)] or [s] for s in shards
    ]


def _mini_per_rank(train_cfg: Any, dp: int, notes: dict) -> int | None:
    mbs = _get(train_cfg, "mini_batch_size")
    if not mbs:
        return None
    mbs = int(mbs)
    if mbs % dp:
        notes["mini_batch_not_divisible_by_dp"] = {"mini_batch_size": mbs, "dp": dp}
    return max(1, mbs // dp)


def _assemble_minis(
    per_rank_minis: list[list[list[np.ndarray]]], tokens: np.ndarray, round_to: int
) -> tuple[list[MicroBatch], list[int]]:
    """Per mini-batch index: synchronise ranks, concatenate, record the closing index."""
    n_minis = max(len(m) for m in per_rank_minis)
    mbs: list[MicroBatch] = []
    bounds: list[int] = []
    for j in range(n_minis):
        lists = [m[j] if j < len(m) else [] for m in per_rank_minis]
        part = _mb_from_rank_lists(lists, tokens, round_to)
        if part:
            mbs.extend(part)
            bounds.append(len(mbs) - 1)
    return mbs, bounds


# --------------------------------------------------------------------------- static


def plan_static(fr, dp, micro_batch_size, round_to=1) -> StepPlan:
    """Fixed ``micro_batch_size`` sequences per rank, in order, from each rank's rows."""
    notes: dict = {}
    mbs, _ = _static_core(fr, dp, micro_batch_size, round_to, notes)
    return StepPlan(mbs, None, None, notes)


def _static_core(fr, dp, micro_batch_size, round_to, notes, extra=None):
    """Static micro-batches, plus per micro-step global sums of column ``extra``.

    Every micro-batch is a contiguous run of the rank-ordered rows, so sums and
    maxima come from ``reduceat`` calls over the whole step.
    """
    tokens = fr["tokens"]
    perm, bounds = _rank_layout(fr, dp, notes)
    m = max(1, int(micro_batch_size))
    segs = [list(range(bounds[k], bounds[k + 1], m)) for k in range(dp)]
    counts = [len(x) for x in segs]
    count = max(counts, default=0)
    if count == 0:
        return [], []
    if len(set(counts)) > 1:
        notes["uneven_micro_batch_counts"] = counts
    flat_starts = [a for x in segs for a in x]
    tp = tokens[perm]
    sums = np.add.reduceat(tp, flat_starts).tolist()
    maxs = np.maximum.reduceat(tp, flat_starts)
    maxs = _round_up(maxs, round_to).tolist()
    ex = np.add.reduceat(extra[perm], flat_starts).tolist() if extra is not None else None
    ex_step = [0] * count
    off = [0]
    for c in counts:
        off.append(off[-1] + c)
    mbs: list[MicroBatch] = []
    for i in range(count):
        ranks, pl, tk = [], [], []
        for k in range(dp):
            if i < counts[k]:
                a = segs[k][i]
                b = min(a + m, bounds[k + 1])
                ranks.append(perm[a:b])
                pl.append(maxs[off[k] + i])
                tk.append(sums[off[k] + i])
                if ex is not None:
                    ex_step[i] += ex[off[k] + i]
            else:
                ranks.append(_EMPTY)
                pl.append(0)
                tk.append(0)
        mbs.append(MicroBatch(ranks, pl, tk))
    return mbs, ex_step


# --------------------------------------------------------------------------- ROLL / NeMo-RL


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
    notes: dict = {}
    tokens = fr["tokens"]
    n = len(tokens)
    r = max(1, int(round_to))
    cap = int(max_tokens)
    if n == 0:
        return StepPlan([], None, None, notes)
    if flavor != "nemo_rl":
        mbs = _token_budget_core(np.arange(n), tokens, dp, cap, r, r, None, notes)
        return StepPlan(mbs, None, None, notes)
    width = int(tokens.max())
    chunk = int(mini_batch_size) if mini_batch_size else n
    if n % chunk:
        notes["not_divisible_by_mini_batch"] = {"samples": n, "mini_batch_size": chunk}
    mbs = []
    bounds = []
    for a in range(0, n, chunk):
        part = _token_budget_core(
            np.arange(a, min(a + chunk, n)), tokens, dp, cap, r, 0, width, notes
        )
        if part:
            mbs.extend(part)
            bounds.append(len(mbs) - 1)
    return StepPlan(mbs, bounds, None, notes)


def _token_budget_core(rows, all_tokens, dp, cap, r, floor, clamp, notes) -> list[MicroBatch]:
    """The sorted, dealt, greedy walk over ``rows`` (indices into the step frame)."""
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


# --------------------------------------------------------------------------- Karmarkar-Karp


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
    round_to=1,
) -> StepPlan:
    """verl / OpenRLHF dynamic batch size: balanced partitions, not a hard cap.

    dp split: the log's ``rank`` column, else (verl's balance_batch) a KK
    equal-size partition of the step over dp ranks by workload, else contiguous
    chunks (OpenRLHF). Each rank's mini-batch is split into N micro-batches by KK, where N is
    ``ceil(sum/max_tokens)`` capped at the row count (verl) or OpenRLHF's
    first-fit count, then the max over dp ranks. Balanced sums can exceed the
    cap: the largest micro-batch token sum is reported in notes.
    """
    notes: dict = {}
    tokens = fr["tokens"]
    n = len(tokens)
    cap = int(max_tokens)
    if n == 0:
        return StepPlan([], None, None, notes)
    if "rank" in fr:
        shards = _rank_shards(fr, dp, notes)
    elif flavor == "verl" and balance_dp and n >= dp and n % dp == 0 and dp > 1:
        # verl's balance_batch: equal-size KK over dp on the workload estimate, each
        # rank's rows ordered light/heavy-interleaved (this order decides which rows
        # share a mini-batch, since ranks cut their rows into consecutive mini-batches).
        work = verl_workload(tokens).tolist()
        shards = []
        for p in karmarkar_karp(work, dp, equal_size=True):
            p.sort(key=lambda x: (work[x], x))
            shards.append(np.asarray(p[::2] + p[1::2][::-1], dtype=np.int64))
    else:
        shards = _rank_shards(fr, dp, notes)
    minis = _mini_batches_per_rank(shards, mini_per_rank)
    n_minis = max(len(m) for m in minis)
    mbs: list[MicroBatch] = []
    bounds: list[int] = []
    worst = 0
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
        for rows in rows_j:
            if len(rows) == 0:
                per_rank.append([])
                continue
            k = min(c_all, len(rows))
            lens = tokens[rows]
            weights = verl_workload(lens) if flavor == "verl" else lens
            parts = karmarkar_karp(
                weights.tolist(), k, equal_size=equal_size and len(rows) % k == 0
            )
            if flavor == "verl":
                # verl orders micro-batches by workload, heaviest in the middle.
                w = weights.tolist()
                parts.sort(key=lambda p: (sum(w[i] for i in p), p[0]), reverse=True)
                parts = parts[::2][::-1] + parts[1::2]
            per_rank.append([rows[np.asarray(p, dtype=np.int64)] for p in parts])
        part = _mb_from_rank_lists(per_rank, tokens, round_to)
        for mb in part:
            worst = max(worst, max(mb.tokens))
        mbs.extend(part)
        bounds.append(len(mbs) - 1)
    notes["max_micro_batch_tokens"] = worst
    if cap and worst > cap:
        notes["token_cap_exceeded"] = {
            "max_tokens": worst,
            "cap": cap,
            "micro_batches_over": sum(1 for mb in mbs if max(mb.tokens) > cap),
        }
    _note_over_cap(notes, tokens, cap)
    return StepPlan(mbs, bounds if mini_per_rank else None, None, notes)


# --------------------------------------------------------------------------- SkyRL


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


def prompt_runs(prompt_id: np.ndarray) -> tuple[np.ndarray, list]:
    """End offsets of consecutive equal prompt ids; non-contiguous repeats are an error."""
    n = len(prompt_id)
    if n == 0:
        return np.zeros(0, np.int64), []
    change = np.flatnonzero(prompt_id[1:] != prompt_id[:-1]) + 1
    ends = np.concatenate((change, [n]))
    firsts = prompt_id[np.concatenate(([0], change))]
    if len(set(firsts.tolist())) != len(firsts):
        seen: set = set()
        for pos, p in zip(np.concatenate(([0], change)).tolist(), firsts.tolist(), strict=False):
            if p in seen:
                raise UnusableInput(
                    f"prompt_id {p!r} appears again at step row {pos + 1} after other prompts: "
                    "a prompt's sequences must be contiguous"
                )
            seen.add(p)
    return ends, firsts.tolist()


def plan_prompt_unit(
    fr,
    dp,
    micro_batch_size,
    *,
    prompts_per_mini_batch=None,
    samples_per_step=None,
    mini_batch_size=None,
    pad_mode="copy",
    max_tokens=None,
    inner="static",
    round_to=1,
) -> StepPlan:
    """SkyRL step-wise training: mini-batches end on prompt boundaries.

    Each mini-batch spans ``prompts_per_mini_batch`` whole prompts (default:
    prompts in the step / (samples_per_step / mini_batch_size), the nominal
    number of mini-batches). It is padded to a multiple of dp, then chunked
    contiguously over ranks, then into micro-batches. ``pad_mode='slice'``
    reproduces padding by ``tensor[:pad_size]``, which yields only
    ``min(pad_size, mb_size)`` rows: short whenever ``pad_size > mb_size``.
    """
    notes: dict = {}
    tokens = fr["tokens"]
    n = len(tokens)
    if n == 0:
        return StepPlan([], [], None, notes)
    if "prompt_id" not in fr:
        raise UnusableInput("strategy prompt_unit needs a prompt_id column in the batch log")
    ends, _ = prompt_runs(np.asarray(fr["prompt_id"]))
    n_prompts = len(ends)
    if not prompts_per_mini_batch:
        if samples_per_step and mini_batch_size:
            n_minis = max(1, int(samples_per_step) // int(mini_batch_size))
            if n_prompts % n_minis:
                notes["prompts_not_divisible"] = {"prompts": n_prompts, "mini_batches": n_minis}
            prompts_per_mini_batch = max(1, math.ceil(n_prompts / n_minis))
        else:
            prompts_per_mini_batch = n_prompts
    ppm = int(prompts_per_mini_batch)
    notes["prompts"] = n_prompts
    notes["prompts_per_mini_batch"] = ppm
    if mini_batch_size and n % int(mini_batch_size):
        # Fixed-size sequence mini-batches (the pre-fix code) would not divide this step.
        notes["fixed_size_not_divisible"] = {
            "sequences": n,
            "mini_batch_size": int(mini_batch_size),
        }
    starts_p = np.concatenate(([0], ends))
    mbs: list[MicroBatch] = []
    bounds: list[int] = []
    pad_all = []
    short = []
    m = max(1, int(micro_batch_size))
    for pi in range(0, n_prompts, ppm):
        a = int(starts_p[pi])
        b = int(starts_p[min(pi + ppm, n_prompts)])
        mb_size = b - a
        pad = (-mb_size) % dp
        rows = np.arange(a, b)
        got = pad if pad_mode != "slice" else min(pad, mb_size)
        if pad:
            pad_all.append({"mini_batch": len(bounds), "mb_size": mb_size, "pad_size": pad})
            if pad > mb_size:
                rec = {
                    "mini_batch": len(bounds),
                    "mb_size": mb_size,
                    "pad_size": pad,
                    "dp": dp,
                    "rows_after_padding": mb_size + got,
                    "needed": mb_size + pad,
                }
                if pad_mode == "slice":
                    short.append(rec)
        total = mb_size + got
        # Padding rows are loss-masked copies; they take rank slots but are not samples.
        padded_rows = np.concatenate((rows, np.full(got, -1, dtype=np.int64)))
        chunk = math.ceil(total / dp)
        per_rank = []
        for k in range(dp):
            rk = padded_rows[k * chunk : (k + 1) * chunk]
            rk = rk[rk >= 0]
            if inner == "balanced_first_fit" and max_tokens:
                bins = balanced_first_fit(tokens[rk].tolist(), int(max_tokens))
                per_rank.append(_bins_to_views(rk, bins))
            else:
                per_rank.append([rk[i : i + m] for i in range(0, len(rk), m)])
        part = _mb_from_rank_lists(per_rank, tokens, round_to)
        if part:
            mbs.extend(part)
            bounds.append(len(mbs) - 1)
    if pad_all:
        notes["padding"] = pad_all
    if short:
        notes["short_padding"] = short
    notes["mini_batches"] = len(bounds)
    return StepPlan(mbs, bounds, None, notes)


# --------------------------------------------------------------------------- Fast-LLM


def plan_doc_target(
    fr, dp, micro_batch_size, docs_per_step, round_to=1, loss_divisor="step_total"
) -> StepPlan:
    """Fast-LLM ``docs_per_step``: accumulate until the global document count reaches the target.

    Micro-batches are taken one micro-step at a time (``micro_batch_size`` rows on
    every rank), the step's document count is summed over ranks, and the
    optimizer step closes as soon as it is >= ``docs_per_step`` (overshoot
    allowed). Every micro-batch in the window divides its loss by the window's
    global document total (``loss_divisor='micro_batch'`` reproduces a loop that
    divides by its own micro-batch's documents instead). Micro-batches left at
    the end of the train step close a short window (reported in notes).
    """
    notes: dict = {}
    tokens = fr["tokens"]
    docs = fr["docs"].astype(np.int64) if "docs" in fr else np.ones(len(tokens), np.int64)
    target = int(docs_per_step)
    if target <= 0:
        raise UnusableInput("batching.docs_per_step must be a positive integer")
    # Global documents per micro-step (summed over ranks) come with the static plan.
    mbs, mb_docs = _static_core(fr, dp, micro_batch_size, round_to, notes, extra=docs)
    bounds: list[int] = []
    divisors: list[float] = []
    acc = 0
    start = 0
    overshoot = []
    for i, d in enumerate(mb_docs):
        acc += d
        if acc >= target:
            bounds.append(i)
            divisors.extend([float(acc)] * (i - start + 1))
            if acc > target:
                overshoot.append(acc - target)
            acc = 0
            start = i + 1
    if start < len(mbs):
        bounds.append(len(mbs) - 1)
        divisors.extend([float(acc)] * (len(mbs) - start))
        notes["partial_tail"] = {"docs": acc, "target": target, "micro_batches": len(mbs) - start}
    if overshoot:
        notes["overshoot"] = {
            "windows": len(overshoot),
            "max": max(overshoot),
            "total": sum(overshoot),
        }
    if loss_divisor == "micro_batch":
        divisors = [float(max(d, 1)) for d in mb_docs]
    notes["docs_per_step"] = target
    notes["micro_batch_docs"] = mb_docs
    return StepPlan(mbs, bounds, divisors, notes)


# --------------------------------------------------------------------------- dispatch


def plan_step(batching_cfg: Any, train_cfg: Any, frame: Any, dp: int) -> StepPlan:
    """Plan one train step's micro-batches with the configured framework strategy."""
    fr = frame if isinstance(frame, dict) and "tokens" in frame else as_frame(frame)
    if isinstance(fr, dict) and fr["tokens"].dtype != np.int64:
        fr = as_frame(fr)
    dp = int(dp)
    if dp < 1:
        raise UnusableInput(f"dp size must be >= 1, got {dp}")
    strategy = _get(batching_cfg, "strategy", "static")
    round_to = int(_get(batching_cfg, "round_to", 1))
    cap = _get(batching_cfg, "max_tokens_per_microbatch")
    mbs = int(_get(train_cfg, "micro_batch_size", 1))
    if strategy == "static":
        return plan_static(fr, dp, mbs, round_to)
    if strategy in ("token_budget", "balanced_first_fit") and not cap:
        raise UnusableInput(
            f"batching.max_tokens_per_microbatch is required for strategy {strategy}"
        )
    if strategy == "token_budget":
        return plan_token_budget(
            fr,
            dp,
            int(cap),
            round_to,
            flavor=str(_get(batching_cfg, "flavor", "roll")),
            mini_batch_size=_get(train_cfg, "mini_batch_size"),
        )
    if strategy == "karmarkar_karp":
        if not cap and not _get(batching_cfg, "num_micro_batches"):
            raise UnusableInput(
                "strategy karmarkar_karp needs batching.max_tokens_per_microbatch or num_micro_batches"
            )
        notes: dict = {}
        plan = plan_karmarkar_karp(
            fr,
            dp,
            int(cap or 0),
            num_micro_batches=_get(batching_cfg, "num_micro_batches"),
            equal_size=bool(_get(batching_cfg, "equal_size", False)),
            flavor=str(_get(batching_cfg, "flavor", "verl")),
            mini_per_rank=_mini_per_rank(train_cfg, dp, notes),
            balance_dp=bool(_get(batching_cfg, "balance_dp", True)),
            round_to=round_to,
        )
        plan.notes.update(notes)
        return plan
    if strategy == "balanced_first_fit":
        notes = {}
        plan = plan_balanced_first_fit(
            fr, dp, int(cap), mini_per_rank=_mini_per_rank(train_cfg, dp, notes), round_to=round_to
        )
        plan.notes.update(notes)
        return plan
    if strategy == "prompt_unit":
        return plan_prompt_unit(
            fr,
            dp,
            mbs,
            prompts_per_mini_batch=_get(batching_cfg, "prompts_per_mini_batch"),
            samples_per_step=_get(train_cfg, "samples_per_step"),
            mini_batch_size=_get(train_cfg, "mini_batch_size"),
            pad_mode=str(_get(batching_cfg, "pad_mode", "copy")),
            max_tokens=cap,
            inner=str(_get(batching_cfg, "inner", "static")),
            round_to=round_to,
        )
    if strategy == "doc_target":
        dps = _get(batching_cfg, "docs_per_step")
        if not dps:
            raise UnusableInput("batching.docs_per_step is required for strategy doc_target")
        return plan_doc_target(
            fr, dp, mbs, int(dps), round_to, str(_get(batching_cfg, "loss_divisor", "step_total"))
        )
    raise UnusableInput(f"batching.strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
