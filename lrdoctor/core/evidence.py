"""One item of evidence: a number a checkpoint or a config holds about progress, a horizon
or an LR, with its unit and the field it was read from.

Diagnosis reasons over *all* of these at once (:mod:`lrdoctor.rules.hypotheses`): the
scheduler's own counter is one item among the optimizer's step, the loop's global step,
the samples consumed, the epochs configured and the horizon saved; a bug is the one
hypothesis that explains every item with the numbers, and "agree" needs two independent
items that were actually compared.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from lrdoctor.core.fieldref import FieldRef


class Role(str, Enum):
    """What a number says about the run."""

    PROGRESS = "progress"        # how far it is (a counter)
    HORIZON = "horizon"          # where the schedule's decay ends
    PLANNED_END = "planned end"  # where training is meant to end
    WARMUP = "warmup"            # where the warmup ends
    LR = "lr"                    # a learning rate (saved or the peak)
    FACTOR = "factor"            # a conversion: accumulation, processes, batch sizes


class Quantity(str, Enum):
    """What one unit of the number counts (the unit), or which factor it is."""

    OPTIMIZER_STEPS = "optimizer steps"
    SCHEDULER_CALLS = "scheduler calls"
    ITERATIONS = "iterations"
    SAMPLES = "samples"
    TOKENS = "tokens"
    EPOCHS = "epochs"
    BATCHES = "batches"
    MICRO_BATCHES = "micro-batches"
    ROLLOUTS = "rollouts"
    FRACTION = "fraction"                            # warmup_ratio: a share of the horizon
    LR = "lr"
    GRAD_ACCUM = "micro-batches per update"
    PROCESSES = "processes"
    GLOBAL_BATCH = "samples per update"
    MICRO_BATCH = "samples per micro-batch"
    BATCHES_PER_EPOCH = "batches per epoch"
    UPDATES_PER_EPOCH = "updates per epoch"
    DATASET = "samples per epoch"
    # RL trainers (verl, SkyRL, OpenRLHF, NeMo-RL, ROLL): a rollout step's batch of prompts,
    # the responses sampled per prompt, and how the batch is split into optimizer updates.
    PROMPTS_PER_STEP = "prompts per rollout step"
    RESPONSES_PER_PROMPT = "responses per prompt"
    PPO_MINI_BATCH = "prompts per mini-batch"
    PPO_EPOCHS = "passes over each rollout batch"
    MINI_BATCHES = "mini-batches per rollout batch"


# Counters of one optimizer update each (the trainer's own notion of a step).
UPDATE_COUNTS = (Quantity.OPTIMIZER_STEPS, Quantity.ITERATIONS)


@dataclass(frozen=True)
class EvidenceItem:
    """One number, what it means, and where it lives (``ref``: file and key path).

    A value the run *logged* (an LR in ``log_history``, a metrics.csv row, a TensorBoard
    scalar) was true at one step only: ``at`` is that step, counted in ``at_unit``. A
    saved value (a counter, a horizon, the optimizer's LR now) has ``at`` None."""

    role: Role
    quantity: Quantity
    value: float
    ref: FieldRef
    at: float | None = None
    at_unit: Quantity | None = None

    @property
    def name(self) -> str:
        """The key it was saved under (last component of the path)."""
        key = [k for k in self.ref.key if isinstance(k, str)]
        return key[-1] if key else str(self.ref)

    @property
    def where(self) -> str:
        return str(self.ref)

    @property
    def logged(self) -> bool:
        """Logged at one step (``at``), not saved as the run's state now."""
        return self.at is not None

    def describe(self) -> str:
        """``name = value unit (file:key)`` for a message (``at step N`` when logged)."""
        from lrdoctor.core.numbers import number

        at = "" if self.at is None else f" at step {number(self.at)}"
        return f"{self.name} = {number(self.value)} {self.quantity.value}{at} ({self.where})"

    def to_dict(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"role": self.role.value, "unit": self.quantity.value,
                               "value": self.value, "name": self.name, "where": self.where}
        if self.at is not None:
            doc["step"] = self.at
            doc["step_unit"] = (self.at_unit or Quantity.ITERATIONS).value
        return doc


@dataclass(frozen=True)
class LoggedLr:
    """One LR the run logged: the value, the step it was logged at (in ``unit``, the log's
    own count) and the field it was read from (``trainer_state.json:log_history[12].
    learning_rate``, ``metrics.csv:[5].lr-AdamW``, ``events.out.tfevents.*:lr-AdamW[5]``).

    ``RunState.lr_log`` holds every point, for the fits and the LR rules; the evidence
    list holds a bounded summary of them (:func:`logged_lr_items`), so a log of thousands
    of steps is four items, each citing its own field."""

    step: float
    lr: float
    ref: FieldRef
    unit: Quantity = Quantity.OPTIMIZER_STEPS

    @property
    def point(self) -> tuple[float, float]:
        return self.step, self.lr


def logged_lr_items(log: list[LoggedLr]) -> list[EvidenceItem]:
    """The first, the last, the lowest and the highest logged LR (each at its first step;
    one item where two coincide), in step order: what says where the run started, where it
    is, its floor and its peak, without one item per logged step."""
    if not log:
        return []
    steps = sorted(range(len(log)), key=lambda i: log[i].step)
    pick = {steps[0], steps[-1],
            min(steps, key=lambda i: (log[i].lr, log[i].step)),
            max(steps, key=lambda i: (log[i].lr, -log[i].step))}
    return [EvidenceItem(Role.LR, Quantity.LR, log[i].lr, log[i].ref, at=log[i].step,
                         at_unit=log[i].unit)
            for i in sorted(pick, key=lambda i: log[i].step)]


def logged_at(log: list[LoggedLr], step: float) -> LoggedLr | None:
    """The logged point at ``step`` (the first, when several share it)."""
    return next((p for p in log if p.step == step), None)


def of(items: list[EvidenceItem], role: Role, *quantities: Quantity) -> list[EvidenceItem]:
    """The items with ``role`` (and one of ``quantities``, when given), in reading order."""
    return [e for e in items if e.role is role and (not quantities or e.quantity in quantities)]


def first(items: list[EvidenceItem], role: Role, *quantities: Quantity) -> EvidenceItem | None:
    hits = of(items, role, *quantities)
    return hits[0] if hits else None
