"""One verdict per file: is this pickle safe to hand to ``torch.load(weights_only=False)``?

``inspect`` asks it of every pickle of a checkpoint folder that no reader opened
(:func:`lrdoctor.read.scan.refusal.refuse_code`); ``fix`` asks it of every file of the
repaired copy, rewritten or copied, before publishing it. Both get the same answer
because both read with the same reader (:mod:`lrdoctor.read.bytes.safeload`, unknown
classes kept opaque, every limit) and the same list of code-execution globals
(:mod:`lrdoctor.read.bytes.unsafe_globals`): a file that reader refuses as hostile
(:class:`~lrdoctor.core.errors.UnsafePickle`) is a verdict; a file it cannot read at all
(corrupt, over a limit) is reported back, and each caller decides (``inspect`` reads on,
``fix`` will not vouch for a copy it could not check).
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import BinaryIO

from lrdoctor.core.errors import UnsafePickle, UnusableInput

__all__ = ["vet"]


def vet(path: Path) -> str | None:
    """Read ``path`` with the safe reader for its verdict.

    Raises :class:`~lrdoctor.core.errors.UnsafePickle` (a call of a code-execution
    global, a record built as a gadget) naming the file. Returns None when the file was
    read clean or holds no pickle, else one phrase saying why it could not be read (a
    limit's phrase names the limit and its variable). A file holds a pickle when a stock
    unpickler reading it from its first byte would look up a global before the stream
    stops being one (:func:`~lrdoctor.read.bytes.unsafe_globals.resolves_a_global`: any
    protocol, text ones too, whatever the file's name): JSON, YAML, safetensors and raw
    tensor bytes stop at their first bytes. A torch zip is read as torch reads it; any
    other zip member by member, the same way; a DCP folder's items through its
    ``.metadata``, none left unread. Costs what a metadata-only read costs: a tensor's
    bytes are never read, an argument of a pickle is skipped, not held.
    """
    from lrdoctor.read.bytes import dcp, safeload, storage

    path = storage.reader_path(path)  # a RemotePath too: fix and inspect read URLs
    if path.name == dcp.METADATA:
        if not dcp.is_dcp(path.parent):
            return _read(lambda: safeload.load(path, unknown_as_opaque=True))
        return _read(lambda: dcp.load(path.parent, unknown_as_opaque=True, every=True))
    try:
        with storage.open_binary(path) as f:
            head = f.read(4)
            if path.suffix == dcp.SUFFIX and dcp.is_dcp(path.parent):
                # items back to back, each read through the .metadata; what torch.load of
                # the file itself would unpickle is its first bytes
                return _plain(f, path) if not head.startswith(b"PK") else None
            if head.startswith(b"PK"):
                return _zip(path)
            if head[:1] == b"\x80":
                return _read(lambda: safeload.load(path, unknown_as_opaque=True))
            f.seek(0)
            is_tar, why = _tar(f, path)
            return why if is_tar else _plain(f, path)
    except OSError as exc:
        return exc.strerror or str(exc)
    except UnusableInput as exc:  # a limit of the walk itself
        if isinstance(exc, UnsafePickle):
            raise
        return exc.message


def _plain(f: BinaryIO, path: Path) -> str | None:
    """A file that is not a zip nor a binary pickle: read when it is a pickle after all."""
    from lrdoctor.read.bytes import safeload, unsafe_globals

    f.seek(0)
    if not unsafe_globals.resolves_a_global(f, str(path)):
        return None
    return _read(lambda: safeload.load(path, unknown_as_opaque=True))


def _tar(f: BinaryIO, path: Path) -> tuple[bool, str | None]:
    """An uncompressed tar (what ``torch.load`` tries before a pickle: the pre-1.0 format
    unpickles its members) member by member, as a zip's: (is a tar, why it failed)."""
    import tarfile

    from lrdoctor.read.bytes import limits, safeload, unsafe_globals

    try:
        tar = tarfile.open(fileobj=f, mode="r:")
    except (tarfile.TarError, OSError, ValueError, EOFError):
        f.seek(0)
        return False, None
    try:
        for count, info in enumerate(tar, 1):
            if count > limits.get("zip_members"):
                return True, limits.over("zip_members", str(path), "the tar archive lists over "
                                         f"{count - 1:,} members").message
            member = tar.extractfile(info) if info.isfile() else None
            if member is None:
                continue
            where = f"{path}[{info.name}]"
            if not unsafe_globals.resolves_a_global(member, where):
                continue
            limits.check_size("pickle_bytes", info.size, where, "the pickle")
            member.seek(0)
            data = member.read(info.size)
            why = _read(partial(safeload.load_bytes, data, where, unknown_as_opaque=True))
            if why is not None:
                return True, f"{info.name}: {why}"
    except (tarfile.TarError, EOFError) as exc:
        return True, f"not a readable tar archive ({exc})"
    finally:
        tar.close()
    return True, None


def _zip(path: Path) -> str | None:
    """A torch zip as torch reads it (its ``data.pkl``); another zip (a TorchScript archive,
    a zip of logs) member by member: a member that is a pickle, in any protocol, is read
    by the safe reader. Deflated members are inflated within ``deflated_bytes`` all
    together, a pickle member is held within ``pickle_bytes``."""
    from lrdoctor.read.bytes import safeload, storage

    try:
        with storage.open_binary(path) as f:
            safeload.zip_members_check(f, str(path))
            return _members(f, path)
    except (zipfile.BadZipFile, OSError, ValueError, EOFError, NotImplementedError):
        return "not a readable zip archive"
    except UnusableInput as exc:
        if isinstance(exc, UnsafePickle):
            raise
        return exc.message


def _members(f: BinaryIO, path: Path) -> str | None:
    from lrdoctor.read.bytes import limits, safeload, unsafe_globals

    with zipfile.ZipFile(f) as zf:
        infos = zf.infolist()
        if any(i.filename.endswith("/data.pkl") and i.filename.count("/") == 1
               for i in infos):
            return _read(lambda: safeload.load(path, unknown_as_opaque=True))
        budget = safeload.Inflation(str(path))
        for info in infos:
            if info.is_dir():
                continue
            where = f"{path}[{info.filename}]"
            with zf.open(info) as m:
                if not unsafe_globals.resolves_a_global(budget.wrap(m, info), where):
                    continue
            limits.check_size("pickle_bytes", info.file_size, where, "the pickle")
            with zf.open(info) as m:
                data = budget.wrap(m, info).read(info.file_size + 1)
            limits.check_size("pickle_bytes", len(data), where, "the pickle")
            why = _read(partial(safeload.load_bytes, data, where, unknown_as_opaque=True))
            if why is not None:
                return f"{info.filename}: {why}"
    return None


def _read(load: Callable[[], object]) -> str | None:
    from lrdoctor.core.errors import UnsafePickle

    try:
        load()
    except UnsafePickle:
        raise
    except UnusableInput as exc:
        return exc.message
    return None
