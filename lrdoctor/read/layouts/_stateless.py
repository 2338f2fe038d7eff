"""Schedules that save no position of their own, found by content and rebuilt.

timm's schedulers are stateless by design: ``state_dict()`` is their ``__dict__`` (the
knobs, ``base_values``, ``t_in_epochs``) and the loop passes the epoch or update count
on every call. A checkpoint holding one (under any key, in any file) gets its schedule
rebuilt (family ``timm``) with no scheduler progress: ``RunState.stateless`` says so, and
LRD133 solves the position from the saved LR and the trainer's counters
(``lr == f(k * step)``). Read by content: no file or key name is assumed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lrdoctor.core.numbers import number
from lrdoctor.core.state import RunState, ScheduleSpec, Unit
from lrdoctor.read.bytes.safeload import Opaque
from lrdoctor.read.layouts import _common
from lrdoctor.read.scan import reading, shapes
from lrdoctor.schedules import timm

_MAX_DEPTH = 4


def _dicts(obj: Any, key: str = "", depth: int = 0) -> Iterator[tuple[str, dict[str, Any]]]:
    """(dotted key, dict) for every dict within ``_MAX_DEPTH`` levels, breadth-first."""
    if not isinstance(obj, dict) or depth > _MAX_DEPTH:
        return
    yield key, obj
    for k, v in list(obj.items())[:256]:
        if isinstance(v, dict):
            yield from _dicts(v, f"{key}.{k}" if key else str(k), depth + 1)


def _plain(sd: dict[str, Any]) -> dict[str, Any]:
    """The scheduler's knobs that are plain values (numbers, strings, lists of numbers)."""
    out: dict[str, Any] = {}
    for k, v in sd.items():
        if isinstance(v, (bool, int, float, str)) or v is None:
            out[str(k)] = v
        elif isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v):
            out[str(k)] = list(v)
    return out


# timm's train.py arguments -> the scheduler create_scheduler_v2 builds from them
# (timm/scheduler/scheduler_factory.py: scheduler_kwargs' defaults, then the per-kind
# arguments), for the kinds modelled and a schedule stepped per epoch.
_ARGS_KIND = {"cosine": "CosineLRScheduler", "step": "StepLRScheduler",
              "multistep": "MultiStepLRScheduler", "constant": "StepLRScheduler"}


def timm_args_state(args: Any, updates_per_epoch: int | None = None,
                    upe_from: str = "") -> tuple[dict[str, Any] | None, str]:
    """The scheduler ``state_dict()`` timm's ``create_scheduler(args, ...)`` would hold, from
    the argparse Namespace timm's ``CheckpointSaver`` pickles as ``args``; (None, why)
    when it cannot be rebuilt exactly. ``updates_per_epoch`` (with where it came from):
    what ``sched_on_updates`` multiplies every length by (timm's loader length over its
    accumulation), which timm saves nowhere; the caller derives it from the counters."""
    a = args.state if isinstance(args, Opaque) and isinstance(args.state, dict) else args
    if not isinstance(a, dict) or not isinstance(a.get("sched"), str) or "epochs" not in a:
        return None, ""
    sched = a["sched"]
    if sched not in _ARGS_KIND:
        return None, f"timm sched={sched!r} is not modelled"
    per_update = bool(a.get("sched_on_updates"))
    if per_update and not updates_per_epoch:
        return None, ("timm sched_on_updates: its lengths are epochs x updates per epoch, "
                      "and the updates per epoch are not saved (the optimizer's step and "
                      f"the completed epochs would give them{': ' + upe_from if upe_from else ''})")
    if a.get("lr_noise") is not None:
        return None, "timm lr_noise: a noisy schedule cannot be placed by its LR"
    u = updates_per_epoch if per_update and updates_per_epoch else 1
    warm = {"warmup_t": a.get("warmup_epochs", 5) * u, "warmup_lr_init": a.get("warmup_lr", 1e-5),
            "warmup_prefix": bool(a.get("warmup_prefix", False))}
    if sched == "cosine":
        sd = {"t_initial": a["epochs"] * u, "lr_min": a.get("min_lr", 0.0),
              "cycle_mul": a.get("lr_cycle_mul", 1.0), "cycle_decay": a.get("lr_cycle_decay", 0.1),
              "cycle_limit": a.get("lr_cycle_limit", 1), "k_decay": a.get("lr_k_decay", 1.0)}
    elif sched == "step":
        sd = {"decay_t": a.get("decay_epochs", 30) * u, "decay_rate": a.get("decay_rate", 0.1)}
    elif sched == "constant":
        sd = {"decay_t": 1, "decay_rate": 1.0}
    else:
        sd = {"decay_t": [m * u for m in a.get("decay_milestones", [30, 60])],
              "decay_rate": a.get("decay_rate", 0.1)}
    if per_update:
        sd["updates_per_epoch"] = u
    return {**sd, **warm, "t_in_epochs": not per_update, "param_group_field": "lr",
            "base_values": None, "kind": _ARGS_KIND[sched]}, ""


