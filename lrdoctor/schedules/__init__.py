"""Learning-rate schedules as pure functions of progress.

Each family module reproduces its framework's implementation exactly (tests
compare against the real classes to 1e-12 relative). No torch import here.
Every family module exposes ``lr_at(spec, progress)``, ``problems(spec)`` and
``floor_progress(spec)``; the field mapping of each family is in its docstring.
:func:`shape` answers, for any family, where the decay ends, where the floor comes and
whether the schedule wraps (climbs again past its end).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from types import ModuleType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lrdoctor.core.state import ScheduleSpec

FAMILIES = ("megatron", "hf", "torch", "deepspeed", "timm", "torchtitan", "onevision",
            "cyclical")


def _family(spec: ScheduleSpec) -> ModuleType:
    """The family module of ``spec``: the one lookup (the replay engine asks here too).
    Only that family is imported: ``inspect`` of one HF run never loads the other six."""
    match spec.family:
        case "megatron":
            from lrdoctor.schedules import megatron

            return megatron
        case "hf":
            from lrdoctor.schedules import hf

            return hf
        case "torch":
            from lrdoctor.schedules import torch_builtin

            return torch_builtin
        case "deepspeed":
            from lrdoctor.schedules import deepspeed

            return deepspeed
        case "timm":
            from lrdoctor.schedules import timm

            return timm
        case "torchtitan":
            from lrdoctor.schedules import torchtitan

            return torchtitan
        case "onevision":
            from lrdoctor.schedules import onevision

            return onevision
        case "cyclical":
            from lrdoctor.schedules import cyclical

            return cyclical
        case _:
            raise ValueError(f"unknown schedule family {spec.family!r}")


def lr_function(spec: ScheduleSpec) -> Callable[[ScheduleSpec, float], float]:
    """The family's own ``lr_at``, resolved once (for a loop over many progress values;
    :func:`lr_at` resolves per call and turns bad parameters into ValueError)."""
    fn: Callable[[ScheduleSpec, float], float] = _family(spec).lr_at
    return fn


def lr_many(spec: ScheduleSpec, progress: Any) -> Any:
    """The LR at each of many progress values (a numpy array in, one out): the family's
    vectorised ``lr_array`` where it has one (a recursive schedule's table, millions of
    steps), else its ``lr_at`` per value. The replay asks here for every distinct progress
    of a run."""
    import numpy as np

    fam = _family(spec)
    vec = getattr(fam, "lr_array", None)
    if vec is not None:
        return np.asarray(vec(spec, progress), dtype=np.float64)
    fn = fam.lr_at
    return np.array([fn(spec, float(p)) for p in progress], dtype=np.float64)


# What saved parameters of the wrong type or size raise inside a family's arithmetic.
_BAD_PARAMS = (TypeError, KeyError, IndexError, AttributeError, RecursionError)


def _unusable(spec: ScheduleSpec, exc: BaseException) -> ValueError:
    detail = (str(exc).splitlines() or [""])[0][:120]
    return ValueError(f"{spec.source or spec.family}: schedule parameters as saved cannot be "
                      f"evaluated ({type(exc).__name__}: {detail})")


def lr_at(spec: ScheduleSpec, progress: float) -> float:
    """LR the schedule gives at ``progress`` (in ``spec.unit``).

    Parameters come from untrusted files: a value of the wrong type is a ValueError
    (which every caller treats as "LR unknown"), never a TypeError from deep inside.
    """
    try:
        return _family(spec).lr_at(spec, progress)
    except _BAD_PARAMS as exc:
        raise _unusable(spec, exc) from None


def lr_or_none(spec: ScheduleSpec | None, progress: float) -> float | None:
    """The LR at ``progress``, or None when it cannot be known: no schedule, a setting
    the family cannot evaluate (raises), or a non-finite value. Diagnosis, the report,
    repair and the live guard all ask this way, so none of them crashes on a schedule
    it could read but not evaluate."""
    if spec is None:
        return None
    try:
        lr = float(lr_at(spec, progress))
    except (ValueError, ImportError, KeyError, ZeroDivisionError, TypeError, OverflowError):
        return None
    return lr if math.isfinite(lr) else None


def group_lr(spec: ScheduleSpec | None, progress: float, group: dict[str, Any]) -> float | None:
    """The LR one optimizer param group gets at ``progress`` (None as :func:`lr_or_none`).

    Megatron reads per-group ``max_lr``/``min_lr``; torch schedules start each group
    from its own ``initial_lr``; HF/DeepSpeed lambdas multiply each group's base LR.
    """
    if spec is None:
        return None
    if spec.family == "megatron":
        per = replace(spec, max_lr=float(group.get("max_lr", spec.max_lr)),
                      min_lr=float(group.get("min_lr", spec.min_lr)))
        return lr_or_none(per, progress)
    base = group.get("initial_lr")
    if base is None or not isinstance(base, (int, float)) or float(base) == spec.max_lr:
        return lr_or_none(spec, progress)
    if spec.family == "torch":
        return lr_or_none(replace(spec, max_lr=float(base)), progress)
    lr = lr_or_none(spec, progress)
    if lr is None or spec.max_lr == 0:
        return None
    return float(base) * lr / spec.max_lr


def repair_refused(spec: ScheduleSpec) -> str | None:
    """Why ``lrdoctor fix`` cannot rewrite the saved state of this family's scheduler (its
    module's ``REPAIR_REFUSED``), or None when it can."""
    if spec.family not in FAMILIES:
        return None
    why: str | None = getattr(_family(spec), "REPAIR_REFUSED", None)
    return why


