"""Megatron-LM checkpoints: the ``torch`` format and ``torch_dist`` (old and new).

Layout::

    <save>/latest_checkpointed_iteration.txt      # "1200" or "release"
    <save>/iter_0001200/mp_rank_00[_000[_000]]/model_optim_rng.pt
    <save>/iter_0001200/common.pt                 # torch_dist before megatron-core 0.19
    <save>/iter_0001200/{.metadata,__R_0.distcp,metadata.json}   # torch_dist (DCP)

torch_dist keeps the non-sharded state (``args``, ``iteration``,
``opt_param_scheduler``, the optimizer's param groups) in ``common.pt`` up to
megatron-core 0.18; from 0.19 there is no ``common.pt`` and the same dict is the
ShardedObject ``common_state`` (DCP bytes item ``common_state/shard_0_1``,
``torch.save([state])``), which Megatron's ``load_common_state_dict`` falls
back to. ``torch_dcp`` / ``fsdp_dtensor`` flatten those leaves into DCP items
(``opt_param_scheduler.num_steps``); both are read through :mod:`.dcp`.

With ``--use-distributed-optimizer`` the param groups (the LRs) are where
megatron-core's ``DistributedOptimizer`` put them. ``torch``: its
``state_dict()`` in ``model_optim_rng.pt`` (``optimizer.optimizer.param_groups``,
no ``params``, a ``step`` per group); ``distrib_optim.pt`` beside it holds only
parameter state. ``torch_dist`` with ``fully_reshardable`` (or
``fully_sharded_model_space``): the same dict in the common state. ``torch_dist``
with ``dp_reshardable`` (Megatron-LM's default) or ``dp_zero_gather_scatter``:
each key of ``state_dict()`` is a ShardedObject
``optimizer.distributed.dp_group_idx_<g>.<key>``, prefixed ``chained_<i>.`` when a
ChainedOptimizer holds several (dense + expert), so the param groups are the DCP
bytes item ``[chained_<i>.]optimizer.distributed.dp_group_idx_<g>.optimizer/shard_0_1``
(``[{"param_groups": [...]}]``) and the common state keeps only
``optimizer.param_state_sharding_type``. Those items are found by key pattern in
``.metadata``; when a checkpoint shows a distributed optimizer but its param groups
cannot be read, ``facts.optimizer_lrs_unread`` says why (LRD111).

``model_optim_rng.pt`` holds ``args`` (argparse.Namespace), ``iteration``,
``opt_param_scheduler`` (``lr_scheduler`` in old checkpoints), ``optimizer``,
``model``, ``rng_state``, ``checkpoint_version``. The scheduler counts
**samples**: Megatron calls ``step(increment=global_batch_size)`` after every
successful update, so ``num_steps == consumed_train_samples -
skipped_train_samples`` minus one global batch per unsuccessful (overflowed)
update.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.facts import Invariant, LrsUnread, Storage
from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.repair import FormatPlan, RepairTools, Target
from lrdoctor.core.state import Counter, RunState, ScheduleSpec, Unit
from lrdoctor.read.bytes import dcp
from lrdoctor.read.layouts import ENGINE, GENERIC, _common
from lrdoctor.read.layouts._megatron_core import rampup_budget, rank_file_repair, scheduler_refs
from lrdoctor.read.layouts._refs import itemize
from lrdoctor.read.scan.shapes import (
    DIST_OPT_ANY,
    DIST_OPT_GROUPS,
    scheduler_field,
    scheduler_key,
)
from lrdoctor.read.scan.view import ScanView

NAME = "megatron"

TRACKER = "latest_checkpointed_iteration.txt"
RANK_FILE = "model_optim_rng.pt"
COMMON_FILE = "common.pt"  # torch_dist (megatron-core < 0.19): non-sharded part of the state
COMMON_STATE = "common_state/shard_0_1"  # torch_dist (>= 0.19): the same, as a DCP bytes item
# The DCP items a torch_dist / torch_dcp / fsdp_dtensor read needs (not rng_state & co.).
DCP_KEYS = (COMMON_STATE, "args", "iteration", "checkpoint_version", "opt_param_scheduler",
            "lr_scheduler", "optimizer")
# Every item of a DistributedOptimizer's sharded state (param state: large, not read).
ITER_DIR = re.compile(r"^(iter_(\d{7,})|release)$")
RANK_DIR = re.compile(r"^mp_rank_(\d{2})(?:_(\d{3}))?(?:_(\d{3}))?$")
# Files Megatron-LM never writes beside its iter_* folders (see :func:`claims`).
NOT_MEGATRON_LM = ("scheduler.pt", "mca_config.json")

# Names from before Megatron counted samples (the scheduler then counted iterations).
ITERATION_ERA_KEYS = ("num_iters", "end_iter", "warmup_iter")

ARGS_KEPT = (
    "train_iters", "train_samples", "lr_decay_iters", "lr_decay_samples",
    "lr_warmup_iters", "lr_warmup_samples", "lr_warmup_fraction", "lr_warmup_init",
    "lr_wsd_decay_iters", "lr_wsd_decay_samples", "lr_wsd_decay_style",
    "lr", "min_lr", "lr_decay_style", "global_batch_size", "micro_batch_size",
    "data_parallel_size", "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "rampup_batch_size", "consumed_train_samples", "skipped_train_samples",
    "consumed_valid_samples", "use_checkpoint_opt_param_scheduler",
    "override_opt_param_scheduler", "ckpt_format", "use_distributed_optimizer",
)


# ---------------------------------------------------------------- layout

def _beside_foreign_files(path: Path) -> bool:
    """Whether the folder holding the ``iter_*`` folders of ``path`` (a rank file, a rank
    folder, an iteration folder or the save folder itself) holds files Megatron-LM never
    writes."""
    if path.is_file():
        save = path.parent.parent.parent
    elif RANK_DIR.match(path.name):
        save = path.parent.parent
    elif _is_iter_dir(path):
        save = path.parent
    else:
        save = path
    return any((save / m).exists() for m in NOT_MEGATRON_LM)


def _iteration(m: re.Match[str]) -> int:
    """``iter_N`` is N; ``release`` sorts first (it is the starting point)."""
    return int(m.group(2)) if m.group(2) else -1


def _iter_dirs(run: Path) -> list[Path]:
    return _common.numbered_children(run, ITER_DIR, lambda child: child.is_dir(), _iteration)


def rank_files(ckpt: Path) -> list[Path]:
    """The ``mp_rank_*/model_optim_rng.pt`` files of one ``iter_*`` directory, rank 0 first."""
    files: list[tuple[tuple[int, ...], Path]] = []
    for child in ckpt.iterdir():
        m = RANK_DIR.match(child.name)
        if m and (child / RANK_FILE).is_file():
            key = tuple(int(g) if g else 0 for g in m.groups())
            files.append((key, child / RANK_FILE))
    return [f for _, f in sorted(files)]


def _is_iter_dir(d: Path) -> bool:
    return bool(ITER_DIR.match(d.name)) and (bool(rank_files(d)) or (d / COMMON_FILE).is_file()
                                              or dcp.is_dcp(d))


def claims(scan: ScanView) -> int:
    """How well this layout claims the input: ENGINE + 5, or 0 when it is not one.

    Megatron-LM keeps its scheduler inside ``model_optim_rng.pt`` and writes no file of its
    own beside ``iter_*``: a scheduler file or adapter config there means another trainer
    saved through megatron-core, whose scheduler this reader would not see. The claim is
    then a weak one (below a read by content), so the layout that owns those files, or the
    content reader, reads the folder; no other layout is named here.
    """
    path = scan.path
    if not _is_layout(path):
        return 0
    return GENERIC - 1 if _beside_foreign_files(path) else ENGINE + 5


def _is_layout(path: Path) -> bool:
    path = _common.as_path(path)
    if path.is_file():
        return path.name in (RANK_FILE, COMMON_FILE)
    if not path.is_dir():
        return False
    if RANK_DIR.match(path.name) and (path / RANK_FILE).is_file():
        return True
    if _is_iter_dir(path):
        return True
    # The tracker alone is not enough: verl's FSDP checkpoints write the same file name
    # beside global_step_N/ folders.
    return any(_is_iter_dir(d) for d in _iter_dirs(path))


detect = _common.detector("megatron")


def find_checkpoints(path: Path) -> list[Path]:
    path = _common.as_path(path)
    if path.is_file() or RANK_DIR.match(path.name) or _is_iter_dir(path):
        return [path]
    return _common.listed([d for d in _iter_dirs(path) if _is_iter_dir(d)],
                          "no iter_*/mp_rank_*/model_optim_rng.pt checkpoints here", path)


def read_tracker(run: Path) -> int | str | None:
    """``latest_checkpointed_iteration.txt``: an iteration, ``"release"``, or None if absent."""
    f = run / TRACKER
    if not f.is_file():
        return None
    text = f.read_text(errors="replace").strip()
    if text == "release":
        return text
    try:
        return int(text)
    except ValueError:
        raise UnusableInput(f"expected an iteration number or 'release', found {text[:40]!r}",
                            str(f)) from None


def resolve(path: Path) -> tuple[Path | None, list[Path]]:
    """(iter dir or None, rank files to read) for any accepted input path."""
    if path.is_file():
        return (path.parent.parent if RANK_DIR.match(path.parent.name) else path.parent), [path]
    if RANK_DIR.match(path.name):
        return path.parent, [path / RANK_FILE]
    if not _is_iter_dir(path):  # a run dir: the tracked checkpoint, else the newest
        tracked = read_tracker(path)
        ckpts = find_checkpoints(path)
        pick = ckpts[-1]
        if tracked is not None:
            name = "release" if tracked == "release" else f"iter_{tracked:07d}"
            if (path / name).is_dir():
                pick = path / name
        path = pick
    files = rank_files(path)
    if not files:
        # torch_dist: common.pt when megatron-core < 0.19 wrote it, else the DCP folder itself
        files = [path / COMMON_FILE] if (path / COMMON_FILE).is_file() or not dcp.is_dcp(path) \
            else [path]
    return path, files


def scheduler_state(sd: _common.Loaded) -> _common.Loaded | None:
    """The scheduler dict of a Megatron state (current or pre-2021 key)."""
    for key in ("opt_param_scheduler", "lr_scheduler"):
        sched = sd.get(key)
        if isinstance(sched, dict):
            return sched
    return None


# ---------------------------------------------------------------- read

def _dcp_wanted(fqn: str) -> bool:
    """The DCP items a Megatron read needs: :data:`DCP_KEYS`, and of a distributed
    optimizer's sharded state only its param-group objects."""
    if DIST_OPT_ANY.match(fqn):
        return bool(DIST_OPT_GROUPS.match(fqn))
    return dcp.wanted(fqn, DCP_KEYS)


