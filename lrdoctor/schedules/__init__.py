"""Learning-rate schedules as pure functions of progress.

Each family module reproduces its framework's implementation exactly (tests
compare against the real classes to 1e-12 relative). No torch import here.
Every family module exposes ``lr_at(spec, progress)``, ``problems(spec)`` and
``floor_progress(spec)``; the field mapping of each family is in its docstring.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lrdoctor.model import ScheduleSpec

FAMILIES = ("megatron", "hf", "torch", "deepspeed")


def _family(spec: ScheduleSpec) -> ModuleType:
    module = {"megatron": "megatron", "hf": "hf", "torch": "torch_builtin",
              "deepspeed": "deepspeed"}.get(spec.family)
    if module is None:
        raise ValueError(f"unknown schedule family {spec.family!r}")
    return importlib.import_module(f"lrdoctor.schedules.{module}")


def lr_at(spec: ScheduleSpec, progress: float) -> float:
    """LR the schedule gives at ``progress`` (in ``spec.unit``)."""
    return _family(spec).lr_at(spec, progress)


def problems(spec: ScheduleSpec) -> list[str]:
    """One line per impossible setting (empty list: the config can run)."""
    if spec.family not in FAMILIES:
        return [f"schedule family={spec.family!r} is not one of {', '.join(FAMILIES)}"]
    return _family(spec).problems(spec)


def floor_progress(spec: ScheduleSpec) -> float | None:
    """First progress from which the LR sits at its final floor (None: never)."""
    return _family(spec).floor_progress(spec)


def curve(spec: ScheduleSpec, start: float, stop: float,
          points: int = 400) -> list[tuple[float, float]]:
    """``points`` evenly spaced (progress, lr) pairs over [start, stop] for plots."""
    if points < 2 or stop == start:
        return [(float(start), lr_at(spec, start))]
    step = (stop - start) / (points - 1)
    xs = [start + i * step for i in range(points - 1)] + [stop]
    return [(float(x), lr_at(spec, x)) for x in xs]
