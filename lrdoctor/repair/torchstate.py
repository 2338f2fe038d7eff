"""The scheduler-state arithmetic of a repair: torch ``LRScheduler``, megatron-core
``OptimizerParamScheduler`` and optimizer state dicts, found by their shape.

Framework-blind: how a scheduler state moves to a new progress (``last_epoch`` and
``_step_count``, ``num_steps``, the horizon field, ``_last_lr``, the param-group ``lr``)
is the same whichever trainer saved it. *Where* a layout keeps that state (which file,
which key, which optimizer goes with it) is the layout's own knowledge, in the ``repair``
function of its module in :mod:`lrdoctor.read.layouts`; the layout calls this arithmetic
through :data:`TOOLS` (the :class:`~lrdoctor.core.repair.RepairTools` protocol), handed
in by the engine, because reading must not import ``repair/``. The DCP writer
(:mod:`lrdoctor.repair.dcp`) uses the same functions on the items it re-nests.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lrdoctor.core.repair import Change, Key, Refusal, Target, get_at, walk
from lrdoctor.read.scan.shapes import SCHEDULER_KEYS, is_megatron_scheduler, is_torch_scheduler
from lrdoctor.read.scan.shapes import is_optimizer as discover_is_optimizer
from lrdoctor.repair.writer import load_pickle
from lrdoctor.schedules import group_lr
from lrdoctor.schedules.torch_builtin import HORIZON_FIELD

if TYPE_CHECKING:
    from lrdoctor.core.fieldref import FieldRef
    from lrdoctor.core.state import RunState

# Horizon fields of torch's built-in schedulers (state_dict() keys): the one table.
HORIZON_KEYS = tuple(dict.fromkeys(h for k, h in HORIZON_FIELD.items() if k != "OneCycleLR"))


def is_scheduler(d: Any) -> bool:
    """A torch LRScheduler state: discovery's one definition, with the ``last_epoch`` a
    repair moves."""
    return is_torch_scheduler(d) and "last_epoch" in d


def is_optimizer(d: Any) -> bool:
    """Discovery's optimizer shape, every param group with the ``lr`` a repair sets."""
    return discover_is_optimizer(d) and all(isinstance(g, dict) and "lr" in g
                                            for g in d["param_groups"])


def find(obj: Any, pred: Callable[[Any], bool]) -> list[Key]:
    return [k for k, v in walk(obj) if pred(v)]


def scheduler_changes(file: str, obj: Any, key: Key, target: Target,
                      lrs: list[float] | None) -> list[Change]:
    """last_epoch/_step_count to the new progress, horizon, and _last_lr."""
    sd = get_at(obj, key)
    out: list[Change] = []
    old = sd["last_epoch"]
    new = _as_int(target.progress, "last_epoch")
    if new != old:
        out.append(Change(file, key + ("last_epoch",), old, new, why=target.policy))
        if isinstance(sd.get("_step_count"), int):
            out.append(Change(file, key + ("_step_count",), sd["_step_count"],
                              sd["_step_count"] + (new - old), why="last_epoch + 1"))
    if target.horizon is not None:
        if "_schedule_phases" in sd or "total_steps" in sd:
            raise Refusal("OneCycleLR precomputes its phases from total_steps: "
                          "--policy extend-horizon cannot move it (use --policy nominal)")
        hk = next((h for h in HORIZON_KEYS if h in sd), None)
        if hk is None:
            raise Refusal("this torch scheduler saves no horizon (LambdaLR keeps it in a "
                          "lambda): set the new horizon in the training code, or use "
                          "--policy nominal")
        out.append(Change(file, key + (hk,), sd[hk], _as_int(target.horizon, hk),
                          why="extend-horizon"))
    if lrs is not None and isinstance(sd.get("_last_lr"), list) \
            and len(sd["_last_lr"]) == len(lrs) and list(sd["_last_lr"]) != lrs:
        out.append(Change(file, key + ("_last_lr",), list(sd["_last_lr"]), lrs,
                          why="LR at the new progress"))
    return out


