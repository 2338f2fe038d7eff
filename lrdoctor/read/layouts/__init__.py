"""Checkpoint layouts: one module per framework, one typed protocol, one registry.

Every layout implements :class:`Layout`: ``claims(scan) -> score``, ``find_checkpoints``
and ``read -> RunState``. A claim judges one typed view of the evidence,
:class:`~lrdoctor.read.scan.view.ScanView`, and every claim goes through one function,
:func:`claim`:

- entries are asked in order of their ``ceiling`` (the most their claim can return); the
  walk stops when no remaining ceiling can beat the best score, so a layout that cannot
  win is never imported;
- an entry's cheap :class:`Hint` is matched before its import (names against the listing,
  key paths against the content), so only hinted layouts are imported;
- the highest score wins: never the order of a list, never one reader deferring to
  another by name.

The view has two depths, and an entry says which it is claimed on:

- **an input** (``on_names``): the bounded listing. The layouts recognised by their files
  (Megatron's ``iter_N``, HF's ``trainer_state.json``, any pickle for the generic read)
  claim here; the winner's reader reads the input, and ``--format`` can force it.
- **one checkpoint read by content** (``on_content``): the generic content read
  (:mod:`~lrdoctor.read.layouts.torchsave`) classifies each checkpoint it reads and asks
  :func:`claim` which framework's layout it is (verl, SkyRL, Composer, torchtune, ROLL
  without ``mca_config.json``). The winner's ``read`` takes that view: the generic
  content read plus its own normalisation (units, where the budget lives). A checkpoint
  no such layout claims stays framework-blind.

Why not classify the content for an input's claim: the content read classifies every
checkpoint anyway (the claim then costs no second read), each checkpoint of a run is
recognised on its own, and the reader of such files stays the generic one that
``--format torchsave`` and the repair name.

A score is how much of the layout the evidence pins down: a trainer's own progress record
outranks the framework that saves through an engine, which outranks the engine's own
files (:data:`TRAINER` ... :data:`ENGINE`); a framework recognised by what its files hold
(:data:`RECOGNISED`) outranks the framework-blind read of the same files (:data:`GENERIC`).

Adding a layout is one module here plus one entry below (see docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from lrdoctor.core.errors import NotFound, NotRecognised, UnusableInput
from lrdoctor.read.scan.listing import Hint
from lrdoctor.read.scan.view import ScanView

if TYPE_CHECKING:
    from lrdoctor.core.repair import FormatPlan, RepairTools, Target
    from lrdoctor.core.state import RunState

# Claim scores: how specific the evidence is (higher wins).
TRAINER = 100    # a trainer's own progress record (HF trainer_state.json)
FRAMEWORK = 80   # a framework saving through an engine or container (ROLL, NeMo-RL, torchtitan)
ENGINE = 60      # a training engine's own files (Megatron, DeepSpeed, Lightning, Accelerate)
RECOGNISED = 40  # a framework recognised by what its content-read files hold (verl, SkyRL, ...)
GENERIC = 20     # any torch.save / pickle, read by content
CONTAINER = 10   # a bare torch.distributed.checkpoint folder


class Layout(Protocol):
    """A framework's checkpoint layout: how well it claims an input, which paths are its
    checkpoints, and how to read one.

    ``claims`` returns 0 for evidence (an input, or a checkpoint the content read
    classified) that is not this layout's, else a score up to the registry entry's
    ``ceiling``. ``read`` returns the framework-blind state of one
    checkpoint that ``find_checkpoints`` listed (a layout read by content also takes the
    :class:`ScanView` of one checkpoint the generic content read classified).
    """

    NAME: str

    def claims(self, scan: ScanView) -> int: ...

    # Each layout's checkpoint handle is its own (a folder, a file, a group of rank files,
    # a classified view): the registry only passes back what find_checkpoints returned.
    def find_checkpoints(self, path: Path) -> Sequence[Any]: ...

    def read(self, ckpt: Any) -> RunState: ...


@runtime_checkable
class Repairs(Protocol):
    r"""The repair side of a layout: the field edits ``lrdoctor fix`` writes, planned in the
    same module that reads the checkpoint, through the
    :class:`~lrdoctor.core.fieldref.FieldRef`\ s its ``read`` filled.

    ``repair`` names the files and key paths (:class:`~lrdoctor.core.repair.Change`), the
    refusals and the notes that only this framework knows; how a scheduler state moves is
    framework-blind and comes in as ``tools`` (:class:`~lrdoctor.core.repair.RepairTools`,
    implemented in ``lrdoctor.repair``), so reading never imports the writer. An entry
    registered with ``repairs=True`` is its own repair side: the engine reaches it through
    :func:`repairs`, never by importing a module named after the layout."""

    def repair(self, path: Path, state: RunState, target: Target,
               tools: RepairTools) -> FormatPlan: ...


@dataclass(frozen=True)
class Entry:
    """One registered layout: its cheap ``hint``, its ``ceiling`` and the static import.

    ``on_names``: claimed on an input (its reader reads it; ``--format`` takes it).
    ``on_content``: claimed on a checkpoint the generic content read classified (its
    ``read`` takes that view and normalises it)."""

    name: str
    hint: Hint
    ceiling: int
    load: Callable[[], Layout]
    on_names: bool = True
    on_content: bool = False
    repairable: bool = False  # the module also holds its repair side (Repairs)

    def layout(self) -> Layout:
        return self.load()

    def judges(self, scan: ScanView) -> bool:
        """Whether this entry is asked about ``scan`` (an input, or a classified checkpoint)."""
        return self.on_content if scan.content is not None else self.on_names

    def repairs(self) -> Repairs | None:
        """The layout's repair side, or None where ``fix`` cannot write this layout. A
        layout registered as repairable without a ``repair`` is a registry error, said
        loudly, never skipped."""
        if not self.repairable:
            return None
        mod = self.load()
        if not isinstance(mod, Repairs):
            raise TypeError(f"layout {self.name} is registered with repairs=True but its "
                            "module has no repair()")
        return mod


LAYOUTS: list[Entry] = []


def register(name: str, *, ceiling: int, names: Sequence[str] = (),
             patterns: Sequence[str] = (), keys: Sequence[str] = (), always: bool = False,
             on_names: bool = True, on_content: bool = False, repairs: bool = False
             ) -> Callable[[Callable[[], Layout]], Callable[[], Layout]]:
    """Register the decorated loader (a function doing one static import) as layout ``name``;
    ``repairs``: the module also holds its repair (:class:`Repairs`, ``lrdoctor fix``)."""

    def add(load: Callable[[], Layout]) -> Callable[[], Layout]:
        LAYOUTS.append(Entry(name, Hint(frozenset(names), tuple(patterns), tuple(keys), always),
                             ceiling, load, on_names, on_content, repairs))
        return load

    return add


# ---------------------------------------------------------------- the registry

@register("megatron", ceiling=ENGINE + 5, names=("model_optim_rng.pt", "common.pt"),
          patterns=(r"^iter_\d+$",), repairs=True)
def _megatron() -> Layout:
    from lrdoctor.read.layouts import megatron
    return megatron


@register("roll", ceiling=FRAMEWORK + 5, names=("scheduler.pt",), on_content=True,
          repairs=True)
def _roll() -> Layout:
    from lrdoctor.read.layouts import roll
    return roll


@register("deepspeed", ceiling=ENGINE + 4, patterns=(r"model_states\.pt$",), repairs=True)
def _deepspeed() -> Layout:
    from lrdoctor.read.layouts import deepspeed
    return deepspeed


@register("nemo_rl", ceiling=FRAMEWORK + 3, names=("training_info.json",))
def _nemo_rl() -> Layout:
    from lrdoctor.read.layouts import nemo_rl
    return nemo_rl


@register("torchtitan", ceiling=FRAMEWORK + 2, patterns=(r"^step-\d+$",))
def _torchtitan() -> Layout:
    from lrdoctor.read.layouts import torchtitan
    return torchtitan


@register("hf", ceiling=TRAINER, names=("trainer_state.json",), repairs=True)
def _hf() -> Layout:
    from lrdoctor.read.layouts import hf
    return hf


@register("lightning", ceiling=ENGINE + 2, patterns=(r"\.ckpt$",), repairs=True)
def _lightning() -> Layout:
    from lrdoctor.read.layouts import lightning
    return lightning


@register("accelerate", ceiling=ENGINE + 1,
          patterns=(r"^(?:scheduler|optimizer)(?:_\d+)?\.bin$", r"^random_states_\d+\.pkl$",
                    r"^optimizer_\d+$"), repairs=True)
def _accelerate() -> Layout:
    from lrdoctor.read.layouts import accelerate
    return accelerate


@register("torchsave", ceiling=GENERIC, always=True, repairs=True)
def _torchsave() -> Layout:
    from lrdoctor.read.layouts import torchsave
    return torchsave


@register("dcp", ceiling=CONTAINER, names=(".metadata",))
def _dcp() -> Layout:
    from lrdoctor.read.layouts import dcp
    return dcp


@register("skyrl", ceiling=RECOGNISED + 1, names=("trainer_state.pt",), on_names=False,
          on_content=True)
def _skyrl() -> Layout:
    from lrdoctor.read.layouts import skyrl
    return skyrl


@register("verl", ceiling=RECOGNISED, patterns=(r"^global_step_\d+$",), on_names=False,
          on_content=True)
def _verl() -> Layout:
    from lrdoctor.read.layouts import verl
    return verl


@register("composer", ceiling=RECOGNISED, keys=(r"^state\.timestamp\.",), on_names=False,
          on_content=True)
def _composer() -> Layout:
    from lrdoctor.read.layouts import composer
    return composer


@register("torchtune", ceiling=RECOGNISED, keys=(r"(?:^|\.)epochs_run$",), on_names=False,
          on_content=True)
def _torchtune() -> Layout:
    from lrdoctor.read.layouts import torchtune
    return torchtune


# ---------------------------------------------------------------- choosing

# Names a report shows (a module's NAME) that differ from the registry's: --format takes both.
ALIASES = {"torch": "torchsave"}
FORMAT_MODULES = [e.name for e in LAYOUTS if e.on_names]  # what --format takes


def forceable() -> str:
    """The names ``--format`` takes, for every message and help text that lists them."""
    return ", ".join(FORMAT_MODULES)


def by_content() -> list[str]:
    """Frameworks recognised by what their content-read files hold, not forceable on their
    own: ``--format torchsave`` reads them and still recognises them."""
    return [e.name for e in LAYOUTS if e.on_content and not e.on_names]


def _entry(name: str) -> Entry | None:
    return next((e for e in LAYOUTS if e.name == name), None)


def repairs(name: str) -> Repairs | None:
    """The repair side of the layout registered (or aliased) as ``name``; None where it has
    none (``fix`` then refuses in one line)."""
    entry = _entry(ALIASES.get(name, name))
    return entry.repairs() if entry is not None else None


def get(name: str) -> Layout:
    """The layout ``--format NAME`` forces."""
    name = ALIASES.get(name, name)
    entry = _entry(name)
    if entry is None or not entry.on_names:
        hint = ""
        if name in by_content():
            hint = (f"; {name} checkpoints are read by content and recognised by their "
                    "layout: use --format torchsave")
        raise UnusableInput(f"unknown format {name!r} (known: {forceable()}){hint}")
    return entry.layout()


def _hinted(hint: Hint, scan: ScanView) -> bool:
    """Whether ``hint`` matches the view: its names (the listing), or its key paths (the
    content, where there is any)."""
    return hint.matches(scan.names, scan.keys, complete=scan.complete)


def claim(scan: ScanView) -> Entry | None:
    """The entry whose layout claims ``scan`` best, or None: of the entries that judge
    such a view, asked in order of ceiling; an entry whose ceiling cannot beat the best so
    far is never hinted, imported or asked."""
    best, score = None, 0
    for e in sorted((e for e in LAYOUTS if e.judges(scan)), key=lambda e: -e.ceiling):
        if e.ceiling <= score:
            break
        if not _hinted(e.hint, scan):
            continue
        s = e.layout().claims(scan)
        if s > e.ceiling:
            raise AssertionError(f"layout {e.name} claimed {s}, above its ceiling {e.ceiling}")
        if s > score:
            best, score = e, s
    return best


def recognised(scan: ScanView) -> Layout | None:
    """The layout of the framework that saved one checkpoint read by content (a view that
    holds its classification), or None: it stays framework-blind."""
    best = claim(scan)
    return best.layout() if best else None


def _claim(path: Path) -> Entry | None:
    return claim(ScanView(path))


def claimant(path: Path) -> Layout | None:
    """The layout that best claims ``path``, or None (only hinted layouts are imported)."""
    best = _claim(path)
    return best.layout() if best else None


def claimed_as(path: Path) -> str | None:
    """The registry name of the layout that reads ``path`` (each module's ``detect`` asks
    whether that is itself)."""
    best = _claim(path)
    return best.name if best else None


def detect(path: Path, forced: str | None = None) -> Layout:
    """The layout for ``path`` (or the forced one)."""
    if not path.exists():
        raise NotFound("no such file or directory", str(path))
    if forced:
        return get(forced)
    found = claimant(path)
    if found is not None:
        return found
    # Never silent: say what was scanned and what the telling files were found to be.
    from lrdoctor.read.scan.refusal import nothing_found

    exc = nothing_found("not a checkpoint lrdoctor recognises", path)
    raise NotRecognised(f"{exc.message} (use --format to force one of: "
                        f"{forceable()})", str(path), detail=exc.detail)


# What a reader's arithmetic raises when a saved value has a type or size it did not expect.
_VALUE_ERRORS = (TypeError, ValueError, ArithmeticError, KeyError, IndexError, AttributeError,
                 RecursionError, MemoryError)


def read(mod: Layout, ckpt: Any) -> RunState:
    """``mod.read(ckpt)`` through the validation boundary: every value of the state is checked
    (:meth:`RunState.validate`), and a value no reader check caught is still one line naming
    the checkpoint, never a traceback."""
    from lrdoctor.read.bytes import seen

    try:
        with seen.recording() as loaded:
            st = mod.read(ckpt)
        if st.facts.files_used is None:  # not read by content: check the side files too
            from lrdoctor.read.scan.refusal import refuse_code

            st.notes.extend(refuse_code(ckpt, st.files))
    except UnusableInput:
        raise
    except _VALUE_ERRORS as exc:
        detail = (str(exc).splitlines() or [""])[0][:120]
        raise UnusableInput(f"a saved value of unexpected type or size "
                            f"({type(exc).__name__}: {detail})", str(ckpt)) from None
    from lrdoctor.read.bytes.safeload import opaque_notes
    from lrdoctor.read.layouts import _fixmanifest

    for file, item, obj in loaded:  # never silent: what was kept opaque, what still read
        notes = opaque_notes(obj, f"{file}[{item}]" if item else file)
        # the discovery's note on the same file and kind (said at load time, before any
        # field was read) gives way to this one
        kinds = {n[:n.index(": ") + 18] for n in notes}
        st.notes[:] = [n for n in st.notes if ": " not in n or n[:n.index(": ") + 18] not in kinds]
        st.notes.extend(n for n in notes if n not in st.notes)
    _fixmanifest.apply(st, ckpt)  # a repaired copy's recorded nominal progress
    st.validate()
    from lrdoctor.read.evidence.attach import attach

    attach(st, ckpt, loaded)  # every counter, horizon and LR as evidence (lrdoctor.evidence)
    return st

