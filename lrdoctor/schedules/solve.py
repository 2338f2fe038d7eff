"""Where on a schedule a saved LR lies: the positions ``t`` with ``lr_at(spec, t) == lr``.

A framework that saves no scheduler position (timm's schedulers, torchtitan's and
torchtune's rebuilt LambdaLRs, a trainer that rebuilds the schedule from its step count)
still saves the LR it used and its own counters. The LR pins the schedule's position;
``position / counter`` is then k, the number of schedule steps per counted step. Pure:
no torch, bounded work (untrusted horizons).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lrdoctor.schedules import lr_function

if TYPE_CHECKING:
    from lrdoctor.core.state import ScheduleSpec

MAX_EVALS = 200_000  # schedule evaluations one solve may take
LR_RTOL = 1e-9


def positions(spec: ScheduleSpec, lr: float, upto: int) -> list[int]:
    """Every whole position in ``[0, upto]`` whose LR is ``lr`` (schedules are stepped at
    whole counts), ascending; at most :data:`MAX_EVALS` evaluated. A plateau (a step
    schedule, the floor) gives a run of positions."""
    fn = lr_function(spec)
    out = []
    for t in range(0, min(int(upto), MAX_EVALS) + 1):
        try:
            v = fn(spec, t)
        except (ValueError, ZeroDivisionError, OverflowError, TypeError, KeyError):
            continue
        if math.isclose(v, lr, rel_tol=LR_RTOL, abs_tol=1e-15):
            out.append(t)
    return out


def runs(ts: list[int]) -> list[tuple[int, int]]:
    """Consecutive positions grouped as (first, last)."""
    out: list[tuple[int, int]] = []
    for t in ts:
        if out and t == out[-1][1] + 1:
            out[-1] = (out[-1][0], t)
        else:
            out.append((t, t))
    return out
