"""LRD102 `min-lr-tail`: A min-LR tail is configured

## Explanation
The decay horizon ends before the planned end of training on purpose (Megatron
`lr_decay_iters` < `train_iters`): the remaining steps run at `min_lr`.

## Example
`lr_decay_iters` 800, `train_iters` 1000: the last 20% runs at `min_lr`.

## Fix
Nothing to do if this is intended.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity, optional
from lrdoctor.core.state import RunState
from lrdoctor.rules.common import fmt, horizon

RULE = Rule.from_module(__name__, Severity.INFO)


class MinLrTail(Evidence):
    horizon: float
    planned_end: float
    tail_fraction: float
    lr_at_planned_end: float | None = optional()

    def headline(self) -> str | None:
        return f"min-LR tail {self.tail_fraction:.0%}"


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """The horizon ends before the planned end of training (by configuration)."""
    from lrdoctor.schedules import lr_or_none

    h = horizon(state)
    if h is None or not h.tail or h.planned is None:
        return []
    spec, planned = h.spec, h.planned
    tail = 1 - h.horizon / planned
    lr_end = lr_or_none(spec, planned)
    what = f"runs at min_lr {spec.min_lr:g} by configuration"
    lr_kept = None
    if lr_end is not None and not math.isclose(lr_end, spec.min_lr, rel_tol=1e-6,
                                                abs_tol=1e-15):
        lr_kept = lr_end
        what = (f"is past the horizon, where {spec.kind} does not hold min_lr "
                f"{spec.min_lr:g} (it gives {lr_end:.6g} at the planned end)")
    unit = h.progress.unit.value  # the planned end, converted to the schedule's unit
    return [RULE.finding(
        f"The decay horizon ({fmt(h.horizon)} {h.horizon_unit}) ends before the planned end "
        f"of training ({fmt(planned)} {unit}): the last {tail:.0%} {what}.",
        MinLrTail(horizon=h.horizon, planned_end=planned, tail_fraction=round(tail, 6),
                  lr_at_planned_end=lr_kept))]
