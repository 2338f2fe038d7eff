"""DeepSpeed ``WarmupLR`` / ``WarmupDecayLR`` / ``WarmupCosineLR`` as pure functions.

Why exact: DeepSpeed saves only ``last_batch_iteration``; the LR a resumed run
uses is whatever these formulas give there, so they repeat deepspeed 0.19's
arithmetic (including ``warmup_num_steps = max(2, warmup_num_steps)`` and the
log warmup that is the default).

ScheduleSpec mapping (family ``"deepspeed"``; readers rely on it):

- ``kind``    = class name: "WarmupLR", "WarmupDecayLR", "WarmupCosineLR"
- ``params``  = the ds_config ``scheduler.params`` verbatim (missing keys take
  DeepSpeed's defaults: warmup_min_lr 0, warmup_num_steps 1000,
  warmup_type "log", cos_min_ratio 1e-4, warmup_min_ratio 0)
- ``max_lr``  = ``warmup_max_lr`` (WarmupLR / WarmupDecayLR; when the config
  leaves it out, WarmupLR uses the optimizer lr and WarmupDecayLR 0.001), or
  the optimizer lr for WarmupCosineLR
- ``min_lr``  = ``warmup_min_lr`` (used only when params lack it)
- ``warmup``  = ``warmup_num_steps``; ``horizon`` = ``total_num_steps``
  (params win when both are given)
- progress    = ``last_batch_iteration + 1`` = calls to ``scheduler.step()``
  = optimizer updates not skipped. A fresh scheduler (``last_batch_iteration
  == -1``) is at progress 0, where WarmupLR gives ``warmup_min_lr`` and
  WarmupCosineLR gives 0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lrdoctor.core.state import ScheduleSpec

KINDS = ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR")
WARMUP_TYPES = ("log", "linear")


def with_horizon(spec: ScheduleSpec, horizon: float) -> ScheduleSpec:
    """``spec`` with ``total_num_steps`` (the horizon DeepSpeed reads) moved to ``horizon``."""
    from dataclasses import replace

    params = dict(spec.params)
    if "total_num_steps" in params:
        params["total_num_steps"] = int(horizon) if float(horizon).is_integer() else horizon
    return replace(spec, horizon=float(horizon), params=params)


def _warmup_steps(spec: ScheduleSpec) -> float:
    w = spec.params.get("warmup_num_steps")
    if w is None:
        w = spec.warmup if spec.warmup else 1000
    return max(2, w)


def _total(spec: ScheduleSpec) -> float:
    t = spec.params.get("total_num_steps", spec.horizon)
    if t is None:
        raise ValueError(f"deepspeed {spec.kind} needs total_num_steps")
    return t


def _warmup_type(spec: ScheduleSpec) -> str:
    wt = spec.params.get("warmup_type", "log")
    return wt if wt in WARMUP_TYPES else "log"  # DeepSpeed falls back to log too


def _warmup_gamma(it: float, w: float, wtype: str) -> float:
    if wtype == "log":
        return (1.0 / math.log(w)) * math.log(it + 1)
    return it / w


def lr_at(spec: ScheduleSpec, progress: float) -> float:
    """LR after ``progress`` calls to ``step()`` (last_batch_iteration = progress - 1)."""
    it = progress - 1
    w = _warmup_steps(spec)
    wtype = _warmup_type(spec)
    if spec.kind in ("WarmupLR", "WarmupDecayLR"):
        min_lr = spec.params.get("warmup_min_lr", spec.min_lr)
        max_lr = spec.max_lr
        if it < 0:
            return min_lr
        if it < w:
            gamma = _warmup_gamma(it, w, wtype)
        elif spec.kind == "WarmupLR":
            gamma = 1.0
        else:
            total = _total(spec)
            gamma = max(0.0, float(total - it) / float(max(1.0, total - w)))
        return min_lr + ((max_lr - min_lr) * gamma)
    if spec.kind == "WarmupCosineLR":
        if it < 0:
            return 0.0
        return spec.max_lr * _cosine_ratio(spec, it, w, wtype)
    raise ValueError(f"unknown deepspeed scheduler {spec.kind!r}")


def _cosine_ratio(spec: ScheduleSpec, it: float, w: float, wtype: str) -> float:
    p = spec.params
    if it < w:
        ratio = _warmup_gamma(it, w, wtype)
        wmin = p.get("warmup_min_ratio", 0.0)
        return wmin + ratio * (1.0 - wmin)
    cmin = p.get("cos_min_ratio", 0.0001)
    real_last = it - w + 1
    real_total = max(1, _total(spec) - w)
    prog = min(1.0, real_last / real_total)
    ratio = (1 + math.cos(math.pi * prog)) / 2
    return max(0.0, cmin + (1.0 - cmin) * ratio)


def floor_progress(spec: ScheduleSpec) -> float | None:
    """Progress from which the LR stays at its floor (None: never)."""
    if spec.kind == "WarmupLR":
        return None
    try:
        total = _total(spec)
    except ValueError:
        return None
    w = _warmup_steps(spec)
    if spec.kind == "WarmupDecayLR":
        return float(max(total, w) + 1)  # gamma reaches 0 at last_batch_iteration == total
    return float(total if total > w else w + 1)  # cosine progress hits 1 at iteration total-1


def problems(spec: ScheduleSpec) -> list[str]:
    """Settings DeepSpeed refuses or that leave no decay window."""
    p = spec.params
    if spec.kind not in KINDS:
        return [f"scheduler type={spec.kind!r} is not one of {', '.join(KINDS)}"]
    out: list[str] = []
    w = p.get("warmup_num_steps", spec.warmup if spec.warmup else 1000)
    if not isinstance(w, int) or w <= 0:
        out.append(f"warmup_num_steps={w} is not a positive integer (DeepSpeed refuses it)")
    wt = p.get("warmup_type", "log")
    if wt not in WARMUP_TYPES:
        out.append(f"warmup_type={wt!r} is not one of log, linear (DeepSpeed falls back to log)")
    if spec.max_lr < 0:
        out.append(f"max_lr={spec.max_lr} is negative")
    if spec.kind in ("WarmupLR", "WarmupDecayLR"):
        min_lr = p.get("warmup_min_lr", spec.min_lr)
        if min_lr < 0:
            out.append(f"warmup_min_lr={min_lr} is negative")
        if min_lr > spec.max_lr:
            out.append(f"warmup_min_lr={min_lr} exceeds warmup_max_lr={spec.max_lr}")
    else:
        for name, default in (("cos_min_ratio", 0.0001), ("warmup_min_ratio", 0.0)):
            v = p.get(name, default)
            if v < 0 or v > 1:
                out.append(f"{name}={v} is outside [0, 1]")
    if spec.kind in ("WarmupDecayLR", "WarmupCosineLR"):
        t = p.get("total_num_steps", spec.horizon)
        if t is None or t <= 0:
            out.append(f"total_num_steps={t} is not positive")
        elif isinstance(w, int) and w >= t:
            out.append(f"warmup_num_steps={w} is not below total_num_steps={t}: "
                       "warmup never ends before the decay horizon")
    return out
