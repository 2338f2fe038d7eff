"""Atomic file writes: a temporary sibling, fsync, the mode a plain ``open()`` would
give, then ``os.replace`` over the target.

Every file lrdoctor writes goes through here, so a reader never sees half a file
(a crash or a full disk leaves the old file, or none, and no temp behind) and an
output is as readable as any file the user makes (``mkstemp`` alone gives 0600).
A directory written as a whole (``fix``'s output) is the repair writer's own
affair; its single files come here too.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


def plain_mode(path: str | os.PathLike) -> None:
    """Give ``path`` the mode ``open()`` would: 0666 less the process umask."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


@contextmanager
def replacing(path: str | os.PathLike, *, suffix: str | None = None,
              parents: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write (by name, for libraries that take
    one: ``savefig``, ``to_parquet``); on a clean exit it is synced, given the plain
    mode and renamed over ``path``; on any error it is removed and the error raised.

    ``suffix`` defaults to ``path``'s own, so writers that go by the name's ending
    write the right format. ``parents`` creates missing parent directories first.
    OSError is left to the caller, which knows which option named the file.
    """
    path = Path(path)
    parent = path.parent if str(path.parent) else Path(".")
    if parents:
        parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.",
                                suffix=path.suffix if suffix is None else suffix, dir=parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        plain_mode(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_bytes(path: str | os.PathLike, data: bytes, *, parents: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path``."""
    with replacing(path, parents=parents) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str, *, parents: bool = False,
               encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically; returns ``path``."""
    return write_bytes(path, text.encode(encoding), parents=parents)
