"""torch.optim.lr_scheduler built-ins as pure functions of ``last_epoch``.

Why not closed forms everywhere: torch's chainable schedulers (LinearLR,
CosineAnnealingLR, ...) compute each LR from the *previous* ``group["lr"]``,
so the value after n ``step()`` calls differs in the last bits from the
textbook formula, and CosineAnnealingLR past ``T_max`` climbs back up through
a special restart branch. We therefore replay the recursion operation for
operation (bit-identical) for up to ``EXACT_STEPS`` steps, and beyond that
use a telescoped form of the same recursion: the ``1 + cos(...)`` factors of
consecutive CosineAnnealingLR steps are identical floats and cancel exactly,
so only per-step rounding (about sqrt(n) * 1e-16 relative) separates it from
the real class; each restart branch is applied explicitly. Repeated gamma
products (ExponentialLR, StepLR) are replayed up to ``EXACT_POW_STEPS``
multiplications, then taken as ``gamma ** m`` (measured: 3.5e-14 relative
worst over 3e5 steps). MultiStepLR and ConstantLR are always exact.

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
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from lrdoctor.schedules import horizon_fields

if TYPE_CHECKING:
    from lrdoctor.core.state import ScheduleSpec

KINDS = ("LinearLR", "CosineAnnealingLR", "OneCycleLR", "SequentialLR", "StepLR",
         "MultiStepLR", "ExponentialLR", "ConstantLR", "PolynomialLR",
         "CosineAnnealingWarmRestarts", "ChainedScheduler", "CyclicLR")
CHAINABLE = ("LinearLR", "CosineAnnealingLR", "StepLR", "MultiStepLR", "ExponentialLR",
             "ConstantLR", "PolynomialLR")
HORIZON_FIELD = horizon_fields.TORCH  # class -> its horizon field (the one table)
DEFAULTS: dict[str, dict[str, Any]] = {
    "LinearLR": {"start_factor": 1.0 / 3, "end_factor": 1.0, "total_iters": 5},
    "ConstantLR": {"factor": 1.0 / 3, "total_iters": 5},
    "PolynomialLR": {"total_iters": 5, "power": 1.0},
    "CosineAnnealingLR": {"eta_min": 0.0},
    "StepLR": {"gamma": 0.1},
    "MultiStepLR": {"gamma": 0.1},
    "CosineAnnealingWarmRestarts": {"T_mult": 1, "eta_min": 0.0},
    "OneCycleLR": {"pct_start": 0.3, "anneal_strategy": "cos", "div_factor": 25.0,
                   "final_div_factor": 1e4, "three_phase": False},
    "CyclicLR": {"mode": "triangular", "gamma": 1.0, "scale_mode": "cycle"},
}
#: State-dict fields that move with the position, not the shape: every LRScheduler's
#: bookkeeping, and CosineAnnealingWarmRestarts' ``T_cur`` / ``T_i`` (the epoch inside the
#: current cycle and that cycle's length, both functions of the epoch and ``T_0``/``T_mult``).
#: Two checkpoints of one schedule differ in these and only these.
POSITION_FIELDS = ("last_epoch", "_step_count", "_last_lr", "_is_initial",
                   "_get_lr_called_within_step", "T_cur", "T_i")
EXACT_STEPS = 2000
EXACT_POW_STEPS = 5000


class _View:
    """One scheduler's knobs: state-dict fields, then horizon, then torch defaults."""

    def __init__(self, kind: str, params: dict[str, Any], base: float,
                 horizon: float | None, init_lr: float = 0.0, min_lr: float = 0.0) -> None:
        self.kind, self.p, self.base, self.horizon = kind, params, base, horizon
        self.init_lr, self.min_lr = init_lr, min_lr

    def __getitem__(self, name: str) -> Any:
        if self.p.get(name) is not None:
            return self.p[name]
        if HORIZON_FIELD.get(self.kind) == name and self.horizon is not None:
            return self.horizon
        if name in DEFAULTS.get(self.kind, {}):
            return DEFAULTS[self.kind][name]
        raise ValueError(f"torch {self.kind} needs {name!r} in params")

    def milestones(self) -> dict[int, int]:
        ms = self.p.get("milestones", {})
        if isinstance(ms, dict):
            return {int(k): int(v) for k, v in ms.items()}
        out: dict[int, int] = {}
        for m in ms:
            out[int(m)] = out.get(int(m), 0) + 1
        return out


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


