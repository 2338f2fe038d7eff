"""Diagnose a run, not one checkpoint: rules that compare the checkpoints of one run.

The per-checkpoint rules (:mod:`lrdoctor.diagnose`) see one :class:`RunState`.
The failure shapes users report most after those only show *between*
checkpoints: a scheduler restarted on resume (state not saved or not
restored), progress double-counted at every resume (``scheduler.step(iteration
* global_batch_size)`` after load), a horizon recomputed on resume with another
batch size, a scheduler state missing from a checkpoint (the next resume
restarts it), a progress rate that changes over the run.

Input: the run's normalized states, oldest first, in whatever way they were
enumerated (a format's ``find_checkpoints`` or a content-first discovery); the
rules are framework-blind. Output: :func:`history` (one row per checkpoint and
the interval from the previous one, for the trend table and the plot) and
:func:`diagnose_run` (findings naming the two checkpoints, the counters and
their deltas).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lrdoctor.core.findings import Finding
from lrdoctor.core.numbers import number
from lrdoctor.core.state import Counter, RunState
from lrdoctor.rules import (
    lrd112_scheduler_restarted_on_resume as lrd112,
)
from lrdoctor.rules import (
    lrd113_progress_double_counted_on_resume as lrd113,
)
from lrdoctor.rules import (
    lrd114_schedule_changed_between_checkpoints as lrd114,
)
from lrdoctor.rules import (
    lrd115_scheduler_state_missing as lrd115,
)
from lrdoctor.rules import (
    lrd116_progress_ratio_changes as lrd116,
)
from lrdoctor.schedules import lr_at

# Two counters advancing by amounts that differ by more than this (relative, and
# at least ABS_TOL units) disagree; a checkpoint's own rounding stays below it.
REL_TOL = 0.05
ABS_TOL = 1.0
LR_RTOL = 1e-6
# The codes this module reports (the rest are one checkpoint's, from lrdoctor.diagnose).
RUN_CODES = frozenset({"LRD112", "LRD113", "LRD114", "LRD115", "LRD116"})


@dataclass
class Point:
    """One checkpoint of the run as the run-level rules see it."""

    name: str
    path: str
    state: RunState
    # Where the trainer's counters say the scheduler should be (schedule unit).
    updates: Counter | None
    scheduler: Counter | None
    horizon: float | None
    planned_end: Counter | None
    optimizer_lr: float | None
    lr_at_scheduler: float | None
    lr_at_updates: float | None
    flags: list[str] = field(default_factory=list)

    @property
    def counters(self) -> tuple[Counter, Counter]:
        """(scheduler, updates) of a point the continuity rules compare (both saved)."""
        if self.scheduler is None or self.updates is None:
            raise ValueError(f"{self.name}: no scheduler progress or no update count")
        return self.scheduler, self.updates


def _lr(spec, x: float | None) -> float | None:
    if spec is None or x is None:
        return None
    try:
        v = lr_at(spec, x)
    except (ValueError, ZeroDivisionError, OverflowError):
        return None
    return v if math.isfinite(v) else None


def _names(paths: list[str]) -> list[str]:
    """Checkpoint names relative to what the run's paths share (``checkpoint-8``, not the
    whole absolute path; ``actor/checkpoint-8`` when that is what tells them apart)."""
    import os

    if len(paths) < 2:
        return [Path(p).name for p in paths]
    try:
        base = os.path.commonpath(paths)
    except ValueError:
        return list(paths)
    return [os.path.relpath(p, base) if p != base else Path(p).name for p in paths]


def points(states: list[RunState]) -> list[Point]:
    """The run's checkpoints with the counters the rules compare."""
    names = _names([s.path for s in states])
    out = []
    for name, st in zip(names, states, strict=True):
        updates = st.nominal_progress
        if updates is None and st.trainer_progress is not None and (
                st.schedule is None or st.trainer_progress.unit == st.schedule.unit):
            updates = st.trainer_progress
        spec = st.schedule
        sp = st.scheduler_progress
        out.append(Point(
            name=name, path=st.path, state=st, updates=updates, scheduler=sp,
            horizon=float(spec.horizon) if spec is not None and spec.horizon else None,
            planned_end=st.planned_end,
            optimizer_lr=st.optimizer_lrs[0] if st.optimizer_lrs else None,
            lr_at_scheduler=_lr(spec, sp.value if sp else None),
            lr_at_updates=_lr(spec, updates.value if updates else None)))
    return out




