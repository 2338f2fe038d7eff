"""Torch ``LRScheduler`` / optimizer state_dicts as lrdoctor's model.

Every torch-based format (accelerate, DeepSpeed client schedulers, Lightning,
plain torch.save, the HF/ROLL optimizer files) saves the same ``state_dict()``
objects; reading them in one place keeps the class identification, the
ScheduleSpec fields and the optimizer counters consistent.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.facts import Storage
from lrdoctor.core.fieldref import FieldRef, Key
from lrdoctor.core.state import Counter, RunState, ScheduleSpec, Unit
from lrdoctor.read.layouts import _common
from lrdoctor.read.layouts._common import OptimizerSummary
from lrdoctor.schedules import horizon_fields
from lrdoctor.schedules.torch_builtin import POSITION_FIELDS

if TYPE_CHECKING:
    from lrdoctor.read.bytes.dcp import DcpState

# Fields of LRScheduler.state_dict() that say where it is, not what shape it has (the model's).
_VOLATILE = POSITION_FIELDS


# Keys that identify a plain (non-composite) scheduler class, first match wins: the order
# matters where one class's keys include another's (OneCycleLR has ``total_steps`` too).
_KIND_BY_KEYS: tuple[tuple[frozenset[str], str], ...] = tuple(
    (frozenset(keys.split()), kind) for keys, kind in (
        ("patience cooldown mode", "ReduceLROnPlateau"),
        ("_schedule_phases", "OneCycleLR"),
        ("total_steps _anneal_func_type", "OneCycleLR"),
        ("max_lrs total_size", "CyclicLR"),
        ("T_0", "CosineAnnealingWarmRestarts"),
        ("T_max", "CosineAnnealingLR"),
        ("start_factor end_factor", "LinearLR"),
        ("power total_iters", "PolynomialLR"),
        ("factor total_iters", "ConstantLR"),
        ("milestones", "MultiStepLR"),
        ("step_size", "StepLR"),
        ("gamma last_epoch", "ExponentialLR"),
    ))


def torch_scheduler_kind(sd: _common.Loaded) -> str | None:
    """The torch class a scheduler state_dict came from (state_dicts carry no class name).

    "LambdaLR" stands for LambdaLR and MultiplicativeLR alike: both save only
    ``lr_lambdas`` (None or {} for plain functions), so neither is recoverable.
    """
    keys = set(sd)
    if "_schedulers" in keys:
        return "SequentialLR" if "_milestones" in keys else "ChainedScheduler"
    if "lr_lambdas" in keys:
        return "LambdaLR"
    return next((kind for needed, kind in _KIND_BY_KEYS if needed <= keys), None)


def _first(values: Any) -> float | None:
    if isinstance(values, (list, tuple)) and values:
        return _common.number(values[0])
    return _common.number(values)


def _params(sd: _common.Loaded) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in sd.items():
        if k in _VOLATILE:
            continue
        if k == "_schedulers" and isinstance(v, list):
            v = [dict(_params(c), kind=torch_scheduler_kind(c)) if isinstance(c, dict) else c
                 for c in v]
        out[k] = v
    return out


@dataclass
class _Fields:
    """The :class:`ScheduleSpec` numbers of one scheduler state."""

    max_lr: float
    min_lr: float = 0.0
    init_lr: float = 0.0
    warmup: float = 0.0
    horizon: float | None = None


def _lambda_fields(sd: _common.Loaded) -> _Fields | None:
    """A lambda child of a SequentialLR: only its base LR is known (its rule is code)."""
    base = _first(sd.get("base_lrs"))
    return _Fields(float(base), init_lr=float(base)) if base is not None else None


def _spec_fields(kind: str, sd: _common.Loaded, opt: OptimizerSummary | None) -> _Fields | None:
    """max_lr/min_lr/init_lr/warmup/horizon for one (non-composite) scheduler, None if unknowable."""
    base = _first(sd.get("base_lrs"))
    max_lr, min_lr, init_lr, warmup = base, 0.0, base or 0.0, 0.0
    hkey = horizon_fields.TORCH.get(kind)
    end = _common.number(sd.get(hkey)) if hkey is not None else None
    horizon = float(end) if end is not None else None
    if kind == "CosineAnnealingLR":
        min_lr = float(sd.get("eta_min") or 0.0)
    elif kind == "CosineAnnealingWarmRestarts":
        min_lr = float(sd.get("eta_min") or 0.0)
        horizon = None  # restarts: no single end
    elif kind == "LinearLR" and base is not None:
        init_lr = base * float(sd.get("start_factor", 1.0))
        min_lr = base * float(sd.get("end_factor", 1.0))
    elif kind == "ConstantLR" and base is not None:
        init_lr = base * float(sd.get("factor", 1.0))
        min_lr = base
    elif kind == "OneCycleLR":
        # base_lrs are initial_lr = max_lr / div_factor; max_lr lives in the param groups.
        # .get: torchtitan's flat optimizer summary carries no per-group peaks
        max_lr = _first(opt.get("group_max_lr")) if opt else None
        if max_lr is None:
            return None
        init_lr = base or 0.0
        min_lr = (_first(opt.get("group_min_lr")) if opt else None) or 0.0
        phases = sd.get("_schedule_phases")
        if isinstance(phases, list) and phases and isinstance(phases[0], dict):
            warmup_end = _common.number(phases[0].get("end_step"))
            if warmup_end is not None:
                warmup = float(warmup_end)
    elif kind == "CyclicLR":  # cycles between base_lrs and max_lrs: no single end
        max_lr = _first(sd.get("max_lrs"))
        min_lr = base or 0.0
    if max_lr is None:
        return None
    return _Fields(float(max_lr), float(min_lr), float(init_lr), float(warmup), horizon)


def torch_scheduler(sd: Any, *, unit: Unit, source: str, opt: OptimizerSummary | None = None,
                    ref: FieldRef | None = None,
                    ) -> tuple[ScheduleSpec | None, Counter | None, list[str]]:
    """(schedule, scheduler progress, notes) from a torch ``LRScheduler.state_dict()``.

    ``opt`` is :func:`optimizer_info` of the optimizer it drives (OneCycleLR keeps
    its peak there). Progress is ``last_epoch`` = calls to ``step()``. ``ref`` names the
    field that holds ``sd``: the progress and the horizon then carry the refs a repair
    writes through.
    """
    notes: list[str] = []
    if not isinstance(sd, dict):
        return None, None, [f"{source}: scheduler state is not a dict"]
    kind = torch_scheduler_kind(sd)
    last_epoch = _common.number(sd.get("last_epoch"))
    at: tuple[Key, ...] = ("last_epoch",)
    saved_children = sd.get("_schedulers")
    children: list[Any] = saved_children if isinstance(saved_children, list) else []
    if last_epoch is None and children and isinstance(children[0], dict):
        last_epoch = _common.number(children[0].get("last_epoch"))  # ChainedScheduler
        at = ("_schedulers", 0, "last_epoch")
    progress = (Counter("scheduler.last_epoch", float(last_epoch), unit, f"{source}:last_epoch",
                        ref.child(*at) if ref else None)
                if last_epoch is not None else None)
    t_cur = _common.number(sd.get("T_cur"))
    if kind == "CosineAnnealingWarmRestarts" and last_epoch is not None and t_cur is not None \
            and not float(t_cur).is_integer():
        # Stepped with fractional epochs, as torch's docs show (``step(epoch + i / iters)``):
        # last_epoch is the floored epoch and T_cur holds the fraction. Its progress is
        # counted in epochs, not in calls, so it is compared with the loop's epochs.
        progress = Counter("scheduler.epoch", float(last_epoch) + t_cur % 1.0, Unit.EPOCHS,
                           f"{source}:last_epoch+T_cur")
        notes.append(f"{source}: CosineAnnealingWarmRestarts stepped with fractional epochs "
                     f"(T_cur {t_cur:g}): its progress is {progress.value:g} epochs")
    if kind is None:
        notes.append(f"{source}: unrecognised scheduler state (keys: {', '.join(sorted(sd))[:120]})")
        return None, progress, notes
    if kind == "LambdaLR":
        notes.append(f"{source}: LambdaLR/MultiplicativeLR: the lambda is code and is not saved, "
                     "so the schedule cannot be rebuilt (a transformers get_scheduler schedule "
                     "looks the same); only its progress is known")
        return None, progress, notes
    if kind == "ReduceLROnPlateau":
        notes.append(f"{source}: ReduceLROnPlateau follows a metric, not progress: no schedule")
        return None, progress, notes
    from lrdoctor.schedules.torch_builtin import KINDS, UNSAVED_RULE

    kinds = [kind, *(torch_scheduler_kind(c) if isinstance(c, dict) else None for c in children)]
    # A SequentialLR's lambda child before its last milestone: that segment's LR is unknown,
    # the rest of the schedule (horizon, floor, the LR past the milestone) is exact.
    partial = {i + 1 for i, k in enumerate(kinds[1:-1]) if kind == "SequentialLR"
               and k in UNSAVED_RULE}
    unmodelled = [k or "?" for i, k in enumerate(kinds) if k not in KINDS and i not in partial]
    if unmodelled:
        notes.append(f"{source}: {kind} " + (f"(wrapping {', '.join(unmodelled)}) " if
                     unmodelled != [kind] else "") + "is not modelled by lrdoctor's torch "
                     "schedules; only its progress is known")
        return None, progress, notes

    by: int | None = None  # the child whose horizon field sets a composite's horizon
    if children:
        fields = [(torch_scheduler_kind(c), c) for c in children if isinstance(c, dict)]
        rebuilt = [_lambda_fields(c) if kind == "SequentialLR" and k in UNSAVED_RULE
                   and i < len(fields) - 1 else
                   _spec_fields(k, c, opt) if k and k not in ("LambdaLR", "ReduceLROnPlateau")
                   else None for i, (k, c) in enumerate(fields)]
        specs = [s for s in rebuilt if s is not None]
        if len(specs) < len(rebuilt) or not specs:
            bad = [k or "?" for (k, _), s in zip(fields, rebuilt, strict=True) if s is None]
            notes.append(f"{source}: {kind} wraps {', '.join(bad)}, which cannot be rebuilt")
            return None, progress, notes
        horizon = None
        if kind == "SequentialLR":
            milestones = sd.get("_milestones") or []
            last_h = specs[-1].horizon
            if last_h is not None and last_h > 0 and milestones:
                # (a last child sized <= 0 never decays: LRD106 names the warmup it follows)
                horizon = float(milestones[-1]) + last_h
                by = len(specs) - 1
        else:  # ChainedScheduler: where the product floors, from the model
            from lrdoctor.schedules.torch_builtin import chained_floor

            horizon, by = chained_floor(_params(sd))
        f = _Fields(max_lr=max(s.max_lr for s in specs), min_lr=specs[-1].min_lr,
                    init_lr=specs[0].init_lr, horizon=horizon)
    else:
        alone = _spec_fields(kind, sd, opt)
        if alone is None:
            notes.append(f"{source}: {kind} without its peak LR (optimizer state missing)")
            return None, progress, notes
        f = alone
    spec = ScheduleSpec(family="torch", kind=kind, unit=progress.unit if progress else unit,
                        params=_params(sd), source=source,
                        max_lr=f.max_lr, min_lr=f.min_lr, init_lr=f.init_lr, warmup=f.warmup,
                        horizon=f.horizon)
    field = horizon_fields.TORCH.get(kind)
    if ref is not None and field is not None and field in sd:
        spec.refs["horizon"] = ref.child(field)
    elif ref is not None and by is not None and all(isinstance(c, dict) for c in children):
        # A composite's horizon comes from one child's field (SequentialLR: the last,
        # after the milestones; ChainedScheduler: the longest).
        child = children[by]
        cfield = horizon_fields.TORCH.get(torch_scheduler_kind(child) or "")
        if cfield is not None and cfield in child:
            spec.refs["horizon"] = ref.child("_schedulers", by, cfield)
    return spec, progress, notes


# The optimizer summary a torch scheduler is read with (OneCycleLR keeps its peak in the
# param groups): the name the torch-based layouts import.
optimizer_info = _common.optimizer_summary


def set_torch_scheduler(st: RunState, sd: Any, *, unit: Unit, source: str,
                        opt: OptimizerSummary | None = None, ref: FieldRef | None = None) -> None:
    """:func:`torch_scheduler` into ``st``: its schedule, its scheduler progress, its notes."""
    spec, prog, notes = torch_scheduler(sd, unit=unit, source=source, opt=opt, ref=ref)
    st.schedule, st.scheduler_progress = spec, prog
    st.notes += notes


def add_optimizer(st: RunState, info: OptimizerSummary, source: str,
                  ref: FieldRef | None = None) -> None:
    """Record the optimizer step counter and LRs on ``st`` (shared by the three readers);
    with ``ref`` (the field holding the optimizer state) each LR's field too."""
    if info["step"] is not None:
        st.counters.append(Counter("optimizer.step", info["step"], Unit.UPDATES, source,
                                   _step_ref(ref, info)))
        if len(info["steps_distinct"]) > 1:
            st.notes.append(f"{source}: parameters disagree on the optimizer step "
                            f"({info['steps_distinct'][:4]}): some were frozen or added later; "
                            "optimizer.step is the max")
    elif info["unreadable_steps"]:
        st.notes.append(f"{source}: optimizer step tensors could not be read")
    st.optimizer_lrs = info["lrs"]
    if ref is not None:
        st.optimizer_lr_refs = [ref.child(*k) for k in info["lr_keys"]]
    _initial_lrs(st, info)


