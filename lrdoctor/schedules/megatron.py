"""Megatron-core ``OptimizerParamScheduler.get_lr`` as a pure function.

Why its own module: Megatron counts ``num_steps`` in *samples* (it is stepped
by the global batch size), clamps silently to ``min_lr`` past
``lr_decay_steps`` and warms up from ``init_lr``; a diagnosis has to know the
exact value the real class would have set, so the arithmetic below follows
megatron-core 0.16 operation for operation (same float rounding).

ScheduleSpec mapping (family ``"megatron"``; readers rely on it):

- ``kind``     = ``lr_decay_style``: "constant", "linear", "cosine",
  "inverse-square-root", "WSD"
- ``max_lr``, ``min_lr``, ``init_lr`` = the scheduler's fields
- ``warmup``   = ``lr_warmup_steps``
- ``horizon``  = ``lr_decay_steps``
- ``params``   = {"wsd_decay_steps": int | None,
  "lr_wsd_decay_style": "linear" | "cosine" | "exponential" | "minus_sqrt"}
- progress     = ``num_steps`` (same unit as warmup / horizon)
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lrdoctor.core.state import ScheduleSpec

KINDS = ("constant", "linear", "cosine", "inverse-square-root", "WSD")
WSD_STYLES = ("linear", "cosine", "exponential", "minus_sqrt")


def lr_at(spec: ScheduleSpec, progress: float) -> float:
    """The LR ``get_lr`` returns once ``num_steps == progress``."""
    n = progress
    max_lr = float(spec.max_lr)
    min_lr = spec.min_lr
    init_lr = spec.init_lr
    warmup = spec.warmup
    decay = spec.horizon
    style = spec.kind

    if warmup > 0 and n <= warmup:
        return init_lr + ((max_lr - init_lr) * float(n) / float(warmup))
    if style == "constant":
        return max_lr
    if decay is None:
        raise ValueError(f"megatron {style} schedule needs lr_decay_steps (horizon)")
    if n > decay:
        return min_lr
    if style == "inverse-square-root":
        w = max(warmup, 1)
        s = max(n, 1)
        return max(min_lr, max_lr * w**0.5 / (s**0.5))

    ratio = float(n - warmup) / float(decay - warmup)
    delta = max_lr - min_lr
    if style == "linear":
        coeff = 1.0 - ratio
    elif style == "cosine":
        coeff = 0.5 * (math.cos(math.pi * ratio) + 1.0)
    elif style == "WSD":
        wsd_steps_total = spec.params.get("wsd_decay_steps")
        if wsd_steps_total is None:
            raise ValueError("megatron WSD schedule needs params['wsd_decay_steps']")
        anneal_start = decay - wsd_steps_total
        if n <= anneal_start:
            coeff = 1.0
        else:
            r = float(n - anneal_start) / float(wsd_steps_total)
            wstyle = spec.params.get("lr_wsd_decay_style")
            if wstyle == "linear":
                coeff = 1.0 - r
            elif wstyle == "cosine":
                coeff = 0.5 * (math.cos(math.pi * r) + 1.0)
            elif wstyle == "exponential":
                coeff = (2.0 * math.pow(0.5, r)) - 1.0
            elif wstyle == "minus_sqrt":
                coeff = 1.0 - math.sqrt(r)
            else:
                raise ValueError(f"unknown megatron lr_wsd_decay_style {wstyle!r}")
    else:
        raise ValueError(f"unknown megatron lr_decay_style {style!r}")
    return min_lr + coeff * delta


def floor_progress(spec: ScheduleSpec) -> float | None:
    """Progress from which the LR stays at ``min_lr`` (None: never)."""
    if spec.kind == "constant" or spec.horizon is None:
        return None
    if spec.kind == "inverse-square-root" and spec.min_lr > 0:
        # max_lr * sqrt(W / n) <= min_lr  <=>  n >= W * (max_lr / min_lr)**2
        reach = max(spec.warmup, 1) * (spec.max_lr / spec.min_lr) ** 2
        return float(min(reach, spec.horizon))
    return float(spec.horizon)


def problems(spec: ScheduleSpec) -> list[str]:
    """Configurations Megatron would refuse (its asserts) or that cannot work."""
    out: list[str] = []
    if spec.kind not in KINDS:
        out.append(f"lr_decay_style={spec.kind!r} is not one of {', '.join(KINDS)}")
    for name in ("max_lr", "min_lr", "init_lr"):
        value = getattr(spec, name)
        if value < 0:
            out.append(f"{name}={value} is negative")
    if spec.min_lr > spec.max_lr:
        out.append(f"min_lr={spec.min_lr} exceeds max_lr={spec.max_lr}")
    if spec.init_lr > spec.max_lr:
        out.append(f"init_lr={spec.init_lr} exceeds max_lr={spec.max_lr}")
    if spec.warmup < 0:
        out.append(f"lr_warmup_steps={spec.warmup} is negative")
    if spec.horizon is None or spec.horizon <= 0:
        out.append(f"lr_decay_steps={spec.horizon} is not positive")
    elif spec.warmup >= spec.horizon:
        out.append(f"lr_warmup_steps={spec.warmup} is not below lr_decay_steps={spec.horizon}: "
                   "warmup never ends before the decay horizon")
    if spec.kind == "WSD":
        wsd = spec.params.get("wsd_decay_steps")
        wstyle = spec.params.get("lr_wsd_decay_style")
        if wsd is None:
            out.append("lr_decay_style='WSD' but wsd_decay_steps is not set")
        elif wsd <= 0:
            out.append(f"wsd_decay_steps={wsd} is not positive")
        elif spec.horizon is not None and spec.horizon > 0 and wsd > spec.horizon - spec.warmup:
            out.append(f"wsd_decay_steps={wsd} exceeds lr_decay_steps - lr_warmup_steps="
                       f"{spec.horizon - spec.warmup}: the anneal starts inside the warmup")
        if wstyle not in WSD_STYLES:
            out.append(f"lr_wsd_decay_style={wstyle!r} is not one of {', '.join(WSD_STYLES)}")
    return out