def load_state(main: Path) -> tuple[_common.Loaded, list[str], str, dcp.DcpState | None]:
    """(state dict, files read, where in them, the DCP state if a DCP folder was read) of a
    rank file, ``common.pt`` or a DCP folder."""
    if not main.is_dir():
        return (_common.load_dict(main, "a Megatron checkpoint dict"), [str(main)], str(main),
                None)
    st = dcp.load(main, select=_dcp_wanted)
    common = st.flat.get(COMMON_STATE)
    if common is not None:
        if not (isinstance(common, list) and common and isinstance(common[0], dict)):
            raise UnusableInput(f"{COMMON_STATE} is not the [state dict] megatron-core saves",
                                str(main))
        return common[0], st.files, f"{main}:{COMMON_STATE}", st
    if scheduler_state(st.tree) is None:
        raise UnusableInput(f"a DCP checkpoint with neither {COMMON_FILE} nor {COMMON_STATE} "
                            "nor opt_param_scheduler items (not written by Megatron?)", str(main))
    return st.tree, st.files, str(main), st  # torch_dcp / fsdp_dtensor: flattened leaves


def read(path: Path) -> RunState:
    path = _common.as_path(path)
    ckpt, files = resolve(path)
    main = files[0]
    sd, read_files, where, dcp_state = load_state(main)
    sched = scheduler_state(sd)
    if sched is None:
        raise UnusableInput("no 'opt_param_scheduler' (or 'lr_scheduler') in the checkpoint; "
                            "saved with --no-save-optim?", str(main))
    args = _common.as_fields(sd.get("args")) or {}
    st = RunState(format=NAME, path=str(ckpt or path), files=read_files)
    st.notes += dcp_state.notes if dcp_state else []  # classes kept opaque: never silent
    src = where

    missing = [k for k in ("max_lr", "min_lr", "lr_warmup_steps", "lr_decay_steps",
                           "lr_decay_style", "num_steps") if scheduler_field(sched, k) is None]
    if missing:
        raise UnusableInput(f"scheduler state lacks {', '.join(missing)}", str(main))

    iteration_era = any(k in sched for k in ITERATION_ERA_KEYS)
    unit = Unit.UPDATES if iteration_era else Unit.SAMPLES
    if iteration_era:
        st.notes.append("scheduler uses pre-2021 key names (num_iters/end_iter): it counts "
                        "iterations, not samples")

    gbs = _common.side_num(st, args.get("global_batch_size"), src, "args.global_batch_size",
                           count=True)
    style = str(_common.plain(scheduler_field(sched, "lr_decay_style")))
    params: dict[str, Any] = {}
    wsd = sched.get("wsd_decay_steps")
    if wsd is None:
        if args.get("train_iters") and args.get("lr_wsd_decay_iters") is not None and gbs:
            wsd = _common.num(args["lr_wsd_decay_iters"], src, "args.lr_wsd_decay_iters",
                              count=True) * (1 if iteration_era else gbs)
        elif args.get("lr_wsd_decay_samples") is not None:
            wsd = _common.num(args["lr_wsd_decay_samples"], src, "args.lr_wsd_decay_samples",
                              count=True)
    if wsd is not None:
        params["wsd_decay_steps"] = wsd
    wsd_style = sched.get("lr_wsd_decay_style", args.get("lr_wsd_decay_style"))
    if wsd_style is not None:
        params["lr_wsd_decay_style"] = wsd_style
    for k in ("start_wd", "end_wd", "wd_incr_steps", "wd_incr_style"):
        if k in sched:
            params[k] = sched[k]
    init_key = "init_lr" if "init_lr" in sched else "args.lr_warmup_init"
    init_lr = sched.get("init_lr", args.get("lr_warmup_init", 0.0)) or 0.0

    def field(name: str, count: bool = False) -> float:
        key = scheduler_key(sched, name)
        return _common.num(scheduler_field(sched, name), src, f"opt_param_scheduler.{key}",
                           count=count)

    st.schedule = ScheduleSpec(
        family="megatron", kind=style,
        max_lr=field("max_lr"),
        min_lr=field("min_lr"),
        init_lr=_common.num(init_lr, src, init_key),
        warmup=field("lr_warmup_steps"),
        horizon=field("lr_decay_steps"),
        unit=unit, params=params,
        source=f"{src}:opt_param_scheduler" + ("" if "init_lr" in sched else " + args.lr_warmup_init"),
    )
    progress = st.scheduler_progress = Counter("scheduler.num_steps",
                                               field("num_steps", count=True), unit, src)
    # The fields a repair writes through: in the rank file (or common.pt), else in the DCP
    # folder's common_state item, else in its re-nested items (traced to each item below).
    meta = str(dcp_state.path / dcp.METADATA) if dcp_state is not None else ""
    in_file = FieldRef(str(main)) if not meta else FieldRef(meta, (0,), COMMON_STATE) \
        if where.endswith(f":{COMMON_STATE}") else FieldRef(meta)
    at = in_file.child("opt_param_scheduler" if isinstance(sd.get("opt_param_scheduler"), dict)
                       else "lr_scheduler")
    progress.ref, st.schedule.refs = scheduler_refs(at, sched)

    # Counters.
    iteration = sd.get("iteration", sd.get("total_iters"))
    if isinstance(iteration, int) and not isinstance(iteration, bool):
        iteration = _common.side_num(st, iteration, src, "iteration", count=True)
        if iteration is not None:
            st.counters.append(Counter("megatron.iteration", int(iteration), Unit.UPDATES,
                                       f"{src}:iteration", in_file.child("iteration")))
    for k in ("consumed_train_samples", "skipped_train_samples", "consumed_valid_samples"):
        v = _common.side_num(st, args.get(k), src, f"args.{k}", count=True)
        if v is not None:
            st.counters.append(Counter(k, v, Unit.SAMPLES, f"{src}:args.{k}",
                                       in_file.child("args", k)))
    opt = _common.optimizer_summary(sd.get("optimizer"))
    opt_src = f"{src}:optimizer"
    if not opt["lrs"] and ckpt is not None:
        dist_opt = _distributed_param_groups(st, ckpt, dcp_state)
        if dist_opt is not None:
            opt, opt_src = dist_opt
    if opt["step"] is None:
        opt["step"] = _common_step(sd.get("optimizer"))
    if opt["step"] is not None:
        at_step = opt["step_key"] if opt_src == f"{src}:optimizer" else None
        st.counters.append(Counter("optimizer.step", opt["step"], Unit.UPDATES, opt_src,
                                   None if at_step is None else in_file.child("optimizer", *at_step)))
    elif opt["unreadable_steps"]:
        st.notes.append("optimizer step tensors could not be read")
    st.optimizer_lrs = opt["lrs"]
    if opt_src == f"{src}:optimizer":
        st.optimizer_lr_refs = [in_file.child("optimizer", *k) for k in opt["lr_keys"]]
    if not st.optimizer_lrs:
        _lrs_expected(st, sd, args, opt)

    if gbs:
        st.samples_per_update = gbs
    if args.get("rampup_batch_size"):
        st.notes.append(f"batch-size ramp-up {args['rampup_batch_size']!r}: early iterations used "
                        "smaller global batches, so samples != iterations x global_batch_size")

    # Budget and the trainer's own progress.
    consumed = st.counter("consumed_train_samples")
    skipped = st.counter("skipped_train_samples")
    it_counter = st.counter("megatron.iteration")
    # Megatron takes one budget: iterations, else samples; each with the counter of its unit.
    for key, done in (("train_iters", it_counter), ("train_samples", consumed)):
        if args.get(key):
            budget_unit = Unit.UPDATES if key == "train_iters" else Unit.SAMPLES
            st.planned_end = Counter(key, args[key], budget_unit, f"{src}:args.{key}",
                                     in_file.child("args", key))
            if done:
                st.trainer_progress = Counter(done.name, done.value, budget_unit, done.source,
                                              done.ref)
            break

    if unit is Unit.SAMPLES and _counts_updates(st, sched, consumed, skipped, it_counter):
        unit = st.schedule.unit = progress.unit = Unit.UPDATES
        st.notes.append(
            f"scheduler.num_steps {_common_int(progress.value)} equals the "
            "iteration count, not consumed samples: this scheduler is stepped by 1 per update "
            "(verl's and ROLL's Megatron paths do so), so its unit is optimizer updates")
    if unit is Unit.SAMPLES and consumed:
        skip = skipped.value if skipped else 0
        st.nominal_progress = Counter(
            "consumed_train_samples - skipped_train_samples", consumed.value - skip, Unit.SAMPLES,
            "args.consumed_train_samples - args.skipped_train_samples")
        _overflowed_updates(st, args, progress)
    elif unit is Unit.UPDATES and it_counter:
        st.nominal_progress = Counter("megatron.iteration", it_counter.value, Unit.UPDATES,
                                      "iteration (iteration-era scheduler)" if iteration_era
                                      else "iteration (one scheduler step per update)")

    st.extras.update({k: args[k] for k in ARGS_KEPT if k in args})
    st.extras["checkpoint_version"] = sd.get("checkpoint_version")
    expected = _expected_from_args(args)
    if expected:
        st.extras["expected_from_args"] = expected
    rampup_budget(st, args, src, unit)
    if ckpt is not None:
        tracked = read_tracker(ckpt.parent) if (ckpt.parent / TRACKER).is_file() else None
        if tracked is not None:
            st.extras["tracker"] = tracked
            st.files.append(str(ckpt.parent / TRACKER))
    st.extras["rank_files"] = len(files)
    if main.is_dir():
        st.facts.storage = Storage.DCP
    # num_steps counts consumed - skipped samples by Megatron's own law (LRD104).
    st.facts.invariant = Invariant.MEGATRON_SAMPLES
    st.facts.micro_batches_per_update = _micro_batches(args)
    _check_ranks(st, sd, sched, files)
    if dcp_state is not None and not in_file.item:
        itemize(st, [dcp_state])  # torch_dcp / fsdp_dtensor: each field's own item
    return st


