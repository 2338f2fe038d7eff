"""Hand-written torch loops: one ``torch.save`` dict per checkpoint file.

Typical shape::

    torch.save({"model": ..., "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "step": global_step, "epoch": e}, "ckpt.pt")

The optimizer and scheduler states are found under their usual names (or one
level down, e.g. ``{"state": {...}}``, or by shape: ``param_groups`` marks an
optimizer, ``last_epoch`` a scheduler). An ``LRScheduler``'s ``last_epoch``
counts ``scheduler.step()`` calls; its class is not saved, so it is identified
from the state's keys. ``LambdaLR``/``MultiplicativeLR`` save no function, so
their schedule cannot be rebuilt.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lrdoctor.errors import UnusableInput
from lrdoctor.formats import _common
from lrdoctor.formats._torchstate import optimizer_info, torch_scheduler, torch_scheduler_kind
from lrdoctor.model import Counter, RunState, Unit

NAME = "torch"

SUFFIXES = (".pt", ".pth", ".tar", ".bin")
OPTIMIZER_KEYS = ("optimizer", "optim", "optimizer_state_dict", "optimizer_state", "opt",
                  "optimizer_state_dicts", "optimizers")
SCHEDULER_KEYS = ("scheduler", "lr_scheduler", "sched", "scheduler_state_dict",
                  "lr_scheduler_state_dict", "scheduler_state", "schedulers", "lr_schedulers")
NEST_KEYS = ("state", "train_state", "training_state", "checkpoint", "ckpt", "trainer")
# Loop counters commonly saved next to the states: key -> (counter name, unit).
COUNTER_KEYS: dict[str, tuple[str, Unit]] = {
    "global_step": ("loop.global_step", Unit.UPDATES),
    "step": ("loop.step", Unit.UPDATES),
    "optimizer_step": ("loop.optimizer_step", Unit.UPDATES),
    "update": ("loop.update", Unit.UPDATES),
    "num_updates": ("loop.num_updates", Unit.UPDATES),
    "iteration": ("loop.iteration", Unit.UPDATES),
    "iter": ("loop.iter", Unit.UPDATES),
    "micro_step": ("loop.micro_step", Unit.MICRO_STEPS),
    "micro_steps": ("loop.micro_steps", Unit.MICRO_STEPS),
    "epoch": ("loop.epoch", Unit.EPOCHS),
}
BUDGET_KEYS: dict[str, Unit] = {
    "total_steps": Unit.UPDATES, "max_steps": Unit.UPDATES, "num_training_steps": Unit.UPDATES,
    "train_steps": Unit.UPDATES, "total_updates": Unit.UPDATES,
    "num_epochs": Unit.EPOCHS, "epochs": Unit.EPOCHS, "max_epochs": Unit.EPOCHS,
}


# ---------------------------------------------------------------- layout

def _numbered(p: Path) -> tuple:
    nums = [int(x) for x in re.findall(r"\d+", p.stem)]
    return (nums[-1] if nums else -1, p.stat().st_mtime, p.name)


def _candidates(d: Path) -> list[Path]:
    return [p for p in d.iterdir() if p.is_file() and p.suffix in SUFFIXES]


def detect(path: Path) -> bool:
    path = Path(path)
    if path.is_file():
        return path.suffix in SUFFIXES
    return path.is_dir() and bool(_candidates(path))


def find_checkpoints(path: Path) -> list[Path]:
    path = Path(path)
    if path.is_file():
        return [path]
    files = sorted(_candidates(path), key=_numbered)
    if not files:
        raise UnusableInput(f"no {'/'.join(SUFFIXES)} checkpoint files here", str(path))
    return files


# ---------------------------------------------------------------- locating states

def _is_optimizer(obj: Any) -> bool:
    return bool(_common.torch_optimizer_dicts(obj))


def _is_scheduler(obj: Any) -> bool:
    if isinstance(obj, dict):
        return "last_epoch" in obj or "_schedulers" in obj
    if isinstance(obj, list):
        return bool(obj) and all(_is_scheduler(x) for x in obj)
    return False


def _find(sd: dict, names: tuple[str, ...], test) -> tuple[str | None, Any]:
    """(dotted key path, object) of the optimizer or scheduler state in a loop checkpoint."""
    for k in names:
        if k in sd and test(sd[k]):
            return k, sd[k]
    for nk in NEST_KEYS:
        if isinstance(sd.get(nk), dict):
            for k in names:
                if k in sd[nk] and test(sd[nk][k]):
                    return f"{nk}.{k}", sd[nk][k]
    for k, v in sd.items():  # unusual names: recognise by shape
        if isinstance(k, str) and test(v):
            return k, v
    return None, None


def optimizer_state(sd: dict) -> tuple[str | None, Any]:
    return _find(sd, OPTIMIZER_KEYS, _is_optimizer)


def scheduler_state(sd: dict) -> tuple[str | None, Any]:
    return _find(sd, SCHEDULER_KEYS, _is_scheduler)


def identify(sched: dict) -> str:
    """The torch LRScheduler class whose ``state_dict()`` has these keys."""
    return torch_scheduler_kind(sched) or "unknown"


# ---------------------------------------------------------------- read

def read(path: Path) -> RunState:
    path = Path(path)
    f = find_checkpoints(path)[-1]
    src = str(f)
    sd = _common.load_dict(f, "a dict of training state")
    st = RunState(format=NAME, path=src, files=[src])

    okey, ostate = optimizer_state(sd)
    opt = optimizer_info(ostate) if okey else None
    if opt is not None:
        st.optimizer_lrs = opt["lrs"]
        if opt["step"] is not None:
            st.counters.append(Counter("optimizer.step", opt["step"], Unit.UPDATES,
                                       f"{src}:{okey}"))
            if len(opt["steps_distinct"]) > 1:
                st.notes.append(f"optimizer params disagree on step: {opt['steps_distinct']}")
        elif opt["unreadable_steps"]:
            st.notes.append("optimizer step tensors could not be read")
    else:
        st.notes.append("no optimizer state found")

    skey, sstate = scheduler_state(sd)
    if isinstance(sstate, list):  # several schedulers: read the first, say so
        st.notes.append(f"{len(sstate)} schedulers under {skey!r}; reading the first")
        skey, sstate = f"{skey}[0]", sstate[0]
    if skey is None:
        st.notes.append("no LR scheduler state found (keys: "
                        + ", ".join(map(str, list(sd)[:12])) + ")")
    else:
        _read_scheduler(st, sstate, f"{src}:{skey}", opt)

    nest = {k: sd[k] for k in NEST_KEYS if isinstance(sd.get(k), dict)}
    scopes = [("", sd)] + [(f"{k}.", v) for k, v in nest.items()]
    for prefix, scope in scopes:
        for key, (name, unit) in COUNTER_KEYS.items():
            v = scope.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) \
                    and st.counter(name) is None:
                st.counters.append(Counter(name, v, unit, f"{src}:{prefix}{key}"))
        for key, unit in BUDGET_KEYS.items():
            v = scope.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and st.planned_end is None:
                st.planned_end = Counter(f"loop.{key}", v, unit, f"{src}:{prefix}{key}")
    if st.planned_end is not None:
        st.trainer_progress = next(
            (c for c in st.counters if c.name.startswith("loop.") and c.unit == st.planned_end.unit),
            None)

    optc = st.counter("optimizer.step")
    if st.schedule is not None and optc is not None and st.schedule.unit is Unit.UPDATES:
        st.nominal_progress = Counter("optimizer.step", optc.value, Unit.UPDATES,
                                      "optimizer.step (one scheduler step per optimizer update)")
    st.extras["top_level_keys"] = [str(k) for k in list(sd)[:40]]
    return st


def _read_scheduler(st: RunState, sched: dict, src: str, opt: dict | None) -> None:
    """Schedule spec and progress through the one shared torch-scheduler converter."""
    st.extras["scheduler_class"] = identify(sched)
    for k in ("_step_count", "_last_lr", "base_lrs"):
        if k in sched:
            st.extras[f"scheduler.{k}"] = sched[k]
    spec, progress, notes = torch_scheduler(sched, unit=Unit.UPDATES, source=src, opt=opt)
    st.schedule, st.scheduler_progress = spec, progress
    st.notes.extend(notes)
