"""LRD206 `variable-updates-per-train-step`: The number of optimizer updates varies between train steps

## Explanation
Each train batch takes a different number of updates, so scheduler progress per train step
is data-dependent.

## Example
updates per pipeline step range 1..3.

## Fix
Advance the scheduler by nominal/actual per update.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity

if TYPE_CHECKING:
    from lrdoctor.rules.replay_context import ReplayContext

RULE = Rule.from_module(__name__, Severity.WARNING)
#: What it rests on (replay_context.with_provenance): the updates and the scheduler's
#: progress only.
LENGTHS = "progress"


class VariableUpdates(Evidence):
    updates_per_step: dict[str, float]
    #: Windows spanning steps: the least and most updates' worth of micro-batches a step holds.
    work_per_step_in_updates: tuple[float, float] | None


def check(c: ReplayContext) -> list[Finding]:
    """Train steps hold different amounts of optimizer work."""
    from lrdoctor.rules.replay_context import REL_TOL, per_step, short

    s, t = c.s, c.t
    ups = s["updates_per_step"]
    if ups["max"] == ups["min"]:
        return []
    mbs_per_step = per_step(c.rep)["micro_batches"]
    spread: tuple[float, float] | None
    if c.cfg.accumulation.flush_at_step_end:
        spread = None
    else:
        # Windows span train steps: 0/1 (or 8/9) updates per step is only where
        # windows happen to end. A drift is steps holding different amounts of
        # work: micro-batches per step in units of the mean window.
        mean_window = len(t["lr"]) / max(1, s["actual_updates"])
        work = mbs_per_step / mean_window
        spread = (float(work.min()), float(work.max()))
    if spread is not None and spread[1] - spread[0] < 1 - REL_TOL:
        return []
    extra = ("" if spread is None else
             f"; with windows spanning steps, steps hold {spread[0]:.3g} to "
             f"{spread[1]:.3g} updates' worth of micro-batches "
             f"({int(mbs_per_step.min())}..{int(mbs_per_step.max())} per step)")
    return [RULE.finding(
        f"Optimizer updates per train step vary from {short(ups['min'])} to "
        f"{short(ups['max'])} (mean {ups['mean']:.3g}, nominal "
        f"{short(s['nominal_updates_per_step'])}){extra}.",
        VariableUpdates(updates_per_step=ups, work_per_step_in_updates=spread))]