def _micro_batches(args: _common.Loaded) -> int | None:
    """Micro-batches per iteration: global batch / (micro batch x data-parallel size)."""
    try:
        return int(args["global_batch_size"] // (args["micro_batch_size"]
                                                 * args["data_parallel_size"]))
    except (KeyError, TypeError, ZeroDivisionError, ValueError):
        return None


def _distributed_param_groups(st: RunState, ckpt: Path,
                              dcp_state: dcp.DcpState | None
                              ) -> tuple[_common.OptimizerSummary, str] | None:
    """(optimizer summary, source) of a torch_dist DistributedOptimizer's param-group
    objects (:data:`DIST_OPT_GROUPS`), or None when the checkpoint has none readable.

    The lowest ``dp_group_idx`` of each chained optimizer is taken (the model-parallel
    rank 0, as a ``torch``-format read takes ``mp_rank_00``). Items that are there but
    could not be read go to ``st.facts.optimizer_lrs_unread``."""
    if dcp_state is None:  # common.pt (megatron-core < 0.19): the objects are in the DCP files
        if not dcp.is_dcp(ckpt):
            return None
        try:
            dcp_state = dcp.load(ckpt, select=lambda fqn: bool(DIST_OPT_GROUPS.match(fqn)))
        except UnusableInput as exc:  # common.pt was read: judge it, say what was not
            st.facts.optimizer_lrs_unread = LrsUnread(reason=str(exc))
            return None
        st.files += [f for f in dcp_state.files if f not in st.files]
        st.notes.extend(n for n in dcp_state.notes if n not in st.notes)
    items: dict[int, tuple[int, str, Any]] = {}
    unread: dict[str, str] = {}
    for fqn, value in dcp_state.flat.items():
        m = DIST_OPT_GROUPS.match(fqn)
        if not m:
            continue
        chained, group = int(m.group(1) or 0), int(m.group(2))
        if not _common.torch_optimizer_dicts(value):
            unread[fqn] = "holds no param_groups"
        elif chained not in items or group < items[chained][0]:
            items[chained] = (group, fqn, value)
    unread.update({k: why for k, why in dcp_state.skipped.items() if DIST_OPT_GROUPS.match(k)})
    if unread:
        st.facts.optimizer_lrs_unread = LrsUnread(
            reason="; ".join(f"{k}: {why}" for k, why in sorted(unread.items())),
            names=sorted(unread))
    if not items:
        return None
    keys = [items[c][1] for c in sorted(items)]
    opt = _common.optimizer_summary([items[c][2] for c in sorted(items)])
    if not opt["lrs"]:
        return None
    if unread:
        st.notes.append(f"optimizer param-group LRs read from {', '.join(keys)} only; not "
                        f"read: {'; '.join(f'{k}: {why}' for k, why in sorted(unread.items()))}")
    st.extras["distributed_optimizer_items"] = keys
    return opt, f"{dcp_state.path}:{keys[0]}" + (f" (+{len(keys) - 1})" if len(keys) > 1 else "")


