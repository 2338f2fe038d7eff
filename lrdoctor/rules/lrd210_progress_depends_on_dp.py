"""LRD210 `progress-depends-on-dp`: Scheduler progress depends on the data-parallel size

## Explanation
After a world-size change the scheduler advances a different amount per global batch: its
increment counts micro-batches per rank rather than samples.

## Example
dp 4 -> 8: scheduler advance per step halves.

## Fix
Increment the scheduler by the global batch (samples) or once per update.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity

if TYPE_CHECKING:
    from lrdoctor.rules.replay_context import ReplayContext

RULE = Rule.from_module(__name__, Severity.ERROR)
#: What it rests on (replay_context.with_provenance): the updates and the scheduler's
#: progress only.
LENGTHS = "progress"


class ProgressDependsOnDp(Evidence):
    #: dp size -> mean scheduler advance per train step.
    advance_by_dp: dict[int, float]
    increment: Any


def check(c: ReplayContext) -> list[Finding]:
    """Scheduler advance per train step depends on the dp size (elastic runs)."""
    import numpy as np

    from lrdoctor.rules.replay_context import REL_TOL, per_step, short

    if not c.cfg.dp.changes:
        return []
    ps = per_step(c.rep)
    keep = np.ones(len(ps["dp"]), dtype=bool)
    if not c.cfg.scheduler.step_on_failed_update:
        # A step whose failed update skipped the scheduler advances less at any dp size:
        # that is the skip (counted apart), not the dp size.
        t = c.t
        skipped = np.unique(t["train_step"][t["failed"].astype(bool)])
        keep[skipped[skipped < len(keep)]] = False
    by_dp = {int(d): float(np.mean(ps["advance"][(ps["dp"] == d) & keep]))
             for d in np.unique(ps["dp"][keep])}
    if len(by_dp) < 2:
        return []
    vals = list(by_dp.values())
    if not max(vals) - min(vals) > REL_TOL * max(abs(v) for v in vals):
        return []
    desc = ", ".join(f"dp {d}: {short(v)}" for d, v in by_dp.items())
    inc = c.cfg.scheduler.increment
    return [RULE.finding(
        f"Scheduler advance per train step depends on the dp size ({desc} "
        f"{c.spec.unit.value} per "
        f"step) with the same global batch: increment '{inc}' counts per-rank work.",
        ProgressDependsOnDp(advance_by_dp=by_dp, increment=inc),
        location="scheduler.increment")]
