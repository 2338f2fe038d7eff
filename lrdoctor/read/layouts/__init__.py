"""Checkpoint layouts: one module per framework, one typed protocol, one registry.

Reading an input happens in two stages, both decided by the best claim (never by the
order of a list, never by one reader deferring to another by name):

1. **Path stage** (:class:`Layout`): which layout's reader opens this path. The bounded
   listing of the input (:class:`~lrdoctor.read.scan.listing.Tree`, names only) is matched
   against each registered :class:`Hint`; only the layouts whose hint matches are imported,
   and each of those says how well it ``claims`` the tree. The highest score reads it.
2. **Content stage** (:class:`ContentLayout`): a checkpoint read by content (``torch``:
   :mod:`~lrdoctor.read.layouts.torchsave`) is classified first
   (:class:`~lrdoctor.read.scan.shapes.Scan`); the frameworks whose hint matches the
   scan's file names and keys are imported and ``claims_content``; the best one ``refine``\\ s
   the framework-blind state (its units, where its budget lives).

A score is how much of the layout the evidence pins down: a trainer's own progress
record outranks the engine it saves through, which outranks a generic container
(:data:`SPECIFIC` ... :data:`GENERIC`). Each entry states its ``ceiling`` (the most its
claim can return) so that a layout that cannot win is never imported.

Adding a layout is one module here plus one entry below (see docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lrdoctor.core.errors import UnusableInput
from lrdoctor.read.scan.listing import Hint, Tree, list_tree

if TYPE_CHECKING:
    from lrdoctor.core.state import RunState
    from lrdoctor.read.scan.shapes import Scan

# Claim scores: how specific the evidence is (higher wins).
TRAINER = 100   # a trainer's own progress record (HF trainer_state.json)
FRAMEWORK = 80  # a framework saving through an engine or container (ROLL, NeMo-RL, torchtitan)
ENGINE = 60     # a training engine's own files (Megatron, DeepSpeed, Lightning, Accelerate)
GENERIC = 20    # any torch.save / pickle, read by content
CONTAINER = 10  # a bare torch.distributed.checkpoint folder


class Layout(Protocol):
    """A framework's checkpoint layout: which paths are its checkpoints, and how to read one.

    ``claims`` returns 0 for a tree that is not this layout's, else a score up to the
    registry entry's ``ceiling``. ``read`` returns the framework-blind state of one
    checkpoint that ``find_checkpoints`` listed.
    """

    NAME: str

    def claims(self, tree: Tree) -> int: ...

    def find_checkpoints(self, path: Path) -> Sequence[Any]: ...

    def read(self, ckpt: Any) -> RunState: ...


class ContentLayout(Protocol):
    """A framework recognised inside a checkpoint read by content (no reader of its own)."""

    NAME: str

    def claims_content(self, scan: Scan) -> int: ...

    def refine(self, scan: Scan, state: RunState) -> None: ...


class Repairs(Protocol):
    r"""The repair side of a layout: the field edits ``lrdoctor fix`` writes, through the
    :class:`~lrdoctor.core.fieldref.FieldRef`\ s the layout's ``read`` filled. An entry's
    ``repair`` loader returns one (issue 20 moves the repair modules behind it; until then
    ``lrdoctor.repair.engine`` finds them by the layout's name)."""

    def plan(self, path: Path, state: RunState, target: Any) -> Any: ...


@dataclass(frozen=True)
class Entry:
    """One registered layout: its cheap ``hint``, its ``ceiling`` and the static import."""

    name: str
    hint: Hint
    ceiling: int
    load: Callable[[], Any]
    path_stage: bool = True     # a path layout (``--format`` takes it)
    content_stage: bool = False  # recognised inside a content read
    repair: Callable[[], Repairs] | None = None  # the static import of its repair side

    def layout(self) -> Layout:
        mod: Layout = self.load()
        return mod

    def content(self) -> ContentLayout:
        mod: ContentLayout = self.load()
        return mod


LAYOUTS: list[Entry] = []


def register(name: str, *, ceiling: int, names: Sequence[str] = (),
             patterns: Sequence[str] = (), keys: Sequence[str] = (), always: bool = False,
             path_stage: bool = True, content_stage: bool = False
             ) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register the decorated loader (a function doing one static import) as layout ``name``."""

    def add(load: Callable[[], Any]) -> Callable[[], Any]:
        LAYOUTS.append(Entry(name, Hint(frozenset(names), tuple(patterns), tuple(keys), always),
                             ceiling, load, path_stage, content_stage))
        return load

    return add


# ---------------------------------------------------------------- the registry

@register("megatron", ceiling=ENGINE + 5, names=("model_optim_rng.pt", "common.pt"),
          patterns=(r"^iter_\d+$",))
def _megatron() -> Any:
    from lrdoctor.read.layouts import megatron
    return megatron


@register("roll", ceiling=FRAMEWORK + 5, names=("scheduler.pt",), content_stage=True)
def _roll() -> Any:
    from lrdoctor.read.layouts import roll
    return roll


@register("deepspeed", ceiling=ENGINE + 4, patterns=(r"model_states\.pt$",))
def _deepspeed() -> Any:
    from lrdoctor.read.layouts import deepspeed
    return deepspeed


@register("nemo_rl", ceiling=FRAMEWORK + 3, names=("training_info.json",))
def _nemo_rl() -> Any:
    from lrdoctor.read.layouts import nemo_rl
    return nemo_rl


@register("torchtitan", ceiling=FRAMEWORK + 2, patterns=(r"^step-\d+$",))
def _torchtitan() -> Any:
    from lrdoctor.read.layouts import torchtitan
    return torchtitan


@register("hf", ceiling=TRAINER, names=("trainer_state.json",))
def _hf() -> Any:
    from lrdoctor.read.layouts import hf
    return hf


@register("lightning", ceiling=ENGINE + 2, patterns=(r"\.ckpt$",))
def _lightning() -> Any:
    from lrdoctor.read.layouts import lightning
    return lightning


@register("accelerate", ceiling=ENGINE + 1,
          patterns=(r"^(?:scheduler|optimizer)(?:_\d+)?\.bin$", r"^random_states_\d+\.pkl$",
                    r"^optimizer_\d+$"))
def _accelerate() -> Any:
    from lrdoctor.read.layouts import accelerate
    return accelerate


@register("torchsave", ceiling=GENERIC, always=True)
def _torchsave() -> Any:
    from lrdoctor.read.layouts import torchsave
    return torchsave


@register("dcp", ceiling=CONTAINER, names=(".metadata",))
def _dcp() -> Any:
    from lrdoctor.read.layouts import dcp
    return dcp


@register("skyrl", ceiling=FRAMEWORK + 1, names=("trainer_state.pt",), path_stage=False,
          content_stage=True)
def _skyrl() -> Any:
    from lrdoctor.read.layouts import skyrl
    return skyrl


@register("verl", ceiling=FRAMEWORK, patterns=(r"^global_step_\d+$",), path_stage=False,
          content_stage=True)
def _verl() -> Any:
    from lrdoctor.read.layouts import verl
    return verl


@register("composer", ceiling=FRAMEWORK, keys=(r"^state\.timestamp\.",), path_stage=False,
          content_stage=True)
def _composer() -> Any:
    from lrdoctor.read.layouts import composer
    return composer


@register("torchtune", ceiling=FRAMEWORK, keys=(r"(?:^|\.)epochs_run$",), path_stage=False,
          content_stage=True)
def _torchtune() -> Any:
    from lrdoctor.read.layouts import torchtune
    return torchtune


# ---------------------------------------------------------------- choosing

# Names a report shows (a module's NAME) that differ from the registry's: --format takes both.
ALIASES = {"torch": "torchsave"}
FORMAT_MODULES = [e.name for e in LAYOUTS if e.path_stage]     # what --format takes
REFINER_MODULES = [e.name for e in LAYOUTS if e.content_stage]  # recognised by content


def forceable() -> str:
    """The names ``--format`` takes, for every message and help text that lists them."""
    return ", ".join(FORMAT_MODULES)


def by_content() -> list[str]:
    """Frameworks recognised inside a content-read checkpoint (``--format torchsave``),
    not forceable on their own: they refine what discovery found."""
    return [n for n in REFINER_MODULES if n not in FORMAT_MODULES]


def _entry(name: str) -> Entry | None:
    return next((e for e in LAYOUTS if e.name == name), None)


def get(name: str) -> Layout:
    """The layout ``--format NAME`` forces."""
    name = ALIASES.get(name, name)
    entry = _entry(name)
    if entry is None or not entry.path_stage:
        hint = ""
        if name in by_content():
            hint = (f"; {name} checkpoints are read by content and recognised by their "
                    "layout: use --format torchsave")
        raise UnusableInput(f"unknown format {name!r} (known: {forceable()}){hint}")
    return entry.layout()


def _best(entries: list[Entry], claim: Callable[[Entry], int]) -> tuple[Entry | None, int]:
    """The entry with the highest claim; an entry whose ceiling cannot beat the best so far
    is never imported."""
    best, score = None, 0
    for e in sorted(entries, key=lambda e: -e.ceiling):
        if e.ceiling <= score:
            break
        s = claim(e)
        if s > e.ceiling:
            raise AssertionError(f"layout {e.name} claimed {s}, above its ceiling {e.ceiling}")
        if s > score:
            best, score = e, s
    return best, score


def _claim(path: Path) -> Entry | None:
    tree = list_tree(path)
    hinted = [e for e in LAYOUTS
              if e.path_stage and e.hint.matches(tree.names, complete=tree.complete)]
    best, _ = _best(hinted, lambda e: e.layout().claims(tree))
    return best


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
        raise UnusableInput("no such file or directory", str(path))
    if forced:
        return get(forced)
    found = claimant(path)
    if found is not None:
        return found
    # Never silent: say what was scanned and what the telling files were found to be.
    from lrdoctor.read.scan.refusal import nothing_found

    exc = nothing_found("not a checkpoint lrdoctor recognises", path)
    raise UnusableInput(f"{exc.message} (use --format to force one of: "
                        f"{forceable()})", str(path), detail=exc.detail)


def content_claimant(scan: Scan) -> ContentLayout | None:
    """The framework whose layout this content-read checkpoint matches best, or None."""
    root = scan.checkpoint.path
    names = {part for f in scan.files_read for part in Path(f).parts}
    names.add(root.name)
    keys = {f.key for f in scan.found}
    hinted = [e for e in LAYOUTS
              if e.content_stage and e.hint.matches(frozenset(names), frozenset(keys))]
    best, _ = _best(hinted, lambda e: e.content().claims_content(scan))
    return best.content() if best else None


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

            refuse_code(ckpt, st.files)
    except UnusableInput:
        raise
    except _VALUE_ERRORS as exc:
        detail = (str(exc).splitlines() or [""])[0][:120]
        raise UnusableInput(f"a saved value of unexpected type or size "
                            f"({type(exc).__name__}: {detail})", str(ckpt)) from None
    from lrdoctor.read.layouts import _fixmanifest

    _fixmanifest.apply(st, ckpt)  # a repaired copy's recorded nominal progress
    st.validate()
    from lrdoctor.read.evidence.attach import attach

    attach(st, ckpt, loaded)  # every counter, horizon and LR as evidence (lrdoctor.evidence)
    return st

