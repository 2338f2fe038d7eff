"""The one framework-blind model of a run that every diagnosis works on.

Readers (``lrdoctor.formats.*``) turn a checkpoint into a :class:`RunState`;
everything downstream (diagnose, report, repair) only sees this model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


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
    (e.g. ``num_cycles``, ``power``, ``wsd_decay_steps``).
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

    def lr_at(self, progress: float) -> float:
        from lrdoctor.schedules import lr_at

        return lr_at(self, progress)


@dataclass
class Counter:
    """One progress counter read from a checkpoint, with its unit and origin."""

    name: str
    value: float
    unit: Unit
    source: str = ""


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
    # The optimizer's param-group learning rates as saved.
    optimizer_lrs: list[float] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extras: dict[str, Any] = field(default_factory=dict)

    def counter(self, name: str) -> Counter | None:
        return next((c for c in self.counters if c.name == name), None)

    def to_dict(self) -> dict[str, Any]:
        return _jsonable(asdict(self))


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, float) and obj != obj:  # NaN is not JSON
        return None
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return repr(obj)
