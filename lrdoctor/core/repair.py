"""The vocabulary a repair is spoken in, shared by the layouts that plan it and ``repair/``.

Why here, in ``core/``: a layout (``lrdoctor.read.layouts.<framework>``) holds the repair of
the checkpoints it reads (its files, its refusals, its notes, which field is which), so a
new layout is one file for reading *and* repair. Reading must not import ``lrdoctor.repair``
(that would tie the read packages to the writer and make an import cycle), so what a
layout's repair returns and what it calls are defined here, below both:

- :class:`Target` (what a policy decided) and :class:`Refusal` (the one-line no) come in;
- :class:`Change` (one field of one file: the :class:`~lrdoctor.core.fieldref.FieldRef` a
  reader fills, with the value before and after) and :class:`FormatPlan` go out;
- :class:`RepairTools` is the framework-blind arithmetic a layout calls (torch
  ``LRScheduler`` and megatron-core scheduler states, optimizer param-group LRs, loading a
  file for rewriting). ``lrdoctor.repair`` implements it and hands it in
  (:data:`lrdoctor.repair.torchstate.TOOLS`): the layout knows *where* the state lives,
  ``repair/`` knows *how* a scheduler state moves, and neither imports the other.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.fieldref import FieldRef

if TYPE_CHECKING:
    from lrdoctor.core.state import RunState, ScheduleSpec, Unit

# A key path inside a loaded object: dict keys, list indexes, attribute names.
Key = tuple[Any, ...]


class Refusal(UnusableInput):
    """The intent is ambiguous or impossible; the message says which option to give."""


@dataclass
class Target:
    """The scheduler state the output checkpoint must hold."""

    policy: str  # nominal | rescale | extend-horizon | sync-lr
    progress_before: float
    progress: float  # new scheduler progress, in ``unit``
    unit: Unit | None
    horizon_before: float | None = None
    horizon: float | None = None  # None: horizon unchanged
    k: float | None = None
    schedule: ScheduleSpec | None = None  # the schedule *after* the fix
    lr_before: float | None = None  # what the schedule gave at the old progress
    lr: float | None = None  # what it gives at the new progress (None: unknown)
    motivated_by: list[str] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)
    # How the policy was chosen: "option" (--policy/--k/--progress/--from-replay) or
    # "findings" (the checkpoint's recommendation), and the other repair that works.
    chosen_by: str = "option"
    alternative: str | None = None
    why: str = ""

    @property
    def scale(self) -> float | None:
        """progress / progress_before, for formats that scale sibling counters."""
        return self.progress / self.progress_before if self.progress_before else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "policy": self.policy, "unit": self.unit.value if self.unit else None,
            "progress_before": self.progress_before, "progress": self.progress,
            "horizon_before": self.horizon_before, "horizon": self.horizon, "k": self.k,
            "lr_before": self.lr_before, "lr": self.lr,
            "motivated_by": self.motivated_by, "reasons": self.reasons,
            "chosen_by": self.chosen_by, "alternative": self.alternative, "why": self.why,
        }


@dataclass
class Change:
    """One field of one file: ``file`` is relative to the checkpoint root.

    ``(file, key)`` is the field's :class:`FieldRef` (:attr:`ref`): the same location a
    reader names, so a repair writes through the refs the read filled."""

    file: str
    key: Key
    before: Any
    after: Any
    kind: str = "pickle"  # "pickle" (torch.save), "json", or "dcp" (a DCP bytes item)
    why: str = ""

    @property
    def ref(self) -> FieldRef:
        return FieldRef(self.file, tuple(self.key))

    @property
    def key_str(self) -> str:
        return key_str(self.key)

    def to_dict(self) -> dict[str, Any]:
        from lrdoctor.core.findings import jsonable as _jsonable

        return {"file": self.file, "key": self.key_str, "before": _jsonable(self.before),
                "after": _jsonable(self.after), "why": self.why}


def key_str(key: Key) -> str:
    out = ""
    for k in key:
        out += f"[{k}]" if isinstance(k, int) else (f".{k}" if out else str(k))
    return out


# A DCP folder's writer of ``.metadata`` and its new storage file: (input root, output
# root, the changes of that folder) -> the output files it wrote.
Builder = Callable[[Path, Path, list[Change]], list[str]]


@dataclass
class FormatPlan:
    """What one layout's repair decided: the checkpoint root, its files, the edits."""

    root: Path  # a directory or a single file
    files: list[str] | None = None  # relative to root; None: every file under it
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # Hard-link the files no change touches (DCP tensor files), else copy them.
    link: bool = False
    # file -> what writes it (and the files beside it) from its changes: a DCP .metadata.
    builders: dict[str, Builder] = field(default_factory=dict)


# ---------------------------------------------------------------- key paths
def get_at(obj: Any, key: Key) -> Any:
    """The value at ``key`` in a loaded object (dicts, lists, argparse Namespaces).
    argparse is imported where a Namespace is looked for: ``inspect`` never does."""
    from argparse import Namespace

    for k in key:
        obj = getattr(obj, k) if isinstance(obj, Namespace) else obj[k]
    return obj


def set_at(obj: Any, key: Key, value: Any) -> None:
    from argparse import Namespace

    parent = get_at(obj, key[:-1])
    last = key[-1]
    if isinstance(parent, Namespace):
        setattr(parent, last, value)
    elif isinstance(parent, tuple):
        raise TypeError(f"cannot set inside a tuple at {key_str(key)}")
    else:
        parent[last] = value


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) or isinstance(b, float):
        try:
            return float(a) == float(b)
        except (TypeError, ValueError):
            return False
    return bool(a == b)


