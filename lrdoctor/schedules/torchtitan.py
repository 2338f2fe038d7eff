"""torchtitan's LR schedule (``components/optimizer/lr_scheduler.py``) as a pure function.

torchtitan builds one ``LambdaLR`` per optimizer over ``linear_warmup_stable_decay``
from the job config's ``[lr_scheduler]`` (``warmup_steps``, ``decay_ratio``,
``decay_type`` linear/sqrt/cosine, ``min_lr_factor``, ``total_steps``) and
``training.steps``; its checkpoint keeps only ``{"last_epoch": N}``. The schedule
lives in the config beside the checkpoint, so lrdoctor rebuilds it from there
(:mod:`lrdoctor.stateless`). Exact to torchtitan 0.3's ``Config.build``: the warmup is
clipped to the total, the decay to ``total - warmup``, and a virtual last step keeps the
LR off 0 (``stable = total + 1 - warmup - decay``).

ScheduleSpec mapping (family ``"torchtitan"``): ``kind`` = ``decay_type``; ``max_lr`` =
the optimizer's ``lr``; ``warmup`` = warmup steps after clipping; ``horizon`` = the
total steps; ``params`` = ``warmup_steps``, ``decay_steps``, ``stable_steps``,
``min_lr_factor`` after the build; progress = ``last_epoch`` (optimizer updates).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from lrdoctor.schedules.shapes import DECAY

if TYPE_CHECKING:
    from lrdoctor.core.state import ScheduleSpec

KINDS = ("linear", "sqrt", "cosine")


def build_params(total_steps: int, warmup_steps: int, decay_ratio: float | None,
                 min_lr_factor: float = 0.0) -> dict[str, Any]:
    """The lambda's arguments as ``LRSchedulersContainer.Config.build`` computes them."""
    warmup = min(int(warmup_steps), total_steps)
    if decay_ratio is not None:
        decay = round(total_steps * decay_ratio)
        if warmup + decay > total_steps:
            decay = total_steps - warmup
    else:
        decay = total_steps - warmup
    return {"warmup_steps": warmup, "decay_steps": decay,
            "stable_steps": total_steps + 1 - warmup - decay, "min_lr_factor": min_lr_factor}


def factor(kind: str, p: dict[str, Any], step: int) -> float:
    """``linear_warmup_stable_decay(step, ...)`` operation for operation."""
    warmup, stable, decay = p["warmup_steps"], p["stable_steps"], p["decay_steps"]
    if step < warmup:
        return float((step + 1) / warmup)
    if step < warmup + stable:
        return 1.0
    progress = float(step + 1 - (warmup + stable)) / decay
    if kind not in KINDS:
        raise ValueError(f"torchtitan decay_type {kind!r} is not linear, sqrt or cosine")
    mf = p["min_lr_factor"]
    return mf + (1 - mf) * DECAY[kind](progress)


def lr_at(spec: ScheduleSpec, progress: float) -> float:
    return spec.max_lr * factor(spec.kind, spec.params, max(0, int(math.floor(progress))))


def floor_progress(spec: ScheduleSpec) -> float | None:
    p = spec.params
    return float(p["warmup_steps"] + p["stable_steps"] + p["decay_steps"] - 1)


def problems(spec: ScheduleSpec) -> list[str]:
    p, out = spec.params, []
    if spec.kind not in KINDS:
        out.append(f"torchtitan decay_type={spec.kind!r} is not one of {', '.join(KINDS)}")
    if p.get("decay_steps", 1) <= 0:
        out.append(f"torchtitan decay steps {p.get('decay_steps')} is not positive: "
                   "the LR never decays")
    if not 0 <= p.get("min_lr_factor", 0.0) <= 1:
        out.append(f"torchtitan min_lr_factor={p.get('min_lr_factor')} is outside [0, 1]")
    return out
