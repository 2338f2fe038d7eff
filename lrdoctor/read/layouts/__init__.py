"""Framework readers: one module per checkpoint layout, picked by ``detect``.

Each module exposes::

    NAME: str                              # "megatron", "roll", "hf", "torch", ...
    def detect(path: Path) -> bool         # cheap: file names, no unpickling
    def find_checkpoints(path: Path) -> list[Path]  # a run dir -> its checkpoints, oldest first
    def read(path: Path) -> RunState       # one checkpoint -> normalized model

The modules here only read; ``lrdoctor fix`` edits through
``lrdoctor.repair.<module>.plan`` (same module names). Helpers shared by the
readers live in ``_common`` (safe loading, optimizer summaries, rank checks)
and ``_torchstate`` (torch LRScheduler/optimizer state_dicts).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from lrdoctor.core.errors import UnusableInput

if TYPE_CHECKING:
    from lrdoctor.core.state import RunState

# Order matters: the more specific layouts first.
FORMAT_MODULES = ["megatron", "roll", "deepspeed", "nemo_rl", "torchtitan", "hf", "lightning",
                  "accelerate", "torchsave", "dcp"]


# Names a report shows (a module's NAME) that differ from the module's: --format takes both.
ALIASES = {"torch": "torchsave"}


def forceable() -> str:
    """The names ``--format`` takes, for every message and help text that lists them
    (the one list: :data:`FORMAT_MODULES`)."""
    return ", ".join(FORMAT_MODULES)


def by_content() -> list[str]:
    """Frameworks recognised inside a content-read checkpoint (``--format torchsave``),
    not forceable on their own: they refine what discovery found."""
    return [n for n in REFINER_MODULES if n not in FORMAT_MODULES]


def get(name: str) -> ModuleType:
    name = ALIASES.get(name, name)
    if name not in FORMAT_MODULES:
        hint = ""
        if name in by_content():
            hint = (f"; {name} checkpoints are read by content and recognised by their "
                    "layout: use --format torchsave")
        raise UnusableInput(f"unknown format {name!r} (known: {forceable()}){hint}")
    return importlib.import_module(f"lrdoctor.read.layouts.{name}")


def available() -> list[ModuleType]:
    mods = []
    for name in FORMAT_MODULES:
        try:
            mods.append(importlib.import_module(f"lrdoctor.read.layouts.{name}"))
        except ModuleNotFoundError as exc:  # a format not written yet
            if exc.name != f"lrdoctor.read.layouts.{name}":
                raise
    return mods


# What a reader's arithmetic raises when a saved value has a type or size it did not expect.
_VALUE_ERRORS = (TypeError, ValueError, ArithmeticError, KeyError, IndexError, AttributeError,
                 RecursionError, MemoryError)


def read(mod: ModuleType, ckpt: Path) -> RunState:
    """``mod.read(ckpt)`` through the validation boundary: every value of the state is checked
    (:meth:`RunState.validate`), and a value no reader check caught is still one line naming
    the checkpoint, never a traceback."""
    from lrdoctor.read.evidence import seen

    try:
        with seen.recording() as loaded:
            st = mod.read(ckpt)
        if st.facts.files_used is None:  # not read by content: check the side files too
            from lrdoctor.read.scan.discover import refuse_code

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


def detect(path: Path, forced: str | None = None) -> ModuleType:
    """The format module for ``path`` (or the forced one)."""
    if not path.exists():
        raise UnusableInput("no such file or directory", str(path))
    if forced:
        return get(forced)
    for mod in available():
        if mod.detect(path):
            return mod
    # Never silent: say what was scanned and what the telling files were found to be.
    from lrdoctor.read.scan.discover import nothing_found

    exc = nothing_found("not a checkpoint lrdoctor recognises", path)
    raise UnusableInput(f"{str(exc).split(': ', 1)[1]} (use --format to force one of: "
                        f"{forceable()})", str(path), detail=exc.detail)


# Framework modules that refine what content-first discovery found (lrdoctor.read.scan.discover):
# each has NAME, claims(scan) -> bool (layout hints: names, keys) and refine(scan, state).
REFINER_MODULES = ["verl", "skyrl", "composer", "torchtune", "roll"]


def refiner_for(scan):
    """The framework module whose layout this discovered checkpoint matches, or None."""
    for name in REFINER_MODULES:
        try:
            mod = importlib.import_module(f"lrdoctor.read.layouts.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"lrdoctor.read.layouts.{name}":
                raise
            continue
        if mod.claims(scan):
            return mod
    return None
