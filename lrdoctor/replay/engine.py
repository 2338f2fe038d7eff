"""The fast replay path: the loop's step accounting in vectorised numpy, no torch.

Why a second path next to :mod:`.torch_exec`: a real optimizer costs about a
millisecond per micro-batch, while a long run has millions; this path derives
the same trace (windows, updates, scheduler progress, LR per micro-batch)
arithmetically, and a test proves both paths agree.

Pipeline: :func:`lrdoctor.replay.samples.load_samples` (batch log / synthetic /
counts) -> :func:`lrdoctor.replay.planning.plan_steps` (the framework's
micro-batching per train step) -> :func:`simulate` (windows, scheduler events, LRs),
against what the config promises (:mod:`.nominal`).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lrdoctor.core.state import ScheduleSpec
from lrdoctor.replay.nominal import (
    nominal_k,
    nominal_samples_per_update,
    nominal_updates,
    replayed_budget_updates,
    samples_per_step,
    schedule_spec,
)
from lrdoctor.replay.planning import Planner, StepInfo, plan_steps

if TYPE_CHECKING:
    import pandas as pd

    from lrdoctor.replay.config import RunConfig
    from lrdoctor.replay.table import Samples


@dataclass
class Replay:
    """A replayed run: the per-micro-batch trace plus what the analysis needs."""

    cfg: Any
    spec: ScheduleSpec
    trace: dict[str, np.ndarray]
    infos: Sequence[StepInfo]
    nominal_updates: float
    budget_updates: float
    engine: str = "fast"
    device: str = "cpu"
    notes: dict = field(default_factory=dict)
    # Views of the trace several readers share (rules.replay_context.per_step), computed once.
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.trace)

    def write_trace(self, path: str, suffix: str) -> None:
        """The trace as ``.parquet`` or ``.csv`` through pyarrow alone. Why not
        :meth:`frame`: the replay never imports pandas, whose import alone cost more
        than the replay of a 75,000-micro-batch run (benchmarks/bench_trace.py);
        ``Table.from_arrays`` wraps the numpy columns without copying them (``pa.table``
        of a dict would import pandas too)."""
        import pyarrow as pa

        table = pa.Table.from_arrays([pa.array(v) for v in self.trace.values()],
                                     names=list(self.trace))
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            pq.write_table(table, path)
        else:
            import pyarrow.csv as pacsv

            pacsv.write_csv(table, path)


def carried_doc_windows(cfg: RunConfig, infos: Sequence[StepInfo]
                        ) -> tuple[np.ndarray, np.ndarray] | None:
    """Document-target windows over the whole run (``flush_at_step_end: false``).

    Fast-LLM accumulates micro-batches until the global document count reaches
    ``docs_per_step`` whatever the data grouping: a window may span train steps,
    and documents left at the end of the run never reach an update. Returns, per
    micro-batch in execution order, whether the optimizer steps after it and the
    step's global document total (the divisor). None when windows are per step.
    """
    if cfg.batching.strategy != "doc_target" or cfg.accumulation.flush_at_step_end:
        return None
    assert cfg.batching.docs_per_step is not None  # doc_target's params model requires it
    target = float(cfg.batching.docs_per_step)
    epochs = cfg.train.epochs_per_step
    docs = np.asarray([d for i in infos for _ in range(epochs)
                       for d in i.plan.notes.get("micro_batch_docs",
                                                 [1] * len(i.plan.micro_batches))],
                      dtype=float)
    close = np.zeros(len(docs), dtype=bool)
    div = np.zeros(len(docs))
    acc, start = 0.0, 0
    for j, d in enumerate(docs.tolist()):
        acc += d
        if acc >= target:
            close[j] = True
            div[start:j + 1] = acc
            acc, start = 0.0, j + 1
    div[start:] = acc
    return close, div


def _plan_columns(plan: Any, packed: bool) -> tuple[list, ...]:
    """One plan's per-micro-batch rows, padded length, tokens, samples, max rank tokens."""
    rows0, pad0, toks, samp, maxrt = [], [], [], [], []
    for mb in plan.micro_batches:
        lens = [len(r) for r in mb.ranks]
        rows0.append(lens[0] if lens else 0)
        pad0.append(mb.padded_len[0] if mb.padded_len else 0)
        toks.append(sum(mb.tokens))
        samp.append(sum(lens))
        maxrt.append(max(mb.tokens, default=0) if packed else
                     max(map(operator.mul, lens, mb.padded_len), default=0))
    return rows0, pad0, toks, samp, maxrt