def with_horizon(spec: ScheduleSpec, horizon: float) -> ScheduleSpec:
    """The same schedule with its decay horizon moved to ``horizon`` (``extend-horizon``).

    A family whose parameters carry the horizon themselves (torch's ``T_max`` /
    ``total_iters``, DeepSpeed's ``total_num_steps``) gets them moved too, so the LR the
    new schedule gives is the one the rewritten scheduler state computes.
    """
    moved = getattr(_family(spec), "with_horizon", None)
    if moved is not None:
        return moved(spec, horizon)
    return replace(spec, horizon=horizon)


def problems(spec: ScheduleSpec) -> list[str]:
    """One line per impossible setting (empty list: the config can run)."""
    if spec.family not in FAMILIES:
        return [f"schedule family={spec.family!r} is not one of {', '.join(FAMILIES)}"]
    try:
        return _family(spec).problems(spec)
    except (*_BAD_PARAMS, ValueError, OverflowError, ZeroDivisionError) as exc:
        return [str(_unusable(spec, exc))]


def floor_progress(spec: ScheduleSpec) -> float | None:
    """First progress from which the LR sits at its final floor (None: never)."""
    try:
        return _family(spec).floor_progress(spec)
    except (*_BAD_PARAMS, ValueError, OverflowError, ZeroDivisionError):
        return None


@dataclass(frozen=True)
class Shape:
    """What a schedule does over a run, from its model: where its decay ends (the horizon,
    None: it never ends, ExponentialLR, ReduceLROnPlateau), where the LR first reaches its
    lowest value for good and that value, and whether past the end it climbs again (torch's
    CosineAnnealingLR past ``T_max``, warm restarts, HF's cosine past its cycles): a
    scheduler run past its horizon then re-warms instead of holding the floor."""

    decay_end: float | None
    floor_at: float | None
    floor_lr: float | None
    wraps: bool


def shape(spec: ScheduleSpec) -> Shape:
    """The :class:`Shape` of ``spec``, asked of its model (the LR just past the end tells
    whether it wraps; a family may answer itself with ``wraps(spec)``)."""
    floor_at = floor_progress(spec)
    end = spec.horizon if spec.horizon is not None and spec.horizon > 0 else floor_at
    floor_lr = lr_or_none(spec, floor_at) if floor_at is not None else None
    own = getattr(_family(spec), "wraps", None) if spec.family in FAMILIES else None
    if own is not None:
        wraps = bool(own(spec))
    elif end is None:
        wraps = False
    else:
        at, past = lr_or_none(spec, end), lr_or_none(spec, end + max(1.0, 0.05 * end))
        wraps = at is not None and past is not None and past > at * (1 + 1e-9) + 1e-15
    return Shape(end, floor_at, floor_lr, wraps)


def curve(spec: ScheduleSpec, start: float, stop: float,
          points: int = 400) -> list[tuple[float, float]]:
    """``points`` evenly spaced (progress, lr) pairs over [start, stop] for plots."""
    if points < 2 or stop == start:
        return [(float(start), lr_at(spec, start))]
    step = (stop - start) / (points - 1)
    xs = [start + i * step for i in range(points - 1)] + [stop]
    return [(float(x), lr_at(spec, x)) for x in xs]