def _differ(a: float, b: float) -> bool:
    return abs(a - b) > max(ABS_TOL, REL_TOL * max(abs(a), abs(b)))


def _same(a: float, b: float) -> bool:
    return not _differ(a, b)


def _counter_ev(c: Counter, a: float, b: float, unit: str | None = None) -> dict[str, Any]:
    """A counter's change; ``unit``: what it counts (:meth:`RunState.unit_of`)."""
    return {"counter": c.name, "from": a, "to": b, "delta": b - a,
            "unit": unit or c.unit.value}


# ---------------------------------------------------------------- the rules

def diagnose_run(states: list[RunState]) -> list[Finding]:
    """Run-level findings for the checkpoints of one run, oldest first."""
    pts = points(states)
    out: list[Finding] = []
    out += _missing_scheduler(pts)
    drift: list[dict[str, Any]] = []
    for a, b in zip(pts, pts[1:], strict=False):
        out += _schedule_changed(a, b)
    # Consecutive checkpoints with both counters; the ones between them (without a
    # scheduler state) are where a resume may have restarted the scheduler.
    idx = [i for i, p in enumerate(pts) if _comparable(p)]
    pairs = list(zip(idx, idx[1:], strict=False))
    ratios = [_ratio(pts[i], pts[j]) for i, j in pairs]
    rate = _baseline(pts[idx[0]]) if idx else 1.0
    for n, (i, j) in enumerate(pairs):
        nxt = ratios[n + 1] if n + 1 < len(ratios) else None
        found, interval = _continuity(pts[i], pts[j], pts[i:j], rate, nxt)
        out += found
        if interval is not None:
            drift.append(interval)
    out += _ratio_drift(pts, drift)
    out += _stateless_restart(pts)
    from lrdoctor.rules import lrd131_lr_zero_while_training

    out += lrd131_lr_zero_while_training.check_run(states)
    return out


def _comparable(p: Point) -> bool:
    return p.scheduler is not None and p.updates is not None


def _ratio(a: Point, b: Point) -> float | None:
    (a_s, a_u), (b_s, b_u) = a.counters, b.counters
    du = b_u.value - a_u.value
    return (b_s.value - a_s.value) / du if du > 0 else None


def _baseline(p: Point) -> float:
    """The run's own scheduler rate per unit of nominal progress, from its first checkpoint
    (1 when healthy, k for a scheduler k times fast from the start: the one-checkpoint
    rules report that). Later intervals are judged against it, so one bad interval (a
    restart) does not become the norm."""
    sc, up = p.counters
    s, u = sc.value, up.value
    return s / u if s > 0 and u > 0 else 1.0


