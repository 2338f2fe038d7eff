"""Which library lambda a LambdaLR ran, recognised from LR points.

torch's ``LambdaLR`` saves no lambda (it is code), so its schedule cannot be read. The
lambdas most loops pass it are transformers' ``get_*_schedule_with_warmup`` helpers,
whose only knobs are the warmup and the number of training steps, both usually saved in
the loop's config. With them, each helper is an exact model (:mod:`lrdoctor.schedules.hf`),
and a saved LR at a saved position is a witness: a helper is *recognised* when it alone
gives every point to ``RTOL`` (relative) and at least one point lies past the warmup, where
the helpers differ. Two helpers that both fit (a point inside the warmup, a flat stretch)
recognise nothing. Pure: no torch, bounded work.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lrdoctor.schedules import lr_or_none

if TYPE_CHECKING:
    from lrdoctor.core.state import ScheduleSpec, Unit

RTOL = 1e-9

#: The transformers helpers a hand-written loop calls by name, as (hf kind, params): the
#: defaults of ``get_linear_/get_cosine_/get_constant_/get_polynomial_decay_schedule_with_
#: warmup`` (num_cycles 0.5; lr_end 1e-7, power 1.0).
HELPERS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("linear", {}),
    ("cosine", {"num_cycles": 0.5}),
    ("constant_with_warmup", {}),
    ("polynomial", {"lr_end": 1e-7, "power": 1.0}),
)


def from_lr_points(points: Sequence[tuple[float, float]], base_lr: float, warmup: float,
                   horizon: float, unit: Unit, source: str = "") -> ScheduleSpec | None:
    """The one helper that gives every ``(position, lr)`` point, or None.

    ``base_lr`` is the LR the lambda multiplies (``base_lrs[0]``/``initial_lr``),
    ``warmup`` and ``horizon`` the helper's ``num_warmup_steps`` / ``num_training_steps``.
    """
    from lrdoctor.core.state import ScheduleSpec

    if base_lr <= 0 or horizon <= 0 or warmup < 0 or not any(t > warmup for t, _ in points):
        return None
    fits = []
    for kind, params in HELPERS:
        spec = ScheduleSpec("hf", kind, base_lr, unit, warmup=warmup, horizon=horizon,
                            params=dict(params), source=source)
        if all(_same(lr_or_none(spec, t), lr) for t, lr in points):
            fits.append(spec)
    return fits[0] if len(fits) == 1 else None


def _same(got: float | None, want: float) -> bool:
    return got is not None and math.isclose(got, want, rel_tol=RTOL, abs_tol=1e-15)
