"""NeMo-RL (DTensor policy) checkpoints: ``<checkpoint_dir>/step_N/``.

Read from NeMo-RL's source (``nemo_rl/utils/checkpoint.py``,
``nemo_rl/utils/native_checkpoint.py``, ``nemo_rl/algorithms/grpo.py``,
``nemo_rl/models/policy/workers/dtensor_policy_worker*.py``)::

    step_N/training_info.json     # GRPOSaveState: consumed_samples, current_step,
                                  #   current_epoch, total_steps, ...
    step_N/config.yaml
    step_N/policy/weights/        # DCP {"model": ...}
    step_N/policy/optimizer/      # DCP {"optim": OptimizerState} ->
                                  #   optim.optim: get_optimizer_state_dict (state keyed by fqn)
                                  #   optim.sched: the torch LRScheduler's state_dict

The policy worker calls ``scheduler.step()`` once per ``train()`` call, i.e. once
per GRPO step (many optimizer updates each), and the checkpoint of step N is
written with ``total_steps = N``: healthy is ``sched.last_epoch ==
total_steps``, counted in rollout steps. The optimizer's own step counts
updates and is reported, not compared.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lrdoctor.core.facts import Storage
from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.state import Counter, RunState, Unit
from lrdoctor.read.bytes import dcp
from lrdoctor.read.layouts import FRAMEWORK, _common
from lrdoctor.read.layouts._refs import itemize
from lrdoctor.read.layouts._torchstate import add_optimizer, optimizer_info, set_torch_scheduler

NAME = "nemo_rl"

STEP_DIR = re.compile(r"^step_(\d+)$")
INFO = "training_info.json"
COMPONENTS = ("policy", "value")  # get_resume_paths: model_component


def _optimizer_dir(d: Path) -> Path | None:
    return next((d / c / "optimizer" for c in COMPONENTS if dcp.is_dcp(d / c / "optimizer")),
                None)


def _is_step_dir(d: Path) -> bool:
    return bool(STEP_DIR.match(d.name)) and (d / INFO).is_file() and (
        _optimizer_dir(d) is not None or (d / "policy").is_dir())


_LAYOUT = _common.StepFolders(STEP_DIR, _is_step_dir,
                              missing=f"no NeMo-RL step_N/{INFO} checkpoints here")


claims = _common.claim_by_path(FRAMEWORK + 3, _LAYOUT.is_layout)
detect = _common.detector("nemo_rl")
find_checkpoints = _LAYOUT.find_checkpoints


def read(path: Path) -> RunState:
    ckpt = find_checkpoints(_common.as_path(path))[-1]
    info_file = ckpt / INFO
    info = _common.read_json(info_file)
    st = RunState(format=NAME, path=str(ckpt), files=[str(info_file)])
    st.facts.storage = Storage.DCP
    for key, unit in (("total_steps", Unit.ROLLOUT_STEPS), ("current_step", Unit.ROLLOUT_STEPS),
                      ("consumed_samples", Unit.SAMPLES), ("current_epoch", Unit.EPOCHS)):
        v = _common.number(info.get(key))
        if v is not None:
            st.counters.append(Counter(f"nemo_rl.{key}", float(v), unit, f"{info_file}:{key}",
                                       FieldRef(str(info_file), (key,))))

    odir = _optimizer_dir(ckpt)
    if odir is None:
        st.notes.append("no policy/optimizer DCP folder (checkpointing.save_optimizer off?): "
                        "scheduler progress unknown")
        return st
    ds = dcp.load(odir, prefixes=("optim",))
    st.files += ds.files
    _common.note_skipped(st, ds)
    src = str(odir)
    tree = FieldRef(str(odir / dcp.METADATA), ("optim",))  # a field of the items, re-nested
    raw = ds.tree.get("optim")
    optim: dict[str, Any] = raw if isinstance(raw, dict) else {}
    opt_info = optimizer_info(optim.get("optim")) if optim.get("optim") is not None else None
    if opt_info is not None:
        add_optimizer(st, opt_info, f"{src}:optim.optim", tree.child("optim"))
    sched = optim.get("sched")
    if isinstance(sched, dict):
        set_torch_scheduler(st, sched, unit=Unit.ROLLOUT_STEPS, source=f"{src}:optim.sched",
                            opt=opt_info, ref=tree.child("sched"))
    else:
        st.notes.append("no optim.sched in the optimizer checkpoint (no scheduler configured)")
    itemize(st, [ds])  # each field as the DCP item that holds it
    total = st.counter("nemo_rl.total_steps")
    if total is not None:
        st.trainer_progress = total
        st.nominal_progress = Counter("nemo_rl.total_steps", total.value, Unit.ROLLOUT_STEPS,
                                      "training_info.total_steps (one scheduler.step() per "
                                      "GRPO step)")
    return st