def apply_changes(obj: Any, changes: list[Change], path: Path) -> None:
    """Set every change in ``obj``; the current value must be the planned 'before'."""
    for c in changes:
        try:
            current = get_at(obj, c.key)
        except (KeyError, IndexError, AttributeError, TypeError):
            raise UnusableInput(f"no field {c.key_str}", str(path)) from None
        if not _same_value(current, c.before):
            raise UnusableInput(f"field {c.key_str} is {current!r}, expected {c.before!r} "
                                "(changed since planning?)", str(path))
        set_at(obj, c.key, c.after)


def _same_value(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return same(a, b)


def walk(obj: Any, key: Key = (), depth: int = 12) -> Iterator[tuple[Key, Any]]:
    """Every (key path, value) of nested dicts/lists/Namespaces; tensors not entered."""
    from argparse import Namespace

    yield key, obj
    if depth == 0:
        return
    if isinstance(obj, dict):
        for k, v in obj.items():
            if isinstance(k, (str, int)):
                yield from walk(v, key + (k,), depth - 1)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            yield from walk(v, key + (i,), depth - 1)
    elif isinstance(obj, Namespace):
        for k, v in vars(obj).items():
            yield from walk(v, key + (k,), depth - 1)


def tree_files(root: Path) -> list[str]:
    """Relative paths of every file under ``root`` (a file root: its own name)."""
    if root.is_file():
        return [root.name]
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and not p.is_symlink())


def named_file(state: RunState) -> Path | None:
    """The plain file the reader named with a FieldRef for the scheduler's progress
    (``Counter.ref``); None where it named none or a container's item."""
    ref = state.scheduler_progress.ref if state.scheduler_progress is not None else None
    return Path(ref.file) if ref is not None and not ref.item else None


class RepairTools(Protocol):
    """The framework-blind scheduler-state arithmetic a layout's repair calls.

    Implemented by :mod:`lrdoctor.repair.torchstate` (``TOOLS``) and handed to
    :meth:`Repairs.repair <lrdoctor.read.layouts.Repairs>` by the repair engine. Every
    method returns :class:`Change`\\ s at the key paths it was given, or raises
    :class:`Refusal`."""

    def load(self, path: Path) -> Any:
        """A file ``fix`` rewrites, loaded for planning (the safe reader's checks first)."""

    def torch_state(self, file: str, obj: Any, target: Target
                    ) -> tuple[list[Change], list[str]]:
        """The torch scheduler(s) in ``obj`` at the target's old progress and their
        optimizers, found by shape."""

    def scheduler_file(self, sfile: Path, ofile: Path | None, target: Target
                       ) -> tuple[list[Change], bool, list[float] | None]:
        """A scheduler saved in a file of its own and the optimizer file beside it:
        (changes, whether ``ofile`` held param groups, the new group LRs)."""

    def torch_scheduler(self, file: str, obj: Any, key: Key, target: Target,
                        lrs: list[float] | None) -> list[Change]:
        """One torch ``LRScheduler`` state at ``key``: last_epoch, horizon, _last_lr."""

    def megatron_scheduler(self, file: str, key: Key, sched: dict[str, Any],
                           target: Target) -> list[Change]:
        """One megatron-core ``OptimizerParamScheduler`` state: num_steps, lr_decay_steps."""

    def optimizers(self, file: str, obj: Any, under: Key, target: Target
                   ) -> tuple[list[Change], bool]:
        """The param-group ``lr`` of every optimizer state under ``under``; whether any."""

    def group_lrs(self, opt_sd: dict[str, Any], target: Target) -> list[float] | None:
        """Per param-group LR at the target; None when the schedule is unknown."""

    def is_scheduler(self, d: Any) -> bool:
        """A torch LRScheduler state with the ``last_epoch`` a repair moves."""

    def is_optimizer(self, d: Any) -> bool:
        """An optimizer state whose every param group has the ``lr`` a repair sets."""

    def content_state(self, objs: dict[Path, Any], rels: dict[Path, str], target: Target,
                      state: RunState) -> tuple[list[Change], list[str]]:
        """Every scheduler state found by content in several files (a folder read by
        content), or the counter the reader named where none is saved."""

    def progress(self, file: str, obj: Any, key: Key, offset: float, target: Target,
                 lrs: list[float] | None) -> list[Change]:
        """The progress field a ``Counter.ref`` names at ``key`` (``offset`` its
        ``ref_offset``): a torch scheduler's ``last_epoch`` with its bookkeeping and
        ``_last_lr`` (``lrs``), a megatron-core ``num_steps``, else a bare counter."""

    def counter(self, file: str, obj: Any, key: Key, offset: float, target: Target,
                why: str) -> Change:
        """A counter through its ref: the field holds the progress minus ``offset``."""

    def lr_fields(self, file: str, obj: Any, keys: list[Key], target: Target
                  ) -> tuple[list[Change], list[float] | None]:
        """The param-group ``lr`` fields ``optimizer_lr_refs`` name: (edits, new LRs)."""

    def ref_state(self, file: str, obj: Any, path: Path, state: RunState, target: Target
                  ) -> tuple[list[Change], list[str]]:
        """One file's edits through the reader's refs into ``path`` (progress, LRs); by
        shape only where no ref names them there, with a note."""
