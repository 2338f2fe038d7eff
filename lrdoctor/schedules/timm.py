"""timm's ``timm.scheduler`` family as pure functions of ``t`` (epochs or updates).

timm's schedulers are stateless by design: the loop passes the epoch to ``step(epoch)``
or the update count to ``step_update(num_updates)``, and ``state_dict()`` is the
scheduler's ``__dict__`` (its knobs, ``base_values``, ``t_in_epochs``) with no count of
its own. So a checkpoint says *what* the schedule is but not *where* it is: lrdoctor
solves that from the saved LR (:mod:`lrdoctor.stateless`).

Operation for operation as timm 1.0's ``_get_lr`` (``cosine_lr.py``, ``poly_lr.py``,
``step_lr.py``, ``multistep_lr.py``; tests compare with the real classes).

ScheduleSpec mapping (family ``"timm"``):

- ``kind``   = class name: "CosineLRScheduler", "PolyLRScheduler", "StepLRScheduler",
  "MultiStepLRScheduler", "WSDLRScheduler" (identified from the state's keys by
  :func:`kind_of`; a WSD ``decay_fn`` that is a callable is code, not modelled)
- ``max_lr`` = ``base_values[0]`` (the param group's ``initial_lr``)
- ``params`` = the scheduler's ``state_dict()`` verbatim
- ``unit``   = epochs when ``t_in_epochs`` else optimizer updates
- ``horizon``= ``get_cycle_length()`` for cosine/poly (their end); None for step kinds
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import TYPE_CHECKING, Any

from lrdoctor.schedules.shapes import DECAY

if TYPE_CHECKING:
    from lrdoctor.core.state import ScheduleSpec

KINDS = ("CosineLRScheduler", "PolyLRScheduler", "StepLRScheduler", "MultiStepLRScheduler",
         "WSDLRScheduler")


def kind_of(sd: Any) -> str | None:
    """The timm scheduler class a ``state_dict()`` came from, or None (not timm's)."""
    if not isinstance(sd, dict) or not {"base_values", "t_in_epochs",
                                        "param_group_field"} <= set(sd):
        return None
    if "stable_fn" in sd:
        return "WSDLRScheduler"
    if "t_initial" in sd:
        return "PolyLRScheduler" if "power" in sd else "CosineLRScheduler"
    if "decay_t" in sd:
        return "MultiStepLRScheduler" if isinstance(sd["decay_t"], (list, tuple)) \
            else "StepLRScheduler"
    if "patience_t" in sd or "lr_scheduler" in sd:
        return "PlateauLRScheduler"
    return "TanhLRScheduler" if "lb" in sd and "ub" in sd else None


def _p(spec: ScheduleSpec, name: str, default: Any) -> Any:
    v = spec.params.get(name)
    return default if v is None else v


def lr_at(spec: ScheduleSpec, progress: float) -> float:
    """The LR timm sets for ``t`` = ``progress`` (the value passed to step/step_update)."""
    t: Any = progress
    if float(t).is_integer():
        t = int(t)
    base = spec.max_lr
    warmup_t = _p(spec, "warmup_t", 0)
    warmup_init = _p(spec, "warmup_lr_init", 0.0)
    if t < warmup_t:
        return warmup_init + t * ((base - warmup_init) / warmup_t)
    if spec.kind == "WSDLRScheduler":
        return _wsd(spec, base, t - warmup_t)
    prefix_default = spec.kind in ("StepLRScheduler", "MultiStepLRScheduler")
    if _p(spec, "warmup_prefix", prefix_default):
        t = t - warmup_t
    if spec.kind == "StepLRScheduler":
        return base * (_p(spec, "decay_rate", 1.0) ** (t // spec.params["decay_t"]))
    if spec.kind == "MultiStepLRScheduler":
        steps = bisect_right(list(spec.params["decay_t"]), t + 1)
        return base * (_p(spec, "decay_rate", 1.0) ** steps)
    if spec.kind not in ("CosineLRScheduler", "PolyLRScheduler"):
        raise ValueError(f"timm scheduler {spec.kind!r} is not modelled")
    t_initial = spec.params["t_initial"]
    mul = _p(spec, "cycle_mul", 1.0)
    if mul != 1:
        i = math.floor(math.log(1 - t / t_initial * (1 - mul), mul))
        t_i = mul ** i * t_initial
        t_curr = t - (1 - mul ** i) / (1 - mul) * t_initial
    else:
        i = t // t_initial
        t_i = t_initial
        t_curr = t - (t_initial * i)
    lr_max = base * _p(spec, "cycle_decay", 1.0) ** i
    lr_min = _p(spec, "lr_min", 0.0)
    k = _p(spec, "k_decay", 1.0)
    if i >= _p(spec, "cycle_limit", 1):
        return lr_min
    if spec.kind == "PolyLRScheduler":
        return lr_min + (lr_max - lr_min) * (1 - t_curr ** k / t_i ** k) ** spec.params["power"]
    return lr_min + 0.5 * (lr_max - lr_min) * (1 + math.cos(math.pi * t_curr ** k / t_i ** k))


def _wsd(spec: ScheduleSpec, base: float, t_s: float) -> float:
    """WSDLRScheduler past its warmup (always a prefix): stable, then the decay to
    ``lr_min`` over the last ``decay_t`` of ``t_initial``."""
    p = spec.params
    lr_min = _p(spec, "lr_min", 0.0)
    fn = _p(spec, "stable_fn", "constant")
    stable = 1.0 if fn == "constant" else (1.0 + t_s / p["stable_timescale"]) ** -(
        0.5 if fn == "rsqrt" else _p(spec, "stable_power", 0.5))
    lr = max(base * stable, lr_min)
    t_decay = t_s - (p["t_initial"] - p["decay_t"])
    if t_decay <= 0:
        return lr
    frac = min(t_decay / p["decay_t"], 1.0)
    kind = _p(spec, "decay_fn", "1-sqrt")
    if kind in ("linear", "1-sqrt", "cosine"):
        d = DECAY[kind](frac)
    elif kind == "power":
        d = 1.0 - frac ** _p(spec, "decay_power", 0.5)
    elif kind == "exp":
        r = _p(spec, "decay_ratio", 0.1)
        d = (r ** frac - r) / (1.0 - r)
    else:
        raise ValueError(f"timm WSD decay_fn {kind!r} is not modelled (a callable is code)")
    return lr_min + (lr - lr_min) * d


def cycle_length(sd: dict[str, Any]) -> float | None:
    """timm's ``get_cycle_length()``: where cosine/poly reach ``lr_min`` for good."""
    if "t_initial" not in sd:
        return None
    if "stable_fn" in sd:  # WSD: the warmup is always a prefix
        return float(sd.get("warmup_t", 0) + sd["t_initial"])
    t0, mul = sd["t_initial"], sd.get("cycle_mul", 1.0)
    cycles = max(1, sd.get("cycle_limit", 1))
    t = t0 * cycles if mul == 1.0 else int(math.floor(-t0 * (mul ** cycles - 1) / (1 - mul)))
    return float(t + sd.get("warmup_t", 0) if sd.get("warmup_prefix") else t)


def floor_progress(spec: ScheduleSpec) -> float | None:
    if spec.kind in ("CosineLRScheduler", "PolyLRScheduler", "WSDLRScheduler"):
        return cycle_length(spec.params)
    return None


def problems(spec: ScheduleSpec) -> list[str]:
    out = []
    if spec.kind not in KINDS:
        return [f"timm {spec.kind} is not modelled by lrdoctor"]
    t_initial = spec.params.get("t_initial")
    if t_initial is not None and t_initial <= 0:
        out.append(f"timm {spec.kind} t_initial={t_initial} is not positive")
    if spec.params.get("lr_min", 0.0) > spec.max_lr:
        out.append(f"timm {spec.kind} lr_min={spec.params['lr_min']} exceeds the base LR "
                   f"{spec.max_lr}")
    return out