def _continuity(a: Point, b: Point, resumes: list[Point], rate: float,
                next_ratio: float | None) -> tuple[list[Finding], dict[str, Any] | None]:
    """Scheduler progress between two checkpoints against the updates between them, at the
    run's own ``rate`` (:func:`_baseline`). ``resumes``: the checkpoints from ``a`` up to
    before ``b``, where a resume may have happened. ``next_ratio``: the next interval's
    scheduler/updates ratio; a jump is a one-off, so when the same faster rate goes on
    there, it is a changed rate (the drift rule's), not a double count. Returns the
    findings and, when the interval is no resume shape, its ratio for the drift rule.
    """
    (a_s, a_u), (b_s, b_u) = a.counters, b.counters
    if a_s.unit != b_s.unit or a_u.unit != b_u.unit:
        return [], None
    du = b_u.value - a_u.value
    if du <= 0:
        return [], None
    sa, sb = a_s.value, b_s.value
    ds = sb - sa
    expected = rate * du
    unit = b.state.unit_of(b_s)  # what the scheduler's counter counts (calls)
    ev: dict[str, Any] = {"from_checkpoint": a.path, "to_checkpoint": b.path,
          "scheduler": _counter_ev(b_s, sa, sb, unit),
          "updates": _counter_ev(b_u, a_u.value, b_u.value, b.state.unit_of(b_u)),
          "expected_scheduler_delta": expected, "run_rate": round(rate, 6)}
    lr_b = b.lr_at_scheduler
    lr_txt = ""
    if lr_b is not None and b.lr_at_updates is not None and not math.isclose(
            lr_b, b.lr_at_updates, rel_tol=LR_RTOL, abs_tol=1e-15):
        ev["lr_at_scheduler"], ev["lr_at_updates"] = lr_b, b.lr_at_updates
        lr_txt = (f"; the schedule gives {lr_b:.6g} at {b.name} where the counters imply "
                  f"{b.lr_at_updates:.6g}")
    head = (f"{a.name} -> {b.name}: {b_u.name} {number(a_u.value)} -> "
            f"{number(b_u.value)} (+{number(du)}) but {b_s.name} {number(sa)} -> "
            f"{number(sb)} ({'+' if ds >= 0 else ''}{number(ds)}) {unit}")
    restarted_at = None
    if ds < 0 and _differ(sa, sb):
        restarted_at = b_u.value - sb / rate
        why = "went backwards"
    elif sa > ABS_TOL and _differ(ds, expected):
        for r in resumes:
            if r.updates is not None and r.updates.value > 0 and _same(
                    sb, rate * (b_u.value - r.updates.value)):
                restarted_at = r.updates.value
                why = f"counts only the updates since {r.name}"
                ev["resumed_from"] = r.path
                break
    if restarted_at is not None:
        ev["restarted_near"] = restarted_at
        return [lrd112.RULE.finding(
            f"{head}: the scheduler {why}, as if it restarted from 0 at a resume near "
            f"{b_u.name} {number(restarted_at)} (state not saved or not restored){lr_txt}.",
            lrd112.SchedulerRestarted(**ev), location=b.path)], None
    persists = next_ratio is not None and _same(next_ratio * du, ds)
    if ds > expected and _differ(ds, expected) and not persists:
        excess = ds - expected
        ev["excess"] = excess
        # The resume added the restored progress again (slime/miles: an extra
        # scheduler.step(iteration * global_batch_size) after load_state_dict).
        # Either the scheduler's own saved progress or the trainer's (iteration x global
        # batch), which differ from the second double-counted resume on.
        for what, base in ((f"the scheduler progress saved at {a.name}", sa),
                           (f"{a_u.name} at {a.name}", rate * a_u.value)):
            m = round(excess / base) if base > 0 else 0
            if m >= 1 and _same(excess, m * base):
                ev["excess_matches"] = {"what": what, "value": base, "multiple": m}
                times = "" if m == 1 else f" x {m}"
                return [lrd113.RULE.finding(
                    f"{head}: {number(excess)} {unit} more than the updates explain, which is "
                    f"{what} ({number(base)}){times}: the resume stepped the restored scheduler "
                    "by the progress again (e.g. scheduler.step(iteration * global_batch_size)"
                    f" after load_state_dict){lr_txt}.", lrd113.ProgressDoubleCounted(**ev),
                    location=b.path)], None
    if _differ(ds, expected):
        return [], {"from": a, "to": b, "ratio": ds / du, "rate": rate, "ev": ev}
    return [], {"from": a, "to": b, "ratio": ds / du, "rate": rate, "ev": None}


def _ratio_drift(pts: list[Point], intervals: list[dict[str, Any]]) -> list[Finding]:
    """One finding when the per-interval scheduler/updates ratio changes over the run."""
    bad = [i for i in intervals if i["ev"] is not None]
    if not bad:
        return []
    ratios = [round(i["ratio"], 6) for i in intervals]
    first = bad[0]
    a, b = first["from"], first["to"]
    (a_s, a_u), (b_s, b_u) = a.counters, b.counters
    ev = dict(first["ev"])
    ev["interval_ratios"] = [{"from": i["from"].name, "to": i["to"].name,
                              "ratio": round(i["ratio"], 6)} for i in intervals]
    ev["ratio_before"] = round(first["rate"], 6)
    ev["ratio_in_interval"] = round(first["ratio"], 6)
    more = (f"; {len(bad) - 1} more interval(s) differ too" if len(bad) > 1 else "")
    return [lrd116.RULE.finding(
        f"{a.name} -> {b.name}: {b_s.name} advanced {first['ratio']:.4g} per unit "
        f"of {b_u.name} (+{number(b_s.value - a_s.value)} over "
        f"+{number(b_u.value - a_u.value)}) where the run advanced "
        f"{first['rate']:.4g}{more} (per-interval ratios "
        f"{', '.join(f'{r:.4g}' for r in ratios)}): scheduler progress per update depends on something that changed (batch "
        "composition, accumulation, world size, a resume).", lrd116.ProgressRatioChanges(**ev),
        location=b.path)]


_COMPARED = (("horizon", "decay horizon"), ("warmup", "warmup"), ("max_lr", "max_lr"),
             ("min_lr", "min_lr"), ("kind", "schedule kind"))


