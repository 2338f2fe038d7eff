"""ROLL (alibaba/ROLL) Megatron-strategy checkpoints, written through mcore_adapter.

Layout (``output_dir`` is the pipeline's ``output_dir``)::

    <output_dir>/<worker>/checkpoint-N/            # worker: actor_train, critic, ...
        scheduler.pt                               # megatron-core OptimizerParamScheduler.state_dict()
        mca_config.json, latest_checkpointed_iteration.txt ("1")
        iter_0000001/mp_rank_00/model_optim_rng.pt # {"model": ...}
        iter_0000001/mp_rank_00/optimizer.pt       # or iter_0000001/dist_optimizer/ (torch_dist)
        rng_state/rng_state_<rank>.pth
    <output_dir>/pipeline/checkpoint-N/pipeline/worker_state_pipeline.json  # {"step", "log_history", "kv"}

Some workers (critic, distill) save under ``checkpoint-N/<cluster_name>/``.
``N`` is the 0-based pipeline step (``for global_step in range(max_steps)``),
so N+1 pipeline steps are done. The scheduler is stepped with increment 1 per
optimizer update: ``num_steps`` counts **updates**, and ``lr_decay_steps``
defaults to the worker's ``max_steps`` = ``pipeline max_steps *
rollout_batch_size * num_return_sequences * ppo_epochs // (per_device_train_batch_size
* gradient_accumulation_steps) // dp``. ROLL does not save its YAML config; when
one sits in the output directory (or the checkpoint) lrdoctor reads it for the
pipeline's ``max_steps``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.repair import Change, FormatPlan, Refusal, RepairTools, Target
from lrdoctor.core.state import Counter, RunState, ScheduleSpec, Unit
from lrdoctor.read.layouts import FRAMEWORK, RECOGNISED, _common
from lrdoctor.read.layouts._megatron_core import scheduler_refs
from lrdoctor.read.layouts._torchstate import read_optimizer_file
from lrdoctor.read.scan import shapes
from lrdoctor.read.scan.shapes import SCHEDULER_KEYS, scheduler_field
from lrdoctor.read.scan.view import ScanView

NAME = "roll"

SCHEDULER_FILE = "scheduler.pt"
OPTIMIZER_FILE = "optimizer.pt"
DIST_OPTIMIZER_DIR = "dist_optimizer"
MCA_CONFIG = "mca_config.json"
ITER_DIR = "iter_0000001"  # mcore_adapter always saves as iteration 1
PIPELINE_STATE = "worker_state_pipeline.json"
PREFERRED_WORKERS = ("actor_train", "critic", "student")


# ---------------------------------------------------------------- layout

def _is_ckpt(d: Path) -> bool:
    """A directory holding a ROLL mcore_adapter scheduler.pt."""
    return ((d / SCHEDULER_FILE).is_file()
            and ((d / MCA_CONFIG).is_file() or (d / ITER_DIR).is_dir()))


def scheduler_file(ckpt: Path) -> Path:
    """``scheduler.pt`` of a checkpoint-N dir (directly, or under one cluster subdir)."""
    if _is_ckpt(ckpt):
        return ckpt / SCHEDULER_FILE
    for sub in sorted(ckpt.iterdir()) if ckpt.is_dir() else []:
        if sub.is_dir() and _is_ckpt(sub):
            return sub / SCHEDULER_FILE
    raise UnusableInput(f"no {SCHEDULER_FILE} (with {MCA_CONFIG}) in this ROLL checkpoint",
                        str(ckpt))


def _has_ckpt(d: Path) -> bool:
    if _is_ckpt(d):
        return True
    if _common.checkpoint_number(d) is None:
        return False
    return any(sub.is_dir() and _is_ckpt(sub) for sub in d.iterdir())


def _worker_ckpts(worker: Path) -> list[Path]:
    return _common.numbered_children(worker, _common.CHECKPOINT_N,
                                     lambda child: child.is_dir() and _has_ckpt(child))


def _workers(output_dir: Path) -> dict[str, list[Path]]:
    out: dict[str, list[Path]] = {}
    for child in sorted(output_dir.iterdir()):
        if child.is_dir() and child.name != "pipeline":
            ck = _worker_ckpts(child)
            if ck:
                out[child.name] = ck
    return out


def claims(scan: ScanView) -> int:
    """How well this layout claims the evidence: on an input, FRAMEWORK + 5 for ROLL's own
    layout (its reader reads it); on a checkpoint the content read classified, RECOGNISED
    + 5 when it holds what ROLL saves (a megatron-core scheduler in ``checkpoint-N``'s
    ``scheduler.pt``, normalised by :func:`refine`); else 0."""
    sc = scan.content
    if sc is not None:
        return RECOGNISED + 5 if _claims_content(sc) else 0
    return FRAMEWORK + 5 if _is_layout(scan.path) else 0


def _is_layout(path: Path) -> bool:
    path = _common.as_path(path)
    try:
        if path.is_file():
            return path.name == SCHEDULER_FILE and _is_ckpt(path.parent)
        if not path.is_dir():
            return False
        if _has_ckpt(path) or _worker_ckpts(path):
            return True
        return bool(_workers(path))
    except OSError:
        return False


detect = _common.detector("roll")


def find_checkpoints(path: Path) -> list[Path]:
    path = _common.as_path(path)
    if path.is_file():
        return [path.parent]
    if _has_ckpt(path):
        return [path]
    ck = _worker_ckpts(path)
    if ck:
        return ck
    workers = _workers(path)
    for name in PREFERRED_WORKERS:
        if name in workers:
            return workers[name]
    if workers:
        return next(iter(workers.values()))
    from lrdoctor.read.scan import refusal

    raise refusal.nothing_found("no <worker>/checkpoint-N/scheduler.pt checkpoints here", path)


def _checkpoint_n_dir(sched_file: Path) -> Path | None:
    for d in (sched_file.parent, sched_file.parent.parent):
        if _common.checkpoint_number(d) is not None:
            return d
    return None


def optimizer_location(ckpt: Path) -> Path | None:
    """``iter_0000001/mp_rank_*/optimizer.pt`` (first rank) or the ``dist_optimizer/`` dir."""
    it = ckpt / ITER_DIR
    if not it.is_dir():
        return None
    if (it / DIST_OPTIMIZER_DIR).is_dir():
        return it / DIST_OPTIMIZER_DIR
    files = sorted(it.glob(f"mp_rank_*/{OPTIMIZER_FILE}"))
    return files[0] if files else None


def pipeline_state_file(ckpt_n: Path) -> Path:
    """``<output_dir>/pipeline/checkpoint-N/pipeline/worker_state_pipeline.json``."""
    return ckpt_n.parent.parent / "pipeline" / ckpt_n.name / "pipeline" / PIPELINE_STATE


def find_config(ckpt_n: Path) -> Path | None:
    """A ROLL pipeline YAML config the user kept next to the outputs (ROLL saves none)."""
    from lrdoctor.read.bytes import safetext

    candidates = []
    for d in (ckpt_n, ckpt_n.parent, ckpt_n.parent.parent):
        candidates += sorted(d.glob("*.yaml")) + sorted(d.glob("*.yml"))
    for f in candidates:
        try:
            cfg = safetext.read_yaml(f)
        except UnusableInput:  # not this run's config (or not one we can read): keep looking
            continue
        if isinstance(cfg, dict) and "max_steps" in cfg and (
                "rollout_batch_size" in cfg or "actor_train" in cfg):
            return f
    return None


def planned_from_config(cfg: _common.Loaded, worker: str) -> dict[str, Any]:
    """The numbers of ROLL's ``set_max_steps`` budget formula found in a pipeline config."""
    wcfg = _common.mapping(cfg.get(worker))
    targs = _common.mapping(wcfg.get("training_args"))
    gen = _common.mapping(_common.mapping(cfg.get("actor_infer")).get("generating_args"))
    out: dict[str, Any] = {
        "pipeline_max_steps": cfg.get("max_steps"),
        "rollout_batch_size": cfg.get("rollout_batch_size"),
        "num_return_sequences": gen.get("num_return_sequences",
                                        cfg.get("num_return_sequences_in_group")),
        "ppo_epochs": cfg.get("ppo_epochs", 1),
        "per_device_train_batch_size": targs.get("per_device_train_batch_size"),
        "gradient_accumulation_steps": targs.get("gradient_accumulation_steps"),
        "learning_rate": targs.get("learning_rate"),
        "lr_scheduler_type": targs.get("lr_scheduler_type"),
        "warmup_steps": targs.get("warmup_steps"),
        "lr_scheduler_kwargs": targs.get("lr_scheduler_kwargs"),
        "use_dynamic_batching_in_train": wcfg.get("use_dynamic_batching_in_train"),
        "max_tokens_per_microbatch_in_train": wcfg.get("max_tokens_per_microbatch_in_train"),
        "sequence_length_round_in_train": wcfg.get("sequence_length_round_in_train"),
    }
    return {k: v for k, v in out.items() if v is not None}


