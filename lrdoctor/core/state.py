"""The one framework-blind model of a run that every diagnosis works on.

Readers (``lrdoctor.read.layouts.*``) turn a checkpoint into a :class:`RunState`;
everything downstream (diagnose, report, repair) only sees this model.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.evidence import EvidenceItem, LoggedLr
from lrdoctor.core.facts import Facts
from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.findings import jsonable

# No step, sample count, horizon or learning rate of a real run comes near this.
MAX_MAGNITUDE = 1e15


class Unit(str, Enum):
    """What one unit of progress counts; mixing units is the bug family we hunt."""

    SAMPLES = "samples"
    UPDATES = "optimizer updates"
    MICRO_STEPS = "micro-steps"
    ROLLOUT_STEPS = "rollout steps"
    SCHEDULER_CALLS = "scheduler calls"
    EPOCHS = "epochs"


@dataclass
class ScheduleSpec:
    """An intended LR schedule, as a pure function of progress in ``unit``.

    ``family`` picks the implementation in :mod:`lrdoctor.schedules`
    ("megatron", "hf", "torch", "deepspeed"); ``kind`` is the decay style
    within that family; ``params`` holds the family's remaining knobs verbatim
    (e.g. ``num_cycles``, ``power``, ``wsd_decay_steps``). The LR at a progress is
    ``lrdoctor.schedules.lr_at(spec, t)``: the models live there, above core/, which
    knows no framework and imports none of them.
    """

    family: str
    kind: str
    max_lr: float
    unit: Unit
    min_lr: float = 0.0
    init_lr: float = 0.0
    warmup: float = 0.0
    horizon: float | None = None
    params: dict[str, Any] = field(default_factory=dict)
    source: str = ""
    # The fields the schedule was built from, by parameter name ("horizon", "warmup"...).
    refs: dict[str, FieldRef] = field(default_factory=dict)


@dataclass
class Counter:
    """One progress counter read from a checkpoint, with its unit and origin."""

    name: str
    value: float
    unit: Unit
    source: str = ""
    # Where the value lives (file and key path), so a repair can write it back.
    ref: FieldRef | None = None
    # ``value`` is the field at ``ref`` plus this: a count the framework keeps from another
    # origin (DeepSpeed's ``last_batch_iteration`` starts at -1, so progress is it + 1); a
    # repair writes ``value - ref_offset``.
    ref_offset: float = 0.0


@dataclass
class RunState:
    """Everything a checkpoint says about how far training has gone."""

    format: str
    path: str
    schedule: ScheduleSpec | None = None
    # Where the scheduler believes it is, in ``schedule.unit``.
    scheduler_progress: Counter | None = None
    # Every other progress counter the checkpoint holds (optimizer step,
    # global_step, iteration, consumed samples, skipped, ...).
    counters: list[Counter] = field(default_factory=list)
    # Conversion between samples and optimizer updates (global batch size).
    samples_per_update: float | None = None
    # Planned end of training (train_iters, max_steps, ...), in its own unit.
    planned_end: Counter | None = None
    # The trainer's own notion of how far it is, in ``planned_end.unit``
    # (Megatron iteration, HF global_step, ROLL pipeline step).
    trainer_progress: Counter | None = None
    # Where the scheduler *should* be according to the trainer's counters and the
    # configured budget, in ``schedule.unit`` (Megatron: consumed - skipped samples;
    # HF: global_step; torch loop: optimizer step). ``source`` says the formula.
    nominal_progress: Counter | None = None
    # The optimizer's param-group learning rates as saved, and where each lives (same
    # order; empty when the reader could not name the fields).
    optimizer_lrs: list[float] = field(default_factory=list)
    optimizer_lr_refs: list[FieldRef] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    # Files of the checkpoint that could not be read at all (file -> why): truncated,
    # corrupt or not what their kind says. A resume would fail on them (LRD130).
    unreadable: dict[str, str] = field(default_factory=dict)
    # The schedule was rebuilt from state or config that keeps no position of its own
    # (timm's schedulers, a config beside the checkpoint): what it was rebuilt from. Its
    # position is solved from the saved LR and the trainer's counters (LRD133).
    stateless: str | None = None
    # LRs the run logged, each with its step (in the log's own count) and field (HF
    # log_history, Lightning's LearningRateMonitor CSV or TensorBoard log), and the log's
    # name for messages: evidence of the LR actually used (LRD131 LR 0 while training
    # went on, LRD132 a log the configured type cannot give). Every point is kept for the
    # fits and those rules; ``evidence`` holds their bounded summary (first, last, min,
    # max) as items with role lr (lrdoctor.core.evidence.logged_lr_items).
    lr_log: list[LoggedLr] = field(default_factory=list)
    lr_log_source: str = ""
    notes: list[str] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)
    # What the rules judge by beyond the counters (lrdoctor.core.facts).
    facts: Facts = field(default_factory=Facts)
    # Every number that measures progress, a horizon or an LR, with its unit and field
    # (lrdoctor.evidence: filled after the reader, judged by the hypothesis rules).
    evidence: list[EvidenceItem] = field(default_factory=list)

    def counter(self, name: str) -> Counter | None:
        return next((c for c in self.counters if c.name == name), None)

    def validate(self) -> None:
        """The validation boundary every reader's result passes (``formats.read``).

        Numbers must be finite ints/floats below :data:`MAX_MAGNITUDE` in size, so
        nothing downstream meets a string, a NaN or a 10**400 integer. The schedule and
        the scheduler's progress are what a diagnosis stands on: a bad one is a one-line
        error naming the file and key. Side values (other counters, the batch size,
        optimizer LRs) are dropped with a note saying which and why.
        """
        s = self.schedule
        if s is not None:
            for name in ("max_lr", "min_lr", "init_lr", "warmup", "horizon"):
                value = getattr(s, name)
                if value is None and name == "horizon":
                    continue
                bad = _bad_number(value)
                if bad:
                    raise UnusableInput(f"schedule {name} ({s.source or 'as read'}): {bad}",
                                        self.path)
            where = _bad_param(s.params)
            if where:
                raise UnusableInput(f"schedule parameter {where[0]} ({s.source or 'as read'}): "
                                    f"{where[1]}", self.path)
        sp = self.scheduler_progress
        if sp is not None:
            bad = _bad_number(sp.value)
            if bad:
                raise UnusableInput(f"{sp.name} ({sp.source or 'as read'}): {bad}", self.path)
        kept = []
        for c in self.counters:
            bad = _bad_number(c.value)
            if bad:
                self.notes.append(f"{c.source or c.name}: {c.name} ignored: {bad}")
            else:
                kept.append(c)
        self.counters = kept
        for attr in ("planned_end", "trainer_progress", "nominal_progress"):
            c = getattr(self, attr)
            bad = _bad_number(c.value) if c is not None else None
            if bad:
                self.notes.append(f"{c.source or c.name}: {c.name} ignored: {bad}")
                setattr(self, attr, None)
        spu = self.samples_per_update
        if spu is not None:
            bad = _bad_number(spu) or (None if spu > 0 else f"{spu} is not > 0")
            if bad:
                self.notes.append(f"samples per update ignored: {bad}")
                self.samples_per_update = None
        lrs = [x for x in self.optimizer_lrs if isinstance(x, float) and math.isnan(x)
               or not _bad_number(x)]
        if len(lrs) != len(self.optimizer_lrs):
            self.notes.append("optimizer LRs that are not finite numbers ignored")
        self.optimizer_lrs = [float(x) for x in lrs]

    def counts(self, ref: FieldRef | None, unit: Unit | None) -> str:
        """What the number saved at ``ref`` counts, as the evidence item read from that same
        field says when it is scheduler calls (``scheduler.last_epoch``, ``T_max``: the
        scheduler's own count, whatever unit the schedule model compares it in), else
        ``unit``'s name. Why: "scheduler.last_epoch 240 optimizer updates" where 60 updates
        happened labelled a counter by what it was compared with, not by what it counts."""
        from lrdoctor.core.evidence import Quantity

        # Only a count compared as optimizer updates is relabelled: a sample-counting
        # scheduler's own count (Megatron's num_steps, by the global batch) is samples.
        if ref is not None and unit in (Unit.UPDATES, None):
            where = (ref.file.rsplit("/", 1)[-1], tuple(ref.key))
            for e in self.evidence:
                if e.quantity is Quantity.SCHEDULER_CALLS and \
                        (e.ref.file.rsplit("/", 1)[-1], tuple(e.ref.key)) == where:
                    return str(e.quantity.value)
        return unit.value if unit is not None else ""

    def unit_of(self, c: Counter | None) -> str:
        """What the counter ``c`` counts (:meth:`counts`): the one label every table,
        message, plot and JSON field gives that counter's number."""
        return "" if c is None else self.counts(c.ref, c.unit)

    def progress_counts(self) -> str:
        """What the scheduler's progress counter counts (:meth:`counts`)."""
        sp = self.scheduler_progress
        return self.counts(sp.ref, sp.unit) if sp is not None else ""

    def horizon_counts(self) -> str:
        """What the schedule's saved horizon counts (:meth:`counts`; a horizon built from a
        config or fitted has its model unit)."""
        spec = self.schedule
        if spec is None:
            return ""
        return self.counts(spec.refs.get("horizon"), spec.unit)

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = jsonable(asdict(self))
        # Each counter labelled by what it counts (see counts()).
        if doc.get("scheduler_progress") is not None:
            doc["scheduler_progress"]["unit"] = self.progress_counts()
        for c, d in zip(self.counters, doc.get("counters") or [], strict=False):
            d["unit"] = self.counts(c.ref, c.unit)
        # The log's points as [step, lr] (the data); where each lives is said by the
        # evidence items that summarise it, not by one field per logged step here.
        doc["lr_log"] = [[p.step, p.lr] for p in self.lr_log]
        return doc


def _bad_number(value: Any) -> str | None:
    """Why ``value`` is not a usable number of a run, or None."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"expected a number, found {type(value).__name__}"
    if isinstance(value, float) and not math.isfinite(value):
        return f"{value} is not a finite number"
    if abs(value) > MAX_MAGNITUDE:
        return f"{float(value) if value < 1e300 else 'a huge number'}: out of range"
    return None


def _bad_param(params: Any, prefix: str = "", depth: int = 0) -> tuple[str, str] | None:
    """The first numeric schedule parameter that is not finite or is out of range."""
    items = params.items() if isinstance(params, dict) else \
        enumerate(params) if isinstance(params, (list, tuple)) else ()
    for k, v in items:
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            if isinstance(v, float) and not math.isfinite(v) and k in _INF_OK:
                continue
            bad = _bad_number(v)
            if bad:
                return key, bad
        elif isinstance(v, (dict, list, tuple)) and depth < 8:
            found = _bad_param(v, key, depth + 1)
            if found:
                return found
    return None


# torch's ReduceLROnPlateau keeps best=inf until its first step; others may save inf too.
_INF_OK = frozenset({"best", "mode_worse", "threshold"})




# ------------------------------------------------------------------ batch log
# One row per sample: what ``BatchLogRecorder`` (lrdoctor.runtime.record) writes from
# the training loop and ``lrdoctor replay`` (lrdoctor.replay.batchlog) reads back.

#: Every column, in the order the recorder writes them.
BATCH_LOG_COLUMNS = ("step", "tokens", "prompt_id", "docs", "rank")
BATCH_LOG_REQUIRED = ("step", "tokens")
#: The integer columns and the least value each may hold (``prompt_id``: int or string).
BATCH_LOG_MIN = {"step": 0, "tokens": 1, "docs": 0, "rank": 0}
_BATCH_LOG_SUFFIXES = {
    ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl", ".jsonl.gz": "jsonl",
    ".csv": "csv", ".tsv": "csv", ".csv.gz": "csv", ".parquet": "parquet", ".pq": "parquet",
}


def batch_log_format(name: str) -> str | None:
    """``jsonl``, ``csv`` or ``parquet`` by a batch log's file name; None when the name
    does not say (the reader then looks at the bytes, the recorder writes JSONL)."""
    lower = name.lower()
    for suffix in sorted(_BATCH_LOG_SUFFIXES, key=len, reverse=True):
        if lower.endswith(suffix):
            return _BATCH_LOG_SUFFIXES[suffix]
    return None
