"""Classifying what a checkpoint file holds by its shape, not by its name.

Every object found anywhere in a file is recognised by its keys: a torch LRScheduler
state, a megatron-core OptimizerParamScheduler state, a DeepSpeed scheduler state, a
torch optimizer state, trainer counters, config/args. This is the one definition of
"is this a scheduler" (:func:`is_scheduler`) that reading and repair share. The result of
reading one checkpoint is a :class:`Scan`; :func:`describe` says in a few words what an
object is (never silent: a checkpoint without a scheduler says what its files hold).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lrdoctor.core.fieldref import FieldRef, Key
from lrdoctor.read.scan.listing import clip, plural
from lrdoctor.schedules import horizon_fields

if TYPE_CHECKING:
    from lrdoctor.read.bytes.dcp import DcpState
    from lrdoctor.read.scan.grouping import Checkpoint

MAX_WALK_NODES = 200_000  # objects visited per file when classifying
NOTHING = "no scheduler/optimizer/trainer state"

# ---------------------------------------------------------------- classification

SCHED_TORCH = "torch_scheduler"
SCHED_MEGATRON = "megatron_scheduler"
SCHED_DEEPSPEED = "deepspeed_scheduler"
SCHED_CYCLICAL = "cyclical_scheduler"
SCHED_PIECEWISE = "piecewise_scheduler"
OPTIMIZER = "optimizer"
COUNTER = "counter"
SETTING = "setting"  # a number inside a config/args object: a budget or a knob, not progress
CONFIG = "config"
SCHEDULER_KINDS = (SCHED_MEGATRON, SCHED_TORCH, SCHED_DEEPSPEED, SCHED_CYCLICAL,
                   SCHED_PIECEWISE)

# Trainer counters by key (last path component), what they count.
COUNTER_NAMES = {
    "global_step", "global_steps", "globalstep", "iteration", "iterations", "iter", "step",
    "steps", "steps_run", "current_step", "num_updates", "update", "updates", "optimizer_step",
    "micro_step", "micro_steps", "epoch", "epochs", "epochs_run", "current_epoch",
    "consumed_samples", "consumed_train_samples", "skipped_train_samples", "global_samples",
    "skipped_steps", "samples", "sample", "tokens", "token", "batch", "batches",
    "batch_in_epoch", "ntokens_seen", "consumed_tokens", "total_steps", "max_steps",
    "train_iters", "train_samples", "total_training_steps", "num_training_steps",
    "lr_decay_iters", "total_epochs", "max_steps_per_epoch", "max_epochs", "num_epochs",
    "total_num_steps", "warmup_num_steps", "micro_batch_size", "global_batch_size",
    "gradient_accumulation_steps", "world_size", "num_processes",
}
# Keys under which a number is not a progress counter even if its name says so.
_NOT_COUNTER_PARENTS = {"param_groups", "rng", "rng_state", "rng_states", "rng_tracker_states"}
# Keys whose value is configuration: numbers below them are settings (budgets), not progress.
CONFIG_KEYS = {"config", "cfg", "args", "hparams", "hyper_parameters", "training_args",
               "job_config", "trainer_config", "ds_config", "hyperparameters"}


@dataclass
class Found:
    """One object recognised in a checkpoint file: what, where (file, key path), the value."""

    kind: str
    file: str
    key: str
    value: Any
    # The key path as a tuple (dict keys, list indexes, attribute names): what a repair
    # writes through (:attr:`ref`); ``key`` is its display form.
    path: tuple[Key, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.file}:{self.key}" if self.key else self.file

    @property
    def ref(self) -> FieldRef:
        """The field this object was found at."""
        return FieldRef(self.file, self.path)


@dataclass
class Scan:
    """Everything discovery read in one checkpoint."""

    checkpoint: Checkpoint
    found: list[Found] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    objects: dict[str, Any] = field(default_factory=dict)  # file -> top-level object
    notes: list[str] = field(default_factory=list)
    # Parts of files left unread ("file:key" -> why): DCP items too large for what their
    # key says they hold, or past a bound. Never silent: the report carries it.
    skipped: dict[str, str] = field(default_factory=dict)
    # Files that could not be read at all (file -> why: truncated, corrupt, not a pickle):
    # a file the checkpoint needs to resume is then missing, which is an error (LRD130).
    unread: dict[str, str] = field(default_factory=dict)
    # DCP folders read (``.metadata`` file -> its items): a field found in one is traced
    # back to the item that holds it (lrdoctor.read.layouts._refs.itemize).
    dcp: dict[str, DcpState] = field(default_factory=dict)

    def of(self, kind: str) -> list[Found]:
        return [f for f in self.found if f.kind == kind]

    def counters(self) -> list[Found]:
        return self.of(COUNTER)

    def first(self, kind: str) -> Found | None:
        hits = self.of(kind)
        return hits[0] if hits else None

    def file_names(self) -> set[str]:
        return {Path(f).name for f in self.files_read}

    def what(self, file: str) -> str:
        """What one file read here was found to hold, in a few words (never silent: a
        checkpoint without a scheduler says what each of its files is instead)."""
        suffix = Path(file).suffix.lower()
        kind = {".json": "JSON", ".yaml": "YAML", ".yml": "YAML"}.get(suffix, "a torch pickle")
        if Path(file).name == ".metadata":
            kind = "a DCP checkpoint"
        return describe(self.objects[file], [f for f in self.found if f.file == file], kind)


# megatron-core's OptimizerParamScheduler.state_dict(): current key -> older names its
# load_state_dict still accepts (Megatron-LM, ROLL's mcore_adapter and verl all save it).
SCHEDULER_KEYS: dict[str, tuple[str, ...]] = {
    "max_lr": ("max_lr", "start_lr"),
    "min_lr": ("min_lr",),
    "lr_warmup_steps": ("lr_warmup_steps", "warmup_iter", "warmup_steps"),
    "lr_decay_steps": horizon_fields.MEGATRON,
    "lr_decay_style": ("lr_decay_style", "decay_style"),
    "num_steps": ("num_steps", "num_iters"),
}


# megatron-core DistributedOptimizer.sharded_state_dict's param-group ShardedObject (see
# lrdoctor.read.layouts.megatron's docstring):
# groups (chained index, data-parallel group index).
DIST_OPT_GROUPS = re.compile(r"^(?:chained_(\d+)\.)?optimizer\.distributed\.dp_group_idx_(\d+)"
                             r"\.optimizer/shard_[0-9._]+$")
DIST_OPT_ANY = re.compile(r"^(?:chained_\d+\.)?optimizer\.distributed\.")


def scheduler_key(sched: dict[Any, Any], name: str) -> str:
    """The key under which ``sched`` holds the megatron-core field ``name`` (its current
    name when absent)."""
    return next((k for k in SCHEDULER_KEYS[name] if k in sched), SCHEDULER_KEYS[name][0])


def scheduler_field(sched: dict[Any, Any], name: str) -> Any:
    """A megatron-core scheduler field under its current or an older name (None if absent)."""
    for key in SCHEDULER_KEYS[name]:
        if key in sched:
            return sched[key]
    return None


def is_megatron_scheduler(obj: Any) -> bool:
    return (isinstance(obj, dict) and scheduler_field(obj, "num_steps") is not None
            and scheduler_field(obj, "lr_decay_steps") is not None
            and scheduler_field(obj, "max_lr") is not None)


def is_torch_scheduler(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    if "_schedulers" in obj:
        return True
    return "last_epoch" in obj and ("base_lrs" in obj or "_step_count" in obj
                                    or "lr_lambdas" in obj or "_last_lr" in obj)


def is_deepspeed_scheduler(obj: Any) -> bool:
    return isinstance(obj, dict) and "last_batch_iteration" in obj and "last_epoch" not in obj


# An event-indexed cyclical parameter scheduler (lrdoctor.schedules.cyclical): a counter
# that restarts each cycle, the cycles done, and the cycle's values and growth.
CYCLICAL_KEYS = ("event_index", "cycle", "cycle_size", "cycle_mult", "start_value",
                 "end_value")


def is_cyclical_scheduler(obj: Any) -> bool:
    return (isinstance(obj, dict) and all(k in obj for k in CYCLICAL_KEYS)
            and obj.get("param_name", "lr") == "lr")


def is_piecewise_scheduler(obj: Any) -> bool:
    """An event-indexed piecewise-linear scheduler: (milestone, value) pairs and its calls."""
    return (isinstance(obj, dict) and "event_index" in obj
            and isinstance(obj.get("milestones"), list) and isinstance(obj.get("values"), list)
            and 0 < len(obj["milestones"]) == len(obj["values"])
            and obj.get("param_name", "lr") == "lr")


def is_optimizer(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("param_groups"), list)


# A state recognised by its keys: the first test that holds names its kind.
STATE_SHAPES = ((SCHED_MEGATRON, is_megatron_scheduler), (SCHED_TORCH, is_torch_scheduler),
                (SCHED_DEEPSPEED, is_deepspeed_scheduler),
                (SCHED_CYCLICAL, is_cyclical_scheduler),
                (SCHED_PIECEWISE, is_piecewise_scheduler), (OPTIMIZER, is_optimizer))


def state_kind(obj: Any) -> str | None:
    """The kind of state ``obj`` is (a scheduler of some framework, an optimizer), or None."""
    return next((kind for kind, test in STATE_SHAPES if test(obj)), None)


def is_scheduler(obj: Any) -> bool:
    """Whether ``obj`` is a learning-rate scheduler's saved state, of any framework: the one
    definition reading and repair share."""
    return state_kind(obj) in SCHEDULER_KINDS


def number(value: Any) -> float | None:
    """A scalar from a checkpoint: int/float, or a tiny tensor read through read_values."""
    from lrdoctor.read.bytes.safeload import TensorRef, read_values

    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, TensorRef):
        if value.numel != 1:
            return None
        vals = read_values(value)
        v = vals[0] if vals else None
        # as for plain scalars: a bool (or a complex) tensor is no count
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) else None
    return None


def classify(obj: Any, file: str, prefix: str = "", config: bool = False) -> list[Found]:
    """Every scheduler/optimizer/counter/config object in ``obj``, by shape, with its key path.

    A recognised state is not walked into (its own counters belong to it);
    ``Opaque`` records (argparse.Namespace, OmegaConf configs) are walked
    through their fields and reported as configs.
    """
    from lrdoctor.read.bytes.safeload import Opaque

    out: list[Found] = []
    budget = [MAX_WALK_NODES]

    def walk(o: Any, key: str, parent: str, depth: int, cfg: bool, at: tuple[Key, ...]) -> None:
        budget[0] -= 1
        if budget[0] <= 0 or depth > 12:
            return
        if isinstance(o, Opaque):
            fields = opaque_fields(o)
            if isinstance(fields, dict):  # an OmegaConf ListConfig gives a list
                out.append(Found(CONFIG, file, key, fields, at))
                walk_dict(fields, key, depth, True, at)
            return
        if isinstance(o, dict):
            kind = state_kind(o)
            if kind is not None:
                out.append(Found(kind, file, key, o, at))
                return
            name = key.rsplit(".", 1)[-1]
            if name in CONFIG_KEYS:
                out.append(Found(CONFIG, file, key, o, at))
            walk_dict(o, key, depth, cfg or name in CONFIG_KEYS, at)
            return
        if isinstance(o, (list, tuple)) and len(o) <= 64:
            for i, item in enumerate(o):
                if isinstance(item, (dict, list, tuple, Opaque)):
                    walk(item, f"{key}[{i}]", parent, depth + 1, cfg, (*at, i))
            return
        v = number(o)
        last = key.rsplit(".", 1)[-1]
        if v is not None and last in COUNTER_NAMES and parent not in _NOT_COUNTER_PARENTS:
            out.append(Found(SETTING if cfg else COUNTER, file, key, v, at))

    def walk_dict(d: dict[Any, Any], key: str, depth: int, cfg: bool, at: tuple[Key, ...]) -> None:
        last = key.rsplit(".", 1)[-1] if key else ""
        if last in _NOT_COUNTER_PARENTS:
            return
        for k, v in list(d.items())[:4096]:
            if not isinstance(k, str):
                continue
            walk(v, f"{key}.{k}" if key else k, last, depth + 1, cfg, (*at, k))

    walk(obj, prefix, "", 0, config, ())
    return out


def follow(obj: Any, key: tuple[Key, ...]) -> Any:
    """The value at ``key`` in a loaded object: the one walk a :class:`FieldRef` means (dict
    keys, list indexes, and the fields of an inert record such as an argparse Namespace).
    KeyError when the path does not exist."""
    from lrdoctor.read.bytes.safeload import Opaque

    for k in key:
        if isinstance(obj, Opaque):
            obj = opaque_fields(obj) or {}
        if isinstance(obj, dict) and k in obj:
            obj = obj[k]
        elif isinstance(obj, (list, tuple)) and isinstance(k, int) and -len(obj) <= k < len(obj):
            obj = obj[k]
        else:
            raise KeyError(k)
    return obj


def opaque_fields(o: Any) -> object:
    """The data fields of an inert record (Namespace, dataclass, OmegaConf DictConfig): a
    dict, or None. An OmegaConf container gives its plain content, whatever the file holds
    there (a ListConfig: a list), so callers narrow with isinstance."""
    state = o.state
    if isinstance(state, tuple) and state and isinstance(state[0], dict):
        state = state[0]
    if not isinstance(state, dict):
        return None
    # OmegaConf: DictConfig.__getstate__ -> {"_content": {key: node}, "_metadata": ..., ...}
    if "_content" in state:
        return _omegaconf_plain(state)
    return state


def _omegaconf_plain(state: Any, depth: int = 0) -> Any:
    """An OmegaConf container's content as plain dicts/lists (values of its nodes)."""
    from lrdoctor.read.bytes.safeload import Opaque

    if depth > 24:
        return None
    if isinstance(state, Opaque):
        return _omegaconf_plain(state.state, depth + 1)
    if isinstance(state, dict) and "_content" in state:
        content = state["_content"]
        if isinstance(content, dict):
            return {str(k): _omegaconf_plain(v, depth + 1) for k, v in content.items()}
        if isinstance(content, list):
            return [_omegaconf_plain(v, depth + 1) for v in content]
        return content if isinstance(content, (str, int, float, bool)) else None
    if isinstance(state, dict) and "_val" in state:
        return state["_val"]
    return state


