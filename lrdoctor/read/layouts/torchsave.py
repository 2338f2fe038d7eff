"""Hand-written torch loops: one ``torch.save`` dict per checkpoint file.

Typical shape::

    torch.save({"model": ..., "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "step": global_step, "epoch": e}, "ckpt.pt")

The optimizer and scheduler states are found under their usual names (or one
level down, e.g. ``{"state": {...}}``, or by shape: ``param_groups`` marks an
optimizer, ``last_epoch`` a scheduler). An ``LRScheduler``'s ``last_epoch``
counts ``scheduler.step()`` calls; its class is not saved, so it is identified
from the state's keys. ``LambdaLR``/``MultiplicativeLR`` save no function, so
their schedule cannot be rebuilt.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.repair import FormatPlan, Refusal, RepairTools, Target
from lrdoctor.core.state import Counter, RunState, ScheduleSpec, Unit
from lrdoctor.read import layouts
from lrdoctor.read.layouts import GENERIC, _common
from lrdoctor.read.layouts._torchstate import optimizer_info, torch_scheduler, torch_scheduler_kind
from lrdoctor.read.scan import grouping, listing, reading, refusal, shapes
from lrdoctor.read.scan.view import ScanView

NAME = "torch"

# ---------------------------------------------------------------- layout
# Files and checkpoints are found by content (lrdoctor.read.scan), not by name.

def _is_layout(path: Path) -> bool:
    path = _common.as_path(path)
    if path.is_file():
        return listing.is_pickle(path)
    return path.is_dir() and any(listing.is_pickle(f)
                                 for f in _safe_candidates(path))


claims = _common.claim_by_path(GENERIC, _is_layout)
detect = _common.detector("torchsave")


def _safe_candidates(path: Path) -> list[Path]:
    try:
        return listing.candidate_files(path)
    except UnusableInput:
        return []


def _is_pickle(f: Path, ckpt: grouping.Checkpoint) -> bool:
    """A pickle by its content (see :func:`listing.is_pickle`), or the one file the user
    named (read, so that a file that is no pickle gets its one-line reason)."""
    return listing.is_pickle(f) or f == ckpt.path


def find_checkpoints(path: Path) -> list[grouping.Checkpoint]:
    """Each checkpoint (path-like: a file, or a folder of files, with its files), oldest first."""
    path = _common.as_path(path)
    return _common.listed([c for c in grouping.run_checkpoints(path)
                           if any(_is_pickle(f, c) for f in c.files)],
                          "no checkpoint files (torch.save / pickle) here", path)


# ---------------------------------------------------------------- read

def read(path: Path | grouping.Checkpoint | ScanView) -> RunState:
    """The newest checkpoint under ``path`` (or the one given), read by content: the layout
    that claims what it holds best reads it on (:func:`read_view` with its normalisation);
    none claims it, it stays framework-blind."""
    view = content_view(path)
    framework = layouts.recognised(view)
    if framework is not None:
        return framework.read(view)
    return read_view(view)


class Recognised:
    """The layout side of a framework recognised by content (verl, SkyRL, Composer,
    torchtune): it claims a classified checkpoint its ``holds`` test says is laid out as
    the framework saves, lists what the generic content read lists, and reads one through
    that read with its ``normalise`` (its units, where its budget lives). A module binds
    its ``claims``, ``find_checkpoints`` and ``read`` to one of these."""

    def __init__(self, name: str, score: int, holds: Callable[[shapes.Scan], bool],
                 normalise: Callable[[shapes.Scan, RunState], None]) -> None:
        self.name, self.score, self.holds, self.normalise = name, score, holds, normalise

    def claims(self, scan: ScanView) -> int:
        """``score`` when the content read classified this checkpoint and ``holds`` it."""
        sc = scan.content
        return self.score if sc is not None and self.holds(sc) else 0

    def find_checkpoints(self, path: Path) -> list[grouping.Checkpoint]:
        """The checkpoints the generic content read finds."""
        return find_checkpoints(path)

    def read(self, ckpt: Path | grouping.Checkpoint | ScanView) -> RunState:
        """A view is one checkpoint the content read classified and found this framework's:
        read with its normalisation. Anything else goes through the generic read, which
        asks the registry about the checkpoint it picks (an older one may not be this
        framework's)."""
        if isinstance(ckpt, ScanView):
            return read_view(ckpt, self.name, self.normalise)
        return read(ckpt)


def read_checkpoint(ckpt: grouping.Checkpoint) -> RunState:
    """One checkpoint read by content (what the DCP and Lightning readers fall back on)."""
    return read(ckpt)


def content_view(ckpt: Path | grouping.Checkpoint | ScanView) -> ScanView:
    """The view of one checkpoint read by content (the newest under a path), classified
    once; a checkpoint with nothing readable is refused here."""
    if isinstance(ckpt, ScanView):
        return ckpt
    if not isinstance(ckpt, grouping.Checkpoint):
        ckpt = find_checkpoints(_common.as_path(ckpt))[-1]
    sc = reading.scan(ckpt)
    _require_readable(sc)
    return ScanView.of(sc)


def read_view(view: ScanView, fmt: str = NAME,
              normalise: Callable[[shapes.Scan, RunState], None] | None = None) -> RunState:
    """The framework-blind state of one classified checkpoint, with a recognised
    framework's ``normalise`` (its units, where its budget lives) applied first."""
    sc = view.content
    if sc is None:  # a view of an input: its newest checkpoint
        sc = content_view(view.path).content
        assert sc is not None  # content_view classifies
    st = build(sc, fmt=fmt)
    if normalise is not None:
        normalise(sc, st)
    from lrdoctor import epochs

    for cfg in sc.of(shapes.CONFIG):  # a loop's args Namespace, hparams, a config dict
        epochs.attach(st, cfg.value, cfg.where)
    from lrdoctor.read.layouts import _stateless

    _stateless.attach(sc, st)  # a scheduler that saves no position (timm)
    _finish(st)
    _require_training_state(st, sc.checkpoint)
    from lrdoctor.read.layouts._refs import itemize

    itemize(st, sc.dcp.values())  # a field of a DCP folder: the item that holds it
    return st


def _require_training_state(st: RunState, ckpt: grouping.Checkpoint) -> None:
    """A path holding no training state at all (``torch.save({'a': 1})``, a model-only
    file) is unusable input, exit 2 like an empty folder: there is nothing to judge, and
    a warning a gate lets through would call it checked."""
    if (st.scheduler_progress is None and st.schedule is None and not st.optimizer_lrs
            and not st.counters and st.planned_end is None and not st.unreadable):
        raise refusal.nothing_found("no training state here (no scheduler, optimizer or "
                                    "trainer counters)", ckpt.path)


def _require_readable(sc: shapes.Scan) -> None:
    """Discovery reads what it can; a checkpoint with nothing readable is unusable input."""
    pickles = [f for f in sc.checkpoint.files if _is_pickle(f, sc.checkpoint)]
    read = [f for f in pickles if str(f) in sc.objects]
    if pickles and not read:
        # Re-read the first for its one-line reason (corrupt, truncated, not a pickle).
        _common.load(pickles[0])
    if len(pickles) == 1 and read and not isinstance(sc.objects[str(read[0])], dict):
        raise UnusableInput(f"expected a dict of training state, found "
                            f"{sc.what(str(read[0]))}", str(read[0]))


# Trainer counters by the last component of their key, each read as counter ``loop.<key>``
# in its unit. Budgets (the planned end) and settings are kept apart from progress.
PROGRESS_KEYS: dict[str, Unit] = {
    **dict.fromkeys(("global_step", "global_steps", "step", "steps_run", "current_step",
                     "optimizer_step", "update", "updates", "num_updates", "iteration",
                     "iterations", "iter", "skipped_steps"), Unit.UPDATES),
    **dict.fromkeys(("micro_step", "micro_steps"), Unit.MICRO_STEPS),
    **dict.fromkeys(("epoch", "epochs_run", "current_epoch"), Unit.EPOCHS),
    **dict.fromkeys(("consumed_samples", "consumed_train_samples", "skipped_train_samples",
                     "global_samples"), Unit.SAMPLES),
}
PLANNED_KEYS: dict[str, Unit] = {
    **dict.fromkeys(("total_steps", "max_steps", "num_training_steps", "train_steps",
                     "total_updates", "train_iters", "total_training_steps"), Unit.UPDATES),
    **dict.fromkeys(("num_epochs", "epochs", "max_epochs", "total_epochs"), Unit.EPOCHS),
    "train_samples": Unit.SAMPLES,
}
# Counters preferred as "where the scheduler should be" (one step per update), in order.
NOMINAL_ORDER = ("optimizer.step", "loop.global_step", "loop.global_steps", "loop.iteration",
                 "loop.optimizer_step", "loop.num_updates", "loop.step", "loop.steps_run",
                 "loop.current_step", "loop.update", "loop.updates", "loop.iter",
                 "loop.iterations")


def build(sc: shapes.Scan, fmt: str = NAME) -> RunState:
    """A :class:`RunState` from what discovery found, framework-blind.

    The scheduler state, the optimizer it drives and every trainer counter are
    taken wherever they were found; each counter's ``source`` is ``file:key``.
    """
    ck = sc.checkpoint
    st = RunState(format=fmt, path=str(ck.path))
    st.notes.extend(sc.notes)
    st.unreadable = dict(sc.unread)
    if sc.skipped:  # DCP items left unread ("file:key" -> why): in --json beside the notes
        st.extras["dcp_skipped"] = dict(sc.skipped)
    sched = _pick_scheduler(sc, st)
    opt_found = _pick_optimizer(sc, sched)
    opt = optimizer_info(opt_found.value) if opt_found else None
    if opt_found is not None and opt is not None:
        st.optimizer_lrs = opt["lrs"]
        st.optimizer_lr_refs = [opt_found.ref.child(*k) for k in opt["lr_keys"]]
        if opt["step"] is not None:
            at = opt["step_key"]
            st.counters.append(Counter("optimizer.step", opt["step"], Unit.UPDATES,
                                       opt_found.where,
                                       opt_found.ref.child(*at) if at is not None else None))
            if len(opt["steps_distinct"]) > 1:
                st.notes.append(f"optimizer params disagree on step: {opt['steps_distinct']}")
        elif opt["unreadable_steps"]:
            st.notes.append("optimizer step tensors could not be read")
    else:
        st.notes.append("no optimizer state found")
    if sched is not None:
        _read_found_scheduler(st, sched, opt, sc.objects.get(sched.file))
    _read_counters(sc, st)
    if st.planned_end is None and sched is not None and sched.kind == shapes.SCHED_MEGATRON:
        from lrdoctor.read.layouts._megatron_core import weight_decay_end

        st.planned_end = weight_decay_end(sched.value, sched.ref, sched.where, Unit.UPDATES)
    # The chosen states and their twins in the other rank files (same key, same shape).
    used = [h.file for h in sc.found for pick in (sched, opt_found)
            if pick is not None and h.kind == pick.kind and h.key == pick.key]
    used += [c.ref.file for c in st.counters if c.ref is not None]  # the counters' files
    for f in sc.files_read:
        if f in used and f not in st.files:
            st.files.append(f)
    for f in sc.files_read:  # every file read is named: the ones not used last
        if f not in st.files:
            st.files.append(f)
    st.facts.files_used = [f for f in st.files if f in used]
    if sched is None:
        st.notes.append("no LR scheduler state found in " + _scanned(sc))
        # What each file holds instead (LRD111 names it: weights only, an unrelated dict).
        st.facts.contents = {f: sc.what(f) for f in sc.files_read[:8]}
    if len(sc.files_read) == 1:
        obj = sc.objects[sc.files_read[0]]
        if isinstance(obj, dict):
            st.extras["top_level_keys"] = [str(k) for k in list(obj)[:40]]
    return st


def _scanned(sc: shapes.Scan) -> str:
    names = [reading.relpath(f, sc.checkpoint.path if sc.checkpoint.path.is_dir()
                              else sc.checkpoint.path.parent) for f in sc.files_read]
    return (f"{len(names)} file(s): " + ", ".join(names[:8])
            + (" ..." if len(names) > 8 else "")) if names else "no readable file"


def _pick_scheduler(sc: shapes.Scan, st: RunState) -> shapes.Found | None:
    """The scheduler state to judge: megatron-core's, else torch's, else DeepSpeed's.

    Several (one per rank file) are compared; disagreement is a note.
    """
    for kind in shapes.SCHEDULER_KINDS:
        hits = sc.of(kind)
        if not hits:
            continue
        first = hits[0]
        same_key = [h for h in hits[1:] if h.key == first.key]
        others = [h for h in hits[1:] if h.key != first.key and h.file == first.file]
        if same_key:
            differ = [h.file for h in same_key if _progress_of(h) != _progress_of(first)]
            st.extras["ranks_agree"] = not differ
            if differ:
                st.notes.append(f"{len(differ)} other file(s) hold a different scheduler "
                                f"progress than {first.where}: {', '.join(differ[:3])}")
        if others:
            st.notes.append(f"{len(others) + 1} schedulers in {first.file}; reading "
                            f"{first.key or 'the top level'}")
        return first
    return None


def _progress_of(f: shapes.Found) -> float | None:
    v = f.value
    for k in ("last_epoch", "num_steps", "last_batch_iteration", "event_index"):
        if k in v:
            return _common.number(v[k])
    return None


def _pick_optimizer(sc: shapes.Scan, sched: shapes.Found | None) -> shapes.Found | None:
    hits = sc.of(shapes.OPTIMIZER)
    if not hits:
        return None
    if sched is not None:
        same = [h for h in hits if h.file == sched.file]
        if same:
            return same[0]
    return hits[0]


def _read_found_scheduler(st: RunState, sched: shapes.Found,
                          opt: _common.OptimizerSummary | None, root: object = None) -> None:
    src = sched.where
    if sched.kind == shapes.SCHED_MEGATRON:
        from lrdoctor.read.layouts._megatron_core import schedule_from_state, scheduler_refs
        key = shapes.scheduler_key(sched.value, "num_steps")
        st.schedule, st.scheduler_progress = schedule_from_state(
            sched.value, src, Unit.UPDATES, _subkey(sched, key))
        st.scheduler_progress.ref, st.schedule.refs = scheduler_refs(sched.ref, sched.value)
        st.extras["scheduler_class"] = "megatron-core OptimizerParamScheduler"
    elif sched.kind == shapes.SCHED_TORCH:
        _read_scheduler(st, sched.value, src, opt, sched.ref)
        prog = st.scheduler_progress
        if prog is not None and sched.key and prog.source == f"{src}:last_epoch":
            prog.source = _subkey(sched, "last_epoch")  # file:key.last_epoch
    elif sched.kind == shapes.SCHED_CYCLICAL:
        _read_cyclical(st, sched, root, opt)
    elif sched.kind == shapes.SCHED_PIECEWISE:
        _read_piecewise(st, sched)
    else:  # DeepSpeed's own schedulers keep only last_batch_iteration (from -1)
        lbi = _common.number(sched.value.get("last_batch_iteration"))
        st.extras["scheduler_class"] = "DeepSpeed scheduler"
        if lbi is not None:
            st.scheduler_progress = Counter("scheduler.last_batch_iteration + 1", lbi + 1,
                                            Unit.UPDATES, _subkey(sched, "last_batch_iteration"),
                                            sched.ref.child("last_batch_iteration"),
                                            ref_offset=1)
        st.notes.append(f"{src}: a DeepSpeed scheduler state keeps only its progress; its "
                        "schedule lives in the DeepSpeed config")


def _read_cyclical(st: RunState, sched: shapes.Found, root: object = None,
                   opt: _common.OptimizerSummary | None = None) -> None:
    """An event-indexed cyclical scheduler: progress = the calls it took (its events),
    from ``event_index`` and the cycles before it, plus those of the schedulers
    concatenated before it (a warm-up); the schedule from its first cycle."""
    from lrdoctor.schedules import lr_or_none
    from lrdoctor.schedules.cyclical import SHAPES, concatenated, total_calls

    v, src = sched.value, sched.where
    st.extras["scheduler_class"] = "cyclical cosine param scheduler (event_index)"
    parent: object = None
    if len(sched.path) >= 2 and sched.path[-2] == "schedulers" and root is not None:
        try:
            parent = shapes.follow(root, sched.path[:-2])
        except KeyError:
            parent = None
    try:
        got = total_calls(v)
        concat = concatenated(parent, v)
    except (TypeError, ValueError, OverflowError, ZeroDivisionError):
        got = concat = None
    if concat is None:
        st.notes.append(f"{src}: concatenated after other schedulers and not the one now "
                        "driving the LR: its calls are not the run's, progress unknown")
        return
    if got is None:
        st.notes.append(f"{src}: the sizes of its {v.get('cycle')} finished cycles cannot be "
                        f"derived from cycle_size {v.get('cycle_size')} and cycle_mult "
                        f"{v.get('cycle_mult')}: its progress is unknown")
        return
    calls, params, start, end = got
    offset, before = concat
    cycle = int(v.get("cycle", 0) or 0)
    name = "scheduler.event_index" if cycle == 0 else (
        f"scheduler.event_index {v['event_index']} + {cycle} finished cycle(s)")
    if offset:
        name += f" + {offset} warm-up call(s) before it (durations)"
        params = {**params, "offset": offset, "before": before}
    ref = sched.ref.child("event_index") if cycle == 0 and not offset else None
    st.scheduler_progress = Counter(name, calls + offset, Unit.UPDATES,
                                    _subkey(sched, "event_index"), ref)
    specs = {kind: ScheduleSpec("cyclical", kind, start, Unit.UPDATES, min_lr=end,
                                horizon=float(offset + params["cycle_size"]), params=params,
                                source=src) for kind in SHAPES}
    # The saved keys are the same for a cosine and a linear cycle: the saved LR says which.
    lrs = opt["lrs"] if opt is not None else []
    fits = [k for k, sp in specs.items() if lrs and all(
        (m := lr_or_none(sp, calls + offset)) is not None
        and abs(m - lr) <= 1e-9 * max(abs(lr), 1e-12) for lr in lrs)]
    st.schedule = specs[fits[0] if fits else "cosine"]
    if fits:
        also = (f"; the {' and '.join(fits[1:])} model(s) give the same value there"
                if fits[1:] else "")
        st.notes.append(f"{src}: modelled as a {fits[0]} cycle: the saved lr {lrs[0]:g} is its "
                        f"value after {calls + offset:g} calls (the saved keys fit cosine and "
                        f"linear cycles alike){also}")
    else:
        st.notes.append(f"{src}: the saved keys fit cosine and linear cycles alike and the "
                        "saved lr fits neither; modelled as the cosine")


def _read_piecewise(st: RunState, sched: shapes.Found) -> None:
    """An event-indexed piecewise-linear scheduler: progress = its ``event_index`` (calls),
    unless it is one part of a concatenation, whose other parts' calls it does not count."""
    v, src = sched.value, sched.where
    st.extras["scheduler_class"] = "piecewise-linear param scheduler (event_index)"
    if "schedulers" in sched.path:
        st.notes.append(f"{src}: a piecewise-linear scheduler inside a concatenation of "
                        "schedulers: its event_index counts only its own calls, progress unknown")
        return
    ei = _common.number(v.get("event_index"))
    if ei is None:
        return
    st.scheduler_progress = Counter("scheduler.event_index", ei, Unit.UPDATES,
                                    _subkey(sched, "event_index"),
                                    sched.ref.child("event_index"))
    ms, vals = list(v["milestones"]), [float(x) for x in v["values"]]
    st.schedule = ScheduleSpec("cyclical", "piecewise", max(vals), Unit.UPDATES,
                               min_lr=min(vals), horizon=float(ms[-1]) + 1,
                               params={"milestones": ms, "values": vals}, source=src)


def _subkey(f: shapes.Found, key: str) -> str:
    return f"{f.file}:{f.key}.{key}" if f.key else f"{f.file}:{key}"


def _read_counters(sc: shapes.Scan, st: RunState) -> None:
    for f in sc.found:
        if f.kind not in (shapes.COUNTER, shapes.SETTING):
            continue
        last = f.key.rsplit(".", 1)[-1]
        if f.kind == shapes.COUNTER and last in PROGRESS_KEYS:
            name = f"loop.{last}"
            if st.counter(name) is None:
                st.counters.append(Counter(name, f.value, PROGRESS_KEYS[last], f.where, f.ref))
        elif last in PLANNED_KEYS and st.planned_end is None and f.value > 0:
            st.planned_end = Counter(f"loop.{last}", f.value, PLANNED_KEYS[last], f.where, f.ref)
    if sc.checkpoint.step is not None:
        st.extras["checkpoint_step"] = sc.checkpoint.step


def _finish(st: RunState) -> None:
    """Nominal progress and trainer progress from the invariants that hold.

    Whether or not the schedule could be rebuilt, the scheduler's calls are
    compared with the optimizer's updates, else with the loop's own counters
    (SGD keeps no ``step``). A scheduler whose progress equals an epoch
    counter is stepped per epoch: that is its unit, not a bug.
    """
    prog = st.scheduler_progress
    if st.planned_end is not None and st.trainer_progress is None:
        st.trainer_progress = next((c for c in st.counters if c.unit == st.planned_end.unit
                                    and c.name != "optimizer.step"), None) or next(
            (c for c in st.counters if c.unit == st.planned_end.unit), None)
    if prog is None or st.nominal_progress is not None:
        return
    for c in st.counters:
        if c.unit is Unit.EPOCHS and c.value > 0 and prog.value in (c.value, c.value + 1) \
                and prog.unit is not Unit.EPOCHS:
            st.notes.append(f"{prog.name} {prog.value:g} matches {c.name} {c.value:g}: "
                            "the scheduler is stepped once per epoch")
            st.nominal_progress = Counter(c.name, prog.value, prog.unit,
                                          f"{c.name} (one scheduler step per epoch)")
            return
    if prog.unit is Unit.EPOCHS:  # stepped with (fractional) epochs: the loop's epoch
        for c in st.counters:
            if c.unit is Unit.EPOCHS and c is not prog and abs(prog.value - c.value) <= 1:
                st.nominal_progress = Counter(c.name, prog.value, prog.unit,
                                              f"{c.name} = {c.value:g} (the epoch the loop "
                                              "stepped the scheduler with)")
                return
    if prog.unit is not Unit.UPDATES:
        return
    for name in NOMINAL_ORDER:
        loop = st.counter(name)
        if loop is not None and loop.value > 0:
            why = ("one scheduler step per optimizer update" if name == "optimizer.step"
                   else "one scheduler step per loop step")
            st.nominal_progress = Counter(loop.name, loop.value, Unit.UPDATES,
                                          f"{loop.name} ({why})")
            return


def _read_scheduler(st: RunState, sched: _common.Loaded, src: str,
                    opt: _common.OptimizerSummary | None,
                    ref: FieldRef | None = None) -> None:
    """Schedule spec and progress through the one shared torch-scheduler converter."""
    st.extras["scheduler_class"] = torch_scheduler_kind(sched) or "unknown"
    for k in ("_step_count", "_last_lr", "base_lrs"):
        if k in sched:
            st.extras[f"scheduler.{k}"] = sched[k]
    spec, progress, notes = torch_scheduler(sched, unit=Unit.UPDATES, source=src, opt=opt,
                                            ref=ref)
    st.schedule, st.scheduler_progress = spec, progress
    st.notes.extend(notes)


# ---------------------------------------------------------------- repair (lrdoctor fix)

def repair(path: Path, state: RunState, target: Target, tools: RepairTools) -> FormatPlan:
    """The edits of ``lrdoctor fix`` for a checkpoint read by content (this layout and the
    frameworks refined from it: ROLL's bare ``scheduler.pt``, verl, SkyRL, Composer,
    torchtune).

    A single file is edited through the reader's refs (``scheduler_progress.ref``,
    ``optimizer_lr_refs``), by shape only where they name nothing in it. Several files go
    where the read found the state (``state.facts.files_used``), by shape: torch
    ``LRScheduler`` states, megatron-core scheduler states, the optimizer's param-group
    ``lr``; where no scheduler state is saved (torchtune), the counter the reader named with
    a FieldRef. A folder checkpoint is copied whole; a single file alone (a directory in
    gives a directory out, holding it by name)."""
    import os

    from lrdoctor.read.bytes.safeload import PICKLE_SUFFIXES

    ckpt = Path(state.path)
    used = [Path(f) for f in state.facts.files_used or [state.path]]
    used = [f for f in used if f.is_file() and (f.suffix.lower() in PICKLE_SUFFIXES or f == ckpt)]
    if not used:
        raise Refusal("no checkpoint file holds the state inspect read", str(path))
    if ckpt.is_file() and used == [ckpt]:
        root = path if path.is_dir() else ckpt
        rel = str(ckpt.relative_to(root)) if root.is_dir() else ckpt.name
        changes, notes = tools.ref_state(rel, tools.load(ckpt), ckpt, state, target)
        return FormatPlan(root=root, files=[rel], changes=changes, notes=notes)
    # The folder holding the checkpoint and every file used (torchtune keeps its
    # recipe_state/ beside the epoch folders: the copy is then the run folder).
    root = Path(os.path.commonpath([str(ckpt if ckpt.is_dir() else ckpt.parent)]
                                   + [str(f.parent) for f in used]))
    objs = {f: tools.load(f) for f in used}
    rels = {f: str(f.relative_to(root)) for f in used}
    changes, notes = tools.content_state(objs, rels, target, state)
    return FormatPlan(root=root, files=None, changes=changes, notes=notes)