def _warm_restarts(v: _View, epoch: float) -> float:
    """CosineAnnealingWarmRestarts at ``epoch``: torch's ``step(epoch)`` arithmetic (the
    same T_cur/T_i the per-call ``T_cur += 1`` reaches at whole epochs), then its
    closed-form ``get_lr``. ``epoch`` may be fractional (``step(epoch + i / iters)``)."""
    t0, mult, eta = v["T_0"], v["T_mult"], v["eta_min"]
    if epoch >= t0:
        if mult == 1:
            t_cur, t_i = epoch % t0, t0
        else:
            n = int(math.log(epoch / t0 * (mult - 1) + 1, mult))
            t_cur = epoch - t0 * (mult ** n - 1) / (mult - 1)
            t_i = t0 * mult ** n
    else:
        t_cur, t_i = epoch, t0
    return eta + (v.base - eta) * (1 + math.cos(math.pi * t_cur / t_i)) / 2


def _cyclic(v: _View, k: int) -> float:
    """CyclicLR's closed form at ``last_epoch == k`` (torch's ``get_lr``, operation for
    operation): a triangle between ``base_lrs`` and ``max_lrs`` over ``total_size`` steps,
    its height scaled per cycle (triangular2: halved) or per step (exp_range: gamma^k)."""
    if v.p.get("_scale_fn_custom") is not None:
        raise ValueError("CyclicLR with a custom scale_fn: the function is not saved")
    total, ratio = v["total_size"], v["step_ratio"]
    base = _scalar(v.p.get("base_lrs"))
    base = float(base) if isinstance(base, (int, float)) else v.min_lr
    peak = _scalar(v.p.get("max_lrs"))
    peak = float(peak) if isinstance(peak, (int, float)) else v.base
    cycle = math.floor(1 + k / total)
    x = 1.0 + k / total - cycle
    scale_factor = x / ratio if x <= ratio else (x - 1) / (ratio - 1)
    height = (peak - base) * scale_factor
    mode = v["mode"]
    at = cycle if v["scale_mode"] == "cycle" else k
    if mode == "triangular":
        scale = 1.0
    elif mode == "triangular2":
        scale = 1 / (2.0 ** (at - 1))
    elif mode == "exp_range":
        scale = v["gamma"] ** at
    else:
        raise ValueError(f"CyclicLR mode={mode!r} is not triangular, triangular2 or exp_range")
    return base + height * scale


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
    operation for operation up to ``EXACT_STEPS``; beyond, children whose rule is a pure
    factor (all but CosineAnnealingLR) telescope to the product of their own schedules."""
    children = _children(spec)
    if not children or any(c.kind not in CHAINABLE for c in children):
        bad = ", ".join(c.kind or "?" for c in children if c.kind not in CHAINABLE)
        raise ValueError(f"torch ChainedScheduler of {bad or 'no schedulers'} is not modelled")
    if k > EXACT_STEPS and all(c.kind != "CosineAnnealingLR" for c in children):
        lr = spec.max_lr
        for c in children:
            lr = lr * (_advance(c, _start(c, closed=False), k) / c.base) if c.base else lr
        return lr
    if k * len(children) > MAX_REPLAY:
        raise ValueError("too many ChainedScheduler steps to replay")
    key = tuple((c.kind, c.base, _knobs(c)) for c in children)
    try:
        return _chain_replay(key, spec.max_lr, k)
    except TypeError:  # a knob saved as something unhashable: replay uncached
        return _chain_replay.__wrapped__(key, spec.max_lr, k)


def _knobs(v: _View) -> tuple[tuple[str, Any], ...]:
    """The knobs a child's rules read, as a hashable key (a cached replay's)."""
    out = tuple((name, v[name]) for name in _STEP_KNOBS.get(v.kind, ()))
    if v.kind == "MultiStepLR":
        out += (("milestones", tuple(sorted(v.milestones().items()))),)
    return out


def _unkey(knobs: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """:func:`_knobs` back into state-dict fields."""
    p = dict(knobs)
    if isinstance(p.get("milestones"), tuple):
        p["milestones"] = dict(p["milestones"])
    return p


@lru_cache(maxsize=256)
def _chain_replay(children: tuple[tuple[str, float, tuple[tuple[str, Any], ...]], ...],
                  lr: float, k: int) -> float:
    """ChainedScheduler's LR after ``k`` steps, replayed operation for operation (pure in
    its arguments, so cached like :func:`_replay`)."""
    views = [_View(kind, _unkey(knobs), base, None) for kind, base, knobs in children]
    for c in views:  # the constructors' step to last_epoch 0, on the LR as it is
        lr = _chain_start(c, lr)
    steps = [_chain_stepper(c) for c in views]
    for i in range(1, k + 1):
        for step in steps:
            lr = step(i, lr)
    return lr


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


def _chain_start(v: _View, lr: float) -> float:
    """A chainable child's constructor step (last_epoch 0) applied to the current LR."""
    if v.kind == "LinearLR":
        return lr * v["start_factor"]
    if v.kind == "ConstantLR":
        return lr * v["factor"]
    if v.kind == "MultiStepLR":
        ms = v.milestones()
        return lr * v["gamma"] ** ms[0] if 0 in ms else lr
    return lr


