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
from lrdoctor.core.fieldref import FieldRef, Key
from lrdoctor.core.state import Counter, RunState, Unit
from lrdoctor.read.bytes import dcp
from lrdoctor.read.layouts import FRAMEWORK, _common
from lrdoctor.read.layouts._common import OptimizerSummary
from lrdoctor.read.layouts._refs import itemize
from lrdoctor.read.layouts._torchstate import add_optimizer, optimizer_info, set_torch_scheduler

NAME = "torchtitan"

STEP_DIR = re.compile(r"^step-(\d+)$")
KEYS = ("lr_scheduler", "train_state", "optimizer")


def _is_step_dir(d: Path) -> bool:
    return bool(STEP_DIR.match(d.name)) and dcp.is_dcp(d)


_LAYOUT = _common.StepFolders(STEP_DIR, _is_step_dir, bases=("", "checkpoint"),
                              missing="no torchtitan step-N checkpoint folders here")


claims = _common.claim_by_path(FRAMEWORK + 2, _LAYOUT.is_layout)
detect = _common.detector("torchtitan")
find_checkpoints = _LAYOUT.find_checkpoints


def flat_optimizer(opt: _common.Loaded) -> OptimizerSummary:
    """Step and LRs of torchtitan's flat optimizer dict (``state.{fqn}.step``,
    ``param_groups.{fqn}.lr``), in the shape :func:`optimizer_info` returns (each LR and
    the step with its key in ``opt``: every parameter repeats its group's LR, so one LR
    per distinct value is kept, at its first key)."""
    steps: list[float] = []
    step_keys: list[tuple[Key, ...]] = []
    unreadable = 0
    lrs: list[float] = []
    lr_keys: list[tuple[Key, ...]] = []
    for k, v in opt.items():
        if not isinstance(k, str):
            continue
        value = v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
        if k.startswith("state.") and k.endswith(".step"):
            if value is None:
                unreadable += 1
            else:
                steps.append(float(value))
                step_keys.append((k,))
        elif k.startswith("param_groups.") and k.endswith(".lr") and value is not None \
                and float(value) not in lrs:
            lrs.append(float(value))
            lr_keys.append((k,))
    step = max(steps) if steps else None
    return OptimizerSummary(
        found=bool(steps or lrs), lrs=lrs, lr_keys=lr_keys, initial_lrs=[], step=step,
        step_key=step_keys[steps.index(step)] if step is not None else None,
        steps_distinct=sorted(set(steps)), unreadable_steps=unreadable,
        params_with_state=len(steps), group_max_lr=[], group_min_lr=[])


def read(path: Path) -> RunState:
    ckpt = find_checkpoints(_common.as_path(path))[-1]
    ds = dcp.load(ckpt, prefixes=KEYS)
    if not any(k in ds.tree for k in ("lr_scheduler", "train_state")):
        # A step-N DCP folder is only a hint: without torchtitan's own items, what the
        # folder holds decides (a scheduler saved under another key is found by shape).
        from lrdoctor.read.layouts import dcp as any_dcp

        st = any_dcp.read(ckpt)
        st.notes.append(f"{ckpt.name}: a step folder without torchtitan's lr_scheduler / "
                        "train_state items: read by content")
        return st
    src = str(ckpt)
    tree = FieldRef(str(ckpt / dcp.METADATA))  # a field of the items, re-nested
    st = RunState(format=NAME, path=src, files=list(ds.files))
    st.facts.storage = Storage.DCP
    _common.note_skipped(st, ds)

    opt_sd = ds.tree.get("optimizer")
    info = None
    if isinstance(opt_sd, dict):
        info = optimizer_info(opt_sd) if _common.torch_optimizer_dicts(opt_sd) \
            else flat_optimizer(opt_sd)
        add_optimizer(st, info, f"{src}:optimizer", tree.child("optimizer"))
    else:
        st.notes.append("no optimizer items (saved with last_save_model_only?)")

    sched = ds.tree.get("lr_scheduler")
    if isinstance(sched, dict) and "last_epoch" in sched:
        if set(sched) == {"last_epoch"}:  # LRSchedulersContainer keeps only the counter
            st.scheduler_progress = Counter("scheduler.last_epoch",
                                            float(_common.number(sched["last_epoch"]) or 0),
                                            Unit.UPDATES, f"{src}:lr_scheduler.last_epoch",
                                            tree.child("lr_scheduler", "last_epoch"))
            st.notes.append("torchtitan saves only lr_scheduler.last_epoch; the LambdaLR "
                            "schedule (warmup_steps, decay_ratio, training.steps) lives in the "
                            "job config, so only its progress is known")
        else:
            set_torch_scheduler(st, sched, unit=Unit.UPDATES, source=f"{src}:lr_scheduler",
                                opt=info, ref=tree.child("lr_scheduler"))
    else:
        st.notes.append("no lr_scheduler items in this checkpoint")

    train = _common.mapping(ds.tree.get("train_state"))
    step = _common.number(train.get("step"))
    if step is not None:
        c = Counter("train_state.step", float(step), Unit.UPDATES, f"{src}:train_state.step",
                    tree.child("train_state", "step"))
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
    if st.schedule is None:
        _schedule_from_job_config(st, ckpt, info)
    itemize(st, [ds])  # each field as the DCP item that holds it
    return st