def timm_updates_per_epoch(obj: dict[str, Any], st: RunState) -> tuple[int | None, str]:
    """Updates per epoch from the counters of a timm ``CheckpointSaver`` file: the
    optimizer's step over the completed epochs (``epoch`` is the index of the epoch just
    finished from checkpoint version 2 on, as ``timm.models.resume_checkpoint`` reads it:
    ``epoch + 1`` completed; before, already incremented). (None, why) when the division is
    not whole or a counter is missing: the number is then unknown, never guessed."""
    step, epoch = st.counter("optimizer.step"), obj.get("epoch")
    if step is None or not isinstance(epoch, int) or isinstance(epoch, bool):
        return None, ("no optimizer step" if step is None else "no epoch") + " saved"
    version = obj.get("version")
    done = epoch + 1 if isinstance(version, int) and version > 1 else epoch
    how_done = (f"epoch {epoch} + 1, timm checkpoint version {version}" if done != epoch
                else f"epoch {epoch}")
    where = step.ref or step.source
    if done <= 0 or step.value <= 0 or step.value % done:
        return None, (f"optimizer step {number(step.value)} ({where}) over {done} completed "
                      "epochs is not a whole number")
    return int(step.value // done), (f"optimizer step {number(step.value)} ({where}) / "
                                     f"{done} completed epochs ({how_done})")


def attach(sc: shapes.Scan, st: RunState) -> None:
    """Rebuild a timm scheduler found anywhere in the scan, when nothing else was found:
    its saved state, else timm's train.py arguments (``args``) with the optimizer's
    ``initial_lr`` as the base LR."""
    if st.schedule is not None or st.scheduler_progress is not None:
        return
    for file, obj in sc.objects.items():
        for key, d in _dicts(obj):
            kind = timm.kind_of(d)
            if kind is None:
                continue
            where = f"{reading.relpath(file, sc.checkpoint.path if sc.checkpoint.path.is_dir() else sc.checkpoint.path.parent)}:{key or 'top level'}"
            base = _common.number((d.get("base_values") or [None])[0])
            code_fn = d.get("decay_fn") is not None and not isinstance(d.get("decay_fn"), str)
            if kind not in timm.KINDS or base is None or code_fn:
                st.notes.append(f"{where}: timm {kind} is not modelled by lrdoctor; its "
                                "position is not saved, so nothing can be judged from it")
                return
            params = _plain(d)
            unit = Unit.EPOCHS if d.get("t_in_epochs", True) else Unit.UPDATES
            mark_stateless(st, ScheduleSpec(
                family="timm", kind=kind, max_lr=base, unit=unit,
                min_lr=float(params.get("lr_min") or 0.0),
                warmup=float(params.get("warmup_t") or 0), horizon=timm.cycle_length(params),
                params=params, source=where), f"timm {kind} state ({where}): timm schedulers "
                "keep no position; it is solved from the saved LR", file)
            return
    _from_args(sc, st)
    if st.schedule is None:
        _from_configs(sc, st)