def _lrs_expected(st: RunState, sd: _common.Loaded, args: _common.Loaded,
                  opt: _common.OptimizerSummary) -> None:
    """No param-group LR was read: say so, and when the checkpoint shows a distributed
    optimizer that saved them (never silent), record why in ``optimizer_lrs_unread``."""
    if args.get("no_save_optim"):
        st.notes.append("saved with --no-save-optim: no optimizer state, no param-group LRs")
        return
    o = sd.get("optimizer")
    sharding = o.get("param_state_sharding_type") if isinstance(o, dict) else None
    unread = st.facts.optimizer_lrs_unread
    if unread is None and (sharding is not None or args.get("use_distributed_optimizer")):
        why = (f"the distributed optimizer's state is here (param_state_sharding_type "
               f"{_common.plain(sharding)!r}) but no param-group item "
               "([chained_<i>.]optimizer.distributed.dp_group_idx_<g>.optimizer) was found"
               if sharding is not None else
               "args.use_distributed_optimizer is set and --no-save-optim is not, but no "
               "optimizer param groups were found")
        unread = st.facts.optimizer_lrs_unread = LrsUnread(reason=why)
    if unread is not None:
        st.notes.append(f"optimizer param-group LRs not read: {unread.reason}")
    elif not opt["found"]:
        st.notes.append("no optimizer state in this file (--no-save-optim?)")


