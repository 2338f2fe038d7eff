"""The typed ground under :mod:`lrdoctor.read.bytes.limited_pickle`: what it reads, and
the state of the standard library's pure-Python unpickler it builds on.

typeshed declares only ``pickle._Unpickler``'s public API; the limited machine replaces
its opcodes and so works on its internals (the stack, the marks, the memo), declared
here once. No behaviour: :class:`TypedUnpickler` adds nothing at run time.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any, Protocol


class BinaryFile(Protocol):
    """What a BoundedReader reads through: a binary file (local, BytesIO or remote)."""

    def read(self, n: int = -1, /) -> bytes: ...

    def readline(self, limit: int = -1, /) -> bytes: ...


class PickleSource(Protocol):
    """What the unpickler reads: ``read(n)`` and ``readline()`` (a file, or a BoundedReader)."""

    def read(self, n: int, /) -> bytes: ...

    def readline(self) -> bytes: ...


class TypedUnpickler(pickle._Unpickler):
    """``pickle._Unpickler`` with its internal state declared: the objects built so far
    (``stack``), the enclosing stacks of open marks (``metastack``), the memo."""

    _file_read: Callable[[int], bytes]
    _file_readline: Callable[[], bytes]
    read: Callable[[int], bytes]
    readline: Callable[[], bytes]
    stack: list[Any]
    metastack: list[list[Any]]
    append: Callable[[Any], None]
    memo: dict[int, Any]
    proto: int
    pop_mark: Callable[[], list[Any]]