def _keys(d: dict[Any, Any], k: int = 5) -> str:
    names = [clip(str(x), 32) for x in list(d)[:k]]
    return "[" + ", ".join(names) + (f", +{len(d) - k} more" if len(d) > k else "") + "]"


def _leaves(obj: Any) -> tuple[int, int]:
    """(tensors, other values) among the leaves of ``obj``, bounded."""
    from lrdoctor.read.bytes.safeload import TensorRef

    tensors = others = 0
    stack, budget = [(obj, 0)], 10_000
    while stack and budget > 0:
        o, depth = stack.pop()
        budget -= 1
        if isinstance(o, TensorRef):
            tensors += 1
        elif isinstance(o, dict) and depth < 8:
            stack.extend((v, depth + 1) for v in list(o.values())[:4096])
        elif isinstance(o, (list, tuple)) and depth < 8:
            stack.extend((v, depth + 1) for v in o[:4096])
        else:
            others += 1
    return tensors, others


def describe(obj: Any, found: list[Found], what: str) -> str:
    """``what`` (a torch pickle, JSON) and what it holds, for a file with no checkpoint."""
    kinds = {f.kind for f in found}
    states = sorted(k for k in kinds if k in SCHEDULER_KINDS or k == OPTIMIZER)
    if states:
        at = next(f.key for f in found if f.kind in states) or "top level"
        return f"{what} holding {', '.join(s.replace('_', ' ') for s in states)} state at {at}"
    if COUNTER in kinds:
        names = sorted({f.key.rsplit(".", 1)[-1] for f in found if f.kind == COUNTER})
        return (f"{what} with trainer counters ({', '.join(names[:4])}) but no scheduler or "
                "optimizer state")
    tensors, others = _leaves(obj)
    if tensors and not others:
        return f"weights only: {what} holding {plural(tensors, 'tensor')}, {NOTHING}"
    if isinstance(obj, dict):
        if not obj:
            return f"{what} holding an empty dict, {NOTHING}"
        cfg = " (configuration)" if CONFIG in kinds or SETTING in kinds else ""
        return f"{what} with keys {_keys(obj)}{cfg}, {NOTHING}"
    from lrdoctor.read.bytes.safeload import Opaque

    name = obj.cls if isinstance(obj, Opaque) else type(obj).__name__
    return f"{what} holding a {clip(name, 48)}, {NOTHING}"


