"""Collect the evidence items of one checkpoint from what the readers loaded.

Every number that measures progress, a horizon, a planned end, a warmup, an LR or a
conversion between units becomes one :class:`~lrdoctor.core.evidence.EvidenceItem`,
wherever it was saved: the objects a reader unpickled or parsed (recorded while it read,
:mod:`lrdoctor.read.bytes.seen`), the records inside them that a framework registered for
checkpointing (an ``argparse.Namespace``, an OmegaConf ``DictConfig``, a dataclass, kept
inert by :mod:`lrdoctor.read.bytes.safeload`), and the config files beside the checkpoint (YAML,
JSON, TOML), recognised by what they hold, not by their names. The meaning of a number
comes from its key (:mod:`lrdoctor.read.evidence.vocabulary`) and from the shape of the
object around it: ``step`` in an optimizer's per-parameter state counts optimizer
updates, ``last_epoch`` in a scheduler's state counts scheduler calls, ``T_max`` there
is a horizon in scheduler calls.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.evidence import EvidenceItem
from lrdoctor.core.evidence import Quantity as Q
from lrdoctor.core.evidence import Role as R
from lrdoctor.core.fieldref import FieldRef, Key
from lrdoctor.read.bytes.storage import RemotePath
from lrdoctor.read.evidence import vocabulary as V

MAX_NODES = 100_000       # objects visited per loaded file
MAX_DEPTH = 14
MAX_ITEMS = 400           # evidence items per checkpoint
MAX_CONFIG_FILES = 16     # config files read beside a checkpoint
MAX_CONFIG_BYTES = 1 << 20
CONFIG_SUFFIXES = (".yaml", ".yml", ".json", ".toml")
CONFIG_PARENTS = frozenset({"config", "cfg", "args", "hparams", "hyper_parameters",
                            "training_args", "job_config", "trainer_config", "ds_config",
                            "hyperparameters", "conf", "settings", "opt", "flags"})
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[+-]?[0-9]+)?)\s*(ep|ba|sp|tok|dur|iter)\s*$",
                       re.IGNORECASE)


def _scalar(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return float(v)
    from lrdoctor.read.bytes.safeload import TensorRef

    if isinstance(v, TensorRef) and v.numel == 1:
        from lrdoctor.read.scan.shapes import number

        n = number(v)
        return float(n) if n is not None else None
    return None


def _fields(o: Any) -> dict[str, Any] | None:
    """The data fields of an inert record (Namespace, dataclass, OmegaConf DictConfig)."""
    from lrdoctor.read.bytes.safeload import Opaque

    if not isinstance(o, Opaque):
        return None
    from lrdoctor.read.scan.shapes import opaque_fields as _opaque_fields

    fields = _opaque_fields(o)
    return fields if isinstance(fields, dict) else None


def _is_optimizer(d: dict[str, Any]) -> bool:
    return isinstance(d.get("param_groups"), list) and "state" in d


def _is_scheduler(d: dict[str, Any]) -> bool:
    keys = {V.norm(k) for k in d if isinstance(k, str)}
    return bool({"last_epoch", "num_steps", "last_batch_iteration"} & keys) and bool(
        {"base_lrs", "step_count", "max_lr", "lr_decay_steps", "last_lr", "lr_lambdas",
         "last_batch_iteration", "t_max", "total_steps", "total_iters"} & keys) or bool(
        {"t_initial", "warmup_t"} & keys and "base_values" in keys)


class _Walker:
    def __init__(self, step: float | None = None) -> None:
        # The optimizer's step as the layout already read it (a tensor read from the file):
        # used as the value of that field instead of reading the tensor again.
        self.step = step
        self.items: list[EvidenceItem] = []
        self.nodes = 0

    def add(self, role: R, q: Q, value: float, ref: FieldRef) -> None:
        if len(self.items) < MAX_ITEMS:
            self.items.append(EvidenceItem(role, q, value, ref))

    def walk(self, o: Any, ref: FieldRef, cfg: bool, depth: int = 0) -> None:
        self.nodes += 1
        if self.nodes > MAX_NODES or depth > MAX_DEPTH:
            return
        fields = _fields(o)
        if fields is not None:  # a registered record: its fields are configuration
            self.walk_dict(fields, ref, True, depth)
            return
        if isinstance(o, dict):
            if _is_optimizer(o):
                self.optimizer(o, ref)
            elif _is_scheduler(o):
                self.scheduler(o, ref)
            else:
                self.walk_dict(o, ref, cfg, depth)
        elif isinstance(o, (list, tuple)) and len(o) <= 64:
            for i, x in enumerate(o):
                if isinstance(x, (dict, list, tuple)) or _fields(x) is not None:
                    self.walk(x, ref.child(i), cfg, depth + 1)

    def walk_dict(self, d: dict[str, Any], ref: FieldRef, cfg: bool, depth: int) -> None:
        for k, v in list(d.items())[:4096]:
            if not isinstance(k, str):
                continue
            name = V.norm(k)
            if name in V.NEVER_UNDER:
                continue
            here = ref.child(k)
            if isinstance(v, (dict, list, tuple)) or _fields(v) is not None:
                self.walk(v, here, cfg or name in CONFIG_PARENTS, depth + 1)
                continue
            self.leaf(name, v, here, cfg)

    def leaf(self, name: str, v: Any, ref: FieldRef, cfg: bool) -> None:
        if isinstance(v, str):
            self.duration(name, v, ref)
            return
        parent = next((k for k in reversed(ref.key[:-1]) if isinstance(k, str)), None)
        what = V.qualified(parent, name) or V.meaning(name, cfg)
        if what is None:
            return  # decided by the key first: a one-element tensor is read only when it counts
        value = _scalar(v)
        if value is not None:
            self.add(what[0], what[1], value, ref)

    def duration(self, name: str, text: str, ref: FieldRef) -> None:
        """Composer-style ``max_duration: "10ep"`` / ``t_warmup: "100ba"``."""
        m = _DURATION.match(text)
        if not m:
            return
        q = V.DURATION_UNITS[m.group(2).lower()]
        value = float(m.group(1))
        if "warmup" in name:
            self.add(R.WARMUP, q, value, ref)
        elif "duration" in name or name in V.PLANNED_END or name in ("max_duration", "t_max"):
            self.add(R.PLANNED_END, q, value, ref)

    def optimizer(self, o: dict[str, Any], ref: FieldRef) -> None:
        """A torch optimizer state_dict: per-parameter ``step`` and the param-group LRs."""
        state = o.get("state")
        if isinstance(state, dict):
            for pid, ps in list(state.items())[:1]:
                if isinstance(ps, dict) and "step" in ps:
                    raw = ps["step"]
                    value = (self.step if self.step is not None and not isinstance(raw, (int, float))
                             else _scalar(raw))
                    if value is not None:
                        self.add(R.PROGRESS, Q.OPTIMIZER_STEPS, value,
                                 ref.child("state", pid, "step"))
        for i, g in enumerate(o.get("param_groups") or []):
            if not isinstance(g, dict):
                continue
            for k in ("lr", "initial_lr"):
                value = _scalar(g.get(k))
                if value is not None:
                    self.add(R.LR, Q.LR, value, ref.child("param_groups", i, k))
            value = _scalar(g.get("step"))  # some optimizers keep the step per group
            if value is not None:
                self.add(R.PROGRESS, Q.OPTIMIZER_STEPS, value, ref.child("param_groups", i,
                                                                        "step"))

    def scheduler(self, o: dict[str, Any], ref: FieldRef, own_clock: bool = False) -> None:
        """An LR scheduler's state: its call counter, horizon, warmup and LRs. ``own_clock``:
        a SequentialLR's child, whose counter and horizon count from its milestone and whose
        last LR is stale once the next child took over; only its base LRs and warmup say
        something about the run (the composite's model holds its horizon)."""
        sequential = "_milestones" in o
        for k, v in o.items():
            if not isinstance(k, str):
                continue
            name = V.norm(k)
            here = ref.child(k)
            if own_clock and name not in ("base_lrs", "base_values") and name not in V.WARMUP:
                continue
            if isinstance(v, (list, tuple)):
                if name in ("schedulers", "_schedulers"):
                    for i, s in enumerate(v[:16]):
                        if isinstance(s, dict):
                            self.scheduler(s, here.child(i), own_clock or sequential)
                elif name in ("base_lrs", "last_lr", "base_values"):
                    for i, x in enumerate(v[:64]):
                        value = _scalar(x)
                        if value is not None:
                            self.add(R.LR, Q.LR, value, here.child(i))
                continue
            value = _scalar(v)
            if value is None:
                continue
            if name in ("last_epoch", "num_steps"):
                self.add(R.PROGRESS, Q.SCHEDULER_CALLS, value, here)
            elif name == "last_batch_iteration":
                self.add(R.PROGRESS, Q.SCHEDULER_CALLS, value + 1, here)
            elif name in V.HORIZON or name in ("total_steps", "max_steps", "t_initial"):
                q = Q.SCHEDULER_CALLS
                if name == "t_initial" and o.get("t_in_epochs") is True:
                    q = Q.EPOCHS
                self.add(R.HORIZON, q, value, here)
            elif name in V.WARMUP:
                q = V.WARMUP[name]
                if name == "warmup_t" and o.get("t_in_epochs") is True:
                    q = Q.EPOCHS
                self.add(R.WARMUP, q, value, here)
            elif name in V.LR:
                self.add(R.LR, Q.LR, value, here)


def walk(obj: Any, ref: FieldRef, config: bool = False,
         step: float | None = None) -> list[EvidenceItem]:
    """The evidence items in one loaded object (``ref``: where it lives; ``step``: the
    optimizer's step as the layout read it)."""
    w = _Walker(step)
    w.walk(obj, ref, config)
    return w.items


def config_files(ckpt: Path, exclude: Iterable[str] = ()) -> list[Path]:
    """The config files beside a checkpoint (its folder and the run folder above), by
    suffix; what each holds decides whether it is one."""
    from lrdoctor.read.scan.listing import SKIP_NAMES

    seen = {str(Path(e)) for e in exclude}
    base = ckpt if ckpt.is_dir() else ckpt.parent
    out: list[Path] = []
    for d in (base, base.parent):
        try:
            entries = sorted(d.iterdir(), key=lambda p: p.name)  # one folder: by name
        except OSError:
            continue
        for f in entries:
            if (f.suffix.lower() in CONFIG_SUFFIXES and f.name not in SKIP_NAMES
                    and str(f) not in seen and not f.is_symlink() and f.is_file()):
                out.append(f)
                if len(out) >= MAX_CONFIG_FILES:
                    return out
    return out


def read_config(f: Path) -> Any:
    """A config file's content (None when it is too large or not parseable: evidence is
    gathered from what can be read; the readers say what they needed)."""
    from lrdoctor.read.bytes import safetext

    try:
        if f.stat().st_size > MAX_CONFIG_BYTES:
            return None
        text = f.read_text(encoding="utf-8")
        suffix = f.suffix.lower()
        if suffix == ".json":
            return safetext.json_loads(text, str(f))
        if suffix == ".toml":
            return safetext.toml_loads(text, str(f))
        return safetext.yaml_loads(text, str(f))
    except (OSError, UnicodeDecodeError, UnusableInput, ValueError):
        return None


def small_pickles(ckpt: Path, exclude: Iterable[str] = ()) -> list[tuple[Path, Any]]:
    """The small pickles in a checkpoint folder that its layout did not read: the objects a
    framework saves for the user's own state (accelerate's ``register_for_checkpointing``
    writes ``custom_checkpoint_N.pkl``), read metadata-only through the allow-list
    unpickler. Recognised by content; one that cannot be read safely is left out (the
    layout did not need it)."""
    from lrdoctor.core.errors import UnsafePickle
    from lrdoctor.read.bytes import safeload
    from lrdoctor.read.scan.listing import is_pickle

    if not ckpt.is_dir():
        return []
    seen = {str(Path(e)) for e in exclude}
    out: list[tuple[Path, Any]] = []
    try:
        entries = sorted(ckpt.iterdir())[:256]
    except OSError:
        return []
    for f in entries:
        try:
            if (str(f) in seen or f.is_symlink() or not f.is_file()
                    or f.stat().st_size > MAX_CONFIG_BYTES or not is_pickle(f)):
                continue
            out.append((f, safeload.load(f, unknown_as_opaque=True)))
        except (OSError, UnsafePickle, UnusableInput, ValueError, RecursionError):
            continue
        if len(out) >= MAX_CONFIG_FILES:
            break
    return out


def relative(file: str, ckpt: Path) -> str:
    """A file as a finding names it: relative to the checkpoint's folder when inside (a
    URL's files alike, so a checkpoint on a store gives the same evidence as on disk)."""
    base = ckpt if ckpt.is_dir() else ckpt.parent
    for folder in (base, base.parent):
        if isinstance(folder, RemotePath):  # type: ignore[unreachable,unused-ignore]
            prefix = str(folder).rstrip("/") + "/"
            if file.startswith(prefix):
                return file[len(prefix):]
            continue
        try:
            return str(Path(file).relative_to(folder))
        except ValueError:
            continue
    return file


def collect(ckpt: Path, loaded: Iterable[tuple[str, str, Any]],
            step: float | None = None) -> list[EvidenceItem]:
    """Every item in the objects loaded for ``ckpt`` (``(file, item, object)``) and in the
    config files beside it, each once (the first reading of a field wins)."""
    items: list[EvidenceItem] = []
    read: set[str] = set()
    for file, item, obj in loaded:
        read.add(file)
        is_cfg = Path(file).suffix.lower() in (".yaml", ".yml", ".toml")
        items += walk(obj, FieldRef(relative(file, ckpt), (), item), is_cfg, step)
    for f, obj in small_pickles(ckpt, read):  # objects registered for checkpointing
        items += walk(obj, FieldRef(relative(str(f), ckpt)))
    for f in config_files(ckpt, read):
        obj = read_config(f)
        # lrdoctor's own reports and fix manifests ("lrdoctor": version) are not the run's.
        if isinstance(obj, dict) and "lrdoctor" not in obj:
            items += walk(obj, FieldRef(relative(str(f), ckpt)), True)
    out: list[EvidenceItem] = []
    keys: set[tuple[str, str, tuple[Key, ...]]] = set()
    for e in items:
        k = (e.ref.file, e.ref.item, e.ref.key)
        if k not in keys:
            keys.add(k)
            out.append(e)
    return out[:MAX_ITEMS]
