"""LRD201 `overshoot`: The scheduler runs past its horizon

## Explanation
Dynamic micro-batching (more updates than budgeted), per-micro-step stepping or a horizon
sized in another unit move the scheduler further than its horizon: the LR reaches its floor
early. Where the LR does not move past warmup (a constant schedule) no update's LR changes,
and the finding is informational.

## Example
ROLL: budget 1024 updates, 2 updates per pipeline step: floor at step 512 of 1024.

## Fix
Advance the scheduler by nominal/actual per update, or make the budget follow the replayed
update count.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lrdoctor.core.findings import Finding, Rule, Severity
from lrdoctor.rules.common import ReplayBudget

if TYPE_CHECKING:
    from lrdoctor.rules.replay_context import ReplayContext

RULE = Rule.from_module(__name__, Severity.ERROR)
#: What it rests on (replay_context.with_provenance): the run's length, where the planned
#: end falls against the horizon; an assumed length (RLinf without its data) caps it.
RUN_LENGTH = True
#: Of the sample lengths, only the updates and the scheduler's progress.
LENGTHS = "progress"


class Overshoot(ReplayBudget, kw_only=True):
    """The replay's budget evidence: the scheduler runs past its horizon."""


def check(c: ReplayContext) -> list[Finding]:
    """The scheduler runs past its horizon: the LR reaches its floor early."""
    from lrdoctor.rules.replay_context import (
        REL_TOL,
        flat_lr,
        flat_lr_note,
        short,
        updates_vs_budget,
    )

    s, spec = c.s, c.spec
    ratio = s["progress_ratio"]
    if not ratio > 1 + REL_TOL:
        return []
    where = (f"; the LR reaches its floor ({short(spec.min_lr)}) after train step "
             f"{s['floor_step']} of {c.cfg.train.steps} ({s['floor_fraction']:.0%})"
             if s["floor_step"] is not None else "")
    times = f"{ratio:.3g}" if ratio >= 1.001 else f"{ratio:.7g}"  # never "1x" for a drift
    flat = flat_lr(c)
    # A few percent early is a drift to fix, not a broken run; an LR that does not move
    # is not harmed at all.
    severity = Severity.INFO if flat is not None else \
        Severity.WARNING if ratio < 1.05 else None
    return [RULE.finding(
        f"The replayed loop advances the scheduler to {short(s['scheduler_progress_end'])} "
        f"{spec.unit.value}, {times}x its "
        f"horizon of {short(s['horizon'])} ({updates_vs_budget(s, 'more')}, {_cause(c)})"
        f"{where}."
        + (flat_lr_note(flat) if flat is not None else ""),
        Overshoot(**c.ev_core.raw()), fix=c.fix_tail, location="scheduler",
        severity=severity)]


def _cause(c: ReplayContext) -> str:
    """Why the loop overruns: more updates per train step than planned, or (the rate as
    planned) a budget that counts fewer train steps than the loop runs. "1 per train step
    instead of 1" named a rate that was not the cause."""
    from lrdoctor.rules.replay_context import REL_TOL, short

    s, steps = c.s, c.cfg.train.steps
    mean, nominal = s["updates_per_step"]["mean"], s["nominal_updates_per_step"]
    if abs(mean - nominal) > REL_TOL * max(abs(nominal), 1e-12):
        return f"{short(mean)} per train step instead of {short(nominal)}"
    covers = s["budget_updates"] / nominal if nominal else None
    return (f"{short(mean)} per train step as planned, but the budget covers only "
            + (f"{short(covers)} of the {steps} train steps" if covers is not None
               else f"part of the {steps} train steps"))