def _from_args(sc: shapes.Scan, st: RunState) -> None:
    for file, obj in sc.objects.items():
        if not isinstance(obj, dict) or "args" not in obj:
            continue
        upe, upe_from = timm_updates_per_epoch(obj, st)
        sd, why = timm_args_state(obj["args"], upe, upe_from)
        if sd is None:
            if why:
                st.notes.append(f"{file}:args: {why}")
            continue
        initial = st.facts.optimizer_initial_lrs or \
            (_common.optimizer_summary(obj["optimizer"]).get("initial_lrs") or []
             if _common.torch_optimizer_dicts(obj.get("optimizer")) else [])
        base = _common.number(initial[0]) if initial else None  # timm sets initial_lr
        if base is None:
            a = obj["args"].state if isinstance(obj["args"], Opaque) else obj["args"]
            base = _common.number(a.get("lr")) if isinstance(a, dict) else None
        if base is None:
            st.notes.append(f"{file}:args: a timm schedule without a base LR (no initial_lr "
                            "in the optimizer, no args.lr)")
            return
        kind = sd.pop("kind")
        sd["base_values"] = [base]
        where = f"{reading.relpath(file, sc.checkpoint.path if sc.checkpoint.path.is_dir() else sc.checkpoint.path.parent)}:args"
        per_update = not sd["t_in_epochs"]
        how = (f"timm create_scheduler; sched_on_updates: lengths x {upe} updates per epoch "
               f"= {upe_from}") if per_update else "timm create_scheduler"
        mark_stateless(st, ScheduleSpec(
            family="timm", kind=kind, max_lr=base,
            unit=Unit.UPDATES if per_update else Unit.EPOCHS,
            min_lr=float(sd.get("lr_min") or 0.0), warmup=float(sd.get("warmup_t") or 0),
            horizon=timm.cycle_length(sd), params=sd, source=f"{where} ({how})"),
            f"timm {kind} built from train.py's args ({where}): timm schedulers keep no "
            "position; it is solved from the saved LR")
        return


def mark_stateless(st: RunState, spec: ScheduleSpec, why: str, file: str | None = None) -> None:
    """``spec`` is the run's schedule and keeps no position (``why`` says whose and where):
    LRD133 places it by the saved LR, so "no LR scheduler state found" no longer applies."""
    st.schedule = spec
    st.stateless = why
    st.notes = [n for n in st.notes if not n.startswith("no LR scheduler state found")]
    st.facts.contents = {}
    if file is not None:
        used = st.facts.files_used if st.facts.files_used is not None else []
        if file not in used:
            st.facts.files_used = [*used, file]


# Schedule builders a config names by their import path (torchtune's ``_component_``,
# Hydra's ``_target_``), as the family and kind that model them exactly (the lambdas of
# torchtune.training.lr_schedulers and transformers.optimization; tests compare them).
CONFIG_BUILDERS: dict[str, tuple[str, str]] = {
    "get_cosine_schedule_with_warmup": ("hf", "cosine"),
    "get_linear_schedule_with_warmup": ("hf", "linear"),
    "get_constant_schedule_with_warmup": ("hf", "constant_with_warmup"),
}
_BUILDER_PACKAGES = ("torchtune.", "transformers.")
_TARGET_KEYS = ("_component_", "_target_")


def config_builder(cfg: Any) -> tuple[str, dict[str, Any], str, str] | None:
    """(dotted key, section, family, kind) of the first section of a config that names a
    modelled schedule builder of a known package, or None."""
    for key, d in _dicts(cfg):
        target = next((d[k] for k in _TARGET_KEYS if isinstance(d.get(k), str)), None)
        if target is None or not target.startswith(_BUILDER_PACKAGES):
            continue
        fk = CONFIG_BUILDERS.get(target.rsplit(".", 1)[-1])
        if fk is not None:
            return key, d, fk[0], fk[1]
    return None


