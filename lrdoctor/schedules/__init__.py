"""Learning-rate schedules as pure functions of progress.

Each family module reproduces its framework's implementation exactly (tests
compare against the real classes to 1e-12 relative). No torch import here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lrdoctor.model import ScheduleSpec


def lr_at(spec: ScheduleSpec, progress: float) -> float:
    """LR the schedule gives at ``progress`` (in ``spec.unit``)."""
    from lrdoctor.schedules import deepspeed, hf, megatron, torch_builtin

    family = {"megatron": megatron, "hf": hf, "torch": torch_builtin,
              "deepspeed": deepspeed}.get(spec.family)
    if family is None:
        raise ValueError(f"unknown schedule family {spec.family!r}")
    return family.lr_at(spec, progress)
