"""Hugging Face accelerate ``Accelerator.save_state`` folders.

Layout (one folder per save; with ``automatic_checkpoint_naming`` they sit in
``<project_dir>/checkpoints/checkpoint_N``)::

    optimizer.bin, optimizer_1.bin ...   # torch optimizer state_dicts (torch.save)
    scheduler.bin, scheduler_1.bin ...   # torch LRScheduler state_dicts
    random_states_R.pkl                  # one per process R (torch.save: RNG state + "step")
    custom_checkpoint_N.pkl              # each object given to register_for_checkpointing
    model.safetensors / pytorch_model.bin

A scheduler the loop did not pass to ``prepare`` but registered with
``register_for_checkpointing`` is saved as ``custom_checkpoint_N.pkl`` (its ``state_dict()``,
torch.save). It is read as the scheduler when its content is one (by shape, never by its
number); it is the user's own object, stepped once per call, so accelerate's
``num_processes`` multiplier does not apply to it.

Counting convention: a prepared ``AcceleratedScheduler`` with
``split_batches=False`` (the default) calls the wrapped scheduler
``num_processes`` times per optimizer step, so ``last_epoch`` is
``num_processes x`` the optimizer step on a multi-process run. The number of
``random_states_R.pkl`` files is the number of processes that saved.

The torch scheduler/optimizer state_dicts inside are read by
:mod:`lrdoctor.read.layouts._torchstate`, shared with the other torch-based readers.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.repair import FormatPlan, Refusal, RepairTools, Target, named_file
from lrdoctor.core.state import Counter, RunState, Unit
from lrdoctor.read.layouts import ENGINE, _common
from lrdoctor.read.layouts._refs import itemize
from lrdoctor.read.layouts._torchstate import (
    add_optimizer,
    load_optimizer_items,
    optimizer_info,
    set_torch_scheduler,
)

if TYPE_CHECKING:
    from lrdoctor.read.bytes.dcp import DcpState

NAME = "accelerate"

SCHEDULER_FILE = re.compile(r"^scheduler(?:_(\d+))?\.bin$")
OPTIMIZER_FILE = re.compile(r"^optimizer(?:_(\d+))?\.bin$")
FSDP_OPTIMIZER_DIR = re.compile(r"^optimizer_(\d+)$")
RANDOM_FILE = re.compile(r"^random_states_(\d+)\.pkl$")
CUSTOM_FILE = re.compile(r"^custom_checkpoint_(\d+)\.pkl$")
CHECKPOINT_DIR = re.compile(r"^checkpoint_(\d+)$")


# ---------------------------------------------------------------- layout

def numbered_files(d: Path, pattern: re.Pattern[str]) -> list[Path]:
    """Files of ``d`` named like ``pattern`` (``scheduler.bin``, ``scheduler_1.bin`` ...), by N."""
    return _common.numbered_children(d, pattern, lambda child: child.is_file())


def fsdp_optimizer_dirs(d: Path) -> list[Path]:
    """``optimizer_N/`` DCP folders (accelerate's save_fsdp_optimizer, SHARDED_STATE_DICT)."""
    from lrdoctor.read.bytes import dcp

    return _common.numbered_children(d, FSDP_OPTIMIZER_DIR, dcp.is_dcp)


def _is_state_dir(d: Path) -> bool:
    return d.is_dir() and bool(numbered_files(d, SCHEDULER_FILE) or numbered_files(d, OPTIMIZER_FILE)
                               or numbered_files(d, RANDOM_FILE))


def _candidates(path: Path) -> list[Path]:
    for base in (path, path / "checkpoints"):
        if not base.is_dir():
            continue
        subs = [c for c in base.iterdir() if _is_state_dir(c)]
        if subs:
            def key(c: Path) -> tuple[int, float, str]:
                m = CHECKPOINT_DIR.match(c.name)
                return (0, int(m.group(1)), "") if m else (1, c.stat().st_mtime, c.name)
            return sorted(subs, key=key)
    return []


def _is_layout(path: Path) -> bool:
    path = _common.as_path(path)
    if path.is_file():
        return bool(SCHEDULER_FILE.match(path.name) or OPTIMIZER_FILE.match(path.name))
    if _is_state_dir(path):
        return True
    return path.is_dir() and bool(_candidates(path))


claims = _common.claim_by_path(ENGINE + 1, _is_layout)
detect = _common.detector("accelerate")


def find_checkpoints(path: Path) -> list[Path]:
    path = _common.as_path(path)
    if path.is_file() or _is_state_dir(path):
        return [path if path.is_dir() else path.parent]
    return _common.listed(_candidates(path),
                          "no accelerate save_state folders (scheduler.bin/optimizer.bin) here", path)


# ---------------------------------------------------------------- read

def read(path: Path) -> RunState:
    path = _common.as_path(path)
    ckpt = find_checkpoints(path)[-1]
    scheds = numbered_files(ckpt, SCHEDULER_FILE)
    # FSDP with SHARDED_STATE_DICT: save_fsdp_optimizer writes DCP folders optimizer_N/
    opts = numbered_files(ckpt, OPTIMIZER_FILE) or fsdp_optimizer_dirs(ckpt)
    randoms = numbered_files(ckpt, RANDOM_FILE)
    if not scheds and not opts:
        raise UnusableInput("no scheduler.bin or optimizer.bin in this save_state folder", str(ckpt))
    st = RunState(format=NAME, path=str(ckpt))
    infos = []
    first: DcpState | None = None  # the first optimizer's DCP items (FSDP), to name its fields
    for f in opts:
        obj, ds = load_optimizer_items(f, st)
        first = ds if f == opts[0] else first
        infos.append(optimizer_info(obj))
        st.files.append(str(f))
    if infos:
        at = FieldRef(str(opts[0])) if first is None else \
            FieldRef(str(first.path / ".metadata"), ("optimizer",))  # replaced by its items
        add_optimizer(st, infos[0], str(opts[0]), at)
    if len(opts) > 1:
        st.extras["optimizers"] = len(opts)
        st.notes.append(f"{len(opts)} optimizers saved; the first one (optimizer.bin) is used")

    registered = registered_schedulers(ckpt) if not scheds else []
    if scheds or registered:
        sfile, sd = (scheds[0], _common.load_dict(scheds[0], "a scheduler state_dict")) \
            if scheds else registered[0]
        st.files.append(str(sfile))
        set_torch_scheduler(st, sd, unit=Unit.UPDATES, source=str(sfile),
                            opt=infos[0] if infos else None, ref=FieldRef(str(sfile)))
        if "_step_count" in sd:
            st.extras["scheduler._step_count"] = sd["_step_count"]
        if len(scheds) > 1:
            st.extras["schedulers"] = len(scheds)
            st.notes.append(f"{len(scheds)} schedulers saved; the first one (scheduler.bin) is used")
        if registered:
            st.notes.append(
                f"no scheduler.bin: the scheduler was not passed to accelerator.prepare; "
                f"{sfile.name} (register_for_checkpointing) holds a torch LR scheduler's state "
                "and is read as the scheduler (not prepared: stepped once per call)")
    else:
        st.notes.append("no scheduler.bin: the scheduler was not passed to accelerator.prepare")

    if randoms:
        n = len(randoms)
        st.facts.processes = n
        st.files.append(str(randoms[0]))
        _read_random_state(st, randoms[0])
        if scheds:  # AcceleratedScheduler (split_batches=False) steps num_processes times per call
            st.facts.scheduler_steps_per_call = n
        if n > 1 and scheds:
            st.notes.append(
                f"{n} processes saved state: a scheduler prepared with split_batches=False "
                f"steps {n} times per optimizer step, so last_epoch should be {n} x optimizer.step "
                "unless its budget was multiplied by num_processes too")
    else:
        st.notes.append("no random_states_*.pkl: number of processes unknown (assumed 1)")

    _nominal(st)
    if first is not None:
        itemize(st, [first])  # the FSDP optimizer's fields as the DCP items holding them
    return st


def registered_schedulers(ckpt: Path) -> list[tuple[Path, _common.Loaded]]:
    """The ``custom_checkpoint_N.pkl`` files whose content is a torch LR scheduler's
    ``state_dict()``, by N; one that cannot be read safely is left out (it is the user's
    own object, and the evidence collector names what it could not read)."""
    from lrdoctor.read.scan.shapes import is_torch_scheduler

    out = []
    for f in numbered_files(ckpt, CUSTOM_FILE):
        try:
            obj = _common.load(f)
        except UnusableInput:
            continue
        if is_torch_scheduler(obj):
            out.append((f, obj))
    return out


def _read_random_state(st: RunState, f: Path) -> None:
    """``Accelerator.step`` from random_states_0.pkl; optional, so a refusal is only a note."""
    try:
        rs = _common.load(f)
    except UnusableInput as exc:
        st.notes.append(f"not read: {exc}")
        return
    step = _common.number(rs.get("step")) if isinstance(rs, dict) else None
    if step is not None:
        st.counters.append(Counter(
            "accelerate.step", step, Unit.MICRO_STEPS,
            f"{f}:step (Accelerator.step: micro-batches under accumulate() since the last "
            "end of the dataloader)", FieldRef(str(f), ("step",))))


def _nominal(st: RunState) -> None:
    opt_step = st.counter("optimizer.step")
    if opt_step is not None:
        st.nominal_progress = Counter("optimizer.step", opt_step.value, Unit.UPDATES,
                                      "optimizer.bin state step (max over parameters)")


# ---------------------------------------------------------------- repair (lrdoctor fix)

def repair(path: Path, state: RunState, target: Target, tools: RepairTools) -> FormatPlan:
    """The edits of ``lrdoctor fix`` for a ``save_state`` folder (``scheduler.bin``,
    ``optimizer.bin``).

    The scheduler/optimizer pair the reader named (else the first) is repaired; model
    weights and ``random_states_*.pkl`` are copied as they are. A prepared
    ``AcceleratedScheduler`` steps ``num_processes`` times per update, which is why a
    rescale says how to prepare it, or the counter runs ahead again."""
    ckpt = find_checkpoints(_common.as_path(path))[-1]
    prepared = numbered_files(ckpt, SCHEDULER_FILE)
    scheds = prepared or [f for f, _ in registered_schedulers(ckpt)]
    opts = numbered_files(ckpt, OPTIMIZER_FILE)
    if not scheds:
        raise Refusal("no scheduler.bin (nor a registered scheduler) to repair", str(ckpt))
    named = named_file(state)
    sfile = named if named is not None and named in scheds else scheds[0]
    opt = opts[scheds.index(sfile)] if len(opts) == len(scheds) else (opts[0] if opts else None)
    changes, _, _ = tools.scheduler_file(sfile, opt, target)
    notes = []
    if target.policy == "rescale" and prepared:
        notes.append("a prepared AcceleratedScheduler steps num_processes times per update: "
                     "prepare it with split_batches=True, or step_scheduler_with_optimizer=False, "
                     "or the counter will run ahead again")
    elif target.policy == "rescale":
        notes.append(f"{sfile.name} is a scheduler registered with register_for_checkpointing "
                     "(not prepared): step it under `if accelerator.sync_gradients`, or the "
                     "counter will run ahead again")
    if len(scheds) > 1:
        notes.append(f"{len(scheds) - 1} more scheduler file(s) copied unchanged")
    return FormatPlan(root=ckpt, files=None, changes=changes, notes=notes)
