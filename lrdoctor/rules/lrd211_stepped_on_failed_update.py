"""LRD211 `stepped-on-failed-update`: The scheduler is stepped when an update fails

## Explanation
Skipped or failed updates (overflow, NaN) still advance the scheduler.

## Example
10 skipped updates advanced the scheduler 10 times.

## Fix
Step the scheduler only after a successful optimizer step.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity

if TYPE_CHECKING:
    from lrdoctor.rules.replay_context import ReplayContext

RULE = Rule.from_module(__name__, Severity.WARNING)
#: What it rests on (replay_context.with_provenance): the failed updates are the config's scheduler.failed_updates.
LENGTHS = "none"


class SteppedOnFailedUpdate(Evidence):
    failed_updates: int

    def headline(self) -> str | None:
        return f"{self.failed_updates} failed update(s)"


def check(c: ReplayContext) -> list[Finding]:
    """Failed (skipped) updates still advanced the scheduler."""
    if not (c.cfg.scheduler.step_on_failed_update and c.s["failed_updates"]):
        return []
    return [RULE.finding(
        f"{c.s['failed_updates']} failed update(s) still advanced the scheduler.",
        SteppedOnFailedUpdate(failed_updates=c.s["failed_updates"]),
        location="scheduler.step_on_failed_update")]