def unmodelled_builder(cfg: Any) -> tuple[str, str] | None:
    """(dotted key, import path) of a config's scheduler section (its key names a
    scheduler) whose builder lrdoctor does not model: said in a note, never guessed."""
    for key, d in _dicts(cfg):
        target = next((d[k] for k in _TARGET_KEYS if isinstance(d.get(k), str)), None)
        if target is not None and "sched" in key.rsplit(".", 1)[-1].lower() \
                and target.rsplit(".", 1)[-1] not in CONFIG_BUILDERS:
            return key, target
    return None


def schedule_from_config(cfg: Any, where: str, base_lr: float, base_from: str,
                         horizon: float | None, horizon_from: str) -> tuple[ScheduleSpec | None, str]:
    """The schedule a config's builder section makes (``where``: the config file as a
    finding names it). The trainer computes what the config leaves out (torchtune's
    ``num_training_steps`` = epochs x steps per epoch): ``horizon`` with its provenance,
    used only when the section has none. (None, why) when it cannot be rebuilt exactly."""
    found = config_builder(cfg)
    if found is None:
        return None, ""
    key, d, family, kind = found
    at = f"{where}:{key}" if key else where
    warm = _common.number(d.get("num_warmup_steps", 0))
    saved = _common.number(d.get("num_training_steps"))
    total, total_from = (saved, f"{at}.num_training_steps") if saved is not None \
        else (horizon, horizon_from)
    if warm is None or (total is None and kind != "constant_with_warmup"):
        return None, (f"{at}: {d.get('_component_') or d.get('_target_')} needs "
                      "num_training_steps, which neither the config nor the counters give"
                      f"{': ' + horizon_from if horizon_from else ''}")
    params: dict[str, Any] = {}
    cycles = _common.number(d.get("num_cycles"))
    if kind == "cosine":
        params["num_cycles"] = 0.5 if cycles is None else cycles
    source = (f"{at} ({family} {kind}, warmup {number(warm)}, horizon "
              f"{number(total) if total is not None else '-'} = {total_from}; peak {number(base_lr)}"
              f" = {base_from})")
    return ScheduleSpec(family=family, kind=kind, max_lr=base_lr, unit=Unit.UPDATES,
                        warmup=warm, horizon=total, params=params, source=source), ""


def _from_configs(sc: shapes.Scan, st: RunState) -> None:
    """A schedule builder named in a config beside the checkpoint (Hydra's ``_target_``,
    torchtune's ``_component_``) with every length it needs in the config: the loop built
    its scheduler from it and saved none, so the saved LR places it."""
    from lrdoctor.read.evidence.collect import config_files, read_config, relative

    ckpt = sc.checkpoint.path
    initial = list(st.facts.optimizer_initial_lrs)
    for o in sc.objects.values():
        for d in _common.torch_optimizer_dicts(o)[:1]:
            initial = initial or list(_common.optimizer_summary(d).get("initial_lrs") or [])
    for f in config_files(ckpt):
        cfg = read_config(f)
        if config_builder(cfg) is None:
            other = unmodelled_builder(cfg)
            if other is not None:
                st.notes.append(f"{relative(str(f), ckpt)}:{other[0]} builds the schedule with "
                                f"{other[1]}, which lrdoctor does not model: the saved LR "
                                "cannot be placed on it")
            continue
        where = relative(str(f), ckpt)
        base, base_from = (_common.number(initial[0]), "the optimizer's initial_lr") \
            if initial else (None, "")
        if base is None:  # the config's optimizer section (Hydra: optimizer.lr)
            opt = cfg.get("optimizer") if isinstance(cfg, dict) else None
            base = _common.number(opt.get("lr")) if isinstance(opt, dict) else None
            base_from = f"{where}:optimizer.lr"
        if base is None:
            st.notes.append(f"{where}: a schedule builder without a base LR (no initial_lr in "
                            "the optimizer, no optimizer.lr in the config)")
            return
        spec, why = schedule_from_config(cfg, where, base, base_from, None, "")
        if spec is None:
            st.notes.append(why)
            return
        mark_stateless(st, spec, f"the scheduler was built from the config ({where}) and its "
                       "state was not saved: it is placed by the saved LR", str(f))
        return
