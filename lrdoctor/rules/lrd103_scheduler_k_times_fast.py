"""LRD103 `scheduler-k-times-fast`: Scheduler progress is k times what the trainer's counters imply

## Explanation
The scheduler advanced k times as far as the trainer's own counters (optimizer updates,
global_step, nominal budget) say it should: it is stepped on every micro-batch of a
gradient-accumulation window, wrapped by accelerate's `AcceleratedScheduler` (which steps
`num_processes` times per call), or stepped per dynamic micro-batch window while its budget
came from nominal batches. With a planned end saved, the finding also gives the step at
which, at this rate, the LR will reach its floor (ROLL issue 407: pipeline step 123 of 200).

## Example
`scheduler.last_epoch` 400 while AdamW `step` is 100 and `global_step` 100: k = 4.

## Fix
Step the scheduler only when the optimizer steps (inside the accumulation branch), or divide
the budget by k; repair the checkpoint with `lrdoctor fix --policy rescale`.
"""

from __future__ import annotations

from collections.abc import Sequence

from lrdoctor.core.findings import Finding, Rule, Severity
from lrdoctor.core.state import RunState
from lrdoctor.rules.common import LiveEvidence, ProgressEvidence, fmt, off_nominal_gap

RULE = Rule.from_module(__name__, Severity.ERROR)


class SchedulerKTimesFast(ProgressEvidence):
    against = "the nominal progress"


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """The scheduler advanced k times what the trainer's counters say."""
    gap = off_nominal_gap(state)
    if gap is None or gap.ratio <= 1:
        return []
    ev, prog, nominal, ratio = gap.evidence, gap.progress, gap.nominal, gap.ratio
    k = round(ratio)
    near_int = k >= 2 and abs(ratio - k) <= 0.02 * k
    causes = _k_causes(state, k) if near_int else (
        "the scheduler is stepped per dynamic micro-batch window while the budget "
        "was computed from nominal batches")
    fix = (f"Advance the scheduler by nominal/actual = {1 / ratio:.4g} per update, or make "
           "the budget follow the real update count.")
    multiplier = near_int and _steps_per_call(state, k)
    if near_int:
        fix = f"Step the scheduler only when the optimizer steps (or divide its budget by {k})."
        if multiplier:
            fix = (f"Size the scheduler's budget in num_processes x updates (x {k}, as "
                   "accelerate's examples do) or prepare with split_batches=True.")
    # accelerate's multiplier is intended when the budget was multiplied too, and the
    # checkpoint cannot tell which: warn rather than fail.
    severity = Severity.WARNING if multiplier else None
    return [RULE.finding(
        f"{prog.name} = {fmt(prog.value)} is {ratio:.3g}x {nominal.source} = "
        f"{fmt(nominal.value)}: likely {causes}.",
        SchedulerKTimesFast(**{**ev.raw(), "k": k if near_int else round(ratio, 4)}),
        fix=fix, severity=severity)]


def _steps_per_call(state: RunState, k: int) -> bool:
    """One call of ``scheduler.step()`` steps it k times (accelerate's AcceleratedScheduler)."""
    return state.facts.scheduler_steps_per_call == k


def _k_causes(state: RunState, k: int) -> str:
    """The likely reason for k scheduler steps per update, as far as the reader knows."""
    if _steps_per_call(state, k):
        return (f"accelerate's AcceleratedScheduler steps it num_processes={k} times per "
                "call (split_batches=False) while its budget counts optimizer updates (that is "
                f"intended only if the budget was multiplied by {k} too)")
    if state.facts.extra_scheduler_calls:
        return ("the scheduler is stepped by hand (e.g. in training_step) on top of "
                "Lightning's own step")
    from lrdoctor.core.state import Unit
    from lrdoctor.rules.horizon_hypotheses import updates_per_rollout

    nominal = state.nominal_progress
    u = updates_per_rollout(state) if nominal is not None \
        and nominal.unit is Unit.ROLLOUT_STEPS else None
    if u is not None and abs(u.value - k) <= 0.02 * k:
        return (f"the scheduler is stepped per optimizer update, {k} per rollout step "
                f"({u.arithmetic}), while it was meant to step once per rollout step")
    why = f"stepped on every micro-batch of a gradient-accumulation window of {k}"
    n = state.facts.processes
    if n and n > 1:
        why += f", or stepped num_processes={n} times per call"
    return "the scheduler is " + why


class LiveSteppedBetweenUpdates(LiveEvidence, kw_only=True):
    """The live guard (StepGuard): the scheduler stepped more than once between two
    optimizer steps."""

    scheduler_steps: int
    optimizer_steps: int
    since_last_update: int


class LiveAdvance(LiveEvidence, kw_only=True):
    """The live guard (LoopWatch): one update advanced the scheduler more than its rate
    (``max_advance``: the most seen so far)."""

    scheduler_progress: float
    optimizer_updates: int
    advance: float
    max_advance: float
