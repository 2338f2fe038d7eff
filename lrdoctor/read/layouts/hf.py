"""Hugging Face ``transformers.Trainer`` checkpoints.

Layout::

    <output_dir>/checkpoint-N/          # N = TrainerState.global_step at save time
        trainer_state.json              # global_step, max_steps, log_history, ...
        scheduler.pt                    # LambdaLR.state_dict(): last_epoch == global_step
        optimizer.pt                    # torch optimizer state_dict (AdamW: state[i]["step"])
        training_args.bin               # torch.save(TrainingArguments): a pickle
        rng_state[_R].pth

The scheduler is built by ``get_scheduler(lr_scheduler_type, num_warmup_steps=
args.get_warmup_steps(max_steps), num_training_steps=max_steps,
scheduler_specific_kwargs=lr_scheduler_kwargs)`` and stepped once per optimizer
update. ``training_args.bin`` is read only through lrdoctor's allow-listed
unpickler; when it is missing or refused, the schedule type and warmup are
fitted to ``log_history[].learning_rate`` instead (``source`` says which).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.evidence import LoggedLr
from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.state import Counter, RunState, ScheduleSpec, Unit
from lrdoctor.read.layouts import TRAINER, _common, _logfit
from lrdoctor.read.layouts._torchstate import read_optimizer_file

if TYPE_CHECKING:  # the repair side is imported by ``fix`` only (see :func:`repair`)
    from lrdoctor.core.repair import FormatPlan, RepairTools, Target

NAME = "hf"

TRAINER_STATE = "trainer_state.json"
SCHEDULER_FILE = "scheduler.pt"
OPTIMIZER_FILES = ("optimizer.pt", "optimizer.bin")
FSDP_OPTIMIZER_DIR = "optimizer_0"  # accelerate's save_fsdp_optimizer (SHARDED_STATE_DICT): DCP
TRAINING_ARGS = "training_args.bin"


# ---------------------------------------------------------------- layout

def _is_layout(path: Path) -> bool:
    path = _common.as_path(path)
    if path.is_file():
        return path.name == TRAINER_STATE
    if not path.is_dir():
        return False
    return (path / TRAINER_STATE).is_file() or bool(_common.checkpoint_n_dirs(path, TRAINER_STATE))


claims = _common.claim_by_path(TRAINER, _is_layout)
detect = _common.detector("hf")


def find_checkpoints(path: Path) -> list[Path]:
    path = _common.as_path(path)
    if path.is_file():
        return [path.parent]
    # An output dir may also hold Trainer.save_state()'s trainer_state.json, without
    # scheduler or optimizer: its checkpoint-N dirs are the checkpoints.
    ckpts = _common.checkpoint_n_dirs(path, TRAINER_STATE)
    if not ckpts and (path / TRAINER_STATE).is_file():
        return [path]
    return _common.listed(ckpts, "no checkpoint-N/trainer_state.json here", path)


def scheduler_file(ckpt: Path) -> Path:
    return ckpt / SCHEDULER_FILE


def optimizer_file(ckpt: Path) -> Path | None:
    """optimizer.pt, or the DCP folder ``optimizer_0/`` of an FSDP SHARDED_STATE_DICT run
    (the DCP reader is imported only when there is no optimizer file to find)."""
    found = next((ckpt / n for n in OPTIMIZER_FILES if (ckpt / n).is_file()), None)
    if found is None:
        from lrdoctor.read.bytes import dcp

        if dcp.is_dcp(ckpt / FSDP_OPTIMIZER_DIR):
            found = ckpt / FSDP_OPTIMIZER_DIR
    return found


def training_args(ckpt: Path) -> tuple[_common.Loaded | None, str | None]:
    """(TrainingArguments fields, None) or (None, why they could not be used)."""
    f = ckpt / TRAINING_ARGS
    if not f.is_file():
        return None, f"{TRAINING_ARGS} missing"
    try:
        obj = _common.load(f)
    except UnusableInput as exc:
        return None, str(exc)
    fields = _common.as_fields(obj)
    if fields is None:
        return None, f"{f}: not a TrainingArguments object"
    return fields, None


def resolved_warmup(args: _common.Loaded, max_steps: int) -> int:
    """``TrainingArguments.get_warmup_steps``: 4.x (warmup_steps/warmup_ratio) and 5.x
    (warmup_steps < 1 is a ratio) rules."""
    ws = _common.num(args.get("warmup_steps") or 0, TRAINING_ARGS, "warmup_steps")
    ratio = _common.num(args.get("warmup_ratio") or 0, TRAINING_ARGS, "warmup_ratio")
    if ws >= 1:
        return int(ws)
    if ws > 0:  # 5.x: a float below 1 is a ratio
        return math.ceil(max_steps * ws)
    if ratio:
        return math.ceil(max_steps * ratio)
    return 0


# ---------------------------------------------------------------- read

def read(path: Path) -> RunState:
    path = _common.as_path(path)
    ckpt = find_checkpoints(path)[-1]
    state_file = ckpt / TRAINER_STATE
    ts = _common.read_json(state_file)
    st = RunState(format=NAME, path=str(ckpt), files=[str(state_file)])
    ssrc = str(state_file)

    global_step = ts.get("global_step")
    max_steps = ts.get("max_steps")
    if not isinstance(global_step, int):
        raise UnusableInput("trainer_state.json has no integer global_step", ssrc)
    state_ref = FieldRef(ssrc)
    st.counters.append(Counter("trainer.global_step", global_step, Unit.UPDATES,
                               f"{ssrc}:global_step", state_ref.child("global_step")))
    st.trainer_progress = Counter("trainer.global_step", global_step, Unit.UPDATES,
                                  f"{ssrc}:global_step", state_ref.child("global_step"))
    st.nominal_progress = Counter("trainer.global_step", global_step, Unit.UPDATES,
                                  "trainer_state.global_step")
    if isinstance(max_steps, int) and max_steps > 0:
        st.planned_end = Counter("trainer.max_steps", max_steps, Unit.UPDATES, f"{ssrc}:max_steps",
                                 state_ref.child("max_steps"))
    if isinstance(ts.get("epoch"), (int, float)):
        st.counters.append(Counter("trainer.epoch", ts["epoch"], Unit.EPOCHS, f"{ssrc}:epoch",
                                   state_ref.child("epoch")))
    n = _common.checkpoint_number(ckpt)
    if n is not None and n != global_step:
        st.notes.append(f"{ckpt.name} but trainer_state.global_step is {global_step}")

    # Scheduler.
    sched: _common.Loaded | None = None
    sfile = scheduler_file(ckpt)
    if sfile.is_file():
        sched = _common.load_dict(sfile, "a scheduler state dict")
        st.files.append(str(sfile))
        last_epoch = _common.number(sched.get("last_epoch"))
        if last_epoch is not None:
            st.scheduler_progress = Counter("scheduler.last_epoch", last_epoch, Unit.UPDATES,
                                            str(sfile), ref=FieldRef(str(sfile), ("last_epoch",)))
        st.extras["scheduler_state"] = {k: v for k, v in sched.items()
                                        if k in ("last_epoch", "_step_count", "base_lrs",
                                                 "_last_lr")}
    else:
        st.notes.append(f"no {SCHEDULER_FILE}: scheduler progress unknown")

    # Optimizer.
    ofile = optimizer_file(ckpt)
    opt = None
    if ofile is not None:
        opt = read_optimizer_file(st, ofile)

    base_lrs = (sched or {}).get("base_lrs") or (opt["initial_lrs"] if opt else [])
    base_lr = _common.side_num(st, base_lrs[0], sfile if sched else ofile, "base_lrs[0]") \
        if isinstance(base_lrs, (list, tuple)) and base_lrs else None

    # Schedule: from training_args.bin, else fitted to log_history.
    args, why = training_args(ckpt)
    st.lr_log, st.lr_log_source = _lr_history(ts, state_ref), f"{ssrc}:log_history"
    history = [(int(p.step), p.lr) for p in st.lr_log]
    st.extras["logged_lr_points"] = len(history)
    if args is not None:
        st.files.append(str(ckpt / TRAINING_ARGS))
        st.schedule = _schedule_from_args(args, max_steps, base_lr)
        for k in ("per_device_train_batch_size", "gradient_accumulation_steps", "learning_rate",
                  "warmup_steps", "warmup_ratio", "max_steps", "num_train_epochs",
                  "lr_scheduler_type", "lr_scheduler_kwargs"):
            if k in args:
                st.extras[k] = _common.plain(args[k]) if k == "lr_scheduler_type" else args[k]
    else:
        st.notes.append(f"training_args.bin not used ({why}): the schedule is fitted to log_history")
        if base_lr is None and history:
            base_lr = max(lr for _, lr in history)
            st.notes.append("initial LR unknown; the fit takes the largest logged LR")
        if base_lr is not None and isinstance(max_steps, int):
            st.schedule = _logfit.fit(
                history, base_lr, max_steps, label="log_history",
                anchor=_logfit.current_lr(st.scheduler_progress, sched, st.optimizer_lrs),
                scale=_logfit.calls_per_step(st.scheduler_progress,
                                             st.counter("trainer.global_step")))
            if st.schedule is None:
                st.notes.append("no schedule type fits log_history; schedule unknown")
    if base_lr is not None:
        st.extras["base_lr"] = base_lr
    if st.schedule is not None and st.schedule.horizon is not None \
            and st.schedule.horizon == max_steps and st.planned_end is not None:
        st.schedule.refs["horizon"] = state_ref.child("max_steps")  # num_training_steps
    _overflowed_steps(st, args)
    for k in ("train_batch_size", "num_train_epochs", "logging_steps", "save_steps",
              "num_input_tokens_seen"):
        if k in ts:
            st.extras[k] = ts[k]
    return st


def _overflowed_steps(st: RunState, args: _common.Loaded | None) -> None:
    """fp16 with a GradScaler: an overflowed step skips optimizer.step(), and accelerate's
    AcceleratedScheduler then skips the scheduler too, while global_step still counts it.
    When scheduler and optimizer agree and trail global_step, that is by design."""
    if args is not None and not args.get("fp16"):
        return
    sp, opt, nom = st.scheduler_progress, st.counter("optimizer.step"), st.nominal_progress
    if sp is None or opt is None or nom is None or sp.value != opt.value:
        return
    skipped = nom.value - opt.value
    if skipped <= 0:
        return
    st.counters.append(Counter("trainer.overflowed_steps", skipped, Unit.UPDATES,
                               "trainer.global_step - optimizer.step", _global_step_ref(st),
                               ref_offset=-opt.value))
    st.nominal_progress = Counter("trainer.global_step - overflowed steps", opt.value,
                                  Unit.UPDATES, "trainer_state.global_step - (global_step - "
                                  "optimizer.step): fp16-overflowed steps skip the scheduler")
    st.notes.append(f"{skipped:,.0f} step(s) skipped the optimizer (fp16 overflow) and so the "
                    "scheduler: it trails global_step by that much by design")


def _global_step_ref(st: RunState) -> FieldRef | None:
    """trainer_state.json's global_step, the field the step counts start from."""
    c = st.counter("trainer.global_step")
    return c.ref if c is not None else None


