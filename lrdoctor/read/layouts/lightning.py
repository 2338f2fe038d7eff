"""PyTorch Lightning ``.ckpt`` files (``trainer.save_checkpoint`` / ``ModelCheckpoint``).

A ``.ckpt`` is a torch.save dict: ``global_step``, ``epoch``, ``loops`` (the
fit loop's progress trackers), ``optimizer_states`` and ``lr_schedulers`` (the
torch schedulers' state_dicts, in configuration order). What it does **not**
hold: the scheduler config (``interval``, ``frequency``) and the trainer's
``max_steps`` / ``max_epochs`` - so the interval is inferred from the counters
and said so.

Counting conventions (pytorch_lightning 2.x, checked against its loops):

- ``global_step`` = optimizer steps (automatic optimization);
- ``loops.fit_loop['epoch_loop.scheduler_progress']`` counts the scheduler
  calls Lightning itself made (all schedulers together);
- an ``interval="step"`` scheduler is stepped at accumulation boundaries when
  ``(batch_idx + 1) % frequency == 0``: ``frequency`` is counted in batches of
  the current epoch, not in optimizer steps, so under ``accumulate_grad_batches``
  a frequency that divides it steps on every update;
- an ``interval="epoch"`` scheduler is stepped only when an epoch ran all its
  batches (a run stopped by ``max_steps`` mid-epoch does not step it, although
  that epoch is counted as completed).

A ``LambdaLR`` saves no lambda. When the run logged its LR with Lightning's
``LearningRateMonitor`` to a ``CSVLogger`` (``<save_dir>/<name>/version_N/
metrics.csv``, next to the default ``checkpoints/`` folder), the schedule is
fitted to the logged points by :mod:`lrdoctor.read.layouts._logfit`, as for HF's
``log_history``. The CSV is found by its content (a ``step`` column and an
``lr-<Optimizer>`` column) in the checkpoint's folder and up to
``LR_LOG_LEVELS`` folders above it, never above the path given. Lightning's
*default* logger, ``TensorBoardLogger``, writes the same points as scalars
tagged ``lr-<Optimizer>`` to ``version_N/events.out.tfevents.*``: those files
are searched the same way (after the CSVs of each folder) and read by
:mod:`lrdoctor.read.bytes.tfevents`, with the same tag rule and first-point-per-step rule.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.evidence import LoggedLr
from lrdoctor.core.facts import LrLog
from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.repair import FormatPlan, RepairTools, Target
from lrdoctor.core.state import Counter, RunState, Unit
from lrdoctor.read.layouts import ENGINE, _common, _logfit
from lrdoctor.read.layouts._common import OptimizerSummary
from lrdoctor.read.layouts._torchstate import (
    add_optimizer,
    optimizer_info,
    torch_scheduler,
    torch_scheduler_kind,
)
from lrdoctor.read.scan import refusal

NAME = "lightning"

SUFFIX = ".ckpt"
STEP_IN_NAME = re.compile(r"step=(\d+)")
FIT = "loops.fit_loop"
LR_LOG_LEVELS = 2  # checkpoints/ -> version_N/ (where CSVLogger writes metrics.csv)
METRICS_CSV = "metrics.csv"  # CSVLogger's name; other *.csv files are recognised by content


# ---------------------------------------------------------------- layout

def _ckpt_files(d: Path) -> list[Path]:
    try:
        return [f for f in d.iterdir() if f.suffix == SUFFIX and f.is_file()]
    except OSError:
        return []


def _search_dirs(path: Path) -> list[Path]:
    dirs = [path, path / "checkpoints"]
    logs = path / "lightning_logs"
    if logs.is_dir():
        dirs += sorted(v / "checkpoints" for v in logs.iterdir() if v.is_dir())
    return dirs


def _is_layout(path: Path) -> bool:
    path = _common.as_path(path)
    if path.is_file():
        return path.suffix == SUFFIX
    return path.is_dir() and any(_ckpt_files(d) for d in _search_dirs(path))


claims = _common.claim_by_path(ENGINE + 2, _is_layout)
detect = _common.detector("lightning")


def find_checkpoints(path: Path) -> list[Path]:
    """``*.ckpt`` files, oldest first: by ``step=N`` when every name has one, else by mtime."""
    path = _common.as_path(path)
    if path.is_file():
        return [path]
    files = [f for d in _search_dirs(path) for f in _ckpt_files(d)]
    if not files:
        raise refusal.nothing_found("no Lightning *.ckpt files here", path)

    by_step = all(STEP_IN_NAME.search(f.name) for f in files)

    def key(f: Path) -> tuple[float, float, str]:
        m = STEP_IN_NAME.search(f.name)
        step = int(m.group(1)) if m else -1
        return (step, f.stat().st_mtime, f.name) if by_step else (f.stat().st_mtime, step, f.name)

    return sorted(files, key=key)


# ---------------------------------------------------------------- read

def _total(progress: Any, field: str = "completed") -> float | None:
    return _common.number(_common.dig(progress, "total", field))


def read(path: Path) -> RunState:
    path = _common.as_path(path)
    ckpt = find_checkpoints(path)[-1]
    sd = _common.load_dict(ckpt, "a Lightning checkpoint dict")
    if "global_step" not in sd and "loops" not in sd:
        # A hand-written loop that named its file *.ckpt: read it as a torch.save dict.
        from lrdoctor.read.layouts import torchsave

        st = torchsave.read(ckpt)
        st.notes.append(f"{ckpt.name} has no 'global_step' or 'loops': not a Lightning "
                        "checkpoint, read as a plain torch.save dict")
        return st
    src = str(ckpt)
    st = RunState(format=NAME, path=src, files=[src])
    for k in ("pytorch-lightning_version", "lightning_version"):
        if k in sd:
            st.extras["lightning_version"] = sd[k]

    raw_fit = _common.dig(sd, "loops", "fit_loop")
    fit: dict[str, Any] = raw_fit if isinstance(raw_fit, dict) else {}
    top = FieldRef(src)
    at_fit = top.child("loops", "fit_loop")
    total = ("total", "completed")
    counters: list[tuple[str, Unit, str, FieldRef]] = [
        ("trainer.global_step", Unit.UPDATES, "global_step", top.child("global_step")),
        ("lightning.optimizer_steps", Unit.UPDATES,
         f"{FIT}['epoch_loop.automatic_optimization.optim_progress'].optimizer.step.total"
         ".completed", at_fit.child("epoch_loop.automatic_optimization.optim_progress",
                                    "optimizer", "step", *total)),
        ("lightning.manual_optimizer_steps", Unit.UPDATES,
         f"{FIT}['epoch_loop.manual_optimization.optim_step_progress'].total.completed",
         at_fit.child("epoch_loop.manual_optimization.optim_step_progress", *total)),
        ("lightning.scheduler_progress", Unit.SCHEDULER_CALLS,
         f"{FIT}['epoch_loop.scheduler_progress'].total.completed",
         at_fit.child("epoch_loop.scheduler_progress", *total)),
        ("lightning.batches", Unit.MICRO_STEPS,
         f"{FIT}['epoch_loop.batch_progress'].total.completed",
         at_fit.child("epoch_loop.batch_progress", *total)),
        ("lightning.epoch", Unit.EPOCHS, "epoch", top.child("epoch")),
    ]
    for name, unit, where, ref in counters:
        value = _common.number(_common.dig(sd, *(str(k) for k in ref.key)))
        if value is not None and not (name == "lightning.manual_optimizer_steps" and value == 0):
            st.counters.append(Counter(name, value, unit, f"{src}:{where}", ref))
    epochs_done = _epochs_done(fit)
    if epochs_done is not None:
        # The completed epochs, give or take the one the checkpoint was written in.
        done = _total(fit.get("epoch_progress")) or 0.0
        st.counters.append(Counter("lightning.epochs_done", epochs_done, Unit.EPOCHS,
                                   f"{src}:{FIT}.epoch_progress (epochs that ran all batches)",
                                   at_fit.child("epoch_progress", *total),
                                   ref_offset=epochs_done - done))

    opts = sd.get("optimizer_states") or []
    info = optimizer_info(opts[0]) if isinstance(opts, list) and opts else None
    if info is not None:
        add_optimizer(st, info, f"{src}:optimizer_states[0]", top.child("optimizer_states", 0))
    if isinstance(opts, list) and len(opts) > 1:
        st.notes.append(f"{len(opts)} optimizers: the first one is used")

    steps = _steps(st)
    batches_c = st.counter("lightning.batches")
    if steps is not None and batches_c is not None and steps.value > 0:
        st.extras["lightning.batches_per_update"] = batches_c.value / steps.value

    scheds = sd.get("lr_schedulers") or []
    if not isinstance(scheds, list) or not scheds:
        st.notes.append("no lr_schedulers in the checkpoint: configure_optimizers returned none")
        return st
    if len(scheds) > 1:
        st.notes.append(f"{len(scheds)} schedulers: the first one is used")
    _scheduler(st, scheds, info, src, steps, epochs_done)
    _planned_end(st, sd, src, steps)
    if st.schedule is None and isinstance(scheds[0], dict) \
            and torch_scheduler_kind(scheds[0]) == "LambdaLR":
        _fit_logged_lr(st, path, ckpt, scheds[0], steps)
    return st


# ---------------------------------------------------------------- logged LR (LambdaLR)

def _is_tfevents(f: Path) -> bool:
    from lrdoctor.read.bytes.tfevents import PREFIX

    return f.name.startswith(PREFIX)


def lr_log_files(ckpt: Path, root: Path) -> list[Path]:
    """``*.csv`` and TensorBoard ``events.out.tfevents.*`` files in the checkpoint's folder and up to LR_LOG_LEVELS above, nearest
    first; never above ``root`` (the path the user gave) when it is a folder holding it."""
    out: list[Path] = []
    d = ckpt.parent
    for _ in range(LR_LOG_LEVELS + 1):
        try:
            out += sorted((f for f in d.iterdir()
                           if (f.suffix == ".csv" or _is_tfevents(f)) and f.is_file()),
                          key=lambda f: (f.name != METRICS_CSV, _is_tfevents(f), f.name))
        except OSError:
            pass
        if d == root or d.parent == d:
            break
        d = d.parent
    return out


def _lr_column(header: list[str]) -> tuple[str | None, list[str]]:
    """(the column of the first optimizer's first param group, all LR columns).

    LearningRateMonitor names a column ``lr-<OptimizerClass>`` (``-1``, ``-2`` for
    more optimizers of the class), ``/pg1``... or ``/<group name>`` for several param
    groups, and adds ``-momentum`` / ``-weight_decay`` columns; CSVLogger sorts the
    header, so the configuration order is lost: the first name sorted is taken."""
    cols = [c for c in header if c.startswith("lr-")
            and not c.endswith(("-momentum", "-weight_decay"))]
    if not cols:
        return None, []
    bases = sorted({c.split("/", 1)[0] for c in cols})
    mine = [c for c in cols if c.split("/", 1)[0] == bases[0]]
    pick = next((c for c in (bases[0], f"{bases[0]}/pg1") if c in mine), sorted(mine)[0])
    return pick, cols


def read_lr_log(f: Path) -> tuple[list[LoggedLr] | None, str, str]:
    """(the first logged LR per step, column, '' or a caveat) or (None, '', why it is not
    an LR log). Each point names its field: ``metrics.csv:[row].<column>`` (``row``
    counts the data rows from 0).

    Lightning logs the LR at every batch that may log, so inside an accumulation
    window several rows share a step: the first is the LR the update started with.
    A TensorBoard event file is read by :func:`read_tb_lr_log`, by the same rules."""
    from lrdoctor.read.bytes import safetext

    if _is_tfevents(f):
        return read_tb_lr_log(f)
    header, rows = safetext.read_csv(f, "a CSVLogger metrics.csv")
    if "step" not in header:
        return None, "", "no 'step' column"
    col, _ = _lr_column(header)
    if col is None:
        return None, "", _no_lr_column("column", "columns", header)
    si, li = header.index("step"), header.index(col)

    def points() -> Iterator[tuple[int, float, FieldRef]]:
        for i, row in enumerate(rows):
            if len(row) <= max(si, li) or not row[li].strip():
                continue
            try:
                step = float(row[si])
                yield (int(step) if step.is_integer() else -1, float(row[li]),
                       FieldRef(str(f), (i, col)))
            except ValueError:
                continue

    history = _first_per_step(points())
    if history is None:
        return None, col, f"column {col!r} holds no logged LR values"
    return history, col, ""


def _no_lr_column(what: str, whats: str, names: list[str]) -> str:
    return (f"no LearningRateMonitor 'lr-<Optimizer>' {what} ({whats}: "
            f"{', '.join(names[:8]) or 'none'}{' ...' if len(names) > 8 else ''})")


def _first_per_step(points: Iterable[tuple[int, float, FieldRef]]) -> list[LoggedLr] | None:
    """The first usable (step, LR, field) of each step, by step; None when there is none.
    Lightning logs at every batch that may log, so inside an accumulation window
    several points share a step: the first is the LR the update started with. The step
    is the trainer's global_step: optimizer updates."""
    seen: dict[int, LoggedLr] = {}
    for step, lr, ref in points:
        if step >= 0 and math.isfinite(lr) and lr >= 0:
            seen.setdefault(step, LoggedLr(float(step), lr, ref))
    return [seen[s] for s in sorted(seen)] or None


def read_tb_lr_log(f: Path) -> tuple[list[LoggedLr] | None, str, str]:
    """:func:`read_lr_log` of a TensorBoardLogger event file: the tags are the column
    names (the same ``lr-<Optimizer>`` rule), each scalar a (step, LR) row, named
    ``<tag>[i]``: the tag's i-th scalar in the file (tensorboard's ``Scalars(tag)[i]``)."""
    from lrdoctor.read.bytes import tfevents

    scalars = tfevents.read(f)
    tags = sorted(scalars.values)
    col, _ = _lr_column(tags)
    if col is None:
        return None, "", _no_lr_column("scalar", "tags", tags)
    history = _first_per_step((step, lr, FieldRef(str(f), (col, i)))
                              for i, (step, lr) in enumerate(scalars.values[col]))
    if history is None:
        return None, col, f"scalar {col!r} holds no logged LR values"
    cut = ("its last record is cut short (a writer mid-flush?): read up to it"
           if scalars.truncated else "")
    return history, col, cut


def _fit_logged_lr(st: RunState, path: Path, ckpt: Path, sched: _common.Loaded,
                   steps: Counter | None) -> None:
    """Fit the LambdaLR's schedule to a LearningRateMonitor log near the checkpoint.

    Never silent: a metrics file that could not be used is put in
    ``facts.lr_log_unused`` (LRD111 reports it)."""
    unused: list[LrLog] = []
    found = None
    for f in lr_log_files(ckpt, path):
        try:
            history, col, why = read_lr_log(f)
        except UnusableInput as exc:
            # Unreadable: a metrics log only by its name; another CSV is only noted.
            history, col, why = None, "", str(exc).removeprefix(f"{f}: ")
            if f.name != METRICS_CSV and not _is_tfevents(f):
                st.notes.append(f"{f}: not read ({why})")
                continue
        if history is not None:
            if why:  # usable, with a caveat (an event file's cut-short last record)
                st.notes.append(f"{f}: {why}")
            found = (f, col, history)
            break
        if f.name == METRICS_CSV or _is_tfevents(f) or why != "no 'step' column":
            unused.append(LrLog(file=str(f), reason=why))
    st.facts.lr_log_unused = unused
    if found is None:
        if not unused:
            st.notes.append(f"no LearningRateMonitor metrics.csv or TensorBoard events.out."
                            f"tfevents.* within {LR_LOG_LEVELS} folders above {ckpt.name}: "
                            "the LambdaLR's schedule cannot be fitted")
        return
    f, col, history = found
    st.files.append(str(f))
    st.facts.lr_log = LrLog(file=str(f), column=col, points=len(history))
    st.extras["logged_lr_points"] = len(history)
    st.lr_log, st.lr_log_source = history, f"{f} column {col!r}"
    if st.extras.get("lightning.interval") != "step":
        st.notes.append(f"{f}: LRs logged per step, but the scheduler steps per epoch: "
                        "not fitted")
        return
    base = sched.get("base_lrs")
    base_lr = _common._side(base[0]) if isinstance(base, (list, tuple)) and base else None
    if base_lr is None:
        base_lr = max(p.lr for p in history)
        st.notes.append("initial LR unknown; the fit takes the largest logged LR")
    end = st.planned_end
    budget = int(end.value) if end is not None and end.unit == Unit.UPDATES else None
    st.schedule = _logfit.fit(
        [(int(p.step), p.lr) for p in history], float(base_lr), budget, label=f"{f} column {col!r}",
        anchor=_logfit.current_lr(st.scheduler_progress, sched, st.optimizer_lrs),
        scale=_logfit.calls_per_step(st.scheduler_progress, steps))
    if st.schedule is None:
        st.notes.append(f"no schedule type fits {f} column {col!r}; schedule unknown")
    elif end is not None and end.ref is not None and st.schedule.horizon == budget:
        st.schedule.refs["horizon"] = end.ref  # the budget the fit was given


BUDGET_HPARAMS = ("max_steps", "total_steps", "num_training_steps", "training_steps",
                  "train_steps")


def _planned_end(st: RunState, sd: _common.Loaded, src: str, steps: Counter | None) -> None:
    """A step budget the module saved with save_hyperparameters(); Lightning keeps none itself."""
    hp = _common.as_fields(sd.get("hyper_parameters")) or {}
    from lrdoctor import epochs

    epochs.attach(st, hp, f"{src}:hyper_parameters")
    for key in BUDGET_HPARAMS:
        v = _common.number(hp.get(key))
        if v is not None and v > 0:
            st.planned_end = Counter(f"hyper_parameters.{key}", v, Unit.UPDATES,
                                     f"{src}:hyper_parameters.{key} (the module's own setting)",
                                     FieldRef(src, ("hyper_parameters", key)))
            if steps is not None:
                st.trainer_progress = Counter(steps.name, steps.value, Unit.UPDATES, steps.source,
                                              steps.ref)
            return
    st.notes.append("Lightning does not save max_steps/max_epochs: the planned end is unknown")


def _steps(st: RunState) -> Counter | None:
    return (st.counter("lightning.optimizer_steps") or st.counter("trainer.global_step")
            if not st.counter("lightning.manual_optimizer_steps")
            else st.counter("lightning.manual_optimizer_steps"))


def _epochs_done(fit: _common.Loaded) -> float | None:
    """Epochs whose batches all ran: what an interval="epoch" scheduler has been stepped for.

    The epoch scheduler steps right after the epoch's last batch, before Lightning
    marks the epoch completed (a ModelCheckpoint at the epoch end sees it stepped
    but the epoch not completed); a run stopped by max_steps mid-epoch has that
    epoch marked completed without the step.
    """
    ep = fit.get("epoch_progress")
    done, started = _total(ep), _total(ep, "started")
    if done is None:
        return None
    bp = fit.get("epoch_loop.batch_progress") or {}
    ran = (_common.number(_common.dig(bp, "current", "completed")) or 0) > 0
    last_batch = bp.get("is_last_batch")
    in_progress = started is not None and started > done
    if in_progress and last_batch is True and ran:
        return done + 1
    if not in_progress and last_batch is False and ran and done > 0:
        return done - 1
    return done


def _scheduler(st: RunState, scheds: list[Any], info: OptimizerSummary | None, src: str,
               steps: Counter | None, epochs_done: float | None) -> None:
    sd0 = scheds[0]
    last = _common.number(sd0.get("last_epoch")) if isinstance(sd0, dict) else None
    s = steps.value if steps else None
    interval = "step"
    if last is not None and epochs_done is not None and last == epochs_done and last != s:
        interval = "epoch"
    unit = Unit.EPOCHS if interval == "epoch" else Unit.UPDATES
    spec, prog, notes = torch_scheduler(sd0, unit=unit, source=f"{src}:lr_schedulers[0]", opt=info,
                                        ref=FieldRef(src, ("lr_schedulers", 0)))
    st.schedule, st.scheduler_progress = spec, prog
    st.notes += notes
    st.extras["lightning.interval"] = interval

    # Did every scheduler call come from Lightning's loop?
    lasts = [_common.number(d.get("last_epoch")) for d in scheds if isinstance(d, dict)]
    made = st.counter("lightning.scheduler_progress")
    if st.counter("lightning.manual_optimizer_steps"):
        made = None
        st.notes.append("manual optimization: training_step steps the scheduler itself, so "
                        "Lightning's scheduler_progress does not apply")
    known = [x for x in lasts if x is not None]
    if made is not None and len(known) == len(lasts):
        extra = sum(known) - made.value
        st.facts.extra_scheduler_calls = extra
        if extra > 0:
            st.notes.append(f"schedulers were stepped {extra:g} times more than Lightning's loop "
                            "stepped them: something else calls scheduler.step() (e.g. "
                            "training_step), on top of the configured interval")

    if interval == "epoch":
        if epochs_done is not None:
            st.nominal_progress = Counter("lightning.epochs_done", epochs_done, Unit.EPOCHS,
                                          "epochs that ran all their batches (fit_loop)")
            st.notes.append("interval='epoch' inferred (last_epoch equals the epochs run): "
                            "Lightning does not save the scheduler config")
        return
    if steps is None or s is None:
        return
    per_update = st.extras.get("lightning.batches_per_update") or 1
    k = 1
    if (last and made is not None and made.value == last and len(scheds) == 1 and s // last > 1
            and s // (s // last) == last):
        k = int(s // last)  # all calls were Lightning's: frequency k in effect
    if k > 1:
        st.nominal_progress = Counter(f"{steps.name} // {k}", s // k, Unit.UPDATES,
                                      f"Lightning optimizer steps // frequency {k}")
        st.extras["lightning.frequency"] = k
        st.notes.append(f"interval='step', frequency={k} inferred: every scheduler call came "
                        f"from Lightning's loop, one per {k} updates; Lightning does not save "
                        "the scheduler config")
    else:
        st.nominal_progress = Counter(steps.name, s, Unit.UPDATES,
                                      "Lightning optimizer steps (interval='step', frequency=1 "
                                      "assumed: the scheduler config is not saved)")
    if per_update > 1:
        st.notes.append(f"about {per_update:.3g} batches per optimizer step "
                        "(accumulate_grad_batches): Lightning counts a scheduler's `frequency` in "
                        "batches, so a frequency > 1 that divides it steps on every update")


# ---------------------------------------------------------------- repair (lrdoctor fix)

def repair(path: Path, state: RunState, target: Target, tools: RepairTools) -> FormatPlan:
    """The edits of ``lrdoctor fix`` for a ``.ckpt`` file.

    ``lr_schedulers[i]`` and ``optimizer_states[i]`` are plain torch state dicts; the fields
    edited are the ones the reader's refs name (``scheduler_progress.ref``, the
    ``optimizer_lr_refs``), found by shape as for a plain torch.save dict only where the
    reader named none in this file (said in a note). ``global_step`` and the ``loops``
    progress trackers are the trainer's own counts, so they are kept. A directory in gives
    a directory out, holding the repaired ``.ckpt`` under its name."""
    path = _common.as_path(path)
    f = find_checkpoints(path)[-1]
    root = path if path.is_dir() else f
    rel = str(f.relative_to(root)) if root.is_dir() else f.name
    changes, notes = tools.ref_state(rel, tools.load(f), f, state, target)
    if root.is_dir():
        notes.append(f"the output holds a repaired copy of {rel} only; resume with "
                     f"trainer.fit(model, ckpt_path=OUT/{rel})")
    return FormatPlan(root=root, files=[rel], changes=changes, notes=notes)
