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
from typing import Any

from lrdoctor import discover
from lrdoctor.errors import UnusableInput
from lrdoctor.formats import _common
from lrdoctor.formats._torchstate import read_optimizer_file
from lrdoctor.model import Counter, RunState, ScheduleSpec, Unit
from lrdoctor.storage import as_path

NAME = "hf"

TRAINER_STATE = "trainer_state.json"
SCHEDULER_FILE = "scheduler.pt"
OPTIMIZER_FILES = ("optimizer.pt", "optimizer.bin")
FSDP_OPTIMIZER_DIR = "optimizer_0"  # accelerate's save_fsdp_optimizer (SHARDED_STATE_DICT): DCP
TRAINING_ARGS = "training_args.bin"
# Kinds tried when fitting log_history (the ones whose lambdas need no extra kwargs).
FIT_KINDS = ("linear", "cosine", "constant_with_warmup", "constant")
FIT_TOLERANCE = 1e-6  # relative; logged LRs are floats rounded by JSON, so near-exact


# ---------------------------------------------------------------- layout

def detect(path: Path) -> bool:
    path = as_path(path)
    if path.is_file():
        return path.name == TRAINER_STATE
    if not path.is_dir():
        return False
    return (path / TRAINER_STATE).is_file() or bool(_common.checkpoint_n_dirs(path, TRAINER_STATE))


def find_checkpoints(path: Path) -> list[Path]:
    path = as_path(path)
    if path.is_file():
        return [path.parent]
    # An output dir may also hold Trainer.save_state()'s trainer_state.json, without
    # scheduler or optimizer: its checkpoint-N dirs are the checkpoints.
    ckpts = _common.checkpoint_n_dirs(path, TRAINER_STATE)
    if ckpts:
        return ckpts
    if (path / TRAINER_STATE).is_file():
        return [path]
    raise discover.nothing_found("no checkpoint-N/trainer_state.json here", path)


def scheduler_file(ckpt: Path) -> Path:
    return ckpt / SCHEDULER_FILE


def optimizer_file(ckpt: Path) -> Path | None:
    """optimizer.pt, or the DCP folder ``optimizer_0/`` of an FSDP SHARDED_STATE_DICT run."""
    from lrdoctor.formats import dcp

    found = next((ckpt / n for n in OPTIMIZER_FILES if (ckpt / n).is_file()), None)
    if found is None and dcp.is_dcp(ckpt / FSDP_OPTIMIZER_DIR):
        found = ckpt / FSDP_OPTIMIZER_DIR
    return found


def training_args(ckpt: Path) -> tuple[dict | None, str | None]:
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


def resolved_warmup(args: dict, max_steps: int) -> int:
    """``TrainingArguments.get_warmup_steps``: 4.x (warmup_steps/warmup_ratio) and 5.x
    (warmup_steps < 1 is a ratio) rules."""
    ws = _common.num(args.get("warmup_steps") or 0, TRAINING_ARGS, "warmup_steps")
    ratio = _common.num(args.get("warmup_ratio") or 0, TRAINING_ARGS, "warmup_ratio")
    assert ws is not None and ratio is not None
    if ws >= 1:
        return int(ws)
    if ws > 0:  # 5.x: a float below 1 is a ratio
        return math.ceil(max_steps * ws)
    if ratio:
        return math.ceil(max_steps * ratio)
    return 0


# ---------------------------------------------------------------- read