def _step_ref(ref: FieldRef | None, info: OptimizerSummary) -> FieldRef | None:
    """The field of the optimizer step (the first parameter's, or group's, holding the max)."""
    key = info["step_key"]
    return ref.child(*key) if ref is not None and key is not None else None


def _initial_lrs(st: RunState, info: OptimizerSummary) -> None:
    """``initial_lr`` is set in the param groups by any torch LRScheduler built on the
    optimizer: with no scheduler state saved, it still says a scheduler was there and
    what its peak was (the run-level rule LRD115 reads it)."""
    if info.get("initial_lrs"):
        st.facts.optimizer_initial_lrs = [float(x) for x in info["initial_lrs"]
                                          if isinstance(x, (int, float)) and not isinstance(x, bool)]


def read_optimizer_file(st: RunState, f: Path) -> OptimizerSummary:
    """Read a standalone optimizer file (HF ``optimizer.pt``, ROLL's) onto ``st``.

    Records the file, the param-group LRs and the ``optimizer.step`` counter, each with
    its field (in a DCP folder, the item holding it); returns
    :func:`_common.optimizer_summary` for the reader's own use.
    """
    obj, ds = load_optimizer_items(f, st)
    opt = _common.optimizer_summary(obj)
    st.files.append(str(f))
    st.optimizer_lrs = opt["lrs"]
    base = FieldRef(str(f)) if ds is None else FieldRef(str(ds.path / ".metadata"), ("optimizer",))
    refs = [base.child(*k) for k in opt["lr_keys"]]
    step_ref = _step_ref(base, opt)
    if ds is not None:
        refs = [ds.ref(r.key) or r for r in refs]
        step_ref = ds.ref(step_ref.key) if step_ref is not None else None
    st.optimizer_lr_refs = refs
    _initial_lrs(st, opt)
    if opt["step"] is not None:
        st.counters.append(Counter("optimizer.step", opt["step"], Unit.UPDATES, str(f),
                                   step_ref))
    elif opt["unreadable_steps"]:
        st.notes.append("optimizer step tensors could not be read")
    return opt