def _common_step(opt_sd: Any) -> float | None:
    """torch_dist: megatron-core's sharded_state_dict moves the per-parameter ``step`` (one
    value for all) to ``optimizer.state.common_step`` in the common state."""
    for d in _common.torch_optimizer_dicts(opt_sd):
        state = d.get("state")
        if isinstance(state, dict) and "common_step" in state:
            return _common.number(state["common_step"])
    return None


def _counts_updates(st: RunState, sched: _common.Loaded, consumed: Counter | None,
                    skipped: Counter | None, iteration: Counter | None) -> bool:
    """True when the invariants say ``num_steps`` counts updates, not samples.

    Megatron-LM steps its scheduler by the global batch (samples); verl and ROLL
    step megatron-core's scheduler by 1 per update. Which invariant holds tells
    the unit: ``num_steps == iteration`` (and not ``consumed - skipped``, with a
    global batch above 1) means updates.
    """
    num_steps = float(scheduler_field(sched, "num_steps"))
    if iteration is None or iteration.value <= 0 or num_steps != iteration.value:
        return False
    if consumed is not None:
        nominal = consumed.value - (skipped.value if skipped else 0)
        if nominal == num_steps:
            return False  # a global batch of 1: both hold, samples is Megatron's own unit
    return st.samples_per_update is None or st.samples_per_update > 1 or consumed is None