def _schedule_from_args(args: _common.Loaded, max_steps: Any, base_lr: float | None
                        ) -> ScheduleSpec:
    kind = str(_common.plain(args.get("lr_scheduler_type")) or "linear")
    horizon = max_steps if isinstance(max_steps, int) and 0 < max_steps <= _common.MAX_MAGNITUDE \
        else None
    warmup = resolved_warmup(args, horizon or 0)
    lr = args.get("learning_rate")
    kwargs = args.get("lr_scheduler_kwargs")
    if isinstance(kwargs, str):  # a JSON string in some versions' CLI parsing
        import json

        try:
            kwargs = json.loads(kwargs or "{}")
        except ValueError:
            kwargs = {}
    return ScheduleSpec(
        family="hf", kind=kind,
        max_lr=_common.num(lr, TRAINING_ARGS, "learning_rate")
        if isinstance(lr, (int, float)) else (base_lr or 0.0),
        unit=Unit.UPDATES, warmup=float(warmup),
        horizon=float(horizon) if horizon is not None else None,
        params=dict(kwargs) if isinstance(kwargs, dict) else {},
        source="training_args.bin",
    )


def _lr_history(ts: _common.JsonObject, ref: FieldRef) -> list[LoggedLr]:
    """Each ``log_history`` entry's LR at its ``step`` (the Trainer's global_step, in
    optimizer updates), named by its own field: ``log_history[i].learning_rate``."""
    out: list[LoggedLr] = []
    history = ts.get("log_history")
    for i, entry in enumerate(history if isinstance(history, list) else []):
        if isinstance(entry, dict) and isinstance(entry.get("step"), int) \
                and _common._side(entry["step"], count=True) is not None \
                and _common._side(entry.get("learning_rate")) is not None:
            out.append(LoggedLr(float(entry["step"]), float(entry["learning_rate"]),
                                ref.child("log_history", i, "learning_rate")))
    return out


