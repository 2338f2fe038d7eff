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


# Counters of one optimizer update each (the trainer's own notion of a step).
UPDATE_COUNTS = (Quantity.OPTIMIZER_STEPS, Quantity.ITERATIONS)


@dataclass(frozen=True)
class EvidenceItem:
    """One number, what it means, and where it lives (``ref``: file and key path)."""

    role: Role
    quantity: Quantity
    value: float
    ref: FieldRef

    @property
    def name(self) -> str:
        """The key it was saved under (last component of the path)."""
        key = [k for k in self.ref.key if isinstance(k, str)]
        return key[-1] if key else str(self.ref)

    @property
    def where(self) -> str:
        return str(self.ref)

    def describe(self) -> str:
        """``name = value unit (file:key)`` for a message."""
        from lrdoctor.core.numbers import number

        return f"{self.name} = {number(self.value)} {self.quantity.value} ({self.where})"

    def to_dict(self) -> dict[str, Any]:
        return {"role": self.role.value, "unit": self.quantity.value, "value": self.value,
                "name": self.name, "where": self.where}


def of(items: list[EvidenceItem], role: Role, *quantities: Quantity) -> list[EvidenceItem]:
    """The items with ``role`` (and one of ``quantities``, when given), in reading order."""
    return [e for e in items if e.role is role and (not quantities or e.quantity in quantities)]


def first(items: list[EvidenceItem], role: Role, *quantities: Quantity) -> EvidenceItem | None:
    hits = of(items, role, *quantities)
    return hits[0] if hits else None
