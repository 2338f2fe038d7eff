"""The fast replay path: the loop's step accounting in vectorised numpy, no torch.

Why a second path next to :mod:`.torch_exec`: a real optimizer costs about a
millisecond per micro-batch, while a long run has millions; this path derives
the same trace (windows, updates, scheduler progress, LR per micro-batch)
arithmetically, and a test proves both paths agree.

Pipeline: :func:`load_samples` (batch log / synthetic / fixed) ->
:func:`plan_steps` (the framework's micro-batching per train step, via
``packing.plan_step``) -> :func:`simulate` (windows, scheduler events, LRs).
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.state import ScheduleSpec, Unit

if TYPE_CHECKING:
    import pandas as pd

    from lrdoctor.replay.config import RunConfig


# ---------------------------------------------------------------- samples


def load_samples(cfg: RunConfig, batch_log: str | None = None, synthetic: str | None = None,
                 seed: int | None = None) -> pd.DataFrame:
    """One row per sample (``step``, ``tokens`` and optional ``prompt_id``/``docs``/``rank``)."""
    import pandas as pd

    if batch_log and synthetic:
        raise UnusableInput("give either --batch-log or --synthetic, not both")
    if not batch_log and not synthetic:
        # The config's data section applies only when the command line names no source.
        if cfg.data.batch_log and cfg.data.synthetic:
            raise UnusableInput("data: give either batch_log or synthetic, not both")
        if cfg.data.batch_log:
            # Relative to the config file, so a config runs from any directory.
            batch_log = cfg.resolve_path(cfg.data.batch_log)
            from pathlib import Path

            if not Path(batch_log).is_file():
                raise UnusableInput(f"data.batch_log {cfg.data.batch_log!r}: no such file "
                                    "(read relative to the config file's directory)",
                                    batch_log)
        synthetic = cfg.data.synthetic
    seed = cfg.data.seed if seed is None else seed
    if batch_log:
        from lrdoctor.replay import batchlog

        return batchlog.read_batch_log(batch_log)
    if synthetic:
        from lrdoctor.replay import batchlog

        sps = cfg.train.samples_per_step
        if sps is None:
            raise UnusableInput("--synthetic needs train.samples_per_step in the config")
        return batchlog.synthetic(synthetic, cfg.train.steps, sps, seed=seed)
    if cfg.batching.strategy not in ("static",):
        raise UnusableInput(f"batching.strategy {cfg.batching.strategy} needs sample lengths: "
                            "give --batch-log or --synthetic (or data.batch_log / "
                            "data.synthetic in the config)")
    sps = cfg.train.samples_per_step
    if sps is None:
        raise UnusableInput("train.samples_per_step is needed when there is no batch log")
    # Without lengths a static loop only needs the sample count; one token each.
    steps = np.repeat(np.arange(cfg.train.steps, dtype=np.int64), sps)
    return pd.DataFrame({"step": steps, "tokens": np.ones_like(steps)})


def lengths_source(cfg: RunConfig, batch_log: str | None = None,
                   synthetic: str | None = None) -> str:
    """Where the replay's sample lengths come from, in words (the output says it)."""
    if batch_log:
        return f"batch log {batch_log}"
    if synthetic:
        return f"synthetic {synthetic} (--synthetic)"
    if cfg.data.batch_log:
        return f"batch log {cfg.data.batch_log} (data.batch_log)"
    if cfg.data.synthetic:
        origin = ("drawn up to the config's own maximum lengths: no batch log given"
                  if cfg._keys_used is not None else "data.synthetic")
        return f"synthetic {cfg.data.synthetic} ({origin})"
    return "sample counts only (static batching: lengths do not change the accounting)"


@dataclass
class StepFrame:
    """One train step's samples as numpy arrays (the ``frame`` given to ``plan_step``)."""

    step: int
    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.columns["tokens"])


def _iter_frames(samples: pd.DataFrame, steps: int,
                 notes: dict | None = None) -> Iterator[tuple[StepFrame, int]]:
    """``steps`` step frames and the logged step each came from; a shorter log is cycled
    (and ``notes`` says so)."""
    order = np.argsort(samples["step"].to_numpy(), kind="stable")
    cols = {c: samples[c].to_numpy()[order] for c in samples.columns}
    step_col = cols["step"]
    uniq, starts = np.unique(step_col, return_index=True)
    if len(uniq) == 0:
        raise UnusableInput("the batch log holds no samples")
    ends = np.append(starts[1:], len(step_col))
    if notes is not None:
        notes["logged_steps"] = int(len(uniq))
        if len(uniq) < steps:
            notes["cycled"] = f"the batch log holds {len(uniq)} steps; cycled over {steps}"
    for s in range(steps):
        i = s % len(uniq)
        sl = slice(int(starts[i]), int(ends[i]))
        yield StepFrame(s, {c: v[sl] for c, v in cols.items()}), i


