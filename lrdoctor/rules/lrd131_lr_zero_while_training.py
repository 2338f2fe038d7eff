"""LRD131 `lr-zero-while-training`: The learning rate reached 0 while training went on

Three sources of the LR that was used, each judged where it is:

- one checkpoint: every param-group LR is 0 while the trainer's counter is short of the
  planned end (:func:`check`);
- the run's log: the logged LR is 0 from a step after the peak to the end of the log (and
  the optimizer's LR is 0), with logged steps after the first 0 (:func:`check`; a warmup
  that starts at 0 is not counted);
- the run's checkpoints: their LRs lie on a line that reaches 0 before the last of them,
  which saved LR 0 (:func:`check_run`): the zero crossing says from which update on the
  run trained at 0, and what share of it that is.

## Explanation
The LR the optimizer used (saved in the param groups, logged, or on the line through the LRs
of the run's checkpoints) is exactly 0 before the planned end, or reached 0 while later
updates were still made: every update from there on changes nothing, so that share of the
run is wasted. A horizon that is too short or counted in another unit, a schedule stepped k
times too fast, a horizon that was unset when the scheduler was built (verl issue 6683) or a
cosine whose `T_max` is one epoch all end here. A warmup that starts at 0 is not counted.

## Example
LRs per checkpoint 7.78e-4, 4.44e-4, 1.11e-4, 0 at updates 6, 12, 18, 24 lie on a line
reaching 0 at update 20 of 24: 4 updates (17% of the run) trained at LR 0.

## Fix
Size the horizon to the updates the run really takes (or step the scheduler once per
update); resume from a checkpoint from before the LR reached 0 after fixing it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lrdoctor.core.evidence import logged_at
from lrdoctor.core.findings import Evidence, Finding, Rule, Severity, optional
from lrdoctor.core.numbers import number

if TYPE_CHECKING:
    from lrdoctor.core.state import Counter, RunState

ZERO_RTOL = 1e-12  # an LR this small against the run's peak is 0 (float noise of a decay)
LINE_RTOL = 1e-3  # how far (relative to the peak) the checkpoints' LRs may lie off a line


class ZeroLR(Evidence):
    source: str  # "optimizer", "log" or "checkpoints"
    zero_from: float  # the step (update) from which the LR is 0
    end: float  # the last step trained (or the planned end)
    steps_at_zero: float
    share_at_zero: float
    counter: str
    peak_lr: float | None = optional()
    points: tuple[tuple[float, float], ...] | None = optional()  # (step, lr) that prove it
    zero_from_field: str | None = optional()  # where the first logged 0 is (file:key)

    def headline(self) -> str | None:
        return f"{number(self.steps_at_zero)} steps at LR 0"


RULE = Rule.from_module(__name__, Severity.ERROR, evidence=(ZeroLR,))


def _is_zero(lr: float, peak: float) -> bool:
    return lr == 0 or (peak > 0 and abs(lr) <= ZERO_RTOL * peak)


def _updates(state: RunState) -> Counter | None:
    from lrdoctor.core.state import Unit

    for c in (state.trainer_progress, state.nominal_progress):
        if c is not None and c.unit is Unit.UPDATES:
            return c
    return next((c for c in state.counters if c.name == "optimizer.step"), None)


# Findings that already say the rest of the run trains at the floor, and why.
_CAUSES = frozenset({"LRD101", "LRD103", "LRD104", "LRD109"})


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    if any(f.code in _CAUSES for f in found):
        return []
    out = _from_log(state)
    if out:
        return out
    lrs, end, done = state.optimizer_lrs, state.planned_end, _updates(state)
    if not lrs or any(lr != 0 for lr in lrs) or end is None or done is None \
            or end.unit is not done.unit or not 0 < done.value < end.value:
        return []
    left = end.value - done.value
    return [RULE.finding(
        f"Every param-group LR is 0 at {done.name} {number(done.value)}, while the planned end "
        f"({end.name}) is {number(end.value)}: the remaining {number(left)} updates "
        f"({left / end.value:.0%} of the run) will train at LR 0, and the updates since the LR "
        "reached 0 did.",
        ZeroLR("optimizer", done.value, end.value, left, left / end.value, done.name),
        location=state.path)]


def _from_log(state: RunState) -> list[Finding]:
    log = sorted(p.point for p in state.lr_log)
    if len(log) < 2:
        return []
    peak = max(lr for _, lr in log)
    if peak <= 0:
        return []
    # From the first time the LR is near its peak: a warmup that starts at 0 is no finding.
    peak_i = next(i for i, (_, lr) in enumerate(log) if lr >= 0.9 * peak)
    after = log[peak_i + 1:]
    last_step = log[-1][0]
    end = max(last_step, state.planned_end.value if state.planned_end is not None
              and state.planned_end.unit.value == "optimizer updates" else last_step)
    # The LR logged 0 from some step after the peak to the end of the log, with the
    # optimizer's LR still 0 (or not saved): the run is at 0 and went on training there.
    # A 0 followed by a rise is a warmup (re)starting at 0 (LRD112) or the bottom of a
    # cycle (LRD132); a repaired checkpoint's log keeps its past, but its LR is no longer 0.
    if not after or not _is_zero(after[-1][1], peak):
        return []
    if state.optimizer_lrs and not all(_is_zero(x, peak) for x in state.optimizer_lrs):
        return []
    i = len(after) - 1
    while i > 0 and _is_zero(after[i - 1][1], peak):
        i -= 1
    zeros = after[i:]
    if len(zeros) < 2 and last_step >= end:
        return []  # one logged 0 at the planned end: a schedule that ends at 0
    first = zeros[0][0]
    gaps = [b - a for (a, _), (b, _) in zip(log, log[1:], strict=False) if b > a]
    every = min(gaps) if gaps else 1.0  # logging_steps: each logged point stands for these
    at_zero = end - first + every
    at = logged_at(state.lr_log, first)
    where = str(at.ref) if at is not None else None
    return [RULE.finding(
        f"The logged LR ({state.lr_log_source}) is 0 at step {number(first)}"
        + (f" ({where})" if where else "") + ", after the peak "
        f"{number(peak)}, and training went on to step {number(last_step)}"
        + (f" of {number(end)} planned" if end > last_step else "")
        + f": {number(at_zero)} logged step(s) trained at LR 0 "
        f"({at_zero / end:.0%} of the run).",
        ZeroLR("log", first, end, at_zero, at_zero / end, "logged step", peak_lr=peak,
               points=tuple(zeros[:8]), zero_from_field=where),
        location=state.lr_log_source or state.path)]


def check_run(states: Sequence[RunState]) -> list[Finding]:
    """The LRs of the run's checkpoints as a trend: on a line that reaches 0 before the
    last checkpoint, which saved LR 0, the run trained at 0 from the crossing on."""
    pts: list[tuple[float, float]] = []
    name = ""
    for st in states:
        c = _updates(st)
        if c is None or not st.optimizer_lrs:
            continue
        pts.append((c.value, st.optimizer_lrs[0]))
        name = c.name
    pts.sort()
    # Only where the LRs are the evidence: a known schedule is judged by the per-checkpoint
    # rules (LRD101, LRD105), and a trend of points it explains says nothing more.
    if len(pts) < 4 or pts[-1][1] != 0 or states[-1].schedule is not None:
        return []
    peak = max(lr for _, lr in pts)
    live = [(x, lr) for x, lr in pts if lr > 0]
    first_zero = next(x for x, lr in pts if lr == 0)
    # The decaying points just before the first zero: from the last peak on.
    live = [(x, lr) for x, lr in live if x < first_zero]
    top = max(range(len(live)), key=lambda i: live[i][1]) if live else 0
    line = live[top:]
    if len(line) < 3:  # two points are always on a line
        return []
    n = len(line)
    mx, my = sum(x for x, _ in line) / n, sum(y for _, y in line) / n
    sxx = sum((x - mx) ** 2 for x, _ in line)
    if sxx == 0:
        return []
    slope = sum((x - mx) * (y - my) for x, y in line) / sxx
    if slope >= 0:
        return []
    if n >= 3 and max(abs(y - (my + slope * (x - mx))) for x, y in line) > LINE_RTOL * peak:
        return []  # not a line: no crossing to read off
    zero_at = mx - my / slope
    end = pts[-1][0]
    for st in states:
        if st.planned_end is not None and st.planned_end.unit.value == "optimizer updates":
            end = max(end, st.planned_end.value)
    if not line[-1][0] < zero_at <= first_zero:
        return []
    at_zero = end - zero_at
    if at_zero <= 1e-9 * end:
        return []  # the schedule reaches 0 exactly at the end: as planned
    return [RULE.finding(
        f"The LRs of the run's checkpoints ({', '.join(f'{number(lr)} at {number(x)}' for x, lr in pts[-6:])}) "
        f"lie on a line that reaches 0 at {name} {number(zero_at)} of {number(end)}: "
        f"{number(at_zero)} updates ({at_zero / end:.0%} of the run) trained at LR 0.",
        ZeroLR("checkpoints", zero_at, end, at_zero, at_zero / end, name, peak_lr=peak,
               points=tuple(pts)), location=states[-1].path)]
