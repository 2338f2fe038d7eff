"""One torch scheduler's rule, replayed: the chainable recursions (LinearLR,
CosineAnnealingLR, ...) step by step, the closed forms (OneCycleLR, CyclicLR,
CosineAnnealingWarmRestarts), each child's step inside a ChainedScheduler, and where a
single scheduler floors. :mod:`lrdoctor.schedules.torch_builtin` is the family (``lr_at``,
the composites, ``problems``) built on these.

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
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Callable
from functools import lru_cache
from typing import Any

from lrdoctor.schedules.horizon_fields import TORCH as HORIZON_FIELD

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
