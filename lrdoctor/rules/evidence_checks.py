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

from typing import Any

from lrdoctor.core.evidence import Quantity as Q
from lrdoctor.core.evidence import Role as R
from lrdoctor.core.findings import Finding, FreeEvidence, Severity
from lrdoctor.core.numbers import number
from lrdoctor.core.state import RunState
from lrdoctor.rules.common import ProgressEvidence
from lrdoctor.rules.hypotheses import (
    REL_TOL,
    Comparison,
    comparisons,
    evidence,
    horizon_tests,
    projection,
)

# Findings that the explained form (LRD119) replaces: the same horizon, unexplained.
_EXPLAINED_BY_119 = ("LRD102", "LRD110", "LRD118")
# Findings of a scheduler running at another rate than the trainer: the harm ahead joins.
_RATE_CODES = ("LRD103", "LRD104", "LRD108", "LRD109")


def horizon_in_another_unit(st: RunState) -> list[Finding]:
    """LRD119: the saved horizon equals the planned end counted in another unit."""
    v = horizon_tests(st)
    if v is None or v.fit is None or not v.fit.harmful or v.horizon.value <= 0:
        return []
    from lrdoctor.schedules import lr_or_none

    spec = st.schedule
    H, E = v.horizon.value, v.planned_updates
    per_update = v.rate * v.scale  # scheduler units per update
    floor_at = H / per_update
    extra: dict[str, Any] = {}
    if floor_at < E * (1 - REL_TOL):
        harm = (f"the LR reaches its floor at {v.step} {number(round(floor_at, 1))} of "
                f"{number(E)} planned: the last {1 - floor_at / E:.0%} of training runs "
                "at the floor")
    else:
        lr_end = lr_or_none(spec, per_update * E) if spec is not None else None
        done = per_update * E / H
        extra["decay_done_at_planned_end"] = round(done, 6)
        harm = (f"at the planned end ({v.step} {number(E)}) only {done:.0%} of the horizon "
                "is done")
        if lr_end is not None and spec is not None:
            extra["lr_at_planned_end"] = lr_end
            harm += f" and the LR is still {lr_end:.6g} (min_lr {spec.min_lr:g})"
    others = "; ".join(f"{t.hypothesis} would give {number(round(t.predicted, 3))}"
                       for t in v.ruled_out[:6])
    from lrdoctor.rules.lrd119_horizon_in_another_unit import RULE, HorizonInAnotherUnit

    ev = HorizonInAnotherUnit(
        horizon=H, horizon_from=v.horizon.where, planned_end_updates=E,
        planned_end_from=v.planned_from, scheduler_calls_per_update=round(v.rate, 6),
        rate_from=v.rate_from, hypothesis=v.fit.to_dict(),
        also_fits=tuple(t.to_dict() for t in v.also),
        ruled_out=tuple(t.to_dict() for t in v.ruled_out),
        floor_at_update=round(floor_at, 3),
        step_unit=v.step if v.step != "update" else None, **extra)
    return [RULE.finding(
        f"The decay horizon {v.horizon.name} = {number(H)} ({v.horizon.where}) is "
        f"{v.fit.hypothesis}: {v.fit.arithmetic} = {number(round(v.fit.predicted, 3))}"
        + "".join(f" (the same number as {t.hypothesis}: {t.arithmetic})" for t in v.also)
        + ". "
        f"The scheduler is called {number(round(v.rate, 4))} time(s) per {v.step} "
        f"({v.rate_from}), so {harm}. Ruled out: {others}.",
        ev, location=v.horizon.where)]


def horizon_unset(st: RunState) -> list[Finding]:
    """LRD120: a horizon of 0 or below (unset, -1) with the LR at 0 while the peak is not."""
    spec = st.schedule
    if spec is not None and spec.horizon is not None:
        return []  # the scheduler's own horizon is judged by LRD106 (impossible config)
    items = evidence(st)
    bad = next((e for e in items if e.role is R.HORIZON and e.value <= 0), None)
    if bad is None:
        return []
    lrs = [e for e in items if e.role is R.LR and e.quantity is Q.LR and not e.logged]
    now = [e for e in lrs if e.name in ("lr", "last_lr") or e.where.endswith("]")
           and "last_lr" in e.where]
    peak = [e for e in lrs if e.name in ("initial_lr", "base_lrs") or "base_lrs" in e.where]
    zero = next((e for e in now if e.value == 0), None)
    top = next((e for e in peak if e.value > 0), None)
    if zero is None or top is None:
        return []
    prog = st.scheduler_progress
    at = f" at {prog.name} = {number(prog.value)}" if prog is not None else ""
    from lrdoctor.rules.lrd120_horizon_unset import RULE, HorizonUnset

    return [RULE.finding(
        f"The schedule's horizon {bad.name} = {number(bad.value)} ({bad.where}) is unset or "
        f"negative: a decay built on it gives LR 0 from its first step. The saved LR is 0 "
        f"({zero.where}){at} while the peak is {top.value:g} ({top.where}). Ruled out: a "
        "decay that finished (its horizon would be a positive number of steps) and a "
        "warmup (it would start at the peak's fraction, not stay at 0).",
        HorizonUnset(horizon=bad.value, horizon_from=bad.where, lr=0.0, lr_from=zero.where,
                     peak_lr=top.value, peak_from=top.where,
                     scheduler_progress=prog.value if prog is not None else None),
        location=bad.where)]


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
    """After every check ran: the explained horizon (LRD119) replaces its unexplained forms
    (LRD102, LRD110, LRD118), and the findings of a scheduler at another rate than the
    trainer gain the harm ahead."""
    if any(f.code == "LRD119" for f in found):
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