def group_lrs(opt_sd: dict[str, Any], target: Target) -> list[float] | None:
    """Per param-group LR at the target; None when the schedule is unknown."""
    lrs = [group_lr(target.schedule, target.progress, g) for g in opt_sd["param_groups"]]
    known = [float(x) for x in lrs if x is not None]
    return known if len(known) == len(lrs) else None


def optimizer_changes(file: str, obj: Any, key: Key, lrs: list[float] | None) -> list[Change]:
    if lrs is None:
        return []
    sd = get_at(obj, key)
    out = []
    for i, (g, lr) in enumerate(zip(sd["param_groups"], lrs, strict=True)):
        if float(g["lr"]) != lr:
            out.append(Change(file, key + ("param_groups", i, "lr"), g["lr"], lr,
                              why="schedule's LR at the new progress"))
    return out


def _as_int(x: float, name: str) -> int:
    r = round(x)
    if abs(x - r) > 1e-9:
        raise Refusal(f"{name} must be an integer but the repair gives {x:g}: "
                      "give --progress N (or --k that divides it)")
    return int(r)


def plan_torch_state(file: str, obj: Any, target: Target) -> tuple[list[Change], list[str]]:
    """Changes for the scheduler(s) that hold ``target.progress_before`` and their optimizer."""
    notes: list[str] = []
    scheds = [k for k in find(obj, is_scheduler)
              if get_at(obj, k)["last_epoch"] == target.progress_before]
    opts = find(obj, is_optimizer)
    if not scheds:
        raise Refusal(f"no torch scheduler state with last_epoch "
                      f"{target.progress_before:g}", file)
    if len(opts) > 1 and len(opts) != len(scheds):
        raise Refusal(f"{len(opts)} optimizers and {len(scheds)} schedulers: cannot "
                      "tell which scheduler drives which optimizer", file)
    changes: list[Change] = []
    for i, sk in enumerate(scheds):
        ok = opts[i] if len(opts) == len(scheds) else (opts[0] if opts else None)
        lrs = group_lrs(get_at(obj, ok), target) if ok is not None else None
        changes += scheduler_changes(file, obj, sk, target, lrs)
        if ok is not None:
            changes += optimizer_changes(file, obj, ok, lrs)
    return changes, notes


def plan_scheduler_file(sfile: Path, ofile: Path | None, target: Target,
                        ) -> tuple[list[Change], bool, list[float] | None]:
    """Changes for a scheduler saved in a file of its own and the optimizer file beside it
    (accelerate ``scheduler.bin``/``optimizer.bin``, HF ``scheduler.pt``/``optimizer.pt``).

    Returns (changes, whether ``ofile`` held param groups, the new group LRs or None).
    """
    sched = load_pickle(sfile)
    if not is_scheduler(sched):
        raise Refusal("not a torch LRScheduler state dict", str(sfile))
    opt = load_pickle(ofile) if ofile is not None else None
    opt_file = ofile if opt is not None and is_optimizer(opt) else None
    lrs = group_lrs(opt, target) if opt_file is not None and opt is not None else None
    changes = scheduler_changes(sfile.name, sched, (), target, lrs)
    if opt_file is not None:
        changes += optimizer_changes(opt_file.name, opt, (), lrs)
    return changes, opt_file is not None, lrs


# ---------------------------------------------------------------- megatron-core schedulers