def _overflowed_updates(st: RunState, args: _common.Loaded, progress: Counter) -> None:
    """fp16 loss scaling skips overflowed updates: Megatron then steps neither the optimizer
    nor the scheduler, yet counts the samples. When ``iteration - optimizer.step`` such
    updates account exactly for the gap, the scheduler is where Megatron meant it to be."""
    it, opt_step, nominal = (st.counter("megatron.iteration"), st.counter("optimizer.step"),
                             st.nominal_progress)
    gbs = st.samples_per_update
    if not (it and opt_step and nominal and gbs) or args.get("rampup_batch_size"):
        return
    overflowed = it.value - opt_step.value
    gap = nominal.value - progress.value
    if overflowed <= 0 or gap != overflowed * gbs:
        return
    st.counters.append(Counter("megatron.overflowed_updates", overflowed, Unit.UPDATES,
                               "megatron.iteration - optimizer.step"))
    st.nominal_progress = Counter(
        "consumed_train_samples - skipped_train_samples - overflowed updates x global_batch_size",
        nominal.value - gap, Unit.SAMPLES,
        f"{nominal.source} - (iteration - optimizer.step) x global_batch_size")
    st.notes.append(f"{_common_int(overflowed)} update(s) overflowed (fp16) and were skipped: "
                    "Megatron does not step the scheduler for them, so it trails "
                    f"consumed_train_samples by {_common_int(gap)} samples by design")


