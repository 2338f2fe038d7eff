"""Writer for DeepSpeed engine checkpoints (``<save>/latest``, ``<save>/<tag>/``).

DeepSpeed's own schedulers save only ``last_batch_iteration`` (progress - 1); a
client torch scheduler saves its usual state. The param-group ``lr`` lives in the
model-states file without ZeRO and in the ``*_optim_states.pt`` partitions with
ZeRO; every copy is set. A run directory gives a run directory holding
``latest`` and the fixed tag, so ``engine.load_checkpoint(OUT)`` finds it.
"""

from __future__ import annotations

from pathlib import Path

from lrdoctor.core.state import RunState
from lrdoctor.read.layouts import deepspeed as reader
from lrdoctor.repair.megatron import optimizer_edits
from lrdoctor.repair.policies import Refusal, Target
from lrdoctor.repair.torchstate import group_lrs, is_optimizer, is_scheduler, scheduler_changes
from lrdoctor.repair.writer import Change, get_at, load_pickle, tree_files, walk


def plan(path: Path, state: RunState, target: Target):
    from lrdoctor.repair.engine import FormatPlan

    path = Path(path)
    tag, _ = reader.resolve(path)
    if path.is_file():
        raise Refusal("give the checkpoint's tag directory (or the save directory), not one "
                      "file: DeepSpeed keeps the optimizer state in sibling files", str(path))
    if tag != path:
        root = path
        files = ([reader.LATEST] if (path / reader.LATEST).is_file() else []) + [
            f"{tag.name}/{f}" for f in tree_files(tag)]
    else:
        root, files = tag, None

    def rel(f: Path) -> str:
        return str(f.relative_to(root))

    changes: list[Change] = []
    notes: list[str] = []
    for f in reader.model_files(tag):
        sd = load_pickle(f)
        sched = sd.get("lr_scheduler")
        if isinstance(sched, dict) and "last_batch_iteration" in sched:
            if target.horizon is not None:
                raise Refusal("DeepSpeed rebuilds its scheduler from ds_config on resume: set "
                              f"scheduler.params.total_num_steps = {target.horizon:g} in your "
                              "ds_config instead (or use --policy nominal)")
            old = sched["last_batch_iteration"]
            if old + 1 != target.progress_before:
                raise Refusal(f"{f.name}: last_batch_iteration {old} disagrees with the other "
                              "rank files")
            new = int(round(target.progress)) - 1
            changes.append(Change(rel(f), ("lr_scheduler", "last_batch_iteration"), old, new,
                                  why=target.policy + " (progress - 1)"))
        elif is_scheduler(sched):
            opt = next((get_at(sd, k) for k, v in walk(sd.get("optimizer")) if is_optimizer(v)),
                       None) if sd.get("optimizer") is not None else None
            changes += scheduler_changes(rel(f), sd, ("lr_scheduler",), target,
                                         group_lrs(opt, target) if opt else None)
        else:
            raise Refusal("no lr_scheduler state to repair", str(f))
        if sd.get("optimizer") is not None:
            ch, _ = optimizer_edits(rel(f), sd, ("optimizer",), target)
            changes += ch
    for f in sorted(tag.iterdir()):
        if reader.OPTIM_STATES.match(f.name):
            ch, _ = optimizer_edits(rel(f), load_pickle(f), (), target)
            changes += ch
    return FormatPlan(root=root, files=files, changes=changes, notes=notes)
