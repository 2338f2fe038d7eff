"""torch.optim.lr_scheduler built-ins as pure functions of ``last_epoch``.

One scheduler's rule, replayed (why torch's LRs are replayed, not taken from
textbook formulas), is :mod:`lrdoctor.schedules.torch_steps`; this module is the
family: ``lr_at``, the composites, where the decay ends, ``problems``.

ScheduleSpec mapping (family ``"torch"``; readers rely on it):

- ``kind``    = class name: "LinearLR", "CosineAnnealingLR", "OneCycleLR",
  "SequentialLR", "ChainedScheduler", "StepLR", "MultiStepLR", "ExponentialLR",
  "ConstantLR", "PolynomialLR", "CosineAnnealingWarmRestarts", "CyclicLR" (its
  closed form; ``base_lrs``/``max_lrs`` read from params; a custom ``scale_fn`` is code,
  a ValueError). ReduceLROnPlateau follows a metric: no model of progress, no horizon
  (the reader says so and builds no spec).
- ``max_lr``  = the param group's ``initial_lr`` (= ``base_lrs[0]``);
  ``base_lrs`` inside params is not read.
- ``horizon`` = ``total_iters`` / ``T_max`` / ``total_steps`` (used only when
  params lack the field)
- ``params``  = the scheduler's ``state_dict()`` verbatim. SequentialLR:
  ``_milestones`` and ``_schedulers`` = child state dicts, each with an added
  ``"kind"`` = child class name (or a parallel ``_scheduler_kinds`` list); a
  LambdaLR child before the last milestone leaves its segment unknown (ValueError),
  the rest exact. ChainedScheduler: ``_schedulers`` alike, every child chainable.
- OneCycleLR keeps its LRs in the param group, not the state dict, so there
  ``max_lr`` = the group's peak ``max_lr``, ``init_lr`` = the group's
  ``initial_lr`` (= ``base_lrs[0]``) and ``min_lr`` = the group's ``min_lr``;
  params ``initial_lr`` / ``max_lr`` / ``min_lr`` win when present, and
  missing ones are rebuilt from ``div_factor`` / ``final_div_factor``
  (default 25 / 1e4).
- progress    = ``last_epoch`` (= calls to ``step()``); fractions are floored.
  OneCycleLR past ``total_steps`` (torch raises) gives its value at
  ``total_steps``.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from typing import TYPE_CHECKING, Any

from lrdoctor.schedules import horizon_fields, torch_steps
from lrdoctor.schedules.torch_steps import (
    _advance,
    _chain_replay,
    _cyclic,
    _floor,
    _knobs,
    _one_cycle,
    _one_cycle_groups,
    _start,
    _View,
    _warm_restarts,
)

if TYPE_CHECKING:
    from lrdoctor.core.state import ScheduleSpec

KINDS = ("LinearLR", "CosineAnnealingLR", "OneCycleLR", "SequentialLR", "StepLR",
         "MultiStepLR", "ExponentialLR", "ConstantLR", "PolynomialLR",
         "CosineAnnealingWarmRestarts", "ChainedScheduler", "CyclicLR")
CHAINABLE = ("LinearLR", "CosineAnnealingLR", "StepLR", "MultiStepLR", "ExponentialLR",
             "ConstantLR", "PolynomialLR")
HORIZON_FIELD = horizon_fields.TORCH  # class -> its horizon field (the one table)
#: State-dict fields that move with the position, not the shape: every LRScheduler's
#: bookkeeping, and CosineAnnealingWarmRestarts' ``T_cur`` / ``T_i`` (the epoch inside the
#: current cycle and that cycle's length, both functions of the epoch and ``T_0``/``T_mult``).
#: Two checkpoints of one schedule differ in these and only these.
POSITION_FIELDS = ("last_epoch", "_step_count", "_last_lr", "_is_initial",
                   "_get_lr_called_within_step", "T_cur", "T_i")


def lr_at(spec: ScheduleSpec, progress: float) -> float:
    """LR after ``progress`` calls to ``step()`` on a freshly built scheduler."""
    if spec.kind == "CosineAnnealingWarmRestarts":  # a closed form of (fractional) epochs
        return _warm_restarts(_spec_view(spec), max(0.0, float(progress)))
    k = max(0, int(math.floor(progress)))
    if spec.kind == "SequentialLR":
        return _sequential(spec, k)
    if spec.kind == "ChainedScheduler":
        return _chained(spec, k)
    view = _spec_view(spec)
    if spec.kind == "CyclicLR":
        return _cyclic(view, k)
    if spec.kind == "OneCycleLR":
        return _one_cycle(view, k)
    if spec.kind in CHAINABLE:
        return _advance(view, _start(view, closed=False), k)
    raise ValueError(f"torch scheduler {spec.kind!r} is not supported")


def with_horizon(spec: ScheduleSpec, horizon: float) -> ScheduleSpec:
    """``spec`` with its horizon field (``T_max``, ``total_iters``) set to ``horizon``.

    The field is the state-dict key itself, so the moved schedule is what the rewritten
    scheduler state computes. OneCycleLR and SequentialLR precompute or nest theirs:
    a ValueError (the repair refuses them).
    """
    from dataclasses import replace

    name = HORIZON_FIELD.get(spec.kind)
    if name is None or spec.kind == "OneCycleLR":
        raise ValueError(f"torch {spec.kind} has no horizon field that can be moved")
    params = dict(spec.params)
    params[name] = int(horizon) if float(horizon).is_integer() else horizon
    return replace(spec, horizon=float(horizon), params=params)


def _spec_view(spec: ScheduleSpec) -> _View:
    return _View(spec.kind, spec.params, spec.max_lr, spec.horizon, spec.init_lr, spec.min_lr)


def _children(spec: ScheduleSpec) -> list[_View]:
    kinds = list(spec.params.get("_scheduler_kinds") or [])
    out = []
    for i, child in enumerate(spec.params.get("_schedulers") or []):
        kind = child.get("kind") or (kinds[i] if i < len(kinds) else "")
        out.append(_View(kind, child, spec.max_lr, None))
    return out


#: Children whose rule is code torch does not save (LambdaLR, MultiplicativeLR: the
#: reader names both "LambdaLR"). Inside a SequentialLR such a child is a segment whose LR is
#: unknown, while every later child starts from its own closed form at 0 (base LRs), so the
#: schedule past it, its horizon and its floor are still exact.
UNSAVED_RULE = ("LambdaLR", "MultiplicativeLR")


def _sequential(spec: ScheduleSpec, k: int) -> float:
    milestones = list(spec.params.get("_milestones", []))
    idx = bisect_right(milestones, k)
    view = _children(spec)[idx]
    local = k - milestones[idx - 1] if idx > 0 else k
    if view.kind in UNSAVED_RULE:
        end = milestones[idx] if idx < len(milestones) else None
        raise ValueError(f"SequentialLR child {idx} ({view.kind}) does not save its lambda: "
                         f"the LR before milestone {end} is unknown")
    if view.kind == "OneCycleLR":
        return _one_cycle(view, local)
    if view.kind not in CHAINABLE:
        raise ValueError(f"torch SequentialLR child {view.kind!r} is not supported")
    # Child 0 starts with its constructor step; later children enter through
    # ``_update_lr(0)``, i.e. their closed form at epoch 0.
    return _advance(view, _start(view, closed=idx > 0), local)


def _chained(spec: ScheduleSpec, k: int) -> float:
    """ChainedScheduler: every child steps the same param-group LR in turn, each with its
    chainable (recursive) rule, from the LR the children's constructors left. Replayed
    operation for operation up to ``torch_steps.EXACT_STEPS``; beyond, children whose rule is a pure
    factor (all but CosineAnnealingLR) telescope to the product of their own schedules."""
    children = _children(spec)
    if not children or any(c.kind not in CHAINABLE for c in children):
        bad = ", ".join(c.kind or "?" for c in children if c.kind not in CHAINABLE)
        raise ValueError(f"torch ChainedScheduler of {bad or 'no schedulers'} is not modelled")
    if k > torch_steps.EXACT_STEPS and all(c.kind != "CosineAnnealingLR" for c in children):
        lr = spec.max_lr
        for c in children:
            lr = lr * (_advance(c, _start(c, closed=False), k) / c.base) if c.base else lr
        return lr
    if k * len(children) > torch_steps.MAX_REPLAY:
        raise ValueError("too many ChainedScheduler steps to replay")
    key = tuple((c.kind, c.base, _knobs(c)) for c in children)
    try:
        return _chain_replay(key, spec.max_lr, k)
    except TypeError:  # a knob saved as something unhashable: replay uncached
        return _chain_replay.__wrapped__(key, spec.max_lr, k)


def chained_floor(params: dict[str, Any]) -> tuple[float | None, int | None]:
    """A ChainedScheduler's decay horizon (where its product floors, None: never) and the
    child whose horizon field holds it, from its ``params`` (the reader's shape)."""
    from lrdoctor.core.state import ScheduleSpec, Unit

    spec = ScheduleSpec("torch", "ChainedScheduler", 1.0, Unit.UPDATES, params=params)
    end = floor_progress(spec)
    if end is None:
        return None, None
    by = next((i for i, c in enumerate(_children(spec)) if _floor(c) == end), None)
    return end, by


def floor_progress(spec: ScheduleSpec) -> float | None:
    """Progress where the LR first reaches its lowest value for good (None: never)."""
    if spec.kind == "ChainedScheduler":
        # The product floors where its last decaying child does; a child that keeps
        # decaying (ExponentialLR, StepLR) leaves none; a warmup or a constant factor that
        # settles (LinearLR up, ConstantLR) sets no floor of its own.
        children = _children(spec)
        if any(c.kind in ("ExponentialLR", "StepLR") for c in children):
            return None
        floors = [f for f in (_floor(c) for c in children) if f is not None]
        return float(max(floors)) if floors else None
    if spec.kind == "SequentialLR":
        children = _children(spec)
        milestones = list(spec.params.get("_milestones", []))
        if not children:
            return None
        sub = _floor(children[-1])
        if sub is None:
            return None
        return float(sub + (milestones[-1] if milestones else 0))
    return _floor(_spec_view(spec))


def wraps(spec: ScheduleSpec) -> bool:
    """Whether the LR climbs again past the decay's end: CosineAnnealingLR past ``T_max``
    (torch's restart branch), warm restarts, and a composite whose decaying part is one."""
    if spec.kind in ("CosineAnnealingLR", "CosineAnnealingWarmRestarts", "CyclicLR"):
        return True
    if spec.kind == "SequentialLR":
        children = _children(spec)
        return bool(children) and children[-1].kind == "CosineAnnealingLR"
    if spec.kind == "ChainedScheduler":
        return any(c.kind == "CosineAnnealingLR" for c in _children(spec))
    return False


def problems(spec: ScheduleSpec) -> list[str]:
    """Settings torch refuses, or that make the schedule meaningless."""
    out = [f"initial_lr={spec.max_lr} is negative"] if spec.max_lr < 0 else []
    if spec.kind == "SequentialLR":
        return out + _sequential_problems(spec)
    if spec.kind == "ChainedScheduler":
        children = _children(spec)
        if not children:
            return out + ["ChainedScheduler has no _schedulers"]
        for i, child in enumerate(children):
            if child.kind not in CHAINABLE:
                out.append(f"_schedulers[{i}] ({child.kind}): not chainable, ChainedScheduler "
                           "cannot step it")
                continue
            out += [f"_schedulers[{i}] ({child.kind}): {line}" for line in _problems(child)]
        return out
    return out + _problems(_spec_view(spec))


def _sequential_problems(spec: ScheduleSpec) -> list[str]:
    milestones = list(spec.params.get("_milestones", []))
    children = _children(spec)
    out: list[str] = []
    if not children:
        return ["SequentialLR has no _schedulers"]
    if len(milestones) != len(children) - 1:
        out.append(f"SequentialLR has {len(children)} _schedulers but {len(milestones)} "
                   f"_milestones (needs {len(children) - 1})")
    if any(b <= a for a, b in zip(milestones, milestones[1:], strict=False)) or any(m <= 0 for m in milestones):
        out.append(f"SequentialLR _milestones={milestones} are not positive and increasing")
    for i, child in enumerate(children):
        if child.kind in UNSAVED_RULE and i < len(children) - 1:
            continue  # its segment's LR is unknown, the rest of the schedule is not
        field = HORIZON_FIELD.get(child.kind)
        h = _number(child.p.get(field)) if field else None
        start = milestones[i - 1] if 0 < i <= len(milestones) else None
        if h is not None and h <= 0 and start is not None:
            # total - warmup with a warmup longer than the run (SequentialLR's usual build)
            out.append(f"_schedulers[{i}] ({child.kind}) {field}={h:g} is not positive: it "
                       f"starts at milestone {start:g} (the warmup), so the schedule was "
                       f"sized for {start + h:g} steps in all, fewer than the warmup "
                       f"{start:g} itself: the warmup is longer than the run")
            continue
        for line in _problems(child):
            out.append(f"_schedulers[{i}] ({child.kind}): {line}")
    return out


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _problems(v: _View) -> list[str]:
    if v.kind in ("LambdaLR", "MultiplicativeLR"):
        return [f"{v.kind} does not save its lambda: its schedule cannot be rebuilt"]
    if v.kind not in KINDS or v.kind in ("SequentialLR", "ChainedScheduler"):
        return [f"torch scheduler kind={v.kind!r} is not one of {', '.join(KINDS)}"]
    out: list[str] = []
    try:
        _kind_problems(v, out)
    except ValueError as exc:
        out.append(str(exc))
    return out


def _kind_problems(v: _View, out: list[str]) -> None:
    kind = v.kind
    horizon = HORIZON_FIELD.get(kind)
    if horizon and v[horizon] <= 0:
        out.append(f"{kind} {horizon}={v[horizon]} is not positive")
    if kind == "LinearLR":
        if not 0 < v["start_factor"] <= 1:
            out.append(f"LinearLR start_factor={v['start_factor']} is outside (0, 1]")
        if not 0 <= v["end_factor"] <= 1:
            out.append(f"LinearLR end_factor={v['end_factor']} is outside [0, 1]")
    elif kind == "ConstantLR":
        if not 0 <= v["factor"] <= 1:
            out.append(f"ConstantLR factor={v['factor']} is outside [0, 1]")
    elif kind == "CosineAnnealingLR":
        if v["eta_min"] < 0:
            out.append(f"CosineAnnealingLR eta_min={v['eta_min']} is negative")
        if v["eta_min"] > v.base:
            out.append(f"CosineAnnealingLR eta_min={v['eta_min']} exceeds initial_lr={v.base}")
    elif kind == "CosineAnnealingWarmRestarts":
        if v["T_0"] <= 0 or not float(v["T_0"]).is_integer():
            out.append(f"CosineAnnealingWarmRestarts T_0={v['T_0']} is not a positive integer")
        if v["T_mult"] < 1 or not float(v["T_mult"]).is_integer():
            out.append(f"CosineAnnealingWarmRestarts T_mult={v['T_mult']} is not an integer >= 1")
    elif kind == "CyclicLR":
        if v.p.get("_scale_fn_custom") is not None:
            out.append("CyclicLR's custom scale_fn is code and is not saved: its schedule "
                       "cannot be rebuilt")
        if v["total_size"] <= 0 or not 0 < v["step_ratio"] < 1:
            out.append(f"CyclicLR total_size={v['total_size']} step_ratio={v['step_ratio']} "
                       "do not make a cycle")
    elif kind == "StepLR":
        if v["step_size"] <= 0:
            out.append(f"StepLR step_size={v['step_size']} is not positive")
    elif kind == "OneCycleLR":
        g = _one_cycle_groups(v)
        if g["max_lr"] < g["initial_lr"] or g["min_lr"] > g["initial_lr"]:
            out.append(f"OneCycleLR min_lr={g['min_lr']} <= initial_lr={g['initial_lr']} "
                       f"<= max_lr={g['max_lr']} does not hold")
        strategy = v.p.get("_anneal_func_type") or v["anneal_strategy"]
        if strategy not in ("cos", "linear"):
            out.append(f"OneCycleLR anneal_strategy={strategy!r} is not 'cos' or 'linear'")
        pct = v.p.get("pct_start")
        if pct is not None and not 0 <= pct <= 1:
            out.append(f"OneCycleLR pct_start={pct} is outside [0, 1]")
    if kind in ("StepLR", "MultiStepLR", "ExponentialLR") and v["gamma"] < 0:
        out.append(f"{kind} gamma={v['gamma']} is negative")
