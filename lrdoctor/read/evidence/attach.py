"""Attach the evidence to a :class:`~lrdoctor.core.state.RunState` after a reader built it.

Runs at the end of ``formats.read`` (one place for every layout): the items come from
what the reader loaded (:mod:`lrdoctor.read.bytes.seen`), the config files beside the
checkpoint, and the reader's own typed facts. Then one repair of the *model*, never of
the input: a nominal counter the trainer never filled (0 while the scheduler and the
optimizer moved on) is replaced by an independent counter that was filled, so the
comparison is made instead of silently skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from lrdoctor.core.evidence import EvidenceItem, first, logged_lr_items
from lrdoctor.core.evidence import Quantity as Q
from lrdoctor.core.evidence import Role as R
from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.state import Counter, RunState, Unit
from lrdoctor.read.bytes.storage import RemotePath
from lrdoctor.read.evidence.collect import collect

_UNIT_QUANTITY = {Unit.SAMPLES: Q.SAMPLES, Unit.UPDATES: Q.ITERATIONS,
                  Unit.MICRO_STEPS: Q.MICRO_BATCHES, Unit.ROLLOUT_STEPS: Q.ROLLOUTS,
                  Unit.EPOCHS: Q.EPOCHS, Unit.SCHEDULER_CALLS: Q.SCHEDULER_CALLS}


def _ref(c: Counter) -> FieldRef:
    return c.ref if c.ref is not None else FieldRef(c.source or c.name)


def from_state(st: RunState) -> list[EvidenceItem]:
    """The reader's own facts as items (layouts whose loads are not recorded, such as a
    torch.distributed.checkpoint read item by item, still give their counters). Logged
    LRs are not among them: :func:`attach` adds their summary (:func:`logged_lr_items`)."""
    out: list[EvidenceItem] = []
    if st.scheduler_progress is not None:
        out.append(EvidenceItem(R.PROGRESS, Q.SCHEDULER_CALLS, float(st.scheduler_progress.value),
                            _ref(st.scheduler_progress)))
    for c in st.counters:
        q = Q.OPTIMIZER_STEPS if c.name == "optimizer.step" else _UNIT_QUANTITY[c.unit]
        out.append(EvidenceItem(R.PROGRESS, q, float(c.value), _ref(c)))
    if st.planned_end is not None:
        out.append(EvidenceItem(R.PLANNED_END, _UNIT_QUANTITY[st.planned_end.unit],
                            float(st.planned_end.value), _ref(st.planned_end)))
    spec = st.schedule
    if spec is not None:
        src = FieldRef(spec.source or "schedule")
        if spec.horizon is not None:
            out.append(EvidenceItem(R.HORIZON, Q.SCHEDULER_CALLS, float(spec.horizon),
                                spec.refs.get("horizon", src)))
        if spec.warmup:
            out.append(EvidenceItem(R.WARMUP, Q.SCHEDULER_CALLS, float(spec.warmup),
                                spec.refs.get("warmup", src)))
    return out


def attach(st: RunState, ckpt: Any, loaded: list[tuple[str, str, Any]]) -> None:
    """Fill ``st.evidence`` and compare through an independent counter where the nominal
    one was never filled."""
    path = getattr(ckpt, "path", ckpt)
    items: list[EvidenceItem] = []
    if isinstance(path, (Path, RemotePath)):  # a URL's files are read as a folder's are
        try:
            step_counter = st.counter("optimizer.step")
            # A URL's RemotePath has the part of pathlib the collector uses.
            items = collect(cast(Path, path), loaded, step=step_counter.value if step_counter is not None else None)
        except (OSError, RecursionError, ValueError, TypeError):  # evidence is best effort
            items = []
        items = [e for e in items if _finite(e.value)]
    known = {(e.role, e.quantity, e.value) for e in items}
    items += [e for e in from_state(st) if (e.role, e.quantity, e.value) not in known]
    # The LRs the run logged (log_history, metrics.csv, TensorBoard), each at its step and
    # field; never merged with a saved LR of the same value: one is the LR now, the other
    # the LR at a logged step.
    items += logged_lr_items(st.lr_log)
    st.evidence = items
    _recognise_lambda(st)
    _unfilled_nominal(st)
    _nominal_from_plan(st)


def _recognise_lambda(st: RunState) -> None:
    """A scheduler whose rule was not saved (a LambdaLR) but whose saved LR, at its saved
    position, is exactly one transformers helper's with the warmup and the training steps
    the files hold (:mod:`lrdoctor.schedules.recognise`): that helper is the schedule, and
    where each number came from is said."""
    prog = st.scheduler_progress
    if st.schedule is not None or prog is None or prog.value <= 0 or not st.optimizer_lrs:
        return
    items = st.evidence
    peak = next((e for e in items if e.role is R.LR and not e.logged
                 and (e.name == "initial_lr" or "base_lrs" in e.where) and e.value > 0), None)
    warm = first(items, R.WARMUP, Q.SCHEDULER_CALLS)
    ends = [e for e in items if e.value > 0 and (
        (e.role is R.HORIZON and e.quantity is Q.SCHEDULER_CALLS)
        or (e.role is R.PLANNED_END and e.quantity is Q.ITERATIONS))]
    if peak is None or warm is None or not ends:
        return
    from lrdoctor.schedules.recognise import from_lr_points

    lr, unit = st.optimizer_lrs[0], prog.unit
    found = {(e.value, s.kind): (e, s) for e in ends
             if (s := from_lr_points([(prog.value, lr)], peak.value, warm.value, e.value,
                                     unit, source=f"recognised from the saved LR {lr:.6g}"))}
    if len({k for _, k in found}) != 1:
        return  # none, or several horizons/helpers fit: nothing recognised
    end, spec = next(iter(found.values()))
    spec.refs.update(horizon=end.ref, warmup=warm.ref)
    st.schedule = spec
    st.notes.append(
        f"schedule recognised from the saved LR: transformers' {spec.kind} helper with "
        f"num_warmup_steps {warm.value:g} ({warm.where}) and num_training_steps "
        f"{end.value:g} ({end.where}) gives {lr:.6g} ({st.optimizer_lr_refs[0] if st.optimizer_lr_refs else 'optimizer lr'}) "
        f"at {prog.name} {prog.value:g} on base LR {peak.value:g} ({peak.where}); no other "
        "helper does")


def _finite(x: float) -> bool:
    return x == x and abs(x) < 1e15


def _unfilled_nominal(st: RunState) -> None:
    """``consumed_train_samples`` saved as 0 while the scheduler and the optimizer have
    moved: the trainer never filled it. The optimizer's own step count (times the global
    batch when the scheduler counts samples) is the independent counter to compare with."""
    nominal, prog = st.nominal_progress, st.scheduler_progress
    if nominal is None or prog is None or nominal.value != 0 or prog.value <= 0:
        return
    opt = first(st.evidence, R.PROGRESS, Q.OPTIMIZER_STEPS)
    if opt is None or opt.value <= 0:
        return
    value, how = opt.value, f"optimizer step {opt.value:g} ({opt.where})"
    if nominal.unit is Unit.SAMPLES:
        spu = st.samples_per_update
        gbs = first(st.evidence, R.FACTOR, Q.GLOBAL_BATCH)
        if not spu and gbs is not None and gbs.value > 0:
            spu = gbs.value
        if not spu:
            return
        value, how = opt.value * spu, f"{how} x global batch {spu:g}"
    st.notes.append(f"{nominal.source or nominal.name} is 0 while {prog.name} is "
                    f"{prog.value:g} and the optimizer stepped {opt.value:g} times: the trainer "
                    f"never filled it; compared with {how} instead")
    st.nominal_progress = Counter(f"{how}", value, nominal.unit,
                                  f"{how} ({nominal.name} is 0: never filled)", ref=opt.ref)


def _nominal_from_plan(st: RunState) -> None:
    """No nominal counter was read, but the schedule's horizon equals the planned end in
    optimizer updates: the schedule was sized for one call per update, so the optimizer's
    own step count is where the scheduler should be. Without this, a scheduler at 2x the
    optimizer's step beside ``max_updates == T_max`` could only be "not judged"."""
    prog, spec = st.scheduler_progress, st.schedule
    if (st.nominal_progress is not None or prog is None or spec is None
            or spec.unit is not Unit.UPDATES or not spec.horizon or spec.horizon <= 0):
        return
    plan = next((e for e in st.evidence if e.role is R.PLANNED_END
                 and e.quantity is Q.ITERATIONS and e.value > 0), None)
    opt = first(st.evidence, R.PROGRESS, Q.OPTIMIZER_STEPS)
    if plan is None or opt is None or opt.value <= 0:
        return
    if abs(plan.value - spec.horizon) > 0.01 * spec.horizon:
        return
    how = (f"optimizer step {opt.value:g} ({opt.where}); the horizon {spec.horizon:g} equals "
           f"the planned end {plan.value:g} ({plan.where}): one scheduler call per update")
    st.nominal_progress = Counter(f"optimizer step ({opt.where})", opt.value, Unit.UPDATES,
                                  how, ref=opt.ref)
