"""torchtune recipe checkpoints, refined from what discovery found.

Layout (``recipes/full_finetune_*.py``, ``torchtune/training/checkpointing``)::

    <output_dir>/epoch_{E}/...                 # model weights
    <output_dir>/recipe_state/recipe_state.pt  # intermediate checkpoints only
        {"optimizer": ..., "seed", "epochs_run", "total_epochs", "max_steps_per_epoch",
         "steps_run", "dataloader"}

torchtune saves **no scheduler state**: on resume it rebuilds the scheduler with
``last_epoch = global_step - 1`` (``global_step = steps_run``, or ``epochs_run x
steps_per_epoch`` in 0.6), so the schedule restarts where ``steps_run`` says.
``steps_run`` counts optimizer steps (one per ``gradient_accumulation_steps`` batches), so
it must equal the optimizer's ``step``.

The schedule itself is in the recipe's config, which ``DiskLogger.log_config`` (and the
other metric loggers) write beside the run as ``torchtune_config.yaml``: its
``lr_scheduler._component_`` names the builder and ``num_warmup_steps``; the recipe passes
``num_training_steps = total_epochs x steps_per_epoch`` (``len(dataloader) // GA``, capped
by ``max_steps_per_epoch``), which is saved nowhere: it is derived as the optimizer's step /
``epochs_run``, with both fields named. The LR the optimizer saved then places the
schedule (LRD133).
"""

from __future__ import annotations

import re
from pathlib import Path

from lrdoctor.core.numbers import number
from lrdoctor.core.state import Counter, RunState, Unit
from lrdoctor.read.layouts import RECOGNISED, _common, torchsave
from lrdoctor.read.scan import shapes

NAME = "torchtune"

RECIPE_STATE = "recipe_state.pt"


def _recipe(sc: shapes.Scan) -> tuple[str, _common.Loaded] | None:
    for f, obj in sc.objects.items():
        if isinstance(obj, dict) and "epochs_run" in obj and "total_epochs" in obj \
                and (Path(f).name == RECIPE_STATE or "seed" in obj):
            return f, obj
    return None


def _claims_content(sc: shapes.Scan) -> bool:
    return _recipe(sc) is not None and not any(
        f.kind in shapes.SCHEDULER_KINDS for f in sc.found)


def refine(sc: shapes.Scan, st: RunState) -> None:
    """The scheduler torchtune will rebuild sits at ``steps_run``; that is its progress."""
    found = _recipe(sc)
    if found is None:
        return  # not claimed: no recipe state here
    f, rs = found
    steps, epochs = rs.get("steps_run"), rs.get("epochs_run")
    per_epoch, total = rs.get("max_steps_per_epoch"), rs.get("total_epochs")
    src = f"{f}:steps_run"
    if not isinstance(steps, int) and isinstance(epochs, int) and isinstance(per_epoch, int):
        steps, src = epochs * per_epoch, f"{f}:epochs_run x max_steps_per_epoch"
    if isinstance(steps, int):
        from lrdoctor.core.fieldref import FieldRef

        st.scheduler_progress = Counter(
            "torchtune.steps_run (scheduler rebuilt at)", steps, Unit.UPDATES, src,
            ref=FieldRef(str(f), ("steps_run",)) if src == f"{f}:steps_run" else None)
        st.notes = [n for n in st.notes if not n.startswith("no LR scheduler state found")]
        st.notes.append("torchtune saves no scheduler state: it rebuilds the scheduler at "
                        "last_epoch = steps_run - 1 on resume")
    if isinstance(total, int) and isinstance(per_epoch, int) and per_epoch > 0:
        st.planned_end = Counter("torchtune.total_epochs x max_steps_per_epoch",
                                 total * per_epoch, Unit.UPDATES,
                                 f"{f}:total_epochs x max_steps_per_epoch")
        st.trainer_progress = st.scheduler_progress
    _schedule_from_config(sc, st, f, rs)


def _steps_per_epoch(st: RunState, f: str, rs: _common.Loaded) -> tuple[int | None, str]:
    """The recipe's ``steps_per_epoch`` (saved nowhere): the optimizer's step over
    ``epochs_run`` when whole; ``max_steps_per_epoch`` caps it."""
    step, epochs = st.counter("optimizer.step"), rs.get("epochs_run")
    if step is None or not isinstance(epochs, int) or isinstance(epochs, bool) or epochs <= 0 \
            or step.value <= 0 or step.value % epochs:
        return None, (f"the optimizer's step over {f}:epochs_run "
                      f"({'not saved' if step is None else number(step.value)} / {epochs})")
    return int(step.value // epochs), (f"optimizer step {number(step.value)} "
                                       f"({step.ref or step.source}) / epochs_run {epochs} "
                                       f"({f}:epochs_run)")


