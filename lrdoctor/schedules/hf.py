"""transformers ``get_scheduler`` schedules as pure functions.

Why exact: every HF schedule is ``LambdaLR`` whose LR is
``base_lr * lambda(last_epoch)``; a diagnosis compares the saved LR with what
the lambda gives at the saved ``last_epoch``, so the lambdas below repeat
transformers 5.x arithmetic operation for operation. Note what HF does *not*
do: no clamp past ``num_training_steps`` (cosine rises again, linear stays 0).

ScheduleSpec mapping (family ``"hf"``; readers rely on it):

- ``kind``    = ``SchedulerType`` value: "linear", "cosine",
  "cosine_with_restarts", "polynomial", "constant", "constant_with_warmup",
  "inverse_sqrt", "cosine_with_min_lr", "cosine_warmup_with_min_lr",
  "warmup_stable_decay"
- ``max_lr``  = the optimizer's initial lr (``base_lrs[0]``; also
  ``optimizer.defaults["lr"]`` unless ``params["lr_init"]`` says otherwise)
- ``warmup``  = ``num_warmup_steps``
- ``horizon`` = ``num_training_steps`` (None where the kind does not need it)
- ``params``  = ``scheduler_specific_kwargs`` verbatim (num_cycles, power,
  lr_end, min_lr, min_lr_rate, warmup_lr_rate, timescale, num_stable_steps,
  num_decay_steps, warmup_type, decay_type, min_lr_ratio)
- progress    = ``LambdaLR.last_epoch`` (= scheduler.step() calls)

``spec.min_lr`` and ``spec.init_lr`` are not read: HF keeps floors in params.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lrdoctor.core.state import ScheduleSpec

KINDS = ("linear", "cosine", "cosine_with_restarts", "polynomial", "constant",
         "constant_with_warmup", "inverse_sqrt", "cosine_with_min_lr",
         "cosine_warmup_with_min_lr", "warmup_stable_decay")
NEEDS_HORIZON = ("linear", "cosine", "cosine_with_restarts", "polynomial",
                 "cosine_with_min_lr", "cosine_warmup_with_min_lr")
NOT_PURE = ("reduce_lr_on_plateau", "greedy")
WSD_TYPES = ("linear", "cosine", "1-sqrt")


def _ramp(step: float, warmup: float) -> float:
    return float(step) / float(max(1, warmup))


def _min_lr_rate(spec: ScheduleSpec) -> float:
    p = spec.params
    if p.get("min_lr") is not None:
        return p["min_lr"] / _lr_init(spec)
    rate = p.get("min_lr_rate")
    if rate is None:
        raise ValueError(f"hf {spec.kind} needs params min_lr or min_lr_rate")
    return rate


def _lr_init(spec: ScheduleSpec) -> float:
    return spec.params.get("lr_init", spec.max_lr)


def _wsd_stable(spec: ScheduleSpec) -> float:
    p = spec.params
    if p.get("num_stable_steps") is not None:
        return p["num_stable_steps"]
    if spec.horizon is None:
        raise ValueError("hf warmup_stable_decay needs num_training_steps or num_stable_steps")
    return spec.horizon - spec.warmup - p["num_decay_steps"]


def _horizon(spec: ScheduleSpec) -> float:
    """``num_training_steps``, which the :data:`NEEDS_HORIZON` kinds read only past
    warmup (their warmup ramp is defined without it, as in transformers)."""
    if spec.horizon is None:
        raise ValueError(f"hf {spec.kind} schedule needs num_training_steps (horizon)")
    return spec.horizon


def factor(spec: ScheduleSpec, step: float) -> float:
    """The LambdaLR multiplier at ``last_epoch == step``."""
    kind, w, p = spec.kind, spec.warmup, spec.params
    if kind == "constant":
        return 1
    if kind == "constant_with_warmup":
        if step < w:
            return float(step) / float(max(1.0, w))
        return 1.0
    if kind == "linear":
        if step < w:
            return _ramp(step, w)
        t = _horizon(spec)
        return max(0.0, float(t - step) / float(max(1, t - w)))
    if kind in ("cosine", "cosine_with_min_lr"):
        if step < w:
            return _ramp(step, w)
        t = _horizon(spec)
        cycles = p.get("num_cycles", 0.5)
        rate = 0.0 if kind == "cosine" else _min_lr_rate(spec)
        prog = float(step - w) / float(max(1, t - w))
        f = 0.5 * (1.0 + math.cos(math.pi * float(cycles) * 2.0 * prog))
        f = f * (1 - rate) + rate
        return max(0, f)
    if kind == "cosine_with_restarts":
        if step < w:
            return _ramp(step, w)
        t = _horizon(spec)
        prog = float(step - w) / float(max(1, t - w))
        if prog >= 1.0:
            return 0.0
        cycles = p.get("num_cycles", 1)
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * ((float(cycles) * prog) % 1.0))))
    if kind == "polynomial":
        lr_init = _lr_init(spec)
        lr_end = p.get("lr_end", 1e-7)
        if step < w:
            return _ramp(step, w)
        t = _horizon(spec)
        if step > t:
            return lr_end / lr_init
        remaining = 1 - (step - w) / (t - w)
        return ((lr_init - lr_end) * remaining ** p.get("power", 1.0) + lr_end) / lr_init
    if kind == "inverse_sqrt":
        if step < w:
            return _ramp(step, w)
        timescale = p.get("timescale")
        if timescale is None:
            timescale = w or 10_000
        return 1.0 / math.sqrt((step + (timescale - w)) / timescale)
    if kind == "cosine_warmup_with_min_lr":
        return _cosine_warmup_min_lr(spec, step)
    if kind == "warmup_stable_decay":
        return _wsd(spec, step)
    raise ValueError(f"unknown hf scheduler kind {kind!r}")


def _cosine_warmup_min_lr(spec: ScheduleSpec, step: float) -> float:
    p = spec.params
    s, w = float(step), float(spec.warmup)
    if s < w:
        wr = p.get("warmup_lr_rate")
        if wr is None:
            return (s + 1.0) / max(1.0, w)
        wr = float(wr)
        return wr + (1.0 - wr) * s / (max(1, w - 1))
    # Read past warmup only: the ramp needs no horizon (a missing one raised TypeError here).
    t = float(_horizon(spec))
    rate = _min_lr_rate(spec)
    prog = (s - w + 1.0) / (max(1.0, t - w))
    f = 0.5 * (1.0 + math.cos(math.pi * p.get("num_cycles", 0.5) * 2.0 * prog))
    return max(0, f * (1 - rate) + rate)


def _wsd(spec: ScheduleSpec, step: float) -> float:
    p = spec.params
    w = spec.warmup
    stable = _wsd_stable(spec)
    decay = p["num_decay_steps"]
    ratio = p.get("min_lr_ratio", 0)
    if step < w:
        prog = float(step) / float(max(1, w))
        wt = p.get("warmup_type", "linear")
        if wt == "linear":
            f = prog
        elif wt == "cosine":
            f = 0.5 * (1.0 - math.cos(math.pi * prog))
        elif wt == "1-sqrt":
            f = 1.0 - math.sqrt(1.0 - prog)
        else:
            raise ValueError(f"unknown hf warmup_type {wt!r}")
        return max(0.0, f * (1.0 - ratio) + ratio)
    if step < w + stable:
        return 1.0
    if step < w + stable + decay:
        prog = float(step - w - stable) / float(max(1, decay))
        dt = p.get("decay_type", "cosine")
        if dt == "linear":
            f = 1.0 - prog
        elif dt == "cosine":
            f = 0.5 * (1.0 + math.cos(math.pi * float(p.get("num_cycles", 0.5)) * 2.0 * prog))
        elif dt == "1-sqrt":
            f = 1.0 - math.sqrt(prog)
        else:
            raise ValueError(f"unknown hf decay_type {dt!r}")
        return max(0.0, f * (1.0 - ratio) + ratio)
    return ratio


def lr_at(spec: ScheduleSpec, progress: float) -> float:
    """``base_lr * lambda(progress)``, as LambdaLR computes it."""
    return spec.max_lr * factor(spec, progress)


def floor_progress(spec: ScheduleSpec) -> float | None:
    """Progress where the LR first reaches its lowest value (None: never).

    HF's cosine does not stay there: past that point it rises again.
    """
    kind, w, t, p = spec.kind, spec.warmup, spec.horizon, spec.params
    if kind in ("linear", "cosine_with_restarts", "polynomial") and t is not None:
        return float(t)
    if kind in ("cosine", "cosine_with_min_lr") and t is not None:
        return float(w + max(1, t - w) / (2.0 * p.get("num_cycles", 0.5)))
    if kind == "cosine_warmup_with_min_lr" and t is not None:
        return float(w - 1 + max(1.0, t - w) / (2.0 * p.get("num_cycles", 0.5)))
    if kind == "warmup_stable_decay" and p.get("num_decay_steps") is not None:
        try:
            return float(w + _wsd_stable(spec) + p["num_decay_steps"])
        except ValueError:
            return None
    return None


def problems(spec: ScheduleSpec) -> list[str]:
    """Settings transformers would refuse, or that leave no schedule to run."""
    kind, w, t, p = spec.kind, spec.warmup, spec.horizon, spec.params
    out: list[str] = []
    if kind in NOT_PURE:
        return [f"lr_scheduler_type={kind!r} depends on metrics, not on progress alone"]
    if kind not in KINDS:
        return [f"lr_scheduler_type={kind!r} is not one of {', '.join(KINDS)}"]
    if spec.max_lr < 0:
        out.append(f"learning_rate={spec.max_lr} is negative")
    if w < 0:
        out.append(f"num_warmup_steps={w} is negative")
    if kind in NEEDS_HORIZON:
        if t is None or t <= 0:
            out.append(f"num_training_steps={t} is not positive")
        elif w >= t:
            out.append(f"num_warmup_steps={w} is not below num_training_steps={t}: "
                       "warmup never ends before the decay horizon")
    if kind == "polynomial":
        lr_end = p.get("lr_end", 1e-7)
        if not _lr_init(spec) > lr_end:
            out.append(f"lr_end={lr_end} is not below the initial lr={_lr_init(spec)}")
        if lr_end < 0:
            out.append(f"lr_end={lr_end} is negative")
    if kind in ("cosine_with_min_lr", "cosine_warmup_with_min_lr"):
        out += _min_lr_problems(spec, p)
    if kind == "inverse_sqrt" and p.get("timescale") is not None and p["timescale"] <= 0:
        out.append(f"timescale={p['timescale']} is not positive")
    if kind == "warmup_stable_decay":
        out += _wsd_problems(spec, p)
    return out


def _min_lr_problems(spec: ScheduleSpec, p: dict[str, Any]) -> list[str]:
    min_lr, rate = p.get("min_lr"), p.get("min_lr_rate")
    if min_lr is not None and rate is not None:
        return [f"min_lr={min_lr} and min_lr_rate={rate} are both set (transformers refuses)"]
    if min_lr is None and rate is None:
        return [f"{spec.kind} needs min_lr or min_lr_rate in lr_scheduler_kwargs"]
    if min_lr is not None:
        if min_lr < 0:
            return [f"min_lr={min_lr} is negative"]
        if min_lr > _lr_init(spec):
            return [f"min_lr={min_lr} exceeds max_lr={_lr_init(spec)}"]
    elif rate is not None and (rate < 0 or rate > 1):
        return [f"min_lr_rate={rate} is outside [0, 1]"]
    return []


def _wsd_problems(spec: ScheduleSpec, p: dict[str, Any]) -> list[str]:
    out = []
    decay = p.get("num_decay_steps")
    for name, default in (("warmup_type", "linear"), ("decay_type", "cosine")):
        if p.get(name, default) not in WSD_TYPES:
            out.append(f"{name}={p.get(name)!r} is not one of {', '.join(WSD_TYPES)}")
    ratio = p.get("min_lr_ratio", 0)
    if ratio < 0 or ratio > 1:
        out.append(f"min_lr_ratio={ratio} is outside [0, 1]")
    if decay is None:
        out.append("warmup_stable_decay needs num_decay_steps")
        return out
    if decay < 0:
        out.append(f"num_decay_steps={decay} is negative")
    if spec.horizon is None and p.get("num_stable_steps") is None:
        out.append("warmup_stable_decay needs num_training_steps or num_stable_steps")
    elif p.get("num_stable_steps") is None and _wsd_stable(spec) < 0:
        out.append(f"num_warmup_steps={spec.warmup} + num_decay_steps={decay} exceed "
                   f"num_training_steps={spec.horizon}: no room for the stable phase")
    elif p.get("num_stable_steps") is not None and p["num_stable_steps"] < 0:
        out.append(f"num_stable_steps={p['num_stable_steps']} is negative")
    return out