def _runs_table(cfg: RunConfig, runs: list[tuple[int, int, StepInfo]]
                ) -> dict[str, np.ndarray]:
    """:func:`micro_batch_table` of :class:`~lrdoctor.replay.planning.StepRuns`: each run's
    plan columns tiled over its steps and epochs in numpy (no Python per step)."""
    epochs = cfg.train.epochs_per_step
    packed = cfg.batching.is_packed
    parts: dict[str, list[np.ndarray]] = {}
    single = len(runs) == 1

    def add(name: str, arr: Any) -> None:
        parts.setdefault(name, []).append(np.asarray(arr))

    def tiled(col: Any, reps: int, dtype: Any) -> np.ndarray:
        """``col`` repeated ``reps`` times; a read-only view of one value when it holds one
        (a single run: nothing to concatenate), so a million identical steps cost nothing."""
        col = np.asarray(col, dtype=dtype)
        if single and len(col) and bool(np.all(col == col[0])):
            return np.broadcast_to(col[:1], (len(col) * reps,))
        return np.tile(col, reps)

    for a, c, info in runs:
        plan = info.plan
        n = len(plan.micro_batches)
        if n == 0:
            continue
        reps = c * epochs
        rows0, pad0, toks, samp, maxrt = _plan_columns(plan, packed)
        bset = set(plan.boundaries) if plan.boundaries is not None else set()
        bound = np.array([i in bset for i in range(n)], dtype=bool)
        divs = (np.asarray(plan.loss_divisors, dtype=float)
                if getattr(plan, "loss_divisors", None) is not None else np.full(n, math.nan))
        docs = (np.asarray(info.mb_docs, dtype=float) if info.mb_docs is not None
                else np.full(n, math.nan))
        if cfg.batching.loss_divisor == "micro_batch" and info.mb_docs is not None and \
                plan.loss_divisors is not None:
            divs = np.asarray(info.mb_docs, dtype=float)
        last_e = np.zeros(n, dtype=bool)
        last_e[-1] = True
        steps = np.arange(a, a + c, dtype=np.int64)
        add("train_step", steps if n * epochs == 1 else np.repeat(steps, n * epochs))
        add("epoch", tiled(np.repeat(np.arange(epochs, dtype=np.int64), n), c, np.int64))
        add("micro_index", tiled(np.arange(n), reps, np.int64))
        for name, col in (("rows", rows0), ("padded_len", pad0), ("tokens", toks),
                          ("samples", samp), ("max_rank_tokens", maxrt)):
            add(name, tiled(col, reps, np.int64))
        add("dp", tiled([info.dp], n * reps, np.int64))
        add("k", tiled([nominal_k(cfg, info.dp)], n * reps, np.int64))
        add("boundary", tiled(bound, reps, bool))
        add("last_in_epoch", tiled(last_e, reps, bool))
        step_last = np.tile(last_e, epochs) & (np.arange(n * epochs) >= n * (epochs - 1))
        add("last_in_step", tiled(step_last, c, bool))
        add("loss_divisor", tiled(divs, reps, float))
        add("docs", tiled(docs, reps, float))
        add("has_boundaries", tiled([plan.boundaries is not None], n * reps, bool))
    names = ("train_step", "epoch", "micro_index", "rows", "padded_len", "tokens", "samples",
             "max_rank_tokens", "dp", "k", "boundary", "last_in_epoch", "last_in_step",
             "loss_divisor", "docs", "has_boundaries")
    out = {k: (np.concatenate(parts[k]) if len(parts.get(k, [])) > 1 else
               parts[k][0] if parts.get(k) else np.zeros(0)) for k in names}
    out["carried"] = np.broadcast_to(np.zeros(1, dtype=bool), (len(out["rows"]),))
    return out