def scheduler_edits(file: str, sched_key: Key, sched: dict[str, Any],
                    target: Target) -> list[Change]:
    """num_steps / lr_decay_steps edits of one OptimizerParamScheduler state dict."""
    out = []
    nkey = next(k for k in SCHEDULER_KEYS["num_steps"] if k in sched)
    old = sched[nkey]
    if old != target.progress_before:
        raise Refusal(f"{nkey} is {old}, other files say {target.progress_before:g}: "
                      "the ranks disagree; fix them one by one", file)
    new = _like(old, target.progress)
    out.append(Change(file, sched_key + (nkey,), old, new, why=target.policy))
    if target.horizon is not None:
        hkey = next(k for k in SCHEDULER_KEYS["lr_decay_steps"] if k in sched)
        out.append(Change(file, sched_key + (hkey,), sched[hkey], _like(sched[hkey],
                                                                        target.horizon),
                          why="extend-horizon"))
    return out


def optimizer_edits(file: str, obj: Any, under: Key, target: Target) -> tuple[list[Change], bool]:
    """param-group lr of every optimizer state dict found under ``under``."""
    out: list[Change] = []
    root = get_at(obj, under) if under else obj
    found = False
    for k in find(root, is_optimizer):
        found = True
        out += optimizer_changes(file, obj, under + k, group_lrs(get_at(root, k), target))
    return out, found


def _like(old: Any, value: float) -> Any:
    """Keep the counter's type: ints stay ints when the new value is whole."""
    if isinstance(old, int) and not isinstance(old, bool) and float(value).is_integer():
        return int(value)
    return float(value)


# ---------------------------------------------------------------- several files, by content

def content_changes(objs: dict[Path, Any], rel: dict[Path, str], target: Target,
                    state: RunState) -> tuple[list[Change], list[str]]:
    """Every scheduler state at the old progress in ``objs`` (torch and megatron-core, by
    shape), the optimizers beside them; where none is saved (torchtune), the counter the
    reader named with a FieldRef."""
    notes: list[str] = []
    opts = [(f, k) for f, o in objs.items() for k in find(o, is_optimizer)]
    lrs = group_lrs(get_at(objs[opts[0][0]], opts[0][1]), target) if opts else None
    changes: list[Change] = []
    n_sched = 0
    for f, o in objs.items():
        for k in find(o, is_scheduler):
            if get_at(o, k)["last_epoch"] == target.progress_before:
                changes += scheduler_changes(rel[f], o, k, target, lrs)
                n_sched += 1
        for k in find(o, is_megatron_scheduler):
            changes += scheduler_edits(rel[f], k, get_at(o, k), target)
            n_sched += 1
    if not n_sched:
        changes += _rebuilt_counter(objs, rel, target, state)
    for f, k in opts:
        changes += optimizer_changes(rel[f], objs[f], k, lrs)
    if len({rel[f] for f in objs}) > 1:
        notes.append("edited in place of: " + ", ".join(sorted({c.file for c in changes})))
    return changes, notes


def _rebuilt_counter(objs: dict[Path, Any], rel: dict[Path, str], target: Target,
                     state: RunState) -> list[Change]:
    """No scheduler state (torchtune): edit the counter the scheduler is rebuilt from."""
    prog = state.scheduler_progress
    ref = prog.ref if prog is not None else None  # the field the reader named
    f = Path(ref.file) if ref is not None else None
    if prog is None or ref is None or f is None or f not in objs or not ref.key or ref.item:
        raise Refusal(f"no scheduler state with progress {target.progress_before:g} in "
                      + ", ".join(sorted(rel.values())))
    return [counter_change(rel[f], objs[f], ref.key, prog.ref_offset, target,
                           f"{target.policy} (the scheduler is rebuilt from {ref.dotted} on "
                           "resume)")]


def _dotted(key: Key) -> str:
    return ".".join(str(k) for k in key)


