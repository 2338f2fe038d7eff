"""Writer for checkpoints read by content (the ``torch`` format and the layouts refined
from it: ROLL's bare ``scheduler.pt``, verl, SkyRL, Composer, torchtune).

Edits go where ``inspect`` found the state (``state.facts.files_used``), in the
format it was read from (each file is rewritten with ``torch.save``): torch
``LRScheduler`` states (``last_epoch``, ``_step_count``, horizon, ``_last_lr``),
megatron-core scheduler states (``num_steps``, ``lr_decay_steps``), the optimizer's
param-group ``lr``; where no scheduler state is saved (torchtune) the counter the
scheduler is rebuilt from. A folder checkpoint is copied whole; a single file alone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from lrdoctor.core.state import RunState
from lrdoctor.read.bytes.safeload import PICKLE_SUFFIXES
from lrdoctor.repair.megatron import scheduler_edits
from lrdoctor.repair.policies import Refusal, Target
from lrdoctor.repair.torchstate import (
    find,
    group_lrs,
    is_optimizer,
    is_scheduler,
    optimizer_changes,
    plan_torch_state,
    scheduler_changes,
)
from lrdoctor.repair.writer import Change, get_at, load_pickle


def _is_megatron(d: Any) -> bool:
    from lrdoctor.read.scan.shapes import is_megatron_scheduler

    return is_megatron_scheduler(d)


def plan(path: Path, state: RunState, target: Target):
    from lrdoctor.repair.engine import FormatPlan

    ckpt = Path(state.path)
    used = [Path(f) for f in state.facts.files_used or [state.path]]
    used = [f for f in used if f.is_file() and (f.suffix.lower() in PICKLE_SUFFIXES or f == ckpt)]
    if not used:
        raise Refusal("no checkpoint file holds the state inspect read", str(path))
    if ckpt.is_file() and used == [ckpt]:
        # One torch.save file: a directory in gives a directory out, holding it by name.
        root = path if path.is_dir() else ckpt
        rel = str(ckpt.relative_to(root)) if root.is_dir() else ckpt.name
        changes, notes = plan_torch_state(rel, load_pickle(ckpt), target)
        return FormatPlan(root=root, files=[rel], changes=changes, notes=notes)
    # The folder holding the checkpoint and every file used (torchtune keeps its
    # recipe_state/ beside the epoch folders: the copy is then the run folder).
    root = Path(os.path.commonpath([str(ckpt if ckpt.is_dir() else ckpt.parent)]
                                   + [str(f.parent) for f in used]))
    objs = {f: load_pickle(f) for f in used}
    rels = {f: str(f.relative_to(root)) for f in used}
    changes, notes = _plan_files(objs, rels, target, state)
    return FormatPlan(root=root, files=None, changes=changes, notes=notes)


def _plan_files(objs: dict[Path, Any], rel: dict[Path, str], target: Target,
                state: RunState) -> tuple[list[Change], list[str]]:
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
        for k in find(o, _is_megatron):
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
    if ref is None or f not in objs or not ref.key or ref.item:
        raise Refusal(f"no scheduler state with progress {target.progress_before:g} in "
                      + ", ".join(sorted(rel.values())))
    try:
        old = get_at(objs[f], ref.key)
    except (KeyError, IndexError, TypeError, AttributeError):
        raise Refusal(f"{rel[f]}: no field {ref.dotted}") from None
    if old != target.progress_before:
        raise Refusal(f"{rel[f]}:{ref.dotted} is {old}, not {target.progress_before:g}")
    new = int(target.progress) if float(target.progress).is_integer() else target.progress
    return [Change(rel[f], ref.key, old, new, why=f"{target.policy} (the scheduler is "
                                                   f"rebuilt from {ref.dotted} on resume)")]
