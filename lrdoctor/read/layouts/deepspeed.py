"""DeepSpeed engine checkpoints (``engine.save_checkpoint``).

Layout::

    <save>/latest                                  # the newest tag, e.g. "global_step120"
    <save>/<tag>/mp_rank_00_model_states.pt        # engine counters, scheduler, ds_config
    <save>/<tag>/zero_pp_rank_0_mp_rank_00_model_states.pt   # ZeRO-3 instead of the above
    <save>/<tag>/[bf16_]zero_pp_rank_R_mp_rank_00_optim_states.pt  # ZeRO 1-3 optimizer state

``mp_rank_00_model_states.pt`` holds ``global_steps``, ``global_samples``,
``skipped_steps``, ``lr_scheduler`` (DeepSpeed's own schedulers save only
``last_batch_iteration``, starting at -1), ``optimizer`` (None under ZeRO) and,
since DeepSpeed 0.9, ``ds_config`` - the only place the schedule's parameters
live. Without it a ``ds_config.json`` next to the checkpoint (tag dir, save
dir or its parent) is used.

Counting convention: ``engine.step()`` at a gradient-accumulation boundary
always increments ``global_steps``; on an fp16 overflow it increments
``skipped_steps`` instead of stepping the optimizer and the scheduler. So a
healthy checkpoint has ``last_batch_iteration + 1 == global_steps -
skipped_steps``. Scheduler progress here is ``last_batch_iteration + 1`` (steps
taken), matching :mod:`lrdoctor.schedules.deepspeed`.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput, reason
from lrdoctor.core.facts import Invariant
from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.repair import (
    Change,
    FormatPlan,
    Key,
    Refusal,
    RepairTools,
    Target,
    get_at,
    tree_files,
    walk,
)
from lrdoctor.core.state import Counter, RunState, ScheduleSpec, Unit
from lrdoctor.read.bytes import safetext
from lrdoctor.read.layouts import ENGINE, _common
from lrdoctor.read.layouts._common import OptimizerSummary
from lrdoctor.read.layouts._torchstate import add_optimizer, optimizer_info, torch_scheduler
from lrdoctor.schedules import horizon_fields

NAME = "deepspeed"

LATEST = "latest"
MODEL_STATES = re.compile(
    r"^(?:zero_pp_rank_(\d+)_)?mp_rank_(\d+)_model_states\.pt$")
OPTIM_STATES = re.compile(r"^(?:bf16_)?zero_pp_rank_(\d+)_mp_rank_(\d+)_optim_states\.pt$")
GLOBAL_STEP = re.compile(r"^global_step(\d+)$")
DS_KINDS = ("WarmupLR", "WarmupDecayLR", "WarmupCosineLR")
CONFIG_KEPT = ("train_batch_size", "train_micro_batch_size_per_gpu",
               "gradient_accumulation_steps", "gradient_clipping")


# ---------------------------------------------------------------- layout

def model_files(tag: Path) -> list[Path]:
    """Model-state files of one tag dir, the one to read first (dp 0, mp 0)."""
    return _common.numbered_children(tag, MODEL_STATES, lambda c: c.is_file(),
                                     lambda m: (int(m.group(2)), int(m.group(1) or 0)))


def _is_tag(d: Path) -> bool:
    return d.is_dir() and bool(model_files(d))


def _tags(run: Path) -> list[Path]:
    found = []
    try:
        children = list(run.iterdir())
    except OSError:
        return []
    for child in children:
        if _is_tag(child):
            m = GLOBAL_STEP.match(child.name)
            found.append(((0, int(m.group(1)), "") if m else (1, child.stat().st_mtime, child.name),
                          child))
    return [p for _, p in sorted(found)]


def read_latest(run: Path) -> str | None:
    f = run / LATEST
    if not f.is_file():
        return None
    try:
        text = f.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise UnusableInput(f"cannot read the tag: {reason(exc)}", str(f)) from None
    return text or None


def _is_layout(path: Path) -> bool:
    """A model-states file, a tag dir, or a save dir of tags (but not an HF checkpoint-N)."""
    path = _common.as_path(path)
    if path.is_file():
        return bool(MODEL_STATES.match(path.name))
    if not path.is_dir():
        return False
    return _is_tag(path) or bool(_tags(path))


claims = _common.claim_by_path(ENGINE + 4, _is_layout)
detect = _common.detector("deepspeed")


def find_checkpoints(path: Path) -> list[Path]:
    path = _common.as_path(path)
    if path.is_file():
        return [path.parent]
    if _is_tag(path):
        return [path]
    return _common.listed(_tags(path), "no DeepSpeed checkpoints "
                          "(<tag>/mp_rank_00_model_states.pt) here", path)


def resolve(path: Path) -> tuple[Path, Path]:
    """(tag dir, model-states file) for any accepted input."""
    if path.is_file():
        return path.parent, path
    if not _is_tag(path):
        tags = find_checkpoints(path)
        tag = tags[-1]
        latest = read_latest(path)
        if latest is not None:
            if not _is_tag(path / latest):
                raise UnusableInput(f"'latest' names tag {latest!r}, which has no model states",
                                    str(path / LATEST))
            tag = path / latest
        path = tag
    return path, model_files(path)[0]


def _ds_config(sd: dict[str, Any], tag: Path, main: Path
               ) -> tuple[dict[str, Any] | None, str, FieldRef | None]:
    """(ds_config, where it was read, the field holding it): the one saved in the model
    states (DeepSpeed >= 0.9), else a ``ds_config.json`` beside the checkpoint."""
    cfg = sd.get("ds_config")
    if isinstance(cfg, dict):
        return cfg, "ds_config", FieldRef(str(main), ("ds_config",))
    for d in (tag, tag.parent, tag.parent.parent):
        f = d / "ds_config.json"
        if f.is_file():
            cfg = safetext.read_json(f, "ds_config.json")
            if isinstance(cfg, dict):
                return cfg, str(f), FieldRef(str(f))
    return None, "", None


# ---------------------------------------------------------------- read

def read(path: Path) -> RunState:
    path = _common.as_path(path)
    tag, main = resolve(path)
    sd = _common.load_dict(main, "a DeepSpeed model-states dict")
    if "global_steps" not in sd and "lr_scheduler" not in sd:
        raise UnusableInput("no 'global_steps' or 'lr_scheduler': not a DeepSpeed engine "
                            "checkpoint", str(main))
    src = str(main)
    st = RunState(format=NAME, path=str(tag), files=[src])
    # last_batch_iteration + 1 == global_steps - skipped_steps by DeepSpeed's law (LRD109).
    st.facts.invariant = Invariant.DEEPSPEED_STEPS
    cfg, cfg_src, cfg_ref = _ds_config(sd, tag, main)
    cfg_src = f"{src}:ds_config" if cfg_src == "ds_config" else cfg_src
    if cfg_src and not cfg_src.startswith(src):
        st.files.append(cfg_src)

    # Engine counters.
    for key, unit in (("global_steps", Unit.UPDATES), ("global_samples", Unit.SAMPLES),
                      ("skipped_steps", Unit.UPDATES)):
        v = _common.number(sd.get(key))
        if v is not None:
            st.counters.append(Counter(f"deepspeed.{key}", v, unit, f"{src}:{key}",
                                       FieldRef(src, (key,))))

    # Optimizer: in the model states without ZeRO, else in the ZeRO partition files.
    opt_info = _read_optimizer(st, sd, tag, src)

    # Scheduler.
    _read_scheduler(st, sd.get("lr_scheduler"), cfg, cfg_src, src, opt_info, cfg_ref)

    # Batch size and the rest of the config.
    if cfg:
        tbs = _common.side_num(st, cfg.get("train_batch_size"), cfg_src, "train_batch_size",
                               count=True)
        if tbs is None:
            micro, ga = (_common.side_num(st, cfg.get(k), cfg_src, k, count=True) for k in
                         ("train_micro_batch_size_per_gpu", "gradient_accumulation_steps"))
            dp = _common.side_num(st, sd.get("dp_world_size"), src, "dp_world_size", count=True)
            if micro is not None and ga is not None and dp is not None:
                tbs = micro * ga * dp
        if tbs:
            st.samples_per_update = float(tbs)
            gs_c, samples = st.counter("deepspeed.global_steps"), st.counter("deepspeed.global_samples")
            if gs_c and samples and gs_c.value and samples.value != gs_c.value * tbs:
                st.extras["deepspeed.samples_per_step_observed"] = samples.value / gs_c.value
                st.notes.append(f"global_samples {samples.value:g} != global_steps {gs_c.value:g} x "
                                f"train_batch_size {tbs:g}: the batch size changed during the run "
                                "(elastic or resumed with another config)")
        st.extras.update({f"ds_config.{k}": cfg[k] for k in CONFIG_KEPT if k in cfg})
        for key, prec in (("fp16", "fp16"), ("bf16", "bf16"), ("bfloat16", "bf16")):
            if isinstance(cfg.get(key), dict) and cfg[key].get("enabled") is True:
                st.extras["precision"] = prec
        zero = cfg.get("zero_optimization")
        if isinstance(zero, dict) and "stage" in zero:
            st.extras["zero_stage"] = zero["stage"]
    else:
        saved = sd.get("ds_config")
        what = (f"ds_config was saved as the path {saved[:120]!r}, not its contents,"
                if isinstance(saved, str) else "no ds_config in the checkpoint (DeepSpeed < 0.9?)")
        st.notes.append(f"{what} and no ds_config.json next to it: schedule parameters unknown")
    for k in ("ds_version", "dp_world_size", "mp_world_size"):
        if k in sd:
            st.extras[k] = sd[k]
    st.extras["tag"] = tag.name
    latest = read_latest(tag.parent)
    if latest is not None:
        st.extras["latest"] = latest
        st.files.append(str(tag.parent / LATEST))
    others = [f for f in model_files(tag) if f != main]
    if others:
        st.extras["model_state_files"] = 1 + len(others)
        _check_ranks(st, sd, main, others)

    # Where the scheduler should be: every optimizer update that was not skipped.
    gs, sk = st.counter("deepspeed.global_steps"), st.counter("deepspeed.skipped_steps")
    if gs is not None:
        skipped = sk.value if sk else 0
        st.nominal_progress = Counter(
            "deepspeed.global_steps - deepspeed.skipped_steps", gs.value - skipped, Unit.UPDATES,
            "global_steps - skipped_steps (an fp16-overflow step skips the scheduler)")
        opt_step = st.counter("optimizer.step")
        if (opt_step is not None and opt_step.value == gs.value - skipped + 1
                and st.extras.get("precision") and not st.extras.get("zero_stage")):
            st.extras["optimizer.init_step"] = 1
            st.notes.append("optimizer.step is one above global_steps - skipped_steps: DeepSpeed's "
                            "fp16/bf16 optimizer without ZeRO takes one zero-gradient step() at "
                            "initialisation (not a training update)")
    if st.schedule is not None and st.schedule.horizon is not None and gs is not None:
        if st.schedule.family == NAME:
            where = horizon_fields.DEEPSPEED[st.schedule.kind]  # set only from this table
            whence = f"{cfg_src}.scheduler.params.{where}"
        else:
            where, whence = f"scheduler.{st.schedule.kind}.horizon", st.schedule.source
        st.planned_end = Counter(where, st.schedule.horizon, Unit.UPDATES, whence,
                                 st.schedule.refs.get("horizon"))
        st.trainer_progress = Counter("deepspeed.global_steps", gs.value, Unit.UPDATES, gs.source,
                                      gs.ref)
    return st


def _read_optimizer(st: RunState, sd: _common.Loaded, tag: Path, src: str
                    ) -> OptimizerSummary | None:
    opt_sd, opt_src = sd.get("optimizer"), src
    opt_ref = FieldRef(src, ("optimizer",))
    if opt_sd is None:
        files = sorted((f for f in tag.iterdir() if OPTIM_STATES.match(f.name)), key=_ranks)
        if not files:
            st.notes.append("no optimizer state saved (save_checkpoint without optimizer?)")
            return None
        opt_src = str(files[0])
        try:
            opt_sd = _common.load(files[0])
        except UnusableInput as exc:  # optional: the scheduler check does not need it
            st.notes.append(f"optimizer state not read: {exc}")
            return None
        st.files.append(opt_src)
        st.extras["optim_state_files"] = len(files)
        opt_ref = FieldRef(opt_src)
    info = optimizer_info(opt_sd)
    add_optimizer(st, info, opt_src, opt_ref)
    scaler = _loss_scaler(opt_sd)
    if scaler:
        st.extras["loss_scaler"] = scaler
    return info


def _ranks(f: Path) -> tuple[int, ...]:
    """(dp rank, mp rank) of a ZeRO partition file, for ordering them."""
    m = OPTIM_STATES.match(f.name)
    return tuple(int(g) for g in m.groups()) if m else ()


def _loss_scaler(obj: Any, depth: int = 0) -> dict[str, Any] | None:
    """cur_scale / cur_iter / last_overflow_iter of an fp16 loss scaler, wherever it is kept."""
    if depth > 3 or not isinstance(obj, dict):
        return None
    keys = ("cur_scale", "cur_iter", "last_overflow_iter")
    if "cur_scale" in obj:
        return {k: obj[k] for k in keys if k in obj}
    fields = _common.as_fields(obj.get("loss_scaler")) if "loss_scaler" in obj else None
    if fields and "cur_scale" in fields:
        return {k: _common.plain(fields[k]) for k in keys if k in fields}
    for key in ("optimizer_state_dict", "optimizer"):
        found = _loss_scaler(obj.get(key), depth + 1)
        if found:
            return found
    return None


def _read_scheduler(st: RunState, sched: Any, cfg: dict[str, Any] | None, cfg_src: str,
                    src: str, opt_info: OptimizerSummary | None,
                    cfg_ref: FieldRef | None = None) -> None:
    raw = cfg.get("scheduler") if cfg else None
    cfg_sched: dict[str, Any] | None = raw if isinstance(raw, dict) else None
    kind = cfg_sched.get("type") if cfg_sched else None
    if sched is None:
        st.notes.append("no lr_scheduler state: the engine had no scheduler (or the client "
                        "scheduler is stepped outside DeepSpeed)")
        return
    if not isinstance(sched, dict):
        st.notes.append(f"{src}: lr_scheduler is a {type(sched).__name__}, not a state dict")
        return
    if "last_batch_iteration" not in sched:  # a torch scheduler (client, or named in ds_config)
        spec, prog, notes = torch_scheduler(sched, unit=Unit.UPDATES, source=f"{src}:lr_scheduler",
                                            opt=opt_info, ref=FieldRef(src, ("lr_scheduler",)))
        st.schedule, st.scheduler_progress = spec, prog
        st.notes += notes
        if spec is not None and kind and kind != spec.kind:
            st.notes.append(f"ds_config names scheduler {kind!r} but the saved state looks like "
                            f"{spec.kind}")
        return

    lbi = _common.num(sched.get("last_batch_iteration"), src, "lr_scheduler.last_batch_iteration")
    st.scheduler_progress = Counter(
        "scheduler.last_batch_iteration + 1", lbi + 1, Unit.UPDATES,
        f"{src}:lr_scheduler.last_batch_iteration + 1 (scheduler steps taken)",
        FieldRef(src, ("lr_scheduler", "last_batch_iteration")), ref_offset=1)
    st.extras["scheduler.last_batch_iteration"] = lbi
    if cfg_sched is None:
        st.notes.append("DeepSpeed scheduler state without a ds_config 'scheduler' section: "
                        "its type and parameters are unknown")
        return
    params = _common.mapping(cfg_sched.get("params"))
    if kind not in DS_KINDS:
        st.notes.append(f"DeepSpeed scheduler {kind!r} is not modelled (only "
                        f"{', '.join(DS_KINDS)}); progress only")
        st.extras["ds_config.scheduler"] = cfg_sched
        return
    opt_lr = _config_lr(cfg)

    def p(key: str, default: float) -> float:
        return _common.num(params.get(key, default), cfg_src, f"scheduler.params.{key}")

    if opt_lr is not None:
        opt_lr = _common.num(opt_lr, cfg_src, "optimizer.params.lr")
    # (peak, floor, start); peak None: the optimizer's initial lr, which ds_config lacks.
    if kind == "WarmupCosineLR":
        lrs = None if opt_lr is None else \
            (opt_lr, opt_lr * p("cos_min_ratio", 1e-4), opt_lr * p("warmup_min_ratio", 0.0))
    else:
        given = params.get("warmup_max_lr")
        peak = opt_lr if given is None and kind == "WarmupLR" else \
            0.001 if given is None else p("warmup_max_lr", 0.001)
        floor = p("warmup_min_lr", 0.0)
        lrs = None if peak is None else (peak, floor, floor)
    if lrs is None:
        st.notes.append(f"{kind}: peak LR is the optimizer's initial lr, which ds_config does not "
                        "give (client optimizer): schedule unknown")
        return
    max_lr, min_lr, init_lr = lrs
    hkey = horizon_fields.DEEPSPEED.get(kind)  # None: WarmupLR holds its peak, no horizon
    total = params.get(hkey) if hkey is not None else None
    st.schedule = ScheduleSpec(
        family=NAME, kind=kind, unit=Unit.UPDATES, params=dict(params),
        max_lr=float(max_lr), min_lr=float(min_lr), init_lr=float(init_lr),
        warmup=p("warmup_num_steps", 1000),
        horizon=p(hkey, 0) if hkey is not None and total is not None else None,
        source=f"{cfg_src}.scheduler" + ("" if "warmup_max_lr" in params or kind ==
                                          "WarmupDecayLR" else " + optimizer.params.lr"))
    if st.schedule.horizon is not None and cfg_ref is not None and hkey is not None:
        st.schedule.refs["horizon"] = cfg_ref.child("scheduler", "params", hkey)


def _config_lr(cfg: dict[str, Any] | None) -> float | None:
    opt = cfg.get("optimizer") if cfg else None
    if isinstance(opt, dict) and isinstance(opt.get("params"), dict):
        return _common.number(opt["params"].get("lr"))
    return None


RANK_KEYS = ("global_steps", "global_samples", "skipped_steps", "lr_scheduler")


def _check_ranks(st: RunState, sd: _common.Loaded, main: Path, others: list[Path]) -> None:
    """Every model-state file (mp ranks, ZeRO-3 dp ranks) must carry the same counters."""
    disagree = _common.compare_ranks(
        st, others, "a DeepSpeed model-states dict",
        lambda other: {k: (sd.get(k), other.get(k)) for k in RANK_KEYS
                       if sd.get(k) != other.get(k)})
    if disagree:
        st.notes.append(f"{len(disagree)} of {len(others) + 1} model-state files disagree with "
                        f"{main.name} on {', '.join(sorted({k for d in disagree for k in d['differs']}))}")


# ---------------------------------------------------------------- repair (lrdoctor fix)

def repair(path: Path, state: RunState, target: Target, tools: RepairTools) -> FormatPlan:
    """The edits of ``lrdoctor fix`` for an engine checkpoint (``<save>/latest``,
    ``<save>/<tag>/``).

    DeepSpeed's own schedulers save only ``last_batch_iteration`` (progress - 1) and are
    rebuilt from ds_config on resume (so a new horizon is refused: it belongs in
    ds_config); a client torch scheduler saves its usual state. The param-group ``lr``
    lives in the model-states file without ZeRO and in the ``*_optim_states.pt``
    partitions with ZeRO; every copy is set. The fields edited are the ones the reader's
    refs name (``scheduler_progress.ref`` with its ``ref_offset``, ``optimizer_lr_refs``),
    at the same key path in every rank's copy of the file; the scheduler or optimizers are
    found by shape only where no ref names them (said in a note). A run directory gives a
    run directory holding ``latest`` and the fixed tag, so ``engine.load_checkpoint(OUT)``
    finds it."""
    path = _common.as_path(path)
    tag, _ = resolve(path)
    if path.is_file():
        raise Refusal("give the checkpoint's tag directory (or the save directory), not one "
                      "file: DeepSpeed keeps the optimizer state in sibling files", str(path))
    root: Path = tag
    files: list[str] | None = None
    if tag != path:
        root = path
        files = ([LATEST] if (path / LATEST).is_file() else []) + [
            f"{tag.name}/{f}" for f in tree_files(tag)]

    def rel(f: Path) -> str:
        return str(f.relative_to(root))

    loaded: dict[Path, Any] = {}

    def load(f: Path) -> Any:
        if f not in loaded:
            loaded[f] = tools.load(f)
        return loaded[f]

    models = model_files(tag)
    partitions = sorted(f for f in tag.iterdir() if OPTIM_STATES.match(f.name))

    def peers(ref: FieldRef | None) -> list[Path]:
        """Every rank's copy of the file a ref names: the same field at the same key path
        in each model-states file, or in each ZeRO partition file."""
        if ref is None or ref.item or not ref.key:
            return []
        f = Path(ref.file).resolve()
        return next((g for g in (models, partitions) if f in {x.resolve() for x in g}), [])

    notes: list[str] = []
    prog = state.scheduler_progress
    pref = prog.ref if prog is not None else None
    lr_refs = [r for r in state.optimizer_lr_refs if peers(r)]
    lr_keys: dict[Path, list[Key]] = {}
    for r in lr_refs:
        for f in peers(r):
            lr_keys.setdefault(f, []).append(r.key)
    changes: list[Change] = []
    lr_changes: list[Change] = []
    lrs: list[float] | None = None
    for f, keys in lr_keys.items():  # the LRs the reader read, in every rank's copy
        ch, new_lrs = tools.lr_fields(rel(f), load(f), keys, target)
        lr_changes += ch
        lrs = lrs if lrs is not None else new_lrs
    if prog is not None and pref is not None and peers(pref):
        for f in peers(pref):  # the progress field the reader read, in every rank's copy
            if pref.key[-1] == "last_batch_iteration" and target.horizon is not None:
                raise Refusal(_DS_HORIZON.format(target.horizon))
            changes += tools.progress(rel(f), load(f), pref.key, prog.ref_offset, target, lrs)
    else:
        notes.append("DeepSpeed: the reader named no scheduler field; the lr_scheduler "
                     "state is found by its shape")
        changes += _scheduler_by_shape(models, load, rel, target, tools)
    if not lr_refs:
        notes.append("DeepSpeed: the reader named no optimizer LR; every optimizer state "
                     "found by its shape is set")
        for f in models:
            if load(f).get("optimizer") is not None:
                changes += tools.optimizers(rel(f), load(f), ("optimizer",), target)[0]
        for f in partitions:
            changes += tools.optimizers(rel(f), load(f), (), target)[0]
    return FormatPlan(root=root, files=files, changes=changes + lr_changes, notes=notes)


_DS_HORIZON = ("DeepSpeed rebuilds its scheduler from ds_config on resume: set "
               "scheduler.params.total_num_steps = {:g} in your ds_config instead (or use "
               "--policy nominal)")


def _scheduler_by_shape(models: list[Path], load: Callable[[Path], Any],
                        rel: Callable[[Path], str], target: Target, tools: RepairTools
                        ) -> list[Change]:
    """The lr_scheduler of each model-states file, by shape (no ref names one)."""
    changes: list[Change] = []
    for f in models:
        sd = load(f)
        sched = sd.get("lr_scheduler")
        if isinstance(sched, dict) and "last_batch_iteration" in sched:
            if target.horizon is not None:
                raise Refusal(_DS_HORIZON.format(target.horizon))
            changes.append(tools.counter(rel(f), sd, ("lr_scheduler", "last_batch_iteration"),
                                         1, target, target.policy + " (progress - 1)"))
        elif tools.is_scheduler(sched):
            opt = sd.get("optimizer")
            ok = next((k for k, v in walk(opt) if tools.is_optimizer(v)), None) \
                if opt is not None else None
            changes += tools.torch_scheduler(rel(f), sd, ("lr_scheduler",), target,
                                             tools.group_lrs(get_at(opt, ok), target)
                                             if ok is not None else None)
        else:
            raise Refusal("no lr_scheduler state to repair", str(f))
    return changes