def counter_change(file: str, obj: Any, key: Key, offset: float, target: Target,
                   why: str) -> Change:
    """A counter written through the reader's ref: the field at ``key`` holds the reported
    progress minus ``offset`` (``Counter.ref_offset``: DeepSpeed's ``last_batch_iteration``
    is progress - 1), so it must read ``progress_before - offset`` and becomes
    ``progress - offset``, its int/float type kept."""
    try:
        old = get_at(obj, key)
    except (KeyError, IndexError, TypeError, AttributeError):
        raise Refusal(f"no field {_dotted(key)}", file) from None
    if isinstance(old, bool) or not isinstance(old, (int, float)):
        raise Refusal(f"{_dotted(key)} is a {type(old).__name__}, not a counter", file)
    if old + offset != target.progress_before:
        raise Refusal(f"{_dotted(key)} is {old}, not {target.progress_before - offset:g}: "
                      "the files disagree; fix them one by one", file)
    return Change(file, key, old, _like(old, target.progress - offset), why=why)


def progress_changes(file: str, obj: Any, key: Key, offset: float, target: Target,
                     lrs: list[float] | None) -> list[Change]:
    """The scheduler progress field the reader's ref names (``key``, the field itself):
    a torch scheduler's ``last_epoch`` moves with its bookkeeping (:func:`scheduler_changes`),
    a megatron-core scheduler's ``num_steps`` with :func:`scheduler_edits`, any other field
    is a bare counter (:func:`counter_change`, honouring ``offset``)."""
    if key:
        try:
            parent = get_at(obj, key[:-1])
        except (KeyError, IndexError, TypeError, AttributeError):
            raise Refusal(f"no field {_dotted(key)}", file) from None
        if not offset and key[-1] == "last_epoch" and is_scheduler(parent):
            if parent["last_epoch"] != target.progress_before:
                raise Refusal(f"{_dotted(key)} is {parent['last_epoch']}, not "
                              f"{target.progress_before:g}: the files disagree", file)
            return scheduler_changes(file, obj, key[:-1], target, lrs)
        if not offset and is_megatron_scheduler(parent) and key[-1] in SCHEDULER_KEYS["num_steps"]:
            return scheduler_edits(file, key[:-1], parent, target)
    return [counter_change(file, obj, key, offset, target, target.policy + (
        f" (progress - {offset:g})" if offset else ""))]


def lr_field_changes(file: str, obj: Any, keys: list[Key], target: Target
                     ) -> tuple[list[Change], list[float] | None]:
    """The param-group ``lr`` fields the reader's refs name (each key ends in ``lr``, its
    parent the param group): (edits, the new LR of each in order, None where the schedule
    gives none for one). Refs naming every group of one optimizer state are set through
    :func:`optimizer_changes`, as a repair by shape sets them."""
    out: list[Change] = []
    lrs: list[float] = []
    whole: dict[Key, list[float]] = {}  # optimizer key -> its groups' new LRs
    named = {tuple(x) for x in keys}
    for k in keys:
        at = tuple(k[:-3])
        if len(k) >= 3 and k[-3] == "param_groups" and at not in whole:
            opt = _get(obj, at, file)
            if is_optimizer(opt) and named >= {at + ("param_groups", i, "lr")
                                               for i in range(len(opt["param_groups"]))}:
                new = group_lrs(opt, target)
                if new is None:
                    return out, None
                whole[at] = new
                out += optimizer_changes(file, obj, at, new)
        if at in whole:
            lrs.append(whole[at][int(k[-2])])
            continue
        group, old = _get(obj, k[:-1], file), _get(obj, k, file)
        lr = group_lr(target.schedule, target.progress, group)
        if lr is None:
            return out, None
        lrs.append(float(lr))
        if float(old) != float(lr):
            out.append(Change(file, k, old, float(lr), why="schedule's LR at the new progress"))
    return out, lrs


def _get(obj: Any, key: Key, file: str) -> Any:
    try:
        return get_at(obj, key)
    except (KeyError, IndexError, TypeError, AttributeError):
        raise Refusal(f"no field {_dotted(key)}", file) from None


