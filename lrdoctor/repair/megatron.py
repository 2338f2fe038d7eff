"""Writer for Megatron-LM ``torch``-format checkpoints (``model_optim_rng.pt`` per rank).

Every rank file of the fixed iteration gets the same edit: the scheduler's
``num_steps`` (samples) and, for extend-horizon, ``lr_decay_steps``; the
optimizer's param-group ``lr`` follows the schedule. megatron-core recomputes the
param-group LR in ``load_state_dict`` anyway (it calls ``step(num_steps)``), but
keeping it consistent makes the output inspect clean.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lrdoctor.core.state import RunState
from lrdoctor.read.layouts import megatron as reader
from lrdoctor.read.scan.shapes import SCHEDULER_KEYS
from lrdoctor.repair.policies import Refusal, Target
from lrdoctor.repair.torchstate import find, group_lrs, is_optimizer, optimizer_changes
from lrdoctor.repair.writer import Change, Key, get_at, load_pickle, tree_files

EXTEND_NOTE = ("Megatron-LM checks the checkpoint's lr_decay_steps against the command line on "
               "resume: resume with --use-checkpoint-opt_param-scheduler (or pass the matching "
               "--lr-decay-samples {h:g})")


def scheduler_edits(file: str, sched_key: Key, sched: dict[str, Any],
                    target: Target) -> list[Change]:
    """num_steps / lr_decay_steps edits of one OptimizerParamScheduler state dict."""
    out = []
    nkey = next(k for k in SCHEDULER_KEYS["num_steps"] if k in sched)
    old = sched[nkey]
    if old != target.progress_before:
        raise Refusal(f"{file}: {nkey} is {old}, other files say {target.progress_before:g}: "
                      "the ranks disagree; fix them one by one")
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


def plan(path: Path, state: RunState, target: Target):
    from lrdoctor.repair.engine import FormatPlan

    path = Path(path)
    ckpt, files = reader.resolve(path)
    root = path

    def rel_of(f: Path) -> str:
        return f.name if root.is_file() else str(f.relative_to(root))

    if path.is_file():
        out_files = [path.name]
    elif ckpt is not None and path != ckpt and ckpt.parent == path:
        # A run dir: the output is a run dir with the tracker and the fixed iteration only.
        out_files = ([reader.TRACKER] if (path / reader.TRACKER).is_file() else []) + [
            f"{ckpt.name}/{f}" for f in tree_files(ckpt)]
    else:
        out_files = None
    changes: list[Change] = []
    any_opt = False
    for f in files:
        sd = load_pickle(f)
        key = next((k for k in ("opt_param_scheduler", "lr_scheduler")
                    if isinstance(sd.get(k), dict)), None)
        if key is None:
            raise Refusal("no opt_param_scheduler in this file", str(f))
        rel = rel_of(f)
        changes += scheduler_edits(rel, (key,), sd[key], target)
        if isinstance(sd.get("optimizer"), dict):
            ch, found = optimizer_edits(rel, sd, ("optimizer",), target)
            changes += ch
            any_opt = any_opt or found
        del sd
    notes = []
    if target.horizon is not None:
        notes.append(EXTEND_NOTE.format(h=target.horizon))
    if not any_opt:
        notes.append("no optimizer param groups in these files (distributed optimizer?): "
                     "megatron-core sets the LR from num_steps when it loads the scheduler")
    return FormatPlan(root=root, files=out_files, changes=changes, notes=notes)
