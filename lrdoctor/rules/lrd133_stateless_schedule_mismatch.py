"""LRD133 `stateless-schedule-mismatch`: The saved LR says the schedule is not where the step count puts it

A scheduler that keeps no position (``RunState.stateless``: timm's, a schedule rebuilt
from a config) is placed by the LR the optimizer saved: every whole position ``t`` with
``f(t) == lr`` (:func:`lrdoctor.schedules.solve.positions`). If the trainer's counter is
among them the two agree (a real comparison); if not, ``t / counter`` is k, the schedule
steps per counted step, and the run's schedule ends k times too early (or late).

## Explanation
Frameworks that save no scheduler position (timm's schedulers; torchtune, torchtitan and
trainers that rebuild the schedule from the step count; a schedule kept in a config beside
the checkpoint) still save the LR they used and their own counters. lrdoctor rebuilds the
schedule with the family's exact formula and finds every position t where it gives the saved
LR: when the trainer's counter is not among them, `lr == f(k * step)` gives k, and the
schedule ends k times too early (or late).

It is an error when the files entail it: another saved counter (an iteration counter
that counts micro-batches) is exactly where the LR puts the schedule, or a saved number
names k (the accumulation count, the process count; each named by its file and key).
Otherwise it is a warning that names the number that would confirm it. An LR the
schedule never gives is a warning too: it was set elsewhere, or the schedule is not the
one rebuilt.

## Example
timm CosineLRScheduler t_initial 40 updates, saved lr 5.0e-4: the schedule gives it at t =
20, while optimizer.step is 5: k = 4, and `args.grad_accum_steps` is 4 (step_update called
per micro-batch of 4).

## Fix
Pass the counter the horizon is counted in (timm: `step(epoch + 1)` with `t_in_epochs=True`,
`step_update(num_updates)` with optimizer updates; torchtune: `lr_scheduler.step()` inside
the accumulation branch), or size the horizon in the unit the schedule is stepped in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lrdoctor.core.findings import Evidence, Finding, FreeEvidence, Rule, Severity, optional
from lrdoctor.core.numbers import number
from lrdoctor.rules.lrd111_not_judged import RULE as LRD111

if TYPE_CHECKING:
    from lrdoctor.core.evidence import EvidenceItem
    from lrdoctor.core.state import Counter, RunState

# Order in which counters stand for "where the schedule should be", by unit.
_UPDATE_COUNTERS = ("optimizer.step", "loop.global_step", "loop.num_updates", "loop.update",
                    "loop.updates", "loop.iteration", "loop.step", "loop.optimizer_step")
_MAX_K = 64


class StatelessPlacement(Evidence):
    lr: float
    counter: str
    counter_value: float
    unit: str
    positions: tuple[tuple[int, int], ...]  # runs of positions whose LR is the saved LR
    expected_lr: float | None
    k: float | None = optional()
    named_by: tuple[str, ...] = ()  # the saved fields that name k (file:key)
    logged_points: int | None = optional()  # LRs the run logged, each at its step
    logged_at_k: int | None = optional()  # of those, the ones that are f(k x step)

    def headline(self) -> str | None:
        return f"schedule at {number(self.k)}x the step count" if self.k else None


RULE = Rule.from_module(__name__, Severity.ERROR, evidence=(StatelessPlacement,))


def _counter(state: RunState) -> Counter | None:
    from lrdoctor.core.state import Unit

    unit = state.schedule.unit if state.schedule else None
    if unit is Unit.EPOCHS:
        return next((c for c in state.counters if c.unit is Unit.EPOCHS), None)
    for name in _UPDATE_COUNTERS:
        c = state.counter(name)
        if c is not None and c.value > 0:
            return c
    return None


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    from lrdoctor.core.state import Unit
    from lrdoctor.schedules import lr_or_none
    from lrdoctor.schedules.solve import MAX_EVALS, positions, runs

    spec = state.schedule
    if not state.stateless or spec is None:
        return []
    where = spec.source or state.path
    if not state.optimizer_lrs:
        return [LRD111.finding(f"{state.stateless}, but no optimizer LR was saved to place "
                               "it: its position could not be judged.",
                               FreeEvidence({"schedule": where}), location=state.path)]
    lr = state.optimizer_lrs[0]
    c = _counter(state)
    scale = max(c.value if c else 0, 1)
    upto = int(min(MAX_EVALS, max(scale * _MAX_K, (spec.horizon or 0) * 2 + 2, 64)))
    found_runs = runs(positions(spec, lr, upto))
    if c is None:
        return [LRD111.finding(f"{state.stateless}: the saved lr {number(lr)} lies at "
                               f"{_where(found_runs, upto)}, but no counter in "
                               f"{spec.unit.value} was saved to compare it with.",
                               FreeEvidence({"schedule": where, "lr": lr}), location=state.path)]
    value = c.value
    # timm's loops call step(epoch + 1) at an epoch's end and save the epoch index.
    agree = {value, value + 1} if spec.unit is Unit.EPOCHS else {value}
    if any(a <= v <= b for a, b in found_runs for v in agree):
        return []
    expected = lr_or_none(spec, value)
    ev: dict[str, Any] = dict(lr=lr, counter=c.name, counter_value=value, unit=spec.unit.value,
              positions=tuple(found_runs[:6]), expected_lr=expected)
    head = (f"{spec.family} {spec.kind} ({where}) saves no position; the saved lr "
            f"{number(lr)} lies at {_where(found_runs, upto)} {spec.unit.value}, but "
            f"{c.name} is {number(value)}")
    if not found_runs:
        return [RULE.finding(
            f"{head}: the rebuilt schedule never gives that LR up to {number(upto)} "
            f"(at {number(value)} it gives {number(expected) if expected is not None else '?'}): "
            "the LR was set elsewhere, or the schedule is not the one rebuilt.",
            StatelessPlacement(**ev), severity=Severity.WARNING, location=c.source or None)]
    k, base = _k(found_runs, sorted(agree, reverse=True), upto)
    exact = [r for r in found_runs if r[1] < upto]  # a bounded run pins the position
    lr_at = _lr_where(state)
    witness = _witness(state, c, exact)
    if witness is not None:  # another saved counter is where the LR puts the schedule
        w, wv = witness
        k = round(wv / base, 4) if base else None
        return [RULE.finding(
            f"{head}, where the schedule gives "
            f"{number(expected) if expected is not None else '?'}. The saved lr {number(lr)} "
            f"({lr_at}) is the schedule at {w.name} = {number(wv)} {w.quantity.value} "
            f"({_src(w)}), "
            f"{number(k) if k else '?'}x {number(base)} ({c.name} = {number(value)}, "
            f"{_src(c)}): the LR was "
            f"computed from a counter that is not the optimizer's step.",
            StatelessPlacement(**ev, k=k, named_by=(f"{w.name} ({_src(w)})",)),
            location=c.source or None)]
    named = _factor_naming(state, base, exact)
    if named:
        k = named[0].value
        numbers = "; ".join(f"{e.name} = {number(e.value)} ({e.where})" for e in named)
        log_txt, (logged, at_k) = _log_agrees(state, k)
        return [RULE.finding(
            f"{head} ({_src(c)}), where the schedule gives "
            f"{number(expected) if expected is not None else '?'}: the saved lr {number(lr)} "
            f"({lr_at}) is f({number(k)} x {number(base)}), and {number(k)} is saved: "
            f"{numbers}. The schedule runs {number(k)} times as fast as the optimizer "
            f"updates (stepped per micro-batch or per process){log_txt}.",
            StatelessPlacement(**ev, k=k, named_by=tuple(e.where for e in named),
                               logged_points=logged, logged_at_k=at_k),
            location=c.source or None)]
    said = (f": lr == f({number(k)} x {number(base)}), the schedule would run {number(k)} "
            f"times as fast as the counter, but no saved number names {number(k)} (a "
            f"gradient-accumulation count or process count of {number(k)} would confirm it)"
            if k and k > 1 else
            f": lr == f({number(k)} x {number(base)}), the schedule is behind the counter"
            if k else "")
    return [RULE.finding(
        f"{head}, where the schedule gives {number(expected) if expected is not None else '?'}"
        f"{said}.", StatelessPlacement(**ev, k=k), severity=Severity.WARNING,
        location=c.source or None)]


def _log_agrees(state: RunState, k: float) -> tuple[str, tuple[int | None, int | None]]:
    """How many of the LRs the run logged (each at the optimizer step it was logged at)
    are the schedule at k x that step: the log as a second witness, cited by its file."""
    from lrdoctor.core.evidence import Quantity
    from lrdoctor.schedules import lr_or_none
    from lrdoctor.schedules.solve import LR_RTOL

    spec = state.schedule
    pts = [p for p in state.lr_log if p.unit is Quantity.OPTIMIZER_STEPS]
    if spec is None or not pts:
        return "", (None, None)
    hits = 0
    for p in pts:
        want = lr_or_none(spec, k * p.step)
        hits += want is not None and math.isclose(want, p.lr, rel_tol=LR_RTOL, abs_tol=1e-15)
    src = state.lr_log_source or str(pts[0].ref.file)
    return (f"; the run's log agrees: {hits} of the {len(pts)} LRs logged in {src} are "
            f"f({number(k)} x the step they were logged at)",
            (len(pts), hits))


def _src(c: Counter | EvidenceItem) -> str:
    from lrdoctor.core.evidence import EvidenceItem

    if isinstance(c, EvidenceItem):
        return c.where
    return str(c.ref) if c.ref is not None else c.source or c.name


def _lr_where(state: RunState) -> str:
    refs = state.optimizer_lr_refs
    return str(refs[0]) if refs else "the optimizer's param group"


def _witness(state: RunState, c: Counter,
             exact: list[tuple[int, int]]) -> tuple[EvidenceItem, float] | None:
    """Another saved counter of loop steps (not the one judged; not epochs, samples or
    tokens) whose
    value is a position that gives the saved LR exactly: the LR was computed from it
    (nanoGPT's ``get_lr(iter_num)`` counting micro-batches, a ``step_update(micro)``).
    Only a bounded run counts: a floor is reached from every later position."""
    from lrdoctor.core.evidence import Quantity, Role, of
    from lrdoctor.rules.hypotheses import evidence

    judged = {str(c.ref)} if c.ref is not None else set()
    steps = (Quantity.OPTIMIZER_STEPS, Quantity.ITERATIONS, Quantity.BATCHES,
             Quantity.MICRO_BATCHES, Quantity.SCHEDULER_CALLS)  # counts of loop steps
    for e in of(evidence(state), Role.PROGRESS, *steps):
        if e.logged or e.value <= c.value \
                or e.where in judged or str(e.ref) in judged:
            continue
        if any(a <= e.value <= b for a, b in exact):
            return e, e.value
    return None


def _factor_naming(state: RunState, base: float,
                   exact: list[tuple[int, int]]) -> list[EvidenceItem]:
    """The saved factors (accumulation, processes) k such that f(k x counter) is the saved
    LR at an exact position: each names the k it explains."""
    from lrdoctor.core.evidence import Quantity, Role, of
    from lrdoctor.rules.hypotheses import evidence

    items = of(evidence(state), Role.FACTOR, Quantity.GRAD_ACCUM, Quantity.PROCESSES)
    hits = [e for e in items if e.value >= 2 and float(e.value).is_integer()
            and any(a <= e.value * base <= b for a, b in exact)]
    if not hits:
        return []
    k = hits[0].value
    return [e for e in hits if e.value == k]


def _k(found_runs: list[tuple[int, int]], values: list[float],
       upto: int) -> tuple[float | None, float]:
    """The whole (or simplest) ratio position / counter that the runs allow; ``values``:
    the counter's readings that mean "on schedule" (epochs: the index and the next)."""
    for k in range(2, _MAX_K + 1):
        for v in values:
            if any(a <= k * v <= b for a, b in found_runs):
                return float(k), v
    for k in range(2, _MAX_K + 1):  # behind: one schedule step per k counted steps
        for v in values:
            if any(a <= v / k <= b for a, b in found_runs):
                return 1 / k, v
    value = values[-1]
    a, b = min(found_runs, key=lambda r: min(abs(r[0] - value), abs(r[1] - value)))
    t = a if b >= upto else (a if abs(a - value) < abs(b - value) else b)
    return (round(t / value, 4) if value else None), value


def _where(found_runs: list[tuple[int, int]], upto: int) -> str:
    if not found_runs:
        return "no position"
    parts = [f"t = {a}" if a == b else (f"t >= {a} (the floor)" if b >= upto
                                        else f"t = {a}..{b}") for a, b in found_runs[:3]]
    return " or ".join(parts) + (" ..." if len(found_runs) > 3 else "")
