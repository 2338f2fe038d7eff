"""What the readers loaded while reading one checkpoint, for the evidence collector.

A reader unpickles or parses each file once; the evidence collector walks the same
objects instead of reading the files again. The loaders call :func:`note`; it records
only inside :func:`recording` (``read.layouts.read``), so a load anywhere else costs nothing.
A context variable keeps threads that read a run's checkpoints side by side apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

_LOADED: ContextVar[list[tuple[str, str, Any]] | None] = ContextVar("lrdoctor_loaded",
                                                                   default=None)
MAX_RECORDED = 1024


def note(file: Any, obj: Any, item: str = "") -> None:
    """Record that ``file`` (its ``item``, for a container) was loaded as ``obj``."""
    rec = _LOADED.get()
    if rec is not None and obj is not None and len(rec) < MAX_RECORDED:
        rec.append((str(file), item, obj))


@contextmanager
def recording() -> Iterator[list[tuple[str, str, Any]]]:
    """Record every load in this context; yields the list ``(file, item, object)``."""
    rec: list[tuple[str, str, Any]] = []
    token = _LOADED.set(rec)
    try:
        yield rec
    finally:
        _LOADED.reset(token)
