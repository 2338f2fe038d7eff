"""Shared shapes and helpers of the micro-batching strategies.

A step plan is what every strategy returns: the micro-batches (rows per dp rank,
padded length, real tokens) plus, where the framework decides them itself, the
optimizer-step boundaries and loss divisors. The helpers here are the parts
several frameworks share: handing a step to dp ranks, cutting mini-batches,
and zipping per-rank micro-batch lists into synchronised micro-steps.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from lrdoctor.core.errors import UnusableInput

if TYPE_CHECKING:
    import numpy as np


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause Python's cyclic garbage collector while plans are built.

    A run's plan is hundreds of thousands of small lists and MicroBatch objects,
    none of them in a cycle; with the collector on, each batch of allocations
    re-scans everything built so far, which costs as much as the planning
    itself (about half of a 1M-sample Karmarkar-Karp plan, measured with
    benchmarks/bench_packing.py). Reference counting still frees everything.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@dataclass(slots=True)  # a run's plan holds ~100,000 of them: no per-object dict
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
    import numpy as np
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
    import numpy as np
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
    import numpy as np
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


def _note_over_cap(notes: dict, lens: np.ndarray, cap: int | None,
                   asserts: str | None = None) -> None:
    """Record sequences longer than the cap; ``asserts`` names the framework code that
    stops the real run on one (None: the framework's cap is soft, e.g. SkyRL's)."""
    if cap and len(lens):
        big = int(lens.max())
        if big > cap:
            rec = notes.setdefault("sequence_over_cap", {"count": 0, "max_len": 0, "cap": cap})
            rec["count"] += int((lens > cap).sum())
            rec["max_len"] = max(rec["max_len"], big)
            if asserts:
                rec["asserts"] = asserts


@cache
def _empty() -> np.ndarray:
    """A rank's empty row list in a micro-batch (one shared array; numpy only when planned)."""
    import numpy as np

    return np.zeros(0, dtype=np.int64)


def _mb_from_rank_lists(
    per_rank: list[list[np.ndarray]], tokens: np.ndarray, round_to: int
) -> list[MicroBatch]:
    """Zip per-rank micro-batch lists into synchronised micro-steps.

    Ranks with fewer micro-batches get empty ones (frameworks pad the count
    to the max across dp so collectives line up). Token sums and max lengths
    come from one concatenation and two ``reduceat`` calls, not per-array numpy.
    """
    import numpy as np
    count = max((len(x) for x in per_rank), default=0)
    if count == 0:
        return []
    dp = len(per_rank)
    grid = [[lst[i] if i < len(lst) else _empty() for lst in per_rank] for i in range(count)]
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


def per_global_batch(n: int, mini_batch_size: Any, notes: dict,
                     plan: Callable[[np.ndarray], list[MicroBatch]]) -> StepPlan:
    """NeMo-RL's loop over a step's global batches: ``mini_batch_size`` consecutive rows
    (all ``n`` when unset) are one optimizer update, ``plan`` makes their micro-batches;
    a short last batch is noted. Its packers (token budget, sequence packing) differ
    only in ``plan``."""
    import numpy as np

    chunk = int(mini_batch_size) if mini_batch_size else n
    if n % chunk:
        notes["not_divisible_by_mini_batch"] = {"samples": n, "mini_batch_size": chunk}
    mbs: list[MicroBatch] = []
    bounds: list[int] = []
    for a in range(0, n, chunk):
        part = plan(np.arange(a, min(a + chunk, n)))
        if part:
            mbs.extend(part)
            bounds.append(len(mbs) - 1)
    return StepPlan(mbs, bounds, None, notes)


class PackerParams(BaseModel):
    """The ``batching`` keys one packer reads (others are ignored, not rejected: the
    section is shared by all packers)."""

    model_config = ConfigDict(extra="ignore", frozen=True)


@dataclass(frozen=True)
class Packer:
    name: str  # the batching.strategy value
    summary: str  # one line for the docs: whose algorithm, what it does
    params: type[PackerParams]
    # plan(params, train_cfg, frame, dp) -> StepPlan (train_cfg: model, object or dict)
    plan: Callable[[Any, Any, dict, int], Any]
    packed: bool  # True: a micro-batch costs its real tokens (packed); False: rows x padded
    token_knob: bool = False  # max_tokens_per_microbatch is its memory knob (LRD203 check)
    # The optimizer-step boundaries it sets (when it sets them) are one per mini-batch,
    # whatever the token cap: the 2x knob check may reuse the first plan.
    mini_batch_windows: bool = False
    # A whole-run planner, plan_steps(params, train_cfg, frames, dps) -> [StepPlan], equal
    # to ``plan`` on each step but faster (None: ``plan`` step by step).
    plan_steps: Callable[[Any, Any, list[dict], list[int]], list[Any]] | None = None

    def params_from(self, batching: Any) -> Any:
        """This packer's params from a ``batching`` section (model, object or dict)."""
        data: dict[str, Any] = {}
        for key in self.params.model_fields:
            val = batching.get(key) if isinstance(batching, dict) else getattr(batching, key, None)
            if val is not None:
                data[key] = val
        try:
            return self.params.model_validate(data)
        except ValidationError as exc:
            err = exc.errors()[0]
            loc = ".".join(str(p) for p in err.get("loc", ()))
            if err.get("type") == "missing":
                raise UnusableInput(f"strategy {self.name} needs batching.{loc}") from None
            msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
            if not loc:
                raise UnusableInput(f"strategy {self.name} {msg}") from None
            raise UnusableInput(f"strategy {self.name}: batching.{loc}: {msg}") from None
