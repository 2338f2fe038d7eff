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
from pathlib import Path

from lrdoctor.core.errors import UnusableInput

__all__ = ["vet"]


def vet(path: Path) -> str | None:
    """Read ``path`` with the safe reader for its verdict.

    Raises :class:`~lrdoctor.core.errors.UnsafePickle` (a call of a code-execution
    global, a record built as a gadget) naming the file. Returns None when the file was
    read clean or holds no pickle (JSON, safetensors, DCP tensor data: a DCP folder's
    pickles are vetted through its ``.metadata``), else one phrase saying why it could
    not be read. Costs what a metadata-only read costs: a tensor's bytes are never read.
    """
    from lrdoctor.read.bytes import dcp, safeload, storage, unsafe_globals

    path = storage.reader_path(path)  # a RemotePath too: fix and inspect read URLs
    if path.suffix == dcp.SUFFIX:  # DCP items back to back: read through the .metadata
        return None
    if path.name == dcp.METADATA:
        if not dcp.is_dcp(path.parent):
            return _read(lambda: safeload.load(path, unknown_as_opaque=True))
        return _read(lambda: dcp.load(path.parent, unknown_as_opaque=True))
    try:
        with storage.open_binary(path) as f:
            head = f.read(4)
    except OSError as exc:
        return exc.strerror or str(exc)
    if head.startswith(b"PK"):
        try:
            with storage.open_binary(path) as f, zipfile.ZipFile(f) as zf:
                torch_zip = any(n.endswith("/data.pkl") and n.count("/") == 1
                                for n in zf.namelist())
        except (zipfile.BadZipFile, OSError, ValueError):
            return "not a readable zip archive"
        if torch_zip:
            return _read(lambda: safeload.load(path, unknown_as_opaque=True))
        # Not a torch.save archive (a TorchScript one, a zip of logs): its pickles by name.
        bad = unsafe_globals.dangerous_in_file(str(path))
        if bad:
            raise unsafe_globals.CodeExecutionGlobal(str(path), bad[0],
                                                     unsafe_globals.danger(bad[0]) or "")
        return None
    if head[:1] == b"\x80":
        return _read(lambda: safeload.load(path, unknown_as_opaque=True))
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