# ---------------------------------------------------------------- read

def read(path: Path | ScanView) -> RunState:
    """A ROLL checkpoint through its own layout; a view is one checkpoint the generic
    content read classified and found ROLL's: that read, normalised by :func:`refine`."""
    if isinstance(path, ScanView):
        from lrdoctor.read.layouts import torchsave

        return torchsave.read_view(path, NAME, refine)
    path = _common.as_path(path)
    ckpts = find_checkpoints(path)
    ckpt = ckpts[-1]
    sfile = scheduler_file(ckpt)
    src = str(sfile)
    sched = _common.load_dict(sfile, "a scheduler state dict")
    missing = [k for k in SCHEDULER_KEYS if scheduler_field(sched, k) is None]
    if missing:
        raise UnusableInput(f"scheduler state lacks {', '.join(missing)} (not a megatron-core "
                            "OptimizerParamScheduler?)", src)
    st = RunState(format=NAME, path=str(ckpt), files=[src])

    def field(name: str, count: bool = False) -> float:
        return _common.num(scheduler_field(sched, name), src, name, count=count)
    params = {k: sched[k] for k in ("start_wd", "end_wd", "wd_incr_steps", "wd_incr_style",
                                     "wsd_decay_steps", "lr_wsd_decay_style") if k in sched}
    st.schedule = ScheduleSpec(
        family="megatron", kind=str(_common.plain(scheduler_field(sched, "lr_decay_style"))),
        max_lr=field("max_lr"),
        min_lr=field("min_lr"),
        init_lr=_common.num(sched.get("init_lr", 0.0) or 0.0, src, "init_lr"),
        warmup=field("lr_warmup_steps"),
        horizon=(horizon := field("lr_decay_steps")),
        unit=Unit.UPDATES, params=params, source=src,
    )
    num_steps = field("num_steps", count=True)
    st.scheduler_progress = Counter("scheduler.num_steps", num_steps, Unit.UPDATES, src)
    st.scheduler_progress.ref, st.schedule.refs = scheduler_refs(FieldRef(src), sched)

    opt_loc = optimizer_location(sfile.parent)
    if opt_loc is not None and opt_loc.is_file():
        read_optimizer_file(st, opt_loc)
    elif opt_loc is not None:
        st.notes.append(f"optimizer saved as a torch_dist checkpoint ({opt_loc.name}/): "
                        "its param groups are not read")
    else:
        st.notes.append("no optimizer state saved (save_only_model?)")

    ckpt_n = _checkpoint_n_dir(sfile)
    n = _common.checkpoint_number(ckpt_n) if ckpt_n else None
    worker = ckpt_n.parent.name if ckpt_n else None
    if ckpt_n is not None and n is not None:
        st.counters.append(Counter("roll.pipeline_step", n, Unit.ROLLOUT_STEPS,
                                   f"{ckpt_n.name} (0-based pipeline global_step)"))
        st.trainer_progress = Counter("roll.pipeline_steps_done", n + 1, Unit.ROLLOUT_STEPS,
                                      f"{ckpt_n.name}: global_step + 1")
        st.counters.append(st.trainer_progress)
        _read_pipeline_state(st, ckpt_n, n, worker)
    st.extras.update({"worker": worker, "lr_decay_steps": st.schedule.horizon,
                      "lr_warmup_steps": st.schedule.warmup})

    cfg_file = find_config(ckpt_n) if ckpt_n else None
    if cfg_file is not None:
        from lrdoctor.read.bytes import safetext

        planned = planned_from_config(_common.mapping(safetext.read_yaml(cfg_file)),
                                      worker or "actor_train")
        st.files.append(str(cfg_file))
        st.extras["config"] = planned
        total = planned.get("pipeline_max_steps")
        if isinstance(total, int) and total > 0:
            st.planned_end = Counter("pipeline.max_steps", total, Unit.ROLLOUT_STEPS,
                                     f"{cfg_file}:max_steps", FieldRef(str(cfg_file), ("max_steps",)))
            kw = planned.get("lr_scheduler_kwargs") or {}
            if isinstance(kw, dict) and "lr_decay_steps" in kw:
                st.notes.append("lr_scheduler_kwargs.lr_decay_steps overrides the budget; "
                                "nominal progress assumes it spans the whole pipeline")
            if n is not None:
                per_step = horizon / total
                st.nominal_progress = Counter(
                    "roll.pipeline_steps_done * lr_decay_steps / pipeline.max_steps",
                    (n + 1) * per_step, Unit.UPDATES, f"({n} + 1) * {horizon:g} / {total}")
                st.extras["nominal_updates_per_pipeline_step"] = per_step
    if st.nominal_progress is None:
        st.notes.append("pipeline max_steps unknown (ROLL saves no config; put the run's YAML "
                        "next to the checkpoints): nominal progress not computed")
    if n is not None:
        st.extras["actual_updates_per_pipeline_step"] = num_steps / (n + 1)
    return st