def _chain_stepper(v: _View) -> Callable[[int, float], float]:
    """A chainable child's ``get_lr`` at last_epoch ``k >= 1`` from the current LR."""
    kind = v.kind
    if kind == "StepLR":
        size, gamma = v["step_size"], v["gamma"]
        return lambda k, lr: lr * gamma if k % size == 0 else lr
    if kind == "MultiStepLR":
        ms, gamma = v.milestones(), v["gamma"]
        return lambda k, lr: lr * gamma ** ms[k] if k in ms else lr
    if kind == "ConstantLR":
        total, factor = v["total_iters"], v["factor"]
        return lambda k, lr: lr * (1.0 / factor) if k == total else lr
    return _stepper(v)


def _start(v: _View, closed: bool) -> float:
    """group["lr"] at last_epoch 0 (constructor step, or closed form in SequentialLR)."""
    b, kind = v.base, v.kind
    if kind == "LinearLR":
        if closed:
            t = v["total_iters"]
            sf, ef = v["start_factor"], v["end_factor"]
            return b * (sf + (ef - sf) * min(t, 0) / t)
        return b * v["start_factor"]
    if kind == "ConstantLR":
        if closed:
            f = v["factor"]
            return b * (f + (0 >= v["total_iters"]) * (1 - f))
        return b * v["factor"]
    if kind == "MultiStepLR":
        ms = v.milestones()
        if closed:
            return b * v["gamma"] ** bisect_right(sorted(_elements(ms)), 0)
        return b * v["gamma"] ** ms[0] if 0 in ms else b
    if kind in ("StepLR", "ExponentialLR"):
        return b * v["gamma"] ** 0 if closed else b
    if kind == "PolynomialLR":
        return b * (1.0 - min(v["total_iters"], 0) / v["total_iters"]) ** v["power"] if closed else b
    if kind == "CosineAnnealingLR":
        eta = v["eta_min"]
        return eta + (b - eta) * (1 + math.cos(math.pi * 0 / v["T_max"])) / 2 if closed else b
    raise ValueError(f"torch scheduler {kind!r} is not supported")


MAX_REPLAY = 1_000_000  # loop iterations one LR evaluation may take (saved state is untrusted)


def _elements(ms: dict[int, int]) -> list[int]:
    if sum(c for c in ms.values() if isinstance(c, int)) > MAX_REPLAY:
        raise ValueError("milestone counts too large to replay")
    return [m for m, c in ms.items() for _ in range(c)]