# ---------------------------------------------------------------- planning


@dataclass
class StepInfo:
    step: int
    dp: int
    plan: Any  # packing.StepPlan
    samples: int
    docs: int | None = None
    mb_docs: list[float] | None = None  # documents per micro-batch, all ranks


Planner = Callable[[Any, Any, Any, int], Any]


def default_planner() -> Planner:
    from lrdoctor.replay import packing

    return packing.plan_step


def plan_steps(cfg: RunConfig, samples: pd.DataFrame, planner: Planner | None = None,
               progress: Callable[[int], None] | None = None,
               notes: dict | None = None) -> list[StepInfo]:
    """Run the framework's micro-batching once per train step.

    With the default planner the steps are planned in chunks through
    ``packing.plan_many`` (Karmarkar-Karp for a whole chunk at once), with
    ``progress`` called per chunk; a given planner is called step by step.
    """
    from lrdoctor.replay import packing

    # A cycled log replans the same frame at the same dp: plans are deterministic.
    unique: dict[tuple[int, int], int] = {}
    todo: list[tuple[StepFrame, int]] = []
    steps: list[tuple[int, int, int]] = []  # (step, dp, index into todo)
    for frame, logged in _iter_frames(samples, cfg.train.steps, notes):
        dp = cfg.dp.size_at(frame.step)
        key = (logged, dp)
        if key not in unique:
            unique[key] = len(todo)
            todo.append((frame, dp))
        steps.append((frame.step, dp, unique[key]))
    plans: list[Any] = []
    with packing.paused_gc():
        if planner is not None:
            for frame, dp in todo:
                plans.append(planner(cfg.batching, cfg.train, frame.columns, dp))
                if progress is not None:
                    progress(frame.step)
        else:
            a = 0
            while a < len(todo):
                b, rows = a, 0
                while b < len(todo) and (b == a or rows + len(todo[b][0]) <= _PLAN_CHUNK_ROWS):
                    rows += len(todo[b][0])
                    b += 1
                chunk = todo[a:b]
                plans.extend(packing.plan_many(cfg.batching, cfg.train,
                                               [f.columns for f, _ in chunk],
                                               [d for _, d in chunk]))
                if progress is not None:
                    progress(chunk[-1][0].step)
                a = b
        infos = [_step_info(frame, dp, plan) for (frame, dp), plan in zip(todo, plans,
                                                                        strict=True)]
    if progress is not None and steps:
        progress(steps[-1][0])  # cycled steps reuse plans: the bar still ends at the end
    return [StepInfo(step, dp, infos[i].plan, infos[i].samples, infos[i].docs,
                     infos[i].mb_docs) if infos[i].step != step else infos[i]
            for step, dp, i in steps]


# Samples planned per ``plan_many`` call (whole steps): large enough that per-call
# costs vanish (Karmarkar-Karp's lockstep groups fill up), small enough that the
# progress bar moves about once a second and the lockstep arrays stay bounded.
_PLAN_CHUNK_ROWS = 1_000_000


def _step_info(frame: StepFrame, dp: int, plan: Any) -> StepInfo:
    """A planned step with its document counts (per micro-batch, summed over ranks)."""
    docs = frame.columns.get("docs")
    mb_docs = None
    if docs is not None:
        mbs = plan.micro_batches
        parts = [r for mb in mbs for r in mb.ranks]
        per_mb = np.fromiter((sum(map(len, mb.ranks)) for mb in mbs), dtype=np.int64,
                             count=len(mbs))
        mb_docs = [0.0] * len(mbs)
        if per_mb.sum():
            d = docs[np.concatenate(parts).astype(np.int64, copy=False)].astype(np.float64)
            cum = np.concatenate(([0.0], np.cumsum(d)))
            ends = np.cumsum(per_mb)
            mb_docs = (cum[ends] - cum[ends - per_mb]).tolist()
    return StepInfo(frame.step, dp, plan, len(frame),
                    int(docs.sum()) if docs is not None else None, mb_docs)


