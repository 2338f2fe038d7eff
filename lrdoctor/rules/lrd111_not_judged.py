"""LRD111 `not-judged`: Scheduler progress or the optimizer's LR could not be judged

## Explanation
lrdoctor found no LR scheduler state in the files it scanned, or found one with nothing
independent to compare it with (no optimizer step, loop counter or nominal budget: a horizon
alone is no comparison), or one whose counter differs from the optimizer's step while no
nominal count says which the schedule should follow, or the checkpoint shows that the
optimizer's param-group LRs were saved (Megatron's distributed optimizer) but they could not
be read, so the LR check (LRD105) was not done, or a metrics log beside a LambdaLR
checkpoint (Lightning's `metrics.csv` or a TensorBoard event file) was unreadable or held no
logged LR, so the schedule was not fitted from it, or a scheduler whose schedule cannot be
rebuilt (a LambdaLR: its lambda is code) has moved the LR below its peak while no file
holds the schedule's horizon or the run's planned end, so whether the decay ends where
training does could not be checked (OpenRLHF's checkpoints: PR 1351's budget bug cannot be
seen in them). Rather than stay silent it names what it scanned and the number that would
decide it, at a severity a CI gate sees.

## Example
`model.pt` and `optimizer.pt` only: no scheduler state among 2 files.

## Fix
Save the scheduler's `state_dict()` (and the optimizer's) in the checkpoint, or point
lrdoctor at the file or folder that holds it.
"""

from __future__ import annotations

from collections.abc import Sequence

from lrdoctor.core.facts import LrLog, LrsUnread
from lrdoctor.core.findings import Evidence, Finding, Rule, Severity, optional
from lrdoctor.core.state import RunState
from lrdoctor.rules.common import fmt, judged, scanned

RULE = Rule.from_module(__name__, Severity.WARNING)


class NotJudged(Evidence, kw_only=True):
    """What could not be judged and what was scanned. One of: no scheduler state
    (``contents``: what each file held), a scheduler with nothing to compare it with
    (``scheduler_progress``), param-group LRs saved but unread (``optimizer_lrs_unread``),
    a logged-LR file that could not be used (``lr_log_unused``)."""

    optimizer_lrs_unread: LrsUnread | None = optional()
    optimizer_lrs_read: list[float] | None = optional()
    lr_log_unused: list[LrLog] | None = optional()
    scheduler_progress: float | None = optional()
    scanned: list[str]
    contents: dict[str, str] | None = optional()
    missing: list[str] | None = optional()  # the numbers that would decide it


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """Never silent: say what could not be judged, and what was scanned."""
    out = _lrs_unread(state) + _lr_log_unused(state) + _end_unknown(state)
    return out + _nothing_to_judge(state, [*found, *out])


_END_NUMBERS = ["the schedule's horizon (num_training_steps)", "the run's planned end "
                "(max_steps, or epochs x updates per epoch)", "the dataset size with the "
                "batch size"]


def _end_unknown(state: RunState) -> list[Finding]:
    """A schedule that could not be rebuilt (a LambdaLR) has moved the LR below its peak,
    and no file holds its horizon or the run's planned end: where the decay ends cannot be
    compared with where training ends. A warning naming the numbers that would decide it
    (never "healthy", never an invented horizon)."""
    from lrdoctor.core.evidence import Role, of
    from lrdoctor.rules.hypotheses import evidence

    prog, peaks = state.scheduler_progress, state.facts.optimizer_initial_lrs
    if state.schedule is not None or prog is None or not state.optimizer_lrs or not peaks:
        return []
    lr, peak = state.optimizer_lrs[0], peaks[0]
    if not 0 < peak or lr >= peak * (1 - 1e-9) or state.planned_end is not None:
        return []
    items = evidence(state)
    if of(items, Role.HORIZON) or of(items, Role.PLANNED_END):
        return []
    return [RULE.finding(
        f"{prog.name} = {fmt(prog.value)}: the optimizer's lr {fmt(lr)} is "
        f"{lr / peak:.3g}x its initial_lr {fmt(peak)}, so a schedule is moving it, but the "
        "schedule cannot be rebuilt (its lambda is code, not saved) and no file holds "
        f"{', '.join(_END_NUMBERS[:2])} or {_END_NUMBERS[2]}: whether the decay ends where "
        "training ends could not be checked.",
        NotJudged(scheduler_progress=prog.value, scanned=scanned(state),
                  missing=list(_END_NUMBERS)),
        fix="Save the run's budget beside the checkpoint (its arguments or config with "
            "max_steps / num_training_steps), or give the schedule to lrdoctor (`lrdoctor "
            "replay`, or `--schedule`).",
        location=state.path)]