# How far above ``step-N`` a job config is looked for (checkpoint/, the dump folder, its
# parent), and how many config files are read at most.
CONFIG_LEVELS = 3
CONFIG_FILES = 24
_CONFIG_SUFFIXES = (".toml", ".json", ".yaml", ".yml")


def job_config(ckpt: Path) -> tuple[Path, dict[str, Any]] | None:
    """The torchtitan job config beside the run, found by content: a mapping with an
    ``lr_scheduler`` table and ``training.steps`` (TOML ``--job.config_file``, or the
    config dumped as JSON/YAML), nearest folder first. Unreadable files are skipped."""
    from lrdoctor.core.errors import UnusableInput
    from lrdoctor.read.bytes import safetext

    seen = 0
    d = ckpt.parent
    for _ in range(CONFIG_LEVELS):
        try:
            files = sorted(f for f in d.iterdir() if f.is_file()
                           and f.suffix.lower() in _CONFIG_SUFFIXES)
        except OSError:
            files = []
        for f in files:
            seen += 1
            if seen > CONFIG_FILES:
                return None
            try:
                if f.suffix.lower() == ".toml":
                    obj: Any = safetext.toml_loads(safetext.read_text(f, "config_bytes",
                                                                      "TOML"), str(f))
                elif f.suffix.lower() == ".json":
                    obj = safetext.read_json(f)
                else:
                    obj = safetext.read_yaml(f)
            except (UnusableInput, ValueError):
                continue
            if isinstance(obj, dict) and isinstance(obj.get("lr_scheduler"), dict) \
                    and isinstance(obj.get("training"), dict) \
                    and _common.number(obj["training"].get("steps")) is not None:
                return f, obj
        if d.parent == d:
            break
        d = d.parent
    return None


def _schedule_from_job_config(st: RunState, ckpt: Path, info: OptimizerSummary | None
                              ) -> None:
    """The LambdaLR torchtitan builds from ``[lr_scheduler]`` and ``training.steps``
    (family ``torchtitan``, exact to ``LRSchedulersContainer.Config.build``)."""
    from lrdoctor.core.state import ScheduleSpec
    from lrdoctor.schedules import torchtitan as titan

    found = job_config(ckpt)
    if found is None:
        return
    f, cfg = found
    ls, tr = cfg["lr_scheduler"], cfg["training"]
    steps = int(_common.number(tr["steps"]) or 0)
    total = _common.number(ls.get("total_steps"))
    total_steps = int(total) if total is not None else steps
    cfg_ref = FieldRef(str(f))
    horizon_ref = cfg_ref.child(*(("lr_scheduler", "total_steps") if total is not None
                                  else ("training", "steps")))
    lr = _common.number((cfg.get("optimizer") or {}).get("lr")) \
        if isinstance(cfg.get("optimizer"), dict) else None
    if lr is None:
        st.notes.append(f"{f}: a torchtitan job config without optimizer.lr: its schedule "
                        "cannot be rebuilt")
        return
    warmup = int(_common.number(ls.get("warmup_steps", 200)) or 0)
    ratio = _common.number(ls.get("decay_ratio"))
    params = titan.build_params(total_steps, warmup, ratio,
                                float(_common.number(ls.get("min_lr_factor", 0.0)) or 0.0))
    src = f"{f}:lr_scheduler"
    st.schedule = ScheduleSpec(family="torchtitan", kind=str(ls.get("decay_type", "linear")),
                               max_lr=float(lr), unit=Unit.UPDATES,
                               min_lr=float(lr) * params["min_lr_factor"],
                               warmup=float(params["warmup_steps"]),
                               horizon=float(total_steps), params=params, source=src,
                               refs={"horizon": horizon_ref})
    if st.planned_end is None and steps > 0:
        st.planned_end = Counter("training.steps", float(steps), Unit.UPDATES,
                                 f"{f}:training.steps", cfg_ref.child("training", "steps"))
    st.files.append(str(f))
    st.notes = [n for n in st.notes if not n.startswith("torchtitan saves only")]
    st.notes.append(f"schedule rebuilt from the job config {f} (torchtitan saves only "
                    "lr_scheduler.last_epoch)")