# ---------------------------------------------------------------- read by content

def _claims_content(sc: shapes.Scan) -> bool:
    """A megatron-core scheduler state in a ``scheduler.pt`` of a ``checkpoint-N`` folder:
    what ROLL's mcore_adapter saves, even without ``mca_config.json`` or ``iter_*`` beside
    it (an HF Trainer's ``scheduler.pt`` holds a torch scheduler, never this shape)."""
    return any(Path(f.file).name == SCHEDULER_FILE and f.key == ""
               and _common.checkpoint_number(Path(f.file).parent) is not None
               for f in sc.of(shapes.SCHED_MEGATRON))


def refine(sc: shapes.Scan, st: RunState) -> None:
    """ROLL's conventions on a discovered checkpoint: ``num_steps`` counts optimizer updates,
    ``checkpoint-N`` is the 0-based pipeline step, the budget is ``lr_decay_steps``."""
    ckpt_n = sc.checkpoint.path if sc.checkpoint.path.is_dir() else sc.checkpoint.path.parent
    n = _common.checkpoint_number(ckpt_n)
    if n is None:
        return
    worker = ckpt_n.parent.name
    st.counters.append(Counter("roll.pipeline_step", n, Unit.ROLLOUT_STEPS,
                               f"{ckpt_n.name} (0-based pipeline global_step)"))
    st.trainer_progress = Counter("roll.pipeline_steps_done", n + 1, Unit.ROLLOUT_STEPS,
                                  f"{ckpt_n.name}: global_step + 1")
    _read_pipeline_state(st, ckpt_n, n, worker)
    if st.schedule is not None:
        st.extras.update({"worker": worker, "lr_decay_steps": st.schedule.horizon,
                          "lr_warmup_steps": st.schedule.warmup})
    if st.scheduler_progress is not None:
        st.extras["actual_updates_per_pipeline_step"] = st.scheduler_progress.value / (n + 1)
    st.notes.append("ROLL mcore_adapter layout (scheduler.pt without mca_config.json): "
                    "num_steps counts optimizer updates; lr_decay_steps is the planned budget")


