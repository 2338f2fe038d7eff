"""The findings reached by testing hypotheses against all the evidence.

- LRD119 ``horizon-in-another-unit``: the horizon is the planned end counted in another
  unit, or the planned end minus the warmup; the finding names the hypothesis that
  predicts the saved horizon exactly, the step where the floor comes (or the LR left at
  the planned end), and every other hypothesis with the number it would have predicted.
- LRD120 ``horizon-unset``: a horizon saved as 0 or negative, confirmed by an LR of 0
  while the schedule's peak is not (verl issue 6683).
- Harm ahead (:func:`harm_ahead`): a scheduler that runs at another rate than the trainer
  (LRD103/LRD104/LRD108/LRD109) gets the step where its floor will come, from the first
  checkpoint holding both; one whose decay will be unfinished at the planned end is an error.
- :func:`after_checks`: LRD119 replaces the unexplained forms of the same horizon.
- :func:`compared`: the comparison that lets a report say the scheduler and the trainer
  agree (none: LRD111 says what could not be judged).
"""

from __future__ import annotations

from lrdoctor.core.findings import Finding, FreeEvidence, Severity
from lrdoctor.core.numbers import number
from lrdoctor.core.state import RunState
from lrdoctor.rules.common import ProgressEvidence
from lrdoctor.rules.hypotheses import (
    REL_TOL,
    Comparison,
    comparisons,
    projection,
)

# Findings that the explained form (LRD119) replaces: the same horizon, unexplained.
_EXPLAINED_BY_119 = ("LRD102", "LRD110", "LRD118")
# Findings of a scheduler running at another rate than the trainer: the harm ahead joins.
_RATE_CODES = ("LRD103", "LRD104", "LRD108", "LRD109")


def harm_ahead(st: RunState, found: list[Finding]) -> None:
    """Add where the floor will come to the findings of a scheduler at another rate than
    the trainer; a decay that will be unfinished at the planned end makes LRD108 an error."""
    p = projection(st)
    prog, spec = st.scheduler_progress, st.schedule
    if p is None or prog is None or spec is None or not spec.horizon:
        return
    if prog.value >= spec.horizon or abs(p.floor_at - p.planned) <= REL_TOL * p.planned:
        return  # already past the horizon (LRD101 says so), or the floor comes on plan
    for f in found:
        if f.code not in _RATE_CODES or f.evidence.get("harm_ahead") is not None \
                or not isinstance(f.evidence, (FreeEvidence, ProgressEvidence)):
            continue
        f.evidence = f.evidence.replaced(harm_ahead=p.to_dict())
        f.message = f"{f.message.rstrip()} {p.sentence()}"
        if f.code == "LRD108" and p.floor_at > p.planned and (p.decay_left or 0) >= 0.05:
            f.severity = Severity.ERROR


def after_checks(st: RunState, found: list[Finding]) -> None:
    """After every check ran: the explained horizon (LRD119, an error: every number read)
    replaces its unexplained forms (LRD102, LRD110, LRD118), and the findings of a scheduler at another rate than the
    trainer gain the harm ahead."""
    if any(f.code == "LRD119" and f.severity is Severity.ERROR for f in found):
        found[:] = [f for f in found if f.code not in _EXPLAINED_BY_119]
    harm_ahead(st, found)


def compared(st: RunState) -> Comparison | None:
    """The comparison of two independent counters that was made and agreed, if any."""
    return next((c for c in comparisons(st) if c.agree), None)


def not_compared(st: RunState) -> str | None:
    """Why scheduler progress could not be judged (None: a comparison was made)."""
    cmp = comparisons(st)
    if st.nominal_progress is not None or (cmp and all(c.agree for c in cmp)):
        return None
    if cmp:
        c = cmp[0]
        return (f"{c.describe()} differ ({number(round(c.ratio or 0, 4))}x), and no nominal "
                "count (the planned budget, the trainer's step) was saved to tell which one "
                "the schedule should follow")
    return None