# ---------------------------------------------------------------- repair (lrdoctor fix)

def repair(path: Path, state: RunState, target: Target, tools: RepairTools) -> FormatPlan:
    """The edits of ``lrdoctor fix`` for a ``checkpoint-N`` directory.

    Only ``scheduler.pt`` (``last_epoch``, ``_step_count``, ``_last_lr``) and the
    optimizer's param-group ``lr`` change. ``trainer_state.json`` holds the trainer's own
    count (``global_step``), which is the truth the scheduler is repaired towards, so it is
    copied as is; ``training_args.bin`` (a pickle of TrainingArguments) is always copied
    byte for byte, never rewritten, which is why a new horizon is refused: the Trainer
    rebuilds it from TrainingArguments when it resumes."""
    from lrdoctor.core.repair import FormatPlan, Refusal, named_file

    if target.horizon is not None:
        raise Refusal("the HF Trainer rebuilds the schedule's horizon from TrainingArguments "
                      "(max_steps / num_train_epochs) when it resumes, and lrdoctor never rewrites "
                      "training_args.bin: use --policy nominal, or resume with a new --max_steps")
    ckpt = find_checkpoints(_common.as_path(path))[-1]
    sfile = named_file(state) or scheduler_file(ckpt)
    if not sfile.is_file():
        raise Refusal(f"no {SCHEDULER_FILE} to repair", str(ckpt))
    changes, has_opt, _ = tools.scheduler_file(sfile, optimizer_file(ckpt), target)
    notes = []
    if not has_opt:
        notes.append("no optimizer.pt param groups: the first resumed update keeps its LR")
    if ckpt != _common.as_path(path):
        notes.append(f"the output is a repaired copy of {ckpt.name} (resume from it with "
                     "trainer.train(resume_from_checkpoint=OUT))")
    return FormatPlan(root=ckpt, files=None, changes=changes, notes=notes)