def _lrs_unread(state: RunState) -> list[Finding]:
    """The reader saw that param-group LRs were saved (Megatron's distributed optimizer)
    but could not read them all."""
    unread = state.facts.optimizer_lrs_unread
    if unread is None or state.scheduler_progress is None:
        return []
    what = ("Some of the optimizer's param-group LRs are in this checkpoint but could not be "
            "read" if state.optimizer_lrs else
            "The optimizer's param-group LRs should be in this checkpoint but could not be read")
    checked = (f"; those read ({len(state.optimizer_lrs)}) were" if state.optimizer_lrs
               else ", so they were not")
    return [RULE.finding(
        f"{what} ({unread.reason}){checked} compared with the schedule (LRD105); "
        f"scanned: {', '.join(state.files[:8]) or state.path}.",
        NotJudged(optimizer_lrs_unread=unread, optimizer_lrs_read=list(state.optimizer_lrs),
                  scanned=scanned(state)),
        fix="Read the named item with the framework's own loader to check its param-group "
            "`lr` against the schedule (lrdoctor unpickles only allow-listed classes and "
            "bounded item sizes), or save the optimizer state in a form lrdoctor reads.",
        location=state.path)]


def _lr_log_unused(state: RunState) -> list[Finding]:
    """A logged-LR file beside the checkpoint (Lightning's metrics.csv or a TensorBoard
    event file) that the reader could not use to fit the schedule."""
    unused = state.facts.lr_log_unused
    if not unused:
        return []
    what = "; ".join(f"{u.file}: {u.reason}" for u in unused[:4])
    used = state.facts.lr_log
    then = (f"{used.file} was used instead" if used is not None
            else "so the LambdaLR's schedule was not fitted from it and the scheduler's LR "
                 "could not be judged")
    return [RULE.finding(
        f"A metrics log beside the checkpoint could not be used ({what}); {then}.",
        NotJudged(lr_log_unused=list(unused), scanned=scanned(state)),
        fix="Log the LR with Lightning's LearningRateMonitor to a CSVLogger (a 'step' and an "
            "'lr-<Optimizer>' column) or a TensorBoardLogger (an 'lr-<Optimizer>' scalar), "
            "or give the schedule in a run config.",
        location=state.path)]


def _nothing_to_judge(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """No scheduler state, or nothing to compare its progress with."""
    if judged(found):
        return []
    prog = state.scheduler_progress
    if prog is None and state.stateless:  # placed by the saved LR: LRD133 says how it went
        return []
    files = ", ".join(state.files[:8]) + (" ..." if len(state.files) > 8 else "") \
        if state.files else state.path
    if prog is None:
        # What each file was found to hold, where the reader said (a content scan).
        contents = state.facts.contents
        if contents:
            files = "; ".join(f"{f} ({what})" for f, what in list(contents.items())[:4]) \
                + (f"; +{len(state.files) - 4} more" if len(state.files) > 4 else "")
        return [RULE.finding(f"No LR scheduler state was found, so scheduler progress "
                             f"could not be checked; scanned: {files}.",
                             NotJudged(scanned=scanned(state), contents=contents or None),
                             location=state.path)]
    if state.nominal_progress is not None:  # compared (a ratio, or both still at 0)
        return []
    from lrdoctor.rules.evidence_checks import compared, not_compared

    # "Agree" only after two independent counters were compared: a horizon alone is not one.
    if compared(state) is not None:
        return []
    why = not_compared(state)
    if why:
        return [RULE.finding(f"Scheduler progress could not be judged: {why}; scanned: "
                             f"{files}.",
                             NotJudged(scheduler_progress=prog.value, scanned=scanned(state)),
                             fix="Keep the run's config (its planned budget) beside the "
                                 "checkpoint or save the trainer's own step, so the "
                                 "scheduler's counter can be compared with the trainer's.",
                             location=state.path)]
    return [RULE.finding(f"{prog.name} = {fmt(prog.value)} was found but nothing to compare "
                         "it with (no optimizer step, loop counter or budget was saved), so it "
                         f"could not be judged; scanned: {files}.",
                         NotJudged(scheduler_progress=prog.value, scanned=scanned(state)),
                         location=state.path)]