def _stepper(v: _View) -> Callable[[int, float], float]:
    """One chainable ``get_lr`` at new ``last_epoch == k >= 1`` from ``group["lr"] == lr``,
    with the scheduler's knobs read once (a replay calls it per step): torch's float
    operations, in torch's order."""
    kind = v.kind
    if kind == "LinearLR":
        t, sf, ef = v["total_iters"], v["start_factor"], v["end_factor"]

        def linear(k: int, lr: float) -> float:
            if k > t:
                return lr
            return lr * (1.0 + (ef - sf) / (t * sf + (k - 1) * (ef - sf)))
        return linear
    if kind == "CosineAnnealingLR":
        t, eta, base = v["T_max"], v["eta_min"], v.base
        cos, pi = math.cos, math.pi

        def cosine(k: int, lr: float) -> float:
            if (k - 1 - t) % (2 * t) == 0:
                return lr + (base - eta) * (1 - cos(pi / t)) / 2
            return (1 + cos(pi * k / t)) / (1 + cos(pi * (k - 1) / t)) * (lr - eta) + eta
        return cosine
    if kind == "ExponentialLR":
        gamma = v["gamma"]
        return lambda k, lr: lr * gamma
    if kind == "PolynomialLR":
        tp, power = v["total_iters"], v["power"]

        def poly(k: int, lr: float) -> float:
            if k > tp:
                return lr
            return lr * ((1.0 - k / tp) / (1.0 - (k - 1) / tp)) ** power
        return poly
    raise ValueError(f"torch scheduler {kind!r} has no per-step rule here")