def read(path: Path) -> RunState:
    path = as_path(path)
    ckpt = find_checkpoints(path)[-1]
    state_file = ckpt / TRAINER_STATE
    ts = _common.read_json(state_file)
    st = RunState(format=NAME, path=str(ckpt), files=[str(state_file)])
    ssrc = str(state_file)

    global_step = ts.get("global_step")
    max_steps = ts.get("max_steps")
    if not isinstance(global_step, int):
        raise UnusableInput("trainer_state.json has no integer global_step", ssrc)
    st.counters.append(Counter("trainer.global_step", global_step, Unit.UPDATES,
                               f"{ssrc}:global_step"))
    st.trainer_progress = Counter("trainer.global_step", global_step, Unit.UPDATES,
                                  f"{ssrc}:global_step")
    st.nominal_progress = Counter("trainer.global_step", global_step, Unit.UPDATES,
                                  "trainer_state.global_step")
    if isinstance(max_steps, int) and max_steps > 0:
        st.planned_end = Counter("trainer.max_steps", max_steps, Unit.UPDATES, f"{ssrc}:max_steps")
    if isinstance(ts.get("epoch"), (int, float)):
        st.counters.append(Counter("trainer.epoch", ts["epoch"], Unit.EPOCHS, f"{ssrc}:epoch"))
    n = _common.checkpoint_number(ckpt)
    if n is not None and n != global_step:
        st.notes.append(f"{ckpt.name} but trainer_state.global_step is {global_step}")

    # Scheduler.
    sched: dict | None = None
    sfile = scheduler_file(ckpt)
    if sfile.is_file():
        sched = _common.load_dict(sfile, "a scheduler state dict")
        st.files.append(str(sfile))
        last_epoch = _common.number(sched.get("last_epoch"))
        if last_epoch is not None:
            st.scheduler_progress = Counter("scheduler.last_epoch", last_epoch, Unit.UPDATES,
                                            str(sfile))
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

    base_lrs = (sched or {}).get("base_lrs") or (opt or {}).get("initial_lrs") or []
    base_lr = _common.side_num(st, base_lrs[0], sfile if sched else ofile, "base_lrs[0]") \
        if isinstance(base_lrs, (list, tuple)) and base_lrs else None

    # Schedule: from training_args.bin, else fitted to log_history.
    args, why = training_args(ckpt)
    history = _lr_history(ts)
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
            anchor = _current_lr(st, sched)
            st.schedule = fit_schedule(history, base_lr, max_steps, anchor=anchor)
            scale = _calls_per_step(st)
            if st.schedule is None and scale != 1:
                # Stepped k times per update: the schedule is a function of the scheduler's
                # counter, k x the logged step (issue 9: fitted even for a k x bug).
                st.schedule = fit_schedule(history, base_lr, max_steps, anchor=anchor,
                                           scale=scale)
            if st.schedule is None and anchor is not None:
                # No schedule explains both: fit the log alone and let diagnose compare.
                st.schedule = fit_schedule(history, base_lr, max_steps)
            if st.schedule is None:
                st.notes.append("no schedule type fits log_history; schedule unknown")
    if base_lr is not None:
        st.extras["base_lr"] = base_lr
    _overflowed_steps(st, args)
    for k in ("train_batch_size", "num_train_epochs", "logging_steps", "save_steps",
              "num_input_tokens_seen"):
        if k in ts:
            st.extras[k] = ts[k]
    return st


def _calls_per_step(st: RunState) -> float:
    """Scheduler calls per trainer step: last_epoch / global_step (a whole k when near one)."""
    sp, gs = st.scheduler_progress, st.counter("trainer.global_step")
    if sp is None or gs is None or gs.value <= 0 or sp.value <= 0:
        return 1.0
    ratio = sp.value / gs.value
    return float(round(ratio)) if abs(ratio - round(ratio)) < 1e-9 else ratio


def _overflowed_steps(st: RunState, args: dict | None) -> None:
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
                               "trainer.global_step - optimizer.step"))
    st.nominal_progress = Counter("trainer.global_step - overflowed steps", opt.value,
                                  Unit.UPDATES, "trainer_state.global_step - (global_step - "
                                  "optimizer.step): fp16-overflowed steps skip the scheduler")
    st.notes.append(f"{skipped:,.0f} step(s) skipped the optimizer (fp16 overflow) and so the "
                    "scheduler: it trails global_step by that much by design")


def _schedule_from_args(args: dict, max_steps: Any, base_lr: float | None) -> ScheduleSpec:
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
        max_lr=_common.num(lr, TRAINING_ARGS, "learning_rate")  # type: ignore[arg-type]
        if isinstance(lr, (int, float)) else (base_lr or 0.0),
        unit=Unit.UPDATES, warmup=float(warmup),
        horizon=float(horizon) if horizon is not None else None,
        params=dict(kwargs) if isinstance(kwargs, dict) else {},
        source="training_args.bin",
    )