def ref_state(file: str, obj: Any, path: Path, state: RunState, target: Target
              ) -> tuple[list[Change], list[str]]:
    """One file's edits through the reader's refs into it (``path``, written as ``file``):
    the progress field ``scheduler_progress.ref`` names and the LRs of
    ``optimizer_lr_refs``; the scheduler(s) and optimizers by shape
    (:func:`plan_torch_state`) only where no ref names the progress in this file, and every
    optimizer by shape where no LR ref does, each said in a note."""
    def here(ref: FieldRef | None) -> bool:
        return ref is not None and not ref.item and bool(ref.key) and \
            Path(ref.file).resolve() == path.resolve()

    prog = state.scheduler_progress
    if prog is None or prog.ref is None or not here(prog.ref):
        found, said = plan_torch_state(file, obj, target)
        return found, said + [f"the reader named no scheduler field in {file}: the "
                                 "scheduler and optimizer states are found by their shape"]
    notes: list[str] = []
    lr_keys = [r.key for r in state.optimizer_lr_refs if here(r)]
    lr_changes, lrs = lr_field_changes(file, obj, lr_keys, target) if lr_keys else ([], None)
    changes = progress_changes(file, obj, prog.ref.key, prog.ref_offset, target, lrs)
    if not lr_keys:
        notes.append(f"the reader named no optimizer LR in {file}: every optimizer state "
                     "found by its shape is set")
        lr_changes = optimizer_edits(file, obj, (), target)[0]
    return changes + lr_changes, notes


# ---------------------------------------------------------------- what layouts call

class Tools:
    """:class:`~lrdoctor.core.repair.RepairTools`: this module's arithmetic, handed to a
    layout's ``repair``. Each method looks the module function up when called, so a test
    that replaces one (``monkeypatch.setattr(torchstate, ...)``) reaches every layout."""

    def load(self, path: Path) -> Any:
        return load_pickle(path)

    def torch_state(self, file: str, obj: Any, target: Target
                    ) -> tuple[list[Change], list[str]]:
        return plan_torch_state(file, obj, target)

    def scheduler_file(self, sfile: Path, ofile: Path | None, target: Target
                       ) -> tuple[list[Change], bool, list[float] | None]:
        return plan_scheduler_file(sfile, ofile, target)

    def torch_scheduler(self, file: str, obj: Any, key: Key, target: Target,
                        lrs: list[float] | None) -> list[Change]:
        return scheduler_changes(file, obj, key, target, lrs)

    def megatron_scheduler(self, file: str, key: Key, sched: dict[str, Any],
                           target: Target) -> list[Change]:
        return scheduler_edits(file, key, sched, target)

    def optimizers(self, file: str, obj: Any, under: Key, target: Target
                   ) -> tuple[list[Change], bool]:
        return optimizer_edits(file, obj, under, target)

    def group_lrs(self, opt_sd: dict[str, Any], target: Target) -> list[float] | None:
        return group_lrs(opt_sd, target)

    def is_scheduler(self, d: Any) -> bool:
        return is_scheduler(d)

    def is_optimizer(self, d: Any) -> bool:
        return is_optimizer(d)

    def content_state(self, objs: dict[Path, Any], rels: dict[Path, str], target: Target,
                      state: RunState) -> tuple[list[Change], list[str]]:
        return content_changes(objs, rels, target, state)

    def progress(self, file: str, obj: Any, key: Key, offset: float, target: Target,
                 lrs: list[float] | None) -> list[Change]:
        return progress_changes(file, obj, key, offset, target, lrs)

    def counter(self, file: str, obj: Any, key: Key, offset: float, target: Target,
                why: str) -> Change:
        return counter_change(file, obj, key, offset, target, why)

    def lr_fields(self, file: str, obj: Any, keys: list[Key], target: Target
                  ) -> tuple[list[Change], list[float] | None]:
        return lr_field_changes(file, obj, keys, target)

    def ref_state(self, file: str, obj: Any, path: Path, state: RunState, target: Target
                  ) -> tuple[list[Change], list[str]]:
        return ref_state(file, obj, path, state, target)


TOOLS = Tools()
