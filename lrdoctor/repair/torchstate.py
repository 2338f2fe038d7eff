"""Edits of torch ``LRScheduler`` and optimizer state dicts, found by their shape.

Shared by every format that stores plain torch state (torch.save dicts, HF
``scheduler.pt``/``optimizer.pt``, Lightning, accelerate). Locating by shape
rather than by a framework's key names keeps one writer for all of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lrdoctor.read.scan.shapes import is_optimizer as discover_is_optimizer
from lrdoctor.read.scan.shapes import is_torch_scheduler
from lrdoctor.repair.policies import Refusal, Target
from lrdoctor.repair.writer import Change, Key, get_at, load_pickle, walk
from lrdoctor.schedules import group_lr
from lrdoctor.schedules.torch_builtin import HORIZON_FIELD

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


def find(obj: Any, pred) -> list[Key]:
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
        raise Refusal(f"{file}: no torch scheduler state with last_epoch "
                      f"{target.progress_before:g}")
    if len(opts) > 1 and len(opts) != len(scheds):
        raise Refusal(f"{file}: {len(opts)} optimizers and {len(scheds)} schedulers: cannot "
                      "tell which scheduler drives which optimizer")
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