def _read_pipeline_state(st: RunState, ckpt_n: Path, n: int, worker: str | None) -> None:
    f = pipeline_state_file(ckpt_n)
    if not f.is_file():
        return
    state = _common.read_json(f)
    st.files.append(str(f))
    step = state.get("step")
    if isinstance(step, int):
        st.extras["pipeline_state_step"] = step
        if step != n:
            st.notes.append(f"pipeline state step {step} != checkpoint-{n}")
        else:  # the folder's number is this field: the counters name it
            for c, offset in ((st.counter("roll.pipeline_step"), 0),
                              (st.counter("roll.pipeline_steps_done"), 1)):
                if c is not None and c.ref is None:
                    c.ref, c.ref_offset = FieldRef(str(f), ("step",)), offset
    history = state.get("log_history")
    if isinstance(history, list):
        prefix = {"critic": "critic/", "student": "student/"}.get(worker or "", "actor/")
        lrs = [(h.get("system/step"), h[prefix + "lr"]) for h in history
               if isinstance(h, dict) and isinstance(h.get(prefix + "lr"), (int, float))]
        if lrs:
            st.extras["pipeline_logged_lr"] = lrs[-1][1]
            st.extras["pipeline_logged_lr_points"] = len(lrs)


# ---------------------------------------------------------------- repair (lrdoctor fix)