def _advance(v: _View, lr0: float, k: int) -> float:
    """group["lr"] after the scheduler moves from last_epoch 0 to ``k``."""
    kind = v.kind
    if k == 0:
        return lr0
    if kind == "StepLR":
        step, gamma = v["step_size"], v["gamma"]
        if k // step > EXACT_POW_STEPS:
            return lr0 * gamma ** (k // step)
        lr = lr0
        for _ in range(k // step):
            lr = lr * gamma
        return lr
    if kind == "MultiStepLR":
        gamma, lr = v["gamma"], lr0
        for m, count in sorted(v.milestones().items()):
            if 1 <= m <= k:
                lr = lr * gamma ** count
        return lr
    if kind == "ConstantLR":
        t = v["total_iters"]
        return lr0 * (1.0 / v["factor"]) if 1 <= t <= k else lr0
    if kind == "ExponentialLR" and k <= EXACT_POW_STEPS:
        lr, gamma = lr0, v["gamma"]
        for _ in range(k):
            lr = lr * gamma
        return lr
    if kind in ("LinearLR", "PolynomialLR"):
        k = min(k, max(int(v["total_iters"]), 0))  # flat past total_iters
        if k == 0:
            return lr0
    if k <= EXACT_STEPS:
        knobs = _knobs(v)
        try:
            return _replay(kind, knobs, v.base, lr0, k)
        except TypeError:  # a knob saved as something unhashable: replay uncached
            return _replay.__wrapped__(kind, knobs, v.base, lr0, k)
    return _jump(v, lr0, k)


#: The knobs each per-step rule reads (the key of a cached replay).
_STEP_KNOBS: dict[str, tuple[str, ...]] = {
    "LinearLR": ("total_iters", "start_factor", "end_factor"),
    "CosineAnnealingLR": ("T_max", "eta_min"),
    "ExponentialLR": ("gamma",),
    "PolynomialLR": ("total_iters", "power"),
    "StepLR": ("step_size", "gamma"),
    "MultiStepLR": ("gamma",),
    "ConstantLR": ("total_iters", "factor"),
}


@lru_cache(maxsize=512)
def _replay(kind: str, knobs: tuple[tuple[str, Any], ...], base: float, lr0: float,
            k: int) -> float:
    """group["lr"] after ``k`` chainable steps from ``lr0``, replayed operation for
    operation. Pure in its arguments, so cached: the rules ask one schedule at a handful
    of positions, each a replay of up to ``EXACT_STEPS`` steps."""
    lr, step = lr0, _stepper(_View(kind, _unkey(knobs), base, None))
    for i in range(1, k + 1):
        lr = step(i, lr)
    return lr


def _jump(v: _View, lr0: float, k: int) -> float:
    """Telescoped recursion for many steps (see module docstring)."""
    kind = v.kind
    if kind == "ExponentialLR":
        return lr0 * v["gamma"] ** k
    if kind == "LinearLR":
        t, sf, ef = v["total_iters"], v["start_factor"], v["end_factor"]
        return lr0 * ((t * sf + k * (ef - sf)) / (t * sf))
    if kind == "PolynomialLR":
        return lr0 * (1.0 - k / v["total_iters"]) ** v["power"]
    # CosineAnnealingLR: closed segments between restart-branch steps.
    t, eta, b = v["T_max"], v["eta_min"], v.base

    def c(x: int) -> float:
        return 1 + math.cos(math.pi * x / t)

    seg, lr = 0, lr0
    restart = t + 1
    if k > restart and (k - restart) / (2 * t) > MAX_REPLAY:
        raise ValueError("too many CosineAnnealingLR restarts to replay")
    while restart <= k:
        before = eta + (lr - eta) * (c(restart - 1) / c(seg))
        lr = before + (b - eta) * (1 - math.cos(math.pi / t)) / 2
        seg, restart = restart, restart + 2 * t
    if k == seg:
        return lr
    return eta + (lr - eta) * (c(k) / c(seg))


def _scalar(value: Any) -> Any:
    return value[0] if isinstance(value, (list, tuple)) and value else value


def _one_cycle_groups(v: _View) -> dict[str, float]:
    peak = _scalar(v.p.get("max_lr")) or v.base
    init = _scalar(v.p.get("initial_lr")) or v.init_lr or peak / v["div_factor"]
    floor = _scalar(v.p.get("min_lr")) or v.min_lr or init / v["final_div_factor"]
    return {"initial_lr": init, "max_lr": peak, "min_lr": floor}


def _one_cycle_phases(v: _View) -> list[tuple[float, str, str]]:
    phases = v.p.get("_schedule_phases")
    if phases:
        return [(ph["end_step"], ph["start_lr"], ph["end_lr"]) for ph in phases]
    total, pct = v["total_steps"], v["pct_start"]
    if v["three_phase"]:
        return [(float(pct * total) - 1, "initial_lr", "max_lr"),
                (float(2 * pct * total) - 2, "max_lr", "initial_lr"),
                (total - 1, "initial_lr", "min_lr")]
    return [(float(pct * total) - 1, "initial_lr", "max_lr"),
            (total - 1, "max_lr", "min_lr")]


def _one_cycle(v: _View, k: int) -> float:
    k = min(k, v["total_steps"])
    groups = _one_cycle_groups(v)
    phases = _one_cycle_phases(v)
    strategy = v.p.get("_anneal_func_type") or v["anneal_strategy"]
    start_step = 0.0
    for i, (end_step, start_key, end_key) in enumerate(phases):
        if k <= end_step or i == len(phases) - 1:
            pct = (k - start_step) / (end_step - start_step)
            start, end = groups[start_key], groups[end_key]
            if strategy == "cos":
                return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
            return (end - start) * pct + start
        start_step = end_step
    raise AssertionError("unreachable: the last phase always matches")


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


def _floor(v: _View) -> float | None:
    try:
        if v.kind == "LinearLR":
            return float(v["total_iters"]) if v["end_factor"] < v["start_factor"] else None
        if v.kind == "PolynomialLR":
            return float(v["total_iters"])
        if v.kind == "CosineAnnealingLR":
            return float(v["T_max"])  # torch climbs back up after T_max
        if v.kind == "OneCycleLR":
            return float(v["total_steps"] - 1)
        if v.kind == "MultiStepLR":
            ms = [m for m in v.milestones() if m >= 1]
            return float(max(ms)) if ms and v["gamma"] < 1 else None
    except ValueError:
        return None
    return None


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