def _current_lr(st: RunState, sched: dict | None) -> tuple[float, float] | None:
    """(scheduler progress, the LR the scheduler computed there): one more point for the fit.

    The scheduler's own ``_last_lr`` is preferred to the optimizer's, which a user may
    have set by hand (that is LRD105's business, not the fit's).
    """
    if st.scheduler_progress is None:
        return None
    last = (sched or {}).get("_last_lr")
    lrs = [v for x in last if (v := _common._side(x)) is not None] \
        if isinstance(last, (list, tuple)) and last else []
    lrs = lrs or [x for x in st.optimizer_lrs if _common._side(x) is not None]
    return (st.scheduler_progress.value, float(lrs[0])) if lrs else None


def _lr_history(ts: dict) -> list[tuple[int, float]]:
    out = []
    for entry in ts.get("log_history") or []:
        if isinstance(entry, dict) and isinstance(entry.get("step"), int) \
                and _common._side(entry["step"], count=True) is not None \
                and _common._side(entry.get("learning_rate")) is not None:
            out.append((entry["step"], float(entry["learning_rate"])))
    return out


def fit_schedule(history: list[tuple[int, float]], max_lr: float,
                 max_steps: int, anchor: tuple[float, float] | None = None,
                 scale: float = 1.0) -> ScheduleSpec | None:
    """The HF schedule (kind, warmup) that reproduces the logged LRs, or None.

    transformers 5 logs at step s the LR that update s used, ``max_lr *
    lambda(s - 1)``; older versions logged after the scheduler stepped,
    ``lambda(s)``. Both offsets are tried. Warmup is searched only around the
    logged peak, where it must lie; ties go to the first kind in FIT_KINDS.
    ``anchor`` = (last_epoch, LR there), ``lambda(last_epoch)`` exactly: it tells
    kinds apart that a short log (still in warmup) cannot.

    ``scale``: scheduler calls per logged step. The schedule is a function of the
    *scheduler's* counter, so a run that stepped it k times per update (accelerate's
    ``AcceleratedScheduler``, a per-micro-batch step) is fitted at ``k x step``.
    """
    from lrdoctor.schedules import hf as hf_sched

    if not history or max_lr <= 0:
        return None
    steps = [s for s, _ in history]
    peak_i = max(range(len(history)), key=lambda i: history[i][1])
    lo = steps[peak_i - 1] if peak_i > 0 else 0
    hi = steps[peak_i + 1] + 1 if peak_i + 1 < len(steps) else steps[peak_i] + 1
    if scale != 1:  # in the scheduler's counter, for either logging offset
        lo, hi = int(max(0, lo - 1) * scale), int(math.ceil(hi * scale))
    candidates = sorted({0, *range(max(0, lo - 1), hi + 1)})
    best: tuple[float, str, int, int] | None = None
    for offset in (1, 0):
        for kind in FIT_KINDS:
            for w in candidates:
                spec = ScheduleSpec(family="hf", kind=kind, max_lr=max_lr, unit=Unit.UPDATES,
                                    warmup=float(w), horizon=float(max_steps))
                err = max(abs(max_lr * hf_sched.factor(spec, (s - offset) * scale) - lr)
                          for s, lr in history) / max_lr
                if anchor is not None:
                    err = max(err, abs(max_lr * hf_sched.factor(spec, anchor[0])
                                       - anchor[1]) / max_lr)
                if best is None or err < best[0] - 1e-15:
                    best = (err, kind, w, offset)
    assert best is not None
    err, kind, w, offset = best
    if err > FIT_TOLERANCE:
        return None
    k = f"{scale:g} x " if scale != 1 else ""
    when = f"lambda({k}(step - 1))" if offset else f"lambda({k}step)"
    return ScheduleSpec(family="hf", kind=kind, max_lr=max_lr, unit=Unit.UPDATES,
                        warmup=float(w), horizon=float(max_steps),
                        source=f"fitted from log_history ({len(history)} points logged as "
                               f"{when}" + (" + the scheduler's current LR" if anchor else "")
                               + f", max rel. error {err:.1e})")
