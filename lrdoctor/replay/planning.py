"""Each train step's samples, micro-batched as the framework does it: :func:`plan_steps`.

Why its own module: planning is where a replay spends its time (Karmarkar-Karp over
every step) and the one place that calls the packers (:mod:`.packing`); both paths,
the fast one (:mod:`.engine`) and the real torch loop (:mod:`.torch_exec`), replay the
same :class:`StepInfo` list it returns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import numpy as np

from lrdoctor.core.errors import UnusableInput

if TYPE_CHECKING:
    import pandas as pd

    from lrdoctor.replay.config import RunConfig
    from lrdoctor.replay.table import Samples


@dataclass
class StepFrame:
    """One train step's samples as numpy arrays (the ``frame`` given to ``plan_step``)."""

    step: int
    columns: dict[str, np.ndarray]

    def __len__(self) -> int:
        return len(self.columns["tokens"])


def _iter_frames(samples: Samples | pd.DataFrame, steps: int,
                 notes: dict | None = None) -> Iterator[tuple[StepFrame, int]]:
    """``steps`` step frames and the logged step each came from; a shorter log is cycled
    (and ``notes`` says so)."""
    from lrdoctor.replay.table import Samples

    table = Samples.of(samples)
    order = np.argsort(table["step"], kind="stable")
    cols = {c: table[c][order] for c in table.columns}
    step_col = cols["step"]
    uniq, starts = np.unique(step_col, return_index=True)
    if len(uniq) == 0:
        raise UnusableInput("the batch log holds no samples")
    ends = np.append(starts[1:], len(step_col))
    if notes is not None and not hasattr(samples, "total"):  # UniformSamples: no log
        notes["logged_steps"] = int(len(uniq))
        if len(uniq) < steps:
            notes["cycled"] = f"the batch log holds {len(uniq)} steps; cycled over {steps}"
    for s in range(steps):
        i = s % len(uniq)
        sl = slice(int(starts[i]), int(ends[i]))
        yield StepFrame(s, {c: v[sl] for c, v in cols.items()}), i


@dataclass
class StepInfo:
    step: int
    dp: int
    plan: Any  # packing.StepPlan
    samples: int
    docs: int | None = None
    mb_docs: list[float] | None = None  # documents per micro-batch, all ranks


Planner = Callable[[Any, Any, Any, int], Any]


class StepRuns(Sequence[StepInfo]):
    """Train steps as runs of consecutive steps that share one planned step.

    Why: a static loop without lengths plans the same step at every step of a dp size; the
    OneVision-Encoder stage-2 run has 8,000,001 of them. Holding one :class:`StepInfo` per
    run (not per step) keeps planning O(runs); the engine, the summary and the rules read
    :attr:`runs` (``(first step, count, info)``). Indexing and iteration still give one
    :class:`StepInfo` per step, built on demand, for the consumers that walk steps (the
    opt-in torch paths).
    """

    def __init__(self, runs: list[tuple[int, int, StepInfo]]) -> None:
        self.runs = runs
        self._starts = [a for a, _, _ in runs]
        self._n = sum(c for _, c, _ in runs)

    def __len__(self) -> int:
        return self._n

    def _at(self, i: int) -> StepInfo:
        import bisect

        r = self.runs[bisect.bisect_right(self._starts, i) - 1]
        info = r[2]
        return info if info.step == i else StepInfo(i, info.dp, info.plan, info.samples,
                                                   info.docs, info.mb_docs)

    @overload
    def __getitem__(self, i: int) -> StepInfo: ...
    @overload
    def __getitem__(self, i: slice) -> list[StepInfo]: ...

    def __getitem__(self, i: int | slice) -> StepInfo | list[StepInfo]:
        if isinstance(i, slice):
            return [self._at(j) for j in range(*i.indices(self._n))]
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(i)
        return self._at(i)

    def __iter__(self) -> Iterator[StepInfo]:
        for a, c, info in self.runs:
            for j in range(a, a + c):
                yield info if info.step == j else StepInfo(j, info.dp, info.plan,
                                                           info.samples, info.docs,
                                                           info.mb_docs)


def micro_batches(infos: Sequence[StepInfo]) -> int:
    """Micro-batches of all steps (one epoch each)."""
    from lrdoctor.rules.replay_context import step_runs

    return sum(c * len(i.plan.micro_batches) for _, c, i in step_runs(infos))


def default_planner() -> Planner:
    from lrdoctor.replay import packing

    return packing.plan_step


def plan_steps(cfg: RunConfig, samples: Samples | pd.DataFrame, planner: Planner | None = None,
               progress: Callable[[int], None] | None = None,
               notes: dict | None = None) -> Sequence[StepInfo]:
    """Run the framework's micro-batching once per train step.

    With the default planner the steps are planned in chunks through
    ``packing.plan_many`` (Karmarkar-Karp for a whole chunk at once), with
    ``progress`` called per chunk; a given planner is called step by step.
    """
    from lrdoctor.replay import packing
    from lrdoctor.replay.table import UniformSamples

    if isinstance(samples, UniformSamples) and planner is None:
        return _uniform_runs(cfg, samples, progress)
    # Plans are deterministic: a step whose rows equal an earlier step's at the same
    # dp reuses its plan. A cycled log always repeats; with the built-in packers,
    # which read a step's rows and never its number, so does any step with the same
    # rows (every step of a static run without lengths, fixed-length synthetic data).
    unique: dict[tuple[Any, ...], int] = {}
    todo: list[tuple[StepFrame, int]] = []
    steps: list[tuple[int, int, int]] = []  # (step, dp, index into todo)
    for frame, logged in _iter_frames(samples, cfg.train.steps, notes):
        dp = cfg.dp.size_at(frame.step)
        key = (logged, dp) if planner is not None else (dp, _rows_key(frame))
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


def _uniform_runs(cfg: RunConfig, samples: Any, progress: Callable[[int], None] | None
                  ) -> StepRuns:
    """Every train step holds the same rows (:class:`~lrdoctor.replay.table.UniformSamples`):
    one plan per dp size, one run per stretch of steps at that size."""
    from lrdoctor.replay import packing

    cols = {c: samples[c] for c in samples.columns}
    frame = StepFrame(0, cols)
    bounds = sorted({0, *(ch.at_step for ch in cfg.dp.changes)})
    plans: dict[int, StepInfo] = {}
    runs: list[tuple[int, int, StepInfo]] = []
    with packing.paused_gc():
        for a, b in zip(bounds, [*bounds[1:], cfg.train.steps], strict=True):
            if b <= a:
                continue
            dp = cfg.dp.size_at(a)
            if dp not in plans:
                plan = packing.plan_step(cfg.batching, cfg.train, frame.columns, dp)
                plans[dp] = _step_info(frame, dp, plan)
            info = plans[dp]
            runs.append((a, b - a, StepInfo(a, dp, info.plan, info.samples, info.docs,
                                            info.mb_docs)))
    if progress is not None:
        progress(cfg.train.steps - 1)
    return StepRuns(runs)


def _rows_key(frame: StepFrame) -> tuple[Any, ...]:
    """A step's rows, every column but the step number, as an exact hashable key."""
    return tuple((c, v.dtype.str, v.tobytes()) for c, v in frame.columns.items() if c != "step")


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