def _schedule_changed(a: Point, b: Point) -> list[Finding]:
    """A horizon, planned end or schedule parameter that differs between two checkpoints."""
    changes: list[dict[str, Any]] = []
    sa, sb = a.state.schedule, b.state.schedule
    if sa is not None and sb is not None and sa.unit == sb.unit:
        fitted = "fitted" in (sa.source or "") or "fitted" in (sb.source or "")
        for attr, label in _COMPARED:
            if fitted and attr != "horizon":
                continue  # a fit to a short log is not a saved parameter
            va, vb = getattr(sa, attr), getattr(sb, attr)
            if va is None or vb is None or va == vb:
                continue
            if isinstance(va, float) and isinstance(vb, float) and math.isclose(
                    va, vb, rel_tol=1e-9, abs_tol=1e-15):
                continue
            changes.append({"what": label, "from": va, "to": vb, "unit": sa.unit.value})
        if not fitted:
            for k in sorted(set(sa.params) & set(sb.params)):
                if sa.params[k] != sb.params[k]:
                    changes.append({"what": f"schedule parameter {k}", "from": sa.params[k],
                                    "to": sb.params[k]})
    pa, pb = a.planned_end, b.planned_end
    if pa is not None and pb is not None and pa.unit == pb.unit and pa.value != pb.value \
            and not any(c["what"] == "decay horizon" and c["from"] == pa.value
                        and c["to"] == pb.value for c in changes):
        changes.append({"what": f"planned end ({pb.name})", "from": pa.value, "to": pb.value,
                        "unit": pb.unit.value})
    if not changes:
        return []
    ev: dict[str, Any] = {"from_checkpoint": a.path, "to_checkpoint": b.path,
                          "changes": changes}
    lr_txt = ""
    if sa is not None and sb is not None and a.scheduler is not None:
        # The LR the old schedule gives at the resume point, and what the new one gives there.
        x = a.scheduler.value
        old, new = _lr(sa, x), _lr(sb, x)
        if old is not None and new is not None and not math.isclose(
                old, new, rel_tol=LR_RTOL, abs_tol=1e-15):
            ev["lr_at_resume_old_schedule"], ev["lr_at_resume_new_schedule"] = old, new
            lr_txt = (f"; at {a.scheduler.name} {number(x)} the LR jumps from {old:.6g} to "
                      f"{new:.6g}")
    what = ", ".join(f"{c['what']} {fmt_any(c['from'])} -> {fmt_any(c['to'])}"
                     for c in changes)
    kept = _horizon_kept(a, b, changes, ev)
    if kept:
        return [lrd114.RULE.finding(f"{a.name} -> {b.name}: {what}{kept}.",
                                    lrd114.ScheduleChanged(**ev), location=b.path)]
    return [lrd114.RULE.finding(
        f"{a.name} -> {b.name}: {what} (recomputed on resume, e.g. with another batch size, "
        f"accumulation or epoch count){lr_txt}.", lrd114.ScheduleChanged(**ev), location=b.path)]


def _horizon_kept(a: Point, b: Point, changes: list[dict[str, Any]],
                  ev: dict[str, Any]) -> str:
    """The run's planned end changed on a resume while the restored scheduler kept its
    horizon (``load_state_dict`` brings back ``T_max``/``total_iters``): the schedule no
    longer fits the plan. The harm with the numbers: where the decay ends against the new
    planned end, and the LR the kept schedule gives there. Empty when that is not it."""
    sa, sb, pb = a.state.schedule, b.state.schedule, b.planned_end
    if sa is None or sb is None or pb is None or sa.horizon is None or sb.horizon is None \
            or sa.horizon != sb.horizon or pb.unit != sb.unit or pb.value == sb.horizon \
            or [c["what"].split(" (")[0] for c in changes] != ["planned end"]:
        return ""
    h, end = float(sb.horizon), float(pb.value)
    at_end, peak = _lr(sb, end), sb.max_lr
    href = sb.refs.get("horizon")
    ev.update(restored_horizon=h, planned_end_now=end, lr_at_planned_end=at_end)
    head = (f" on resume, but the restored scheduler kept its horizon {number(h)} "
            f"({href or sb.source or 'its saved state'}, the same in both): the schedule no "
            "longer fits the new plan")
    if at_end is None:
        return head
    share = f" = {at_end / peak:.0%} of the peak {peak:.6g}" if peak else ""
    if h < end:
        at_h = _lr(sb, h)
        after = (f"its LR then stays at {at_h:.6g} for the last {number(end - h)}"
                 if at_h is not None and math.isclose(at_h, at_end, rel_tol=LR_RTOL,
                                                      abs_tol=1e-15) else
                 f"past it the {sb.kind} climbs back from {number(at_h) if at_h is not None else '?'}"
                 if at_h is not None and at_end > at_h else f"past it the {sb.kind} moves on")
        return (f"{head}: its decay ends at {number(h)} of the {number(end)} now planned, "
                f"{after}, and at the planned end {number(end)} it gives {at_end:.6g}{share}")
    return (f"{head}: at the planned end {number(end)} the decay is "
            f"{number(round(100 * end / h, 1))}% done and the LR is still {at_end:.6g}{share}")