# ---------------------------------------------------------------- budget


def samples_per_step(cfg: RunConfig, infos: list[StepInfo] | None = None) -> float:
    if cfg.train.samples_per_step is not None:
        return float(cfg.train.samples_per_step)
    if infos:
        return float(np.mean([i.samples for i in infos]))
    raise UnusableInput("train.samples_per_step is not set and there is no batch log")


def nominal_k(cfg: RunConfig, dp: int) -> int:
    """Micro-batches per optimizer update the loop is configured for at this dp size."""
    t = cfg.train
    if t.mini_batch_size is not None and cfg.batching.strategy == "static":
        # RLinf / SkyRL: the accumulation count is recomputed from the global batch.
        return max(1, math.ceil(t.mini_batch_size / (t.micro_batch_size * dp)))
    return t.gradient_accumulation


def nominal_samples_per_update(cfg: RunConfig, dp: int | None = None) -> float:
    t = cfg.train
    if t.mini_batch_size is not None:
        return float(t.mini_batch_size)
    return float(t.micro_batch_size * t.gradient_accumulation * (dp or cfg.dp.size))


def nominal_updates(cfg: RunConfig, sps: float) -> float:
    """Optimizer updates the configuration promises with nominal (static) batches."""
    t = cfg.train
    if t.mini_batch_size is None and (
            t.drop_last or cfg.accumulation.short_window == "drop"
            or (not cfg.accumulation.flush_at_step_end and cfg.batching.strategy == "static")):
        # An epoch loop over a DataLoader: whole batches, the short one counted unless
        # dropped (lrdoctor.epochs: one home for the floor / ceil / carry arithmetic).
        from lrdoctor import epochs

        per_rank = sps / cfg.dp.size  # the micro-batches of one step, as a DataLoader counts
        batches = (int(per_rank) // t.micro_batch_size if t.drop_last
                   else math.ceil(per_rank / t.micro_batch_size))
        policy = ("carry" if not cfg.accumulation.flush_at_step_end else
                  "drop" if cfg.accumulation.short_window == "drop" else "flush")
        return float(epochs.updates(batches, t.steps * t.epochs_per_step,
                                    t.gradient_accumulation, policy))
    if t.mini_batch_size is not None:
        per = math.ceil(sps / t.mini_batch_size)
    elif not cfg.accumulation.flush_at_step_end:
        # One counter for the run: windows span train steps, no per-step rounding up.
        return float(int(t.steps * t.epochs_per_step * sps)
                     // (cfg.dp.size * t.micro_batch_size * t.gradient_accumulation))
    else:
        per = math.ceil(sps / cfg.dp.size / t.micro_batch_size / t.gradient_accumulation)
    return float(t.steps * t.epochs_per_step * per)


def nominal_advance_per_update(cfg: RunConfig, sps: float) -> float:
    """Scheduler progress one nominal optimizer update is meant to bring, in its unit."""
    sc, t = cfg.scheduler, cfg.train
    inc = sc.increment
    if sc.step_on == "update":
        per = (nominal_samples_per_update(cfg) if inc == "samples" else
               float(nominal_k(cfg, cfg.dp.size)) if inc == "micro_batches" else float(inc))
    elif sc.step_on == "micro_step":
        per_mb = (float(t.micro_batch_size * cfg.dp.size) if inc == "samples" else
                  1.0 if inc == "micro_batches" else float(inc))
        per = per_mb * nominal_k(cfg, cfg.dp.size)
    else:  # rollout_step: one step's advance spread over its nominal updates
        per_step = (sps if inc == "samples" else
                    float(math.ceil(sps / cfg.dp.size / t.micro_batch_size))
                    if inc == "micro_batches" else float(inc))
        ups = nominal_updates(cfg, sps) / (t.steps or 1)
        per = per_step / ups if ups else per_step
    return per * sc.multiplier


def replayed_budget_updates(cfg: RunConfig, sps: float) -> float:
    """The budget in optimizer updates (an explicit total is in scheduler units; a
    generation-steps total counts generation batches as if each were one train step)."""
    if cfg.budget.formula in ("explicit", "generation_steps"):
        per = nominal_advance_per_update(cfg, sps)
        return cfg.budget.given_total / per if per else cfg.budget.given_total
    return budget_updates(cfg, sps)


def budget_updates(cfg: RunConfig, sps: float) -> float:
    """The update count the framework handed its scheduler (``budget.formula``)."""
    t = cfg.train
    if cfg.budget.formula == "roll":
        return float(int(t.steps * sps * t.epochs_per_step)
                     // (t.micro_batch_size * t.gradient_accumulation) // cfg.dp.size)
    return nominal_updates(cfg, sps)


def horizon(cfg: RunConfig, sps: float) -> float:
    """The scheduler's horizon in its own unit (``schedule.horizon`` or derived)."""
    if cfg.schedule.horizon != "auto":
        return float(cfg.schedule.horizon)
    if cfg.budget.formula in ("explicit", "generation_steps"):
        return cfg.budget.given_total
    inc = cfg.scheduler.increment
    if cfg.scheduler.step_on == "rollout_step":
        if inc == "samples":
            per = sps
        elif inc == "micro_batches":
            per = math.ceil(sps / cfg.dp.size / cfg.train.micro_batch_size)
        else:
            per = float(inc)
        return float(cfg.train.steps * per)
    if inc == "samples":
        per = nominal_samples_per_update(cfg)
    elif inc == "micro_batches":
        per = float(nominal_k(cfg, cfg.dp.size))
    else:
        per = float(inc)
    return budget_updates(cfg, sps) * per


def schedule_unit(cfg: RunConfig) -> Unit:
    if cfg.scheduler.increment == "samples":
        return Unit.SAMPLES
    if cfg.scheduler.increment == "micro_batches":
        return Unit.MICRO_STEPS
    return {"update": Unit.UPDATES, "micro_step": Unit.MICRO_STEPS,
            "rollout_step": Unit.ROLLOUT_STEPS}[cfg.scheduler.step_on]


def schedule_spec(cfg: RunConfig, sps: float) -> ScheduleSpec:
    s = cfg.schedule
    spec = ScheduleSpec(family=s.family, kind=s.kind, max_lr=s.max_lr, unit=schedule_unit(cfg),
                        min_lr=s.min_lr, init_lr=s.init_lr, warmup=s.warmup,
                        horizon=horizon(cfg, sps), params=dict(s.params), source="run config")
    check_spec(spec)
    return spec


def check_spec(spec: ScheduleSpec) -> None:
    """A schedule the family cannot build is unusable input, not a traceback."""
    from lrdoctor import schedules

    probs = schedules.problems(spec)
    if probs:
        raise UnusableInput(f"schedule: {probs[0]}")
    try:
        schedules.lr_at(spec, 0.0)
    except (ValueError, KeyError, TypeError) as exc:
        raise UnusableInput(f"schedule: {exc}") from None


def schedule_fn(spec: ScheduleSpec) -> Callable[[ScheduleSpec, float], float]:
    """The family's ``lr_at`` resolved once (``schedules.lr_at`` dispatches per call)."""
    from lrdoctor import schedules

    return schedules.lr_function(spec)


def floor_progress(spec: ScheduleSpec) -> float | None:
    """Scheduler progress from which the LR stays at its floor (None: never)."""
    from lrdoctor import schedules

    return schedules.floor_progress(spec)


# ---------------------------------------------------------------- the fast path


@dataclass
class Replay:
    """A replayed run: the per-micro-batch trace plus what the analysis needs."""

    cfg: Any
    spec: ScheduleSpec
    trace: dict[str, np.ndarray]
    infos: list[StepInfo]
    nominal_updates: float
    budget_updates: float
    engine: str = "fast"
    device: str = "cpu"
    notes: dict = field(default_factory=dict)

    def frame(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self.trace)


def carried_doc_windows(cfg: RunConfig, infos: list[StepInfo]
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


def micro_batch_table(cfg: RunConfig, infos: list[StepInfo]) -> dict[str, np.ndarray]:
    """Flatten every (step, epoch, micro-batch) into columns, in execution order."""
    cols: dict[str, list] = {k: [] for k in (
        "train_step", "epoch", "micro_index", "rows", "padded_len", "tokens", "samples",
        "max_rank_tokens", "dp", "k", "boundary", "last_in_epoch", "last_in_step",
        "loss_divisor", "docs")}
    epochs = cfg.train.epochs_per_step
    packed = cfg.batching.is_packed
    for info in infos:
        plan = info.plan
        mbs = plan.micro_batches
        n = len(mbs)
        if n == 0:
            continue
        rows0, pad0, toks, samp, maxrt = [], [], [], [], []
        for mb in mbs:
            lens = [len(r) for r in mb.ranks]
            rows0.append(lens[0] if lens else 0)
            pad0.append(mb.padded_len[0] if mb.padded_len else 0)
            toks.append(sum(mb.tokens))
            samp.append(sum(lens))
            maxrt.append(max(mb.tokens, default=0) if packed else
                         max(map(operator.mul, lens, mb.padded_len), default=0))
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


def simulate(cfg: RunConfig, infos: list[StepInfo], spec: ScheduleSpec | None = None,
             notes: dict | None = None) -> Replay:
    """Windows, updates, scheduler progress and the LR each micro-batch sees."""
    sps = samples_per_step(cfg, infos)
    spec = spec or schedule_spec(cfg, sps)
    t = micro_batch_table(cfg, infos)
    n = len(t["rows"])
    acc, sch = cfg.accumulation, cfg.scheduler
    k = t["k"].astype(np.int64)
    last = t["last_in_epoch"].astype(bool)

    # Which micro-batch closes a window (the optimizer-step condition).
    if acc.flush_at_step_end:
        j = t["micro_index"].astype(np.int64)
        close = ((j + 1) % k == 0) if acc.rule == "correct" else (j % k == 0)
        if acc.short_window == "step":  # "drop": the leftover joins the next window
            close = close | last
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
    failed = close & np.isin(update_index, np.asarray(fail_idx, dtype=np.int64))

    # Loss weight: this micro-batch's share of a nominal update.
    samp = t["samples"].astype(float)
    div = t["loss_divisor"].astype(float)
    docs = t["docs"].astype(float)
    dps, dp_inv = np.unique(t["dp"], return_inverse=True)
    nominal = np.array([nominal_samples_per_update(cfg, int(d)) for d in dps])[dp_inv] if n \
        else np.zeros(0)
    weight = np.where(np.isnan(div), samp / nominal, np.where(np.isnan(docs), samp, docs) / div)
    wsamp = np.bincount(window, weights=samp)[window] if n else np.zeros(0)

    # Scheduler events: how far the scheduler moves after each micro-batch.
    inc = sch.increment
    mult = float(sch.multiplier)
    if sch.step_on == "micro_step":
        per = samp if inc == "samples" else np.ones(n) if inc == "micro_batches" else \
            np.full(n, float(inc))
        events = per * mult
    elif sch.step_on == "update":
        per = wsamp if inc == "samples" else wsize.astype(float) if inc == "micro_batches" \
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

    uniq, inv = np.unique(before, return_inverse=True)
    lr_fn = schedule_fn(spec)
    lr_u = np.array([lr_fn(spec, float(p)) for p in uniq])
    lr = lr_u[inv] if n else np.zeros(0)

    trace = {
        "train_step": t["train_step"].astype(np.int64),
        "epoch": t["epoch"].astype(np.int64),
        "micro_index": t["micro_index"].astype(np.int64),
        "rows": t["rows"].astype(np.int64),
        "padded_len": t["padded_len"].astype(np.int64),
        "tokens": t["tokens"].astype(np.int64),
        "samples": t["samples"].astype(np.int64),
        "max_rank_tokens": t["max_rank_tokens"].astype(np.int64),
        "window": window.astype(np.int64),
        "window_size": wsize.astype(np.int64),
        "is_update": close.astype(bool),
        "applied": applied.astype(bool),
        "update_index": update_index.astype(np.int64),
        "failed": failed.astype(bool),
        "scheduler_progress": after,
        "lr": lr,
        "dp": t["dp"].astype(np.int64),
        "loss_weight": weight,
        "loss_divisor": div,
        "docs": docs,
        "window_weight_sum": (np.bincount(window, weights=weight)[window] if n else np.zeros(0)),
        "peak_mem_bytes": np.full(n, np.nan),
    }
    return Replay(cfg=cfg, spec=spec, trace=trace, infos=infos,
                  nominal_updates=nominal_updates(cfg, sps),
                  budget_updates=replayed_budget_updates(cfg, sps),
                  notes=dict(notes or {}))


def replay_fast(cfg: RunConfig, samples: pd.DataFrame, planner: Planner | None = None,
                progress: Callable[[int], None] | None = None) -> Replay:
    notes: dict = {}
    infos = plan_steps(cfg, samples, planner, progress, notes)
    return simulate(cfg, infos, notes=notes)
