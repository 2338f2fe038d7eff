"""OneVision-Encoder's ``PolynomialLRWarmup`` (``training/lr_scheduler.py``) as a pure function.

Why its own family: it is not torch's ``PolynomialLR``. Read from
github.com/EvolvingLMMs-Lab/OneVision-Encoder (c2cd3e0; the class is unchanged since
before PR 82, b02db5b), its ``get_lr`` at ``last_epoch = l`` (``w = warmup_iters``,
``t = total_iters``, ``p = power``, ``lr`` the group's current LR):

- ``l == 0`` or ``l > t``: the group's LR as it is (at 0 the optimizer's base LR; past
  ``t`` the LR stays where step ``t`` left it);
- ``l <= w``: ``base_lr x l / w``;
- else, recursively: ``lr_l = (1/2 x lr_{l-1}) x (1 + f_l)`` with
  ``f_l = ((1 - (l-w)/(t-w)) / (1 - (l-1-w)/(t-w))) ** p``.

The recursion is not the polynomial its ``_get_closed_form_lr`` (used only on
``load_state_dict``) gives: each step keeps the mean of the last LR and the polynomial's
step ratio applied to it, so the LR decays far slower and halves at ``t``. The values
here follow the recursion: one ``numpy.cumprod`` of ``0.5 x (1 + f_l)`` from ``lr_w``,
which rounds exactly as the class's ``(0.5 x lr) x (1 + f)`` does (halving is exact), with
``f_l`` from Python's own ``**``, so they equal the class's LRs bit for bit (tests/schedules/test_onevision.py steps the class itself).

ScheduleSpec mapping (family ``"onevision"``, kind ``"polynomial_lr_warmup"``):
``max_lr`` = the base LR, ``warmup`` = ``warmup_iters``, ``horizon`` = ``total_iters``,
``params`` = {"power": p}; progress = ``last_epoch`` (scheduler steps).
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

    from lrdoctor.core.state import ScheduleSpec

KINDS = ("polynomial_lr_warmup",)
#: Past this many decay steps the table is not built (memory: 8 bytes a step).
MAX_TABLE = 50_000_000


def _args(spec: ScheduleSpec) -> tuple[float, int, int, float]:
    power = spec.params.get("power", 1.0)
    if spec.horizon is None:
        raise ValueError("PolynomialLRWarmup needs total_iters (horizon)")
    return float(spec.max_lr), int(spec.warmup), int(spec.horizon), float(power)


@lru_cache(maxsize=4)
def _decay_table(base: float, w: int, t: int, power: float) -> np.ndarray:
    """``lr_l`` for ``l = w .. t`` by the class's recursion (index ``l - w``)."""
    import numpy as np

    if t - w > MAX_TABLE:
        raise ValueError(f"PolynomialLRWarmup over {t - w:,} decay steps is more than "
                         f"{MAX_TABLE:,} (the table of its recursive LRs)")
    start = base if w == 0 else base * w / w  # lr_w: the end of the warmup (or lr_0)
    ls = np.arange(w + 1, t + 1, dtype=np.float64)
    span = float(t - w)
    num = 1.0 - (ls - w) / span
    den = 1.0 - (ls - 1 - w) / span
    ratio = num / den
    # Python's ``**`` (C ``pow``), as the class computes it: ``x * x`` differs from
    # ``x ** 2`` in the last bit for about 1 value in 500, and the recursion carries it.
    f = np.fromiter((x ** power for x in ratio.tolist()), dtype=np.float64,
                    count=len(ratio))
    out = np.empty(t - w + 1)
    out[0] = start
    out[1:] = 0.5 * (1.0 + f)
    return np.cumprod(out, out=out)  # ((lr_w x s_1) x s_2) ...: the class's order


def lr_at(spec: ScheduleSpec, progress: float) -> float:
    """The LR after ``progress`` scheduler steps (``last_epoch``; fractions floored)."""
    base, w, t, power = _args(spec)
    lv = int(progress)
    if lv <= 0:
        return base
    if lv <= w:
        return base * lv / w
    return float(_decay_table(base, w, t, power)[min(lv, t) - w])


def lr_array(spec: ScheduleSpec, progress: np.ndarray) -> np.ndarray:
    """:func:`lr_at` over many progress values at once (the replay's path)."""
    import numpy as np

    base, w, t, power = _args(spec)
    lv = np.floor(np.asarray(progress, dtype=np.float64)).astype(np.int64)
    out = np.full(lv.shape, base)
    warm = (lv > 0) & (lv <= w)
    out[warm] = base * lv[warm] / w
    dec = lv > w
    if dec.any():
        out[dec] = _decay_table(base, w, t, power)[np.minimum(lv[dec], t) - w]
    return out


def floor_progress(spec: ScheduleSpec) -> float | None:
    """The LR stops moving at ``total_iters`` (at half its last decayed value, not 0)."""
    return float(spec.horizon) if spec.horizon is not None else None


def problems(spec: ScheduleSpec) -> list[str]:
    out: list[str] = []
    if spec.kind not in KINDS:
        out.append(f"kind={spec.kind!r} is not one of {', '.join(KINDS)}")
    p: Any = spec.params.get("power", 1.0)
    if not isinstance(p, (int, float)) or isinstance(p, bool):
        out.append(f"power={p!r} is not a number")
    if spec.warmup < 0 or spec.warmup != int(spec.warmup):
        out.append(f"warmup_iters={spec.warmup} is not a whole number >= 0")
    if spec.horizon is None or spec.horizon <= spec.warmup or spec.horizon != int(spec.horizon):
        out.append(f"total_iters={spec.horizon} is not a whole number above warmup_iters="
                   f"{spec.warmup} (the decay divides by total_iters - warmup_iters)")
    elif spec.horizon - spec.warmup > MAX_TABLE:
        out.append(f"total_iters - warmup_iters = {spec.horizon - spec.warmup:,} is more than "
                   f"{MAX_TABLE:,} decay steps")
    return out