def fmt_any(v: Any) -> str:
    return number(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else repr(v)


def _missing_scheduler(pts: list[Point]) -> list[Finding]:
    """A checkpoint without scheduler state whose optimizer LR is not the peak: a scheduler
    was moving the LR, and a resume from here builds a fresh one that starts over."""
    out = []
    for i, p in enumerate(pts):
        if p.scheduler is not None or p.optimizer_lr is None:
            continue
        if p.state.stateless:  # saved, and stateless by design: LRD133 places it by its LR
            continue
        peak, whence = _peak(pts, i)
        if peak is None or peak <= 0:
            continue
        lrs = p.state.optimizer_lrs
        if all(math.isclose(lr, peak, rel_tol=LR_RTOL) for lr in lrs):
            continue
        ev: dict[str, Any] = {"checkpoint": p.path, "optimizer_lrs": lrs, "peak_lr": peak,
                              "peak_from": whence}
        where = ""
        if p.updates is not None:
            ev["updates"] = {"counter": p.updates.name, "value": p.updates.value,
                             "unit": p.updates.unit.value}
            where = f" at {p.updates.name} {number(p.updates.value)}"
        other = next((q for q in reversed(pts[:i]) if q.scheduler is not None), None) or \
            next((q for q in pts[i + 1:] if q.scheduler is not None), None)
        also = ""
        if other is not None and other.scheduler is not None:
            there = other.scheduler
            ev["checkpoint_with_scheduler"] = other.path
            ev["scheduler_there"] = {"counter": there.name, "value": there.value}
            also = f" ({other.name} has {there.name} {number(there.value)})"
        out.append(lrd115.RULE.finding(
            f"{p.name} saves no scheduler state{where}, but its optimizer lr "
            f"{lrs[0]:.6g} is {lrs[0] / peak:.3g}x the peak {peak:.6g} ({whence}): a "
            f"scheduler was moving it{also}, and a resume from {p.name} restarts the "
            "schedule from step 0.", lrd115.SchedulerStateMissing(**ev), location=p.path))
    return out


def _lr_positions(p: Point) -> tuple[Counter, list[int]] | None:
    """(the optimizer's step, every whole position up to it where the stateless schedule
    gives the saved LR) of a point whose schedule saves no position and counts updates."""
    from lrdoctor.core.state import Unit
    from lrdoctor.schedules.solve import positions

    st, spec = p.state, p.state.schedule
    step = st.counter("optimizer.step")
    if not st.stateless or spec is None or spec.unit is not Unit.UPDATES or step is None \
            or step.value <= 0 or p.optimizer_lr is None:
        return None
    return step, positions(spec, p.optimizer_lr, int(step.value))


def _stateless_restart(pts: list[Point]) -> list[Finding]:
    """A schedule that saves no position (timm's ``step_update(num_updates)``) whose loop
    restarted its update count at 0 on a resume: at the later checkpoints the saved LR is
    the schedule at ``step - s_r``, where ``s_r`` is the optimizer step saved by an earlier
    checkpoint (the one resumed from), while the optimizer's own step was restored. Every
    number is read (LRs, steps) or the rebuilt schedule's; one finding, at the latest
    checkpoint where it still holds."""
    placed: list[tuple[int, Point, Counter, list[int]]] = []
    for i, p in enumerate(pts):
        got = _lr_positions(p)
        if got is not None:
            placed.append((i, p, got[0], got[1]))
    if len(placed) < 2:
        return []
    steps = {i: step.value for i, _, step, _ in placed}
    found: tuple[int, Point, Counter, float, int] | None = None  # (i, point, step, pos, r)
    for i, p, step, ts in placed:
        if step.value in ts:  # on schedule
            continue
        r = next((j for j in sorted(steps, reverse=True) if j < i and 0 < steps[j] < step.value
                  and step.value - steps[j] in ts), None)
        if r is None or (found is not None and found[4] != r):
            continue
        found = (i, p, step, step.value - steps[r], r)
    if found is None:
        return []
    i, b, step, pos, r = found
    a = pts[r]
    a_step = steps[r]
    lr = b.optimizer_lr
    assert lr is not None and b.state.schedule is not None
    same = next((pts[j] for j in sorted(steps) if j < i and steps[j] == pos
                 and pts[j].optimizer_lr is not None
                 and math.isclose(pts[j].optimizer_lr or 0.0, lr, rel_tol=LR_RTOL)), None)
    lr_ref = b.state.optimizer_lr_refs[0] if b.state.optimizer_lr_refs else "the optimizer"
    step_ref = step.ref or step.source
    echo = (f"; {b.name}'s LR {lr:.6g} is {same.name}'s LR (the schedule at {number(pos)} "
            "again)" if same is not None else "")
    expected = _lr(b.state.schedule, step.value)
    ev: dict[str, Any] = {
        "from_checkpoint": a.path, "to_checkpoint": b.path,
        "scheduler": {"counter": "position of the saved lr", "from": a_step, "to": pos,
                      "delta": pos - a_step, "unit": "optimizer updates"},
        "updates": _counter_ev(step, a_step, step.value),
        "expected_scheduler_delta": step.value - a_step, "run_rate": 1.0,
        "resumed_from": a.path, "restarted_near": a_step, "lr_at_scheduler": lr,
        "lr_at_updates": expected}
    return [lrd112.RULE.finding(
        f"{a.name} -> {b.name}: optimizer step {number(a_step)} -> {number(step.value)} "
        f"({step_ref}), but the saved lr {lr:.6g} ({lr_ref}) is the rebuilt schedule "
        f"({b.state.schedule.source}) at update {number(pos)} = {number(step.value)} - "
        f"{number(a_step)}, not at {number(step.value)} (where it gives "
        f"{number(expected) if expected is not None else '?'}): the loop's update count "
        f"restarted at 0 when the run resumed from {a.name} (optimizer step "
        f"{number(a_step)}) while the optimizer's step was restored, so the schedule "
        f"replayed its start{echo}.", lrd112.SchedulerRestarted(**ev), location=b.path)]


def _peak(pts: list[Point], i: int) -> tuple[float | None, str]:
    p = pts[i]
    init = p.state.facts.optimizer_initial_lrs
    if init:
        return float(init[0]), "the optimizer's initial_lr, set by a torch LR scheduler"
    if p.state.schedule is not None and p.state.schedule.max_lr:
        return p.state.schedule.max_lr, p.state.schedule.source or "the checkpoint's schedule"
    for q in pts:
        if q.state.schedule is not None and q.state.schedule.max_lr:
            return q.state.schedule.max_lr, f"the schedule of {q.name}"
    return None, ""


# ---------------------------------------------------------------- history

def history(states: list[RunState], findings: list[Finding] | None = None
            ) -> list[dict[str, Any]]:
    """One JSON-ready row per checkpoint: counters, deltas from the previous one, LRs, and
    the run-level codes whose interval ends there (for the trend table and the plot)."""
    pts = points(states)
    flagged: dict[str, list[str]] = {}
    for f in findings or []:
        key = f.evidence.get("to_checkpoint") or f.evidence.get("checkpoint")
        if key:
            flagged.setdefault(key, []).append(f.code)
    rows = []
    prev: Point | None = None
    for p in pts:
        row: dict[str, Any] = {
            "checkpoint": p.name, "path": p.path,
            "updates": _cval(p.updates, p.state), "scheduler": _cval(p.scheduler, p.state),
            "horizon": p.horizon,
            "horizon_unit": p.state.horizon_counts() if p.horizon is not None else None,
            "planned_end": _cval(p.planned_end, p.state),
            "optimizer_lr": p.optimizer_lr,
            "lr_at_scheduler": p.lr_at_scheduler, "lr_at_updates": p.lr_at_updates,
            "codes": sorted(set(flagged.get(p.path, []))),
        }
        if prev is not None:
            if p.updates is not None and prev.updates is not None:
                row["updates_delta"] = p.updates.value - prev.updates.value
            if p.scheduler is not None and prev.scheduler is not None:
                row["scheduler_delta"] = p.scheduler.value - prev.scheduler.value
        rows.append(row)
        prev = p
    return rows


def _cval(c: Counter | None, st: RunState) -> dict[str, Any] | None:
    """A counter's row cell, labelled by what it counts (:meth:`RunState.unit_of`)."""
    return None if c is None else {"name": c.name, "value": c.value, "unit": st.unit_of(c)}