def _common_int(x: float) -> str:
    return f"{x:,.0f}"


def _expected_from_args(args: _common.Loaded) -> dict[str, float]:
    """What Megatron's get_optimizer_param_scheduler would build from these args (samples)."""
    gbs = args.get("global_batch_size")
    out: dict[str, float] = {}
    if args.get("train_iters") and gbs:
        decay_iters = args.get("lr_decay_iters") or args["train_iters"]
        out["lr_decay_steps"] = decay_iters * gbs
        if args.get("lr_warmup_fraction") is not None:
            out["lr_warmup_steps"] = args["lr_warmup_fraction"] * out["lr_decay_steps"]
        elif args.get("lr_warmup_iters") is not None:
            out["lr_warmup_steps"] = args["lr_warmup_iters"] * gbs
    elif args.get("train_samples"):
        out["lr_decay_steps"] = args.get("lr_decay_samples") or args["train_samples"]
        if args.get("lr_warmup_fraction") is not None:
            out["lr_warmup_steps"] = args["lr_warmup_fraction"] * out["lr_decay_steps"]
        elif args.get("lr_warmup_samples") is not None:
            out["lr_warmup_steps"] = args["lr_warmup_samples"]
    return out


def _check_ranks(st: RunState, sd: _common.Loaded, sched: _common.Loaded,
                 files: list[Path]) -> None:
    """Every rank must carry the same scheduler state and iteration; record any that do not."""
    def differs(other: _common.Loaded) -> dict[str, tuple[Any, Any]]:
        o_sched = scheduler_state(other) or {}
        diffs = {k: (sched.get(k), o_sched.get(k)) for k in set(sched) | set(o_sched)
                 if sched.get(k) != o_sched.get(k)}
        if other.get("iteration") != sd.get("iteration"):
            diffs["iteration"] = (sd.get("iteration"), other.get("iteration"))
        return diffs

    disagree = _common.compare_ranks(st, files[1:], "a Megatron checkpoint dict", differs)
    if disagree:
        st.notes.append(f"{len(disagree)} of {len(files)} rank files disagree with "
                        f"{files[0].parent.name} on scheduler state or iteration")


def repair(path: Path, state: RunState, target: Target, tools: RepairTools) -> FormatPlan:
    """``fix``: every rank file of the iteration :func:`resolve` picks (megatron-core's edits)."""
    ckpt, files = resolve(_common.as_path(path))
    return rank_file_repair(_common.as_path(path), ckpt, files, TRACKER, target, tools)