def micro_batch_table(cfg: RunConfig, infos: Sequence[StepInfo]) -> dict[str, np.ndarray]:
    """Flatten every (step, epoch, micro-batch) into columns, in execution order."""
    from lrdoctor.replay.planning import StepRuns

    if isinstance(infos, StepRuns) and cfg.batching.strategy == "static":
        return _runs_table(cfg, infos.runs)
    cols: dict[str, list] = {k: [] for k in (
        "train_step", "epoch", "micro_index", "rows", "padded_len", "tokens", "samples",
        "max_rank_tokens", "dp", "k", "boundary", "last_in_epoch", "last_in_step",
        "loss_divisor", "docs")}
    epochs = cfg.train.epochs_per_step
    packed = cfg.batching.is_packed
    # Steps with equal rows share one plan (planning reuses it): its columns once.
    per_plan: dict[int, tuple[list, ...]] = {}
    for info in infos:
        plan = info.plan
        mbs = plan.micro_batches
        n = len(mbs)
        if n == 0:
            continue
        done = per_plan.get(id(plan))
        if done is None:
            done = per_plan[id(plan)] = _plan_columns(plan, packed)
        rows0, pad0, toks, samp, maxrt = done
        bset = set(plan.boundaries) if plan.boundaries is not None else None
        bound = [bset is not None and i in bset for i in range(n)]
        divs = (list(plan.loss_divisors) if getattr(plan, "loss_divisors", None) is not None
                else [math.nan] * n)
        docs = info.mb_docs if info.mb_docs is not None else [math.nan] * n
        if cfg.batching.loss_divisor == "micro_batch" and info.mb_docs is not None and \
                plan.loss_divisors is not None:
            divs = list(info.mb_docs)
        k = nominal_k(cfg, info.dp)
        for e in range(epochs):
            cols["train_step"] += [info.step] * n
            cols["epoch"] += [e] * n
            cols["micro_index"] += range(n)
            cols["rows"] += rows0
            cols["padded_len"] += pad0
            cols["tokens"] += toks
            cols["samples"] += samp
            cols["max_rank_tokens"] += maxrt
            cols["dp"] += [info.dp] * n
            cols["k"] += [k] * n
            cols["boundary"] += bound if bset is not None else [False] * n
            cols["last_in_epoch"] += [False] * (n - 1) + [True]
            cols["last_in_step"] += [False] * (n - 1) + [e == epochs - 1]
            cols["loss_divisor"] += divs
            cols["docs"] += docs
    out = {k: np.asarray(v) for k, v in cols.items()}
    carried = carried_doc_windows(cfg, infos)
    out["carried"] = np.full(len(out["rows"]), carried is not None)
    if carried is not None:
        out["boundary"] = carried[0]
        if cfg.batching.loss_divisor == "step_total":
            out["loss_divisor"] = carried[1]
    out["has_boundaries"] = np.zeros(len(out["rows"]), dtype=bool)
    # Per-row flag: did this step's plan close windows itself?
    if len(out["rows"]):
        flags = []
        for info in infos:
            n = len(info.plan.micro_batches)
            flags += [info.plan.boundaries is not None] * (n * epochs)
        out["has_boundaries"] = np.asarray(flags, dtype=bool)
    return out


