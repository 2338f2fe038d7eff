"""LRD205 `lr-changes-inside-window`: The LR changes inside an accumulation window

## Explanation
The scheduler is stepped per micro-batch, so micro-batches of one window see different LRs
and the schedule runs k times too fast.

## Example
k=4: LR changes 3 times inside each window.

## Fix
Step the scheduler only when the optimizer steps; divide a micro-step budget by k.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity
from lrdoctor.rules.common import LiveEvidence

if TYPE_CHECKING:
    from lrdoctor.rules.replay_context import ReplayContext

RULE = Rule.from_module(__name__, Severity.ERROR)


class LrChangesInsideWindow(Evidence):
    changes: int
    updates: int
    step_on: str
    scheduler_moves_per_update: float

    def headline(self) -> str | None:
        return f"{self.scheduler_moves_per_update:.3g}x scheduler moves per update"


def check(c: ReplayContext) -> list[Finding]:
    """The LR moves inside accumulation windows (scheduler stepped per micro-batch)."""
    from lrdoctor.rules.replay_context import REL_TOL, scheduler_calls_per_update

    s, cfg = c.s, c.cfg
    changes = s["lr_changes_inside_windows"]
    if not changes:
        return []
    nwin = max(1, s["actual_updates"])
    calls = scheduler_calls_per_update(c.t)
    speed = (f"; the scheduler moves {calls:.3g} times per optimizer update, so a budget "
             f"counted in updates runs {calls:.3g}x fast" if calls > 1 + REL_TOL else "")
    return [RULE.finding(
        f"The LR changes {changes} times inside accumulation windows "
        f"({changes / nwin:.2g} per update): micro-batches of one update see different "
        f"LRs (scheduler stepped on {cfg.scheduler.step_on.replace('_', ' ')}){speed}.",
        LrChangesInsideWindow(changes=changes, updates=s["actual_updates"],
                              step_on=cfg.scheduler.step_on,
                              scheduler_moves_per_update=calls),
        location="scheduler.step_on")]


class LiveLrChange(LiveEvidence, kw_only=True):
    """The live guard: the LR changed inside an accumulation window."""

    lr_before: list[float]
    lr_after: list[float]
    micro_batch_in_window: int
    optimizer_update: int
