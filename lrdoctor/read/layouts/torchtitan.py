"""torchtitan checkpoints: ``<dump_folder>/checkpoint/step-N/``, one DCP folder per save.

Read from torchtitan's source (``components/checkpointer/dcp.py``,
``components/optimizer/{optimizer,lr_scheduler,utils}.py``, ``trainer.py``)::

    step-N/.metadata, __R_0.distcp
      <model fqns>                       # model params flattened at the top level
      optimizer.state.<fqn>.step         # get_flat_optim_state_dict: "state.{fqn}.{name}",
      optimizer.param_groups.<fqn>.lr    #   "param_groups.{fqn}.{key}" (older: nested dicts)
      lr_scheduler.last_epoch            # LRSchedulersContainer: {"last_epoch": N}
                                         #   (older: the first LambdaLR's full state_dict)
      train_state.step, .ntokens_seen    # Trainer.state_dict()
      dataloader.*

The trainer increments ``step`` and calls ``optimizers.step()`` then
``lr_schedulers.step()`` once per step, so ``last_epoch == train_state.step``
when healthy. The schedule is a LambdaLR over ``warmup_steps``/``decay_ratio``/
``training.steps`` of the job config, which is not saved: only progress can be
judged from the checkpoint.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lrdoctor.core.facts import Storage
from lrdoctor.core.state import Counter, RunState, Unit
from lrdoctor.read.bytes.storage import as_path
from lrdoctor.read.layouts import _common, dcp
from lrdoctor.read.layouts._torchstate import add_optimizer, optimizer_info, torch_scheduler

NAME = "torchtitan"

STEP_DIR = re.compile(r"^step-(\d+)$")
KEYS = ("lr_scheduler", "train_state", "optimizer")


def _is_step_dir(d: Path) -> bool:
    return bool(STEP_DIR.match(d.name)) and dcp.is_dcp(d)


_LAYOUT = _common.StepFolders(STEP_DIR, _is_step_dir, bases=("", "checkpoint"),
                              missing="no torchtitan step-N checkpoint folders here")


def detect(path: Path) -> bool:
    return _LAYOUT.detect(as_path(path))


def find_checkpoints(path: Path) -> list[Path]:
    return _LAYOUT.find(as_path(path))


def flat_optimizer(opt: Any) -> dict[str, Any]:
    """Step and LRs of torchtitan's flat optimizer dict (``state.{fqn}.step``,
    ``param_groups.{fqn}.lr``), in the shape :func:`optimizer_info` returns."""
    steps = [float(v) for k, v in opt.items() if isinstance(k, str) and k.startswith("state.")
             and k.endswith(".step") and isinstance(v, (int, float))]
    unreadable = sum(1 for k, v in opt.items() if isinstance(k, str) and k.startswith("state.")
                     and k.endswith(".step") and not isinstance(v, (int, float)))
    lrs: list[float] = []
    for k, v in opt.items():
        if isinstance(k, str) and k.startswith("param_groups.") and k.endswith(".lr") \
                and isinstance(v, (int, float)) and float(v) not in lrs:
            lrs.append(float(v))
    return {"found": bool(steps or lrs), "lrs": lrs, "initial_lrs": [],
            "step": max(steps) if steps else None, "steps_distinct": sorted(set(steps)),
            "unreadable_steps": unreadable, "params_with_state": len(steps)}


def read(path: Path) -> RunState:
    ckpt = find_checkpoints(as_path(path))[-1]
    ds = dcp.load(ckpt, prefixes=KEYS)
    if not any(k in ds.tree for k in ("lr_scheduler", "train_state")):
        # A step-N DCP folder is only a hint: without torchtitan's own items, what the
        # folder holds decides (a scheduler saved under another key is found by shape).
        st = dcp.read(ckpt)
        st.notes.append(f"{ckpt.name}: a step folder without torchtitan's lr_scheduler / "
                        "train_state items: read by content")
        return st
    src = str(ckpt)
    st = RunState(format=NAME, path=src, files=list(ds.files))
    st.facts.storage = Storage.DCP
    dcp.note_skipped(st, ds)

    opt_sd = ds.tree.get("optimizer")
    info = None
    if isinstance(opt_sd, dict):
        info = optimizer_info(opt_sd) if _common.torch_optimizer_dicts(opt_sd) \
            else flat_optimizer(opt_sd)
        add_optimizer(st, info, f"{src}:optimizer")
    else:
        st.notes.append("no optimizer items (saved with last_save_model_only?)")

    sched = ds.tree.get("lr_scheduler")
    if isinstance(sched, dict) and "last_epoch" in sched:
        if set(sched) == {"last_epoch"}:  # LRSchedulersContainer keeps only the counter
            st.scheduler_progress = Counter("scheduler.last_epoch",
                                            float(_common.number(sched["last_epoch"]) or 0),
                                            Unit.UPDATES, f"{src}:lr_scheduler.last_epoch")
            st.notes.append("torchtitan saves only lr_scheduler.last_epoch; the LambdaLR "
                            "schedule (warmup_steps, decay_ratio, training.steps) lives in the "
                            "job config, so only its progress is known")
        else:
            spec, prog, notes = torch_scheduler(sched, unit=Unit.UPDATES,
                                                source=f"{src}:lr_scheduler", opt=info)
            st.schedule, st.scheduler_progress = spec, prog
            st.notes += notes
    else:
        st.notes.append("no lr_scheduler items in this checkpoint")

    train = ds.tree.get("train_state")
    step = _common.number(train.get("step")) if isinstance(train, dict) else None
    if step is not None:
        c = Counter("train_state.step", float(step), Unit.UPDATES, f"{src}:train_state.step")
        st.counters.append(c)
        st.trainer_progress = c
        st.nominal_progress = Counter("train_state.step", float(step), Unit.UPDATES,
                                      "train_state.step (one lr_schedulers.step() per step)")
        tokens = _common.number(train.get("ntokens_seen"))
        if tokens is not None:
            st.extras["ntokens_seen"] = tokens
    else:
        st.notes.append("no train_state.step in this checkpoint")
    st.extras["step_dir"] = ckpt.name
    return st