def _distinct(col: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(col, return_inverse=True)``, without the sort when the column holds one
    value (a run without dp changes: millions of rows)."""
    if len(col) and col.min() == col.max():
        return col[:1].copy(), np.broadcast_to(np.zeros(1, dtype=np.int64), col.shape)
    return np.unique(col, return_inverse=True)


def simulate(cfg: RunConfig, infos: Sequence[StepInfo], spec: ScheduleSpec | None = None,
             notes: dict | None = None) -> Replay:
    """Windows, updates, scheduler progress and the LR each micro-batch sees."""
    sps = samples_per_step(cfg, infos)
    spec = spec or schedule_spec(cfg, sps)
    t = micro_batch_table(cfg, infos)
    n = len(t["rows"])
    acc, sch = cfg.accumulation, cfg.scheduler
    k = np.asarray(t["k"], dtype=np.int64)
    last = np.asarray(t["last_in_epoch"], dtype=bool)

    # Which micro-batch closes a window (the optimizer-step condition).
    if acc.flush_at_step_end:
        j = np.asarray(t["micro_index"], dtype=np.int64)
        close = ((j + 1) % k == 0) if acc.rule == "correct" else (j % k == 0)
        if acc.short_window == "step":  # "drop": the leftover joins the next window
            close = close | last
    elif n and k.min() == k.max():
        # One counter, one k (no dp change): every k-th micro-batch, no modulo over the run.
        k0 = int(k[0])
        close = np.zeros(n, dtype=bool)
        close[(k0 - 1 if acc.rule == "correct" else 0)::k0] = True
    else:
        g = np.arange(n, dtype=np.int64)
        close = ((g + 1) % k == 0) if acc.rule == "correct" else (g % k == 0)
    hb = t["has_boundaries"]
    # Strategy windows close at the end of a train step, unless they carry over the run.
    close = np.where(hb, t["boundary"] | (last & ~t["carried"]), close)

    ncl = np.cumsum(close)
    window = ncl - close
    wsize = np.bincount(window, minlength=int(window.max(initial=-1)) + 1)[window] if n else \
        np.zeros(0, dtype=np.int64)
    applied = window < (ncl[-1] if n else 0)
    update_index = np.where(close, window, -1)
    # An index past int64 names no update of a replay (and numpy cannot hold it).
    fail_idx = [u for u in sch.failed_updates if u <= np.iinfo(np.int64).max]
    failed = close & np.isin(update_index, np.asarray(fail_idx, dtype=np.int64)) if fail_idx \
        else np.zeros(n, dtype=bool)

    # Loss weight: this micro-batch's share of a nominal update.
    samp = np.asarray(t["samples"], dtype=float)
    div = np.asarray(t["loss_divisor"], dtype=float)
    docs = np.asarray(t["docs"], dtype=float)
    dps, dp_inv = _distinct(t["dp"])
    per_dp = np.array([nominal_samples_per_update(cfg, int(d)) for d in dps])
    nominal = (np.broadcast_to(per_dp[:1], (n,)) if len(per_dp) == 1 else per_dp[dp_inv]) \
        if n else np.zeros(0)
    if n and div.strides == (0,) and math.isnan(div[0]) and samp.strides == (0,) \
            and nominal.strides == (0,):
        # one value everywhere (a single run of identical static steps)
        weight = np.broadcast_to(samp[:1] / nominal[:1], (n,))
    else:
        weight = np.where(np.isnan(div), samp / nominal,
                          np.where(np.isnan(docs), samp, docs) / div)

    # Scheduler events: how far the scheduler moves after each micro-batch.
    inc = sch.increment
    mult = float(sch.multiplier)
    if sch.step_on == "micro_step":
        per = samp if inc == "samples" else np.ones(n) if inc == "micro_batches" else \
            np.full(n, float(inc))
        events = per * mult
    elif sch.step_on == "update":
        # samples: the window's samples (its sum over the window's micro-batches)
        per = (np.bincount(window, weights=samp)[window] if n else np.zeros(0)) \
            if inc == "samples" else wsize.astype(float) if inc == "micro_batches" \
            else np.full(n, float(inc))
        fire = close & (~failed | sch.step_on_failed_update)
        events = np.where(fire, per * mult, 0.0)
    else:  # rollout_step: once per train step, after its last micro-batch
        ls = t["last_in_step"].astype(bool)
        if inc == "samples":
            step_samp = {i.step: i.samples for i in infos}
            per = np.array([step_samp[s] for s in t["train_step"]], dtype=float)
        elif inc == "micro_batches":
            step_mb = {i.step: len(i.plan.micro_batches) for i in infos}
            per = np.array([step_mb[s] for s in t["train_step"]], dtype=float)
        else:
            per = np.full(n, float(inc))
        events = np.where(ls, per * mult, 0.0)
    after = np.cumsum(events)
    before = after - events

    # ``before`` never decreases (increments are > 0): its distinct values without a sort.
    new_val = np.r_[True, before[1:] != before[:-1]] if n else np.zeros(0, dtype=bool)
    uniq = before[new_val]
    inv = np.cumsum(new_val) - 1
    from lrdoctor import schedules

    lr_u = schedules.lr_many(spec, uniq)  # vectorised where the family is
    lr = lr_u[inv] if n else np.zeros(0)

    trace = {
        "train_step": np.asarray(t["train_step"], dtype=np.int64),
        "epoch": np.asarray(t["epoch"], dtype=np.int64),
        "micro_index": np.asarray(t["micro_index"], dtype=np.int64),
        "rows": np.asarray(t["rows"], dtype=np.int64),
        "padded_len": np.asarray(t["padded_len"], dtype=np.int64),
        "tokens": np.asarray(t["tokens"], dtype=np.int64),
        "samples": np.asarray(t["samples"], dtype=np.int64),
        "max_rank_tokens": np.asarray(t["max_rank_tokens"], dtype=np.int64),
        "window": np.asarray(window, dtype=np.int64),
        "window_size": np.asarray(wsize, dtype=np.int64),
        "is_update": np.asarray(close, dtype=bool),
        "applied": np.asarray(applied, dtype=bool),
        "update_index": np.asarray(update_index, dtype=np.int64),
        "failed": np.asarray(failed, dtype=bool),
        "scheduler_progress": after,
        "lr": lr,
        "dp": np.asarray(t["dp"], dtype=np.int64),
        "loss_weight": weight,
        "loss_divisor": div,
        "docs": docs,
        "window_weight_sum": (np.bincount(window, weights=weight)[window] if n else np.zeros(0)),
        "peak_mem_bytes": np.broadcast_to(np.full(1, np.nan), (n,)),
    }
    return Replay(cfg=cfg, spec=spec, trace=trace, infos=infos,
                  nominal_updates=nominal_updates(cfg, sps),
                  budget_updates=replayed_budget_updates(cfg, sps),
                  notes=dict(notes or {}))


def replay_fast(cfg: RunConfig, samples: Samples | pd.DataFrame, planner: Planner | None = None,
                progress: Callable[[int], None] | None = None) -> Replay:
    notes: dict = {}
    infos = plan_steps(cfg, samples, planner, progress, notes)
    return simulate(cfg, infos, notes=notes)