def repair(path: Path, state: RunState, target: Target, tools: RepairTools) -> FormatPlan:
    """The edits of ``lrdoctor fix`` for a worker's ``checkpoint-N/scheduler.pt``.

    The scheduler is megatron-core's (``num_steps`` counts optimizer updates); the
    optimizer's param groups live in ``iter_0000001/mp_rank_*/optimizer.pt``. The output
    is a repaired copy of the worker's ``checkpoint-N`` directory. mcore_adapter checks
    ``lr_decay_steps`` against the run's config on resume, which is why a new horizon
    comes with a note saying where to set it."""
    ckpt = find_checkpoints(_common.as_path(path))[-1]
    sfile = scheduler_file(ckpt)
    sched = tools.load(sfile)
    if not isinstance(sched, dict):
        raise Refusal("not a scheduler state dict", str(sfile))
    changes: list[Change] = tools.megatron_scheduler(str(sfile.relative_to(ckpt)), (), sched,
                                                     target)
    notes = []
    opt_files = sorted((sfile.parent / ITER_DIR).glob(f"mp_rank_*/{OPTIMIZER_FILE}"))
    for f in opt_files:
        ch, _ = tools.optimizers(str(f.relative_to(ckpt)), tools.load(f), (), target)
        changes += ch
    if not opt_files:
        notes.append("optimizer state not in optimizer.pt files (dist_optimizer/ or not saved): "
                     "megatron-core sets the LR from num_steps when it loads the scheduler")
    if target.horizon is not None:
        notes.append("mcore_adapter checks lr_decay_steps against the run's config on resume "
                     "unless use_checkpoint_opt_param_scheduler is set: set lr_decay_steps "
                     f"{target.horizon:g} in lr_scheduler_kwargs (or use the checkpoint's)")
    notes.append(f"the output is a repaired copy of {ckpt.parent.name}/{ckpt.name}; put it "
                 "where the run resumes from")
    return FormatPlan(root=ckpt, files=None, changes=changes, notes=notes)