def load_optimizer(f: Path, st: RunState | None = None) -> Any:
    """An optimizer state from a file, or from the DCP folder FSDP's sharded state dict
    writes instead (accelerate ``save_fsdp_optimizer`` / HF Trainer: ``optimizer_0/``
    holding ``{"optimizer": FSDP.optim_state_dict(...)}``). A DCP source marks ``st`` so
    that ``fix`` refuses to rewrite it."""
    return load_optimizer_items(f, st)[0]


def load_optimizer_items(f: Path, st: RunState | None) -> tuple[Any, DcpState | None]:
    """:func:`load_optimizer`, with the DCP folder's items when it is one (to trace each
    field back to its item: :meth:`~lrdoctor.read.bytes.dcp.DcpState.ref`)."""
    if not f.is_dir():
        return _common.load(f), None
    from lrdoctor.read.bytes import dcp

    ds = dcp.load(f, prefixes=("optimizer",))
    if st is not None:
        st.facts.storage = Storage.DCP
        st.files += [x for x in ds.files if x not in st.files]
        _common.note_skipped(st, ds)
    opt = ds.tree.get("optimizer")
    if not isinstance(opt, dict):
        raise UnusableInput("a DCP folder without 'optimizer' items (not an FSDP sharded "
                            "optimizer state)", str(f))
    return opt, ds