def _schedule_from_config(sc: shapes.Scan, st: RunState, f: str, rs: _common.Loaded) -> None:
    """The recipe's schedule from the config beside the run (``torchtune_config.yaml``):
    ``num_training_steps = total_epochs x steps_per_epoch``, placed by the saved LR."""
    from lrdoctor.read.evidence.collect import config_files, read_config, relative
    from lrdoctor.read.layouts import _stateless

    if st.schedule is not None:
        return
    total = rs.get("total_epochs")
    spe, spe_from = _steps_per_epoch(st, f, rs)
    horizon = float(total * spe) if isinstance(total, int) and spe else None
    h_from = (f"{f}:total_epochs {total} x steps per epoch {spe} = {spe_from}"
              if horizon is not None else f"steps per epoch unknown: {spe_from}")
    initial = st.facts.optimizer_initial_lrs
    base, base_from = (initial[0], "the optimizer's initial_lr") if initial else (None, "")
    ckpt = sc.checkpoint.path
    seen: set[Path] = set()
    for cfg_file in config_files(ckpt) + config_files(Path(f).parent):
        if cfg_file in seen:
            continue
        seen.add(cfg_file)
        cfg = read_config(cfg_file)
        if _stateless.config_builder(cfg) is None:
            continue
        where = relative(str(cfg_file), ckpt)
        if base is None and isinstance(cfg, dict) and isinstance(cfg.get("optimizer"), dict):
            base = _common.number(cfg["optimizer"].get("lr"))
            base_from = f"{where}:optimizer.lr"
        spec, why = _stateless.schedule_from_config(cfg, where, base or 0.0, base_from,
                                                    horizon, h_from) \
            if base else (None, f"{where}: no base LR (no initial_lr, no optimizer.lr)")
        if spec is None:
            st.notes.append(why)
            return
        _stateless.mark_stateless(
            st, spec, f"torchtune rebuilds its LR scheduler from the config ({where}) at every "
            "start and saves no scheduler state: it is placed by the saved LR", str(cfg_file))
        if not st.lr_log:
            _read_disk_log(st, cfg_file.parent, ckpt)
        return


_DISK_LINE = re.compile(r"^Step (\d+) \| (.*)$")
_MAX_LOG_BYTES = 4 << 20
_MAX_POINTS = 100_000


def _float(text: str) -> float | None:
    try:
        v = float(text)
    except ValueError:
        return None
    return v if v == v and abs(v) < 1e6 else None


def _read_disk_log(st: RunState, run: Path, ckpt: Path) -> None:
    """The LRs torchtune's ``DiskLogger`` wrote (``<output_dir>/logs/log_<time>.txt``, one
    ``Step N | loss:... lr:... `` line per logged step, ``N`` the recipe's global step after
    the update): every point, each citing its line, for LRD133 to place beside the saved LR.
    Bounded (size, points); a file that is not such a log is skipped."""
    from lrdoctor.core.evidence import LoggedLr
    from lrdoctor.core.fieldref import FieldRef
    from lrdoctor.read.evidence.collect import relative

    logs = run / "logs"
    try:
        files = sorted(f for f in logs.iterdir() if f.name.startswith("log_")
                       and f.suffix == ".txt" and f.is_file() and not f.is_symlink()
                       and f.stat().st_size <= _MAX_LOG_BYTES) if logs.is_dir() else []
    except OSError:
        return
    for f in files[-1:]:  # the newest run's log
        try:
            lines = f.read_text(encoding="utf-8", errors="replace").splitlines()
        except OSError:
            continue
        rel = relative(str(f), ckpt)
        points = []
        for i, line in enumerate(lines[:_MAX_POINTS]):
            m = _DISK_LINE.match(line)
            if m is None:
                continue
            lr = next((_float(tok[3:]) for tok in m.group(2).split()
                       if tok.startswith("lr:")), None)
            if lr is not None:
                points.append(LoggedLr(float(m.group(1)), float(lr), FieldRef(rel, (i, "lr"))))
        if points:
            st.lr_log, st.lr_log_source = points, rel


# ---------------------------------------------------------------- layout (read by content)

# claims: RECOGNISED when the content read classified a checkpoint laid out as torchtune saves;
# read: the generic content read, then torchtune's normalisation (:func:`refine`).
_LAYOUT = torchsave.Recognised(NAME, RECOGNISED, _claims_content, refine)
claims, find_checkpoints, read = _LAYOUT.claims, _LAYOUT.find_checkpoints, _LAYOUT.read
