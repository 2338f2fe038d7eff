"""Writing a repaired copy: field edits, atomic output, manifest.

Format-blind. A fix is a list of :class:`Change` (file, key path, before, after);
this module copies the checkpoint to a temporary sibling of the output, rewrites
only the files that hold a change (every other key kept), and renames the
result into place, so a crash leaves either no output or a complete one. The
input is only ever opened for reading.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lrdoctor.atomic import refuse_checkpoint
from lrdoctor.core.errors import UnsafePickle, UnusableInput
from lrdoctor.core.repair import Builder, Change, apply_changes
from lrdoctor.read.bytes import unsafe_globals
from lrdoctor.read.layouts._fixmanifest import MANIFEST

_CHUNK = 8 << 20


# ---------------------------------------------------------------- loading
def load_pickle(path: Path) -> Any:
    """A file ``fix`` rewrites, loaded with its tensors (torch ``weights_only``, mmap).

    First read by the same safe reader ``inspect`` uses (``lrdoctor.read.bytes.safeload``: the
    allow-list and the resource limits), so a file torch would choke on or a class
    off the allow-list is refused before torch sees it. Framework classes become the
    stand-ins of :mod:`lrdoctor.repair.standins`, mapped by name in code: no module
    the file names is ever imported.
    """
    from lrdoctor.read.layouts import _common

    path = Path(path)
    if _no_torch():
        from lrdoctor.repair import torchzip

        return torchzip.load(path).root  # checks with the safe reader first
    _common.load(path)  # refuses what inspect refuses, within the limits
    torch = _torch()

    from lrdoctor.repair import standins

    allowed: list[Any] = [argparse.Namespace, *standins.safe_globals(), *_numpy_globals()]
    try:
        with torch.serialization.safe_globals(allowed):
            return torch.load(path, weights_only=True, mmap=_torchzip().is_torch_zip(path),
                              map_location="cpu")  # legacy files cannot be mapped
    except Exception as exc:  # noqa: BLE001 - one line for the user
        text = str(exc)
        m = _GLOBAL.search(text)
        if m:
            msg = (f"it asks for {m.group(1)!r}, which is not on the allow-list of "
                   "harmless classes (nothing was executed)")
        else:
            lines = [ln for ln in text.strip().splitlines() if ln.strip()]
            msg = lines[0] if lines else type(exc).__name__
        raise UnusableInput(f"cannot load for rewriting: {msg.strip()[:240]}",
                            str(path)) from None


_GLOBAL = re.compile(r"GLOBAL ([\w.]+)")


def _numpy_globals() -> list[Any]:
    """numpy arrays and scalars as torch's weights_only loader may rebuild them (RNG
    states in verl's extra_state, Lightning's loops): a fixed list named in code, the
    same records the safe reader already decoded by hand. Empty without numpy."""
    try:
        import numpy as np
    except ImportError:
        return []
    core = getattr(np, "_core", None) or np.core
    dtypes = [type(np.dtype(t)) for t in ("bool", "int8", "int16", "int32", "int64", "uint8",
                                          "uint16", "uint32", "uint64", "float16", "float32",
                                          "float64")]
    return [core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray, np.dtype,
            *dtypes]


def load_file(path: Path, kind: str) -> Any:
    if kind == "json":
        from lrdoctor.read.bytes import safetext

        return safetext.read_json(path)
    return load_pickle(path)


# ---------------------------------------------------------------- files
def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def copy_file(src: Path, dst: Path, advance: Callable[[int], None] | None = None) -> None:
    """shutil.copy2 in chunks, so a progress bar can follow big files."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    with open(src, "rb") as fi, open(dst, "wb") as fo:
        while chunk := fi.read(_CHUNK):
            fo.write(chunk)
            if advance:
                advance(len(chunk))
        fo.flush()
        os.fsync(fo.fileno())
    shutil.copystat(src, dst)


def torch_free() -> bool:
    """Whether pickles are read and rewritten by :mod:`lrdoctor.repair.torchzip` (no torch).

    Always for zip files (the same bytes for every install, storages copied rather than
    re-serialized); ``LRDOCTOR_TORCH_FREE_FIX=0`` writes with ``torch.save`` where torch is
    installed. Legacy non-zip files are written with torch.
    """
    return os.environ.get("LRDOCTOR_TORCH_FREE_FIX", "1") != "0" or _no_torch()


def _no_torch() -> bool:
    from lrdoctor.extras import have

    return not have("torch")


def _torchzip() -> Any:
    from lrdoctor.repair import torchzip

    return torchzip


def _torch():
    from lrdoctor.extras import need

    return need("torch", "rewriting a torch.save file (fix)")


def write_pickle(obj: Any, dst: Path) -> None:
    torch = _torch()

    from lrdoctor.repair import standins

    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        torch.save(obj, dst, pickle_module=standins.PICKLE_MODULE)  # stand-ins as their names
    except RuntimeError as exc:  # torch's zip writer: "file write failed" on a full disk
        import errno

        line = (str(exc).strip().splitlines() or ["write failed"])[0][:160]
        raise OSError(errno.ENOSPC if "write" in line else errno.EIO,
                      f"torch.save failed ({line})", str(dst)) from None
    _fsync_file(dst)


def write_json(obj: Any, dst: Path, like: Path | None = None) -> None:
    """JSON in the layout the frameworks use (indent 2, sorted as loaded)."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(obj, indent=2, sort_keys=False) + "\n"
    if like is not None:  # keep the original's indentation and trailing newline
        orig = like.read_text()
        text = json.dumps(obj, indent=_guess_indent(orig)) + ("\n" if orig.endswith("\n") else "")
    dst.write_text(text)
    _fsync_file(dst)


def _guess_indent(text: str) -> int | None:
    for line in text.splitlines()[1:3]:
        stripped = line.lstrip(" ")
        if stripped and len(line) != len(stripped):
            return len(line) - len(stripped)
    return None if "\n" not in text.strip() else 2


def check_output(src: Path, out: Path, force: bool, protect: tuple[Path, ...] = ()) -> None:
    """Refuse any ``--out`` whose replacement could destroy what the user did not ask to replace.

    ``--out`` may not equal, contain or lie inside the input or any other path the input
    names (``protect``: the checkpoint root a rank file belongs to, ...), for file and
    directory inputs alike and whether or not ``--force`` is given: replacing an output
    removes it, and an output that holds the input would take the input with it.
    """
    out_r = out.resolve()
    for p in dict.fromkeys((src, *protect)):
        p_r = Path(p).resolve()
        if out_r == p_r:
            raise UnusableInput(f"--out is the input itself ({p}); lrdoctor never modifies "
                                "its input", str(out))
        if p_r.is_relative_to(out_r):
            raise UnusableInput(f"--out contains the input {p}: replacing it would delete "
                                "the input; choose a new path", str(out))
        if out_r.is_relative_to(p_r):
            raise UnusableInput(f"--out lies inside the input checkpoint {p}", str(out))
    if out.exists() or out.is_symlink():
        if not force:
            raise UnusableInput("output exists (give --force to replace it)", str(out))
    if not out_r.parent.is_dir():
        raise UnusableInput("the output's parent directory does not exist", str(out.parent))


TMP_TAG = ".lrdoctor-tmp-"
LOCK_TAG = ".lrdoctor-lock"


def _holder_glob(out: Path) -> str:
    return f".{out.name}{TMP_TAG}*"


class OutputLock:
    """An exclusive, crash-safe claim on one output path (``flock`` on a hidden sibling).

    Two ``fix`` runs to one ``--out`` must not both succeed silently: the second is
    refused at once. The kernel drops the lock when its holder dies (SIGKILL too), so a
    killed run never blocks the next one. While held, every temporary holder of this
    output name is provably stale: only the lock's owner writes one.
    """

    def __init__(self, out: Path):
        self.out = out
        self.path = out.parent / f".{out.name}{LOCK_TAG}"
        self.fd: int | None = None

    def __enter__(self) -> OutputLock:
        import fcntl

        for _ in range(8):
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise UnusableInput("another `lrdoctor fix` is writing this output right now "
                                    "(try again when it has finished)", str(self.out)) from None
            try:  # the file may have been unlinked by the previous owner meanwhile
                same_file = os.stat(self.path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same_file = False
            if same_file:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                self.fd = fd
                return self
            os.close(fd)
        raise UnusableInput("cannot lock the output (its lock file keeps changing)", str(self.out))

    def __exit__(self, *exc: Any) -> None:
        if self.fd is not None:
            try:
                os.unlink(self.path)
            except FileNotFoundError:
                pass
            os.close(self.fd)
            self.fd = None


def remove_stale(out: Path, keep: Path | None = None) -> list[Path]:
    """Remove what killed runs to ``out`` left behind; call with :class:`OutputLock` held.

    Temporary holders (hidden ``.NAME.lrdoctor-tmp-PID-*`` siblings) are stale by the lock.
    A one-file output's manifest without its output is an orphan of a run killed between
    the two renames (the manifest is published first).
    """
    removed = []
    for h in sorted(out.parent.glob(_holder_glob(out))):
        if keep is not None and h == keep:
            continue
        _remove(h)
        removed.append(h)
    orphan = out.with_name(out.name + "." + MANIFEST)
    if orphan.is_file() and not (out.exists() or out.is_symlink()):
        try:
            doc = json.loads(orphan.read_text())
        except (OSError, ValueError):
            doc = None
        if isinstance(doc, dict) and doc.get("command") == "fix" and "lrdoctor" in doc:
            _remove(orphan)
            removed.append(orphan)
    return removed


@dataclass
class Written:
    out: Path
    manifest: Path
    changed: dict[str, str] = field(default_factory=dict)  # rel file -> sha256
    copied: int = 0
    bytes_copied: int = 0
    linked: int = 0  # unchanged files hard-linked instead of copied
    cleaned: list[Path] = field(default_factory=list)  # leftovers of killed runs, removed


def write_output(src: Path, out: Path, files: list[str], changes: list[Change],
                 manifest: dict[str, Any], *, force: bool = False,
                 verify: Callable[[Path], None] | None = None,
                 progress: Any = None, protect: tuple[Path, ...] = (), link: bool = False,
                 builders: dict[str, Builder] | None = None) -> Written:
    """Build the output in a temporary sibling, verify it there, rename it into place.

    ``files``: what the output holds (relative to ``src``; a file root: its name).
    ``protect``: further input paths ``out`` must not touch (see :func:`check_output`).
    ``verify(tmp_path)`` may raise to abort; the temporary copy is then removed.
    ``progress``: a rich Progress to show copies on (optional).
    An existing output is replaced only with ``force`` and only once the new one is
    complete and verified; it is moved aside first, so a crash never leaves neither.
    ``link``: unchanged files are hard-linked where the filesystem allows (else copied).
    ``builders``: file -> ``builder(src, tmp, changes) -> [files written]`` for files that
    are not rewritten field by field (a DCP ``.metadata`` and its new storage file).
    """
    check_output(src, out, force, protect)
    refuse_checkpoint(out)
    with OutputLock(out):
        check_output(src, out, force, protect)  # again, now that no other fix can race us
        cleaned = remove_stale(out)
        written = _write_locked(src, out, files, changes, manifest, force=force,
                                verify=verify, progress=progress, link=link,
                                builders=builders or {})
        written.cleaned = cleaned
        return written


def _write_locked(src: Path, out: Path, files: list[str], changes: list[Change],
                  manifest: dict[str, Any], *, force: bool,
                  verify: Callable[[Path], None] | None, progress: Any, link: bool = False,
                  builders: dict[str, Builder] | None = None) -> Written:
    single = src.is_file()
    by_file: dict[str, list[Change]] = {}
    for c in changes:
        by_file.setdefault(c.file, []).append(c)
    unknown = set(by_file) - set(files)
    if unknown:
        raise UnusableInput(f"planned change in a file outside the checkpoint: {sorted(unknown)}")

    parent = out.parent
    # A hidden holder dir next to the output, named with our pid; inside it the output
    # under its final name, so verification reads exactly what will be renamed into place.
    try:
        holder = Path(tempfile.mkdtemp(prefix=f".{out.name}{TMP_TAG}{os.getpid()}-",
                                       dir=parent))
    except OSError as exc:
        raise UnusableInput(f"cannot write the repaired copy here: {exc.strerror}",
                            str(out)) from None
    tmp = holder / out.name
    if not single:
        tmp.mkdir()
    written = Written(out=out, manifest=(out / MANIFEST) if not single
                      else out.with_name(out.name + "." + MANIFEST))
    try:
        total = sum((src / f if not single else src).stat().st_size
                    for f in files if f not in by_file)
        task = progress.add_task("copying", total=total) if progress is not None else None

        def advance(n: int) -> None:
            if progress is not None:
                progress.update(task, advance=n)

        for rel in files:
            s = src if single else src / rel
            d = tmp if single else tmp / rel
            if progress is not None:
                progress.update(task, description=("rewriting " if rel in by_file
                                                   else "copying ") + rel)
            if builders and rel in builders:
                continue  # written below, from its changes
            if rel in by_file and by_file[rel][0].kind == "pickle" and torch_free() \
                    and (_no_torch() or _torchzip().is_torch_zip(s)):
                _torchzip().rewrite(s, d, by_file[rel])
                shutil.copystat(s, d)
                written.changed[rel] = sha256(d)
            elif rel in by_file:
                kind = by_file[rel][0].kind
                obj = load_file(s, kind)
                apply_changes(obj, by_file[rel], s)
                if kind == "json":
                    write_json(obj, d, like=s)
                else:
                    write_pickle(obj, d)
                del obj
                shutil.copystat(s, d)
                written.changed[rel] = sha256(d)
            elif link and _link(s, d):
                written.linked += 1
            else:
                copy_file(s, d, advance)
                written.copied += 1
                written.bytes_copied += s.stat().st_size
        for rel, build in (builders or {}).items():
            for made in build(src, tmp, by_file.get(rel, [])):
                written.changed[made] = sha256(tmp / made)
        _refuse_code_in(src, tmp, [*files, *(m for m in written.changed if m not in files)],
                        single)
        doc = dict(manifest)
        doc["changed_files"] = [{"file": f, "sha256": h} for f, h in written.changed.items()]
        if unsafe_globals.allowed():  # the user's escape, on record beside the output
            doc["allowed_unsafe_globals"] = sorted(unsafe_globals.allowed())
        mtext = json.dumps(doc, indent=2, allow_nan=False) + "\n"
        mtmp = (tmp / MANIFEST) if not single else holder / written.manifest.name
        mtmp.write_text(mtext)
        _fsync_file(mtmp)
        if verify is not None:
            verify(tmp)
        _publish(holder, tmp, out, mtmp if single else None, written.manifest, force)
        _fsync_dir(parent)
    except BaseException:
        _remove(holder)
        raise
    _remove(holder)  # holds the replaced output, if any
    return written


def _link(src: Path, dst: Path) -> bool:
    """Hard-link ``dst`` to ``src`` (same bytes, no copy); False where the filesystem
    does not allow it (another device, no link support), so the caller copies."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        return False
    return True


def _refuse_code_in(src: Path, tmp: Path, files: list[str], single: bool) -> None:
    """A repaired copy never holds what ``inspect`` refuses: every file written or copied
    is read by the same safe reader, with the same list of code-execution globals
    (:func:`lrdoctor.read.bytes.vet.vet`), before the output is published, so that
    ``torch.load(weights_only=False)`` of a "verified" copy cannot run a payload that sat
    in a file ``fix`` only copied. A pickle that reader could not read (corrupt, over a
    limit) is not vouched for either. The line names the input file it came from."""
    from lrdoctor.read.bytes.vet import vet

    for rel in files:
        where = str(src if single else src / rel)
        try:
            why = vet(tmp if single else tmp / rel)
        except UnsafePickle as exc:
            raise _located(exc, where, "refused to write a repaired copy holding it: ") \
                from None
        if why is not None:
            raise UnusableInput("refused to write a repaired copy holding it: lrdoctor could "
                                f"not read it to check it for code-execution globals ({why})",
                                where)


def _located(exc: UnsafePickle, where: str, lead: str) -> UnsafePickle:
    """``exc`` (of its own type, so LRD303's advice follows) about the input file ``where``."""
    new = type(exc).__new__(type(exc))  # its own __init__ takes other arguments
    new.__dict__.update(exc.__dict__)
    new.path, new.message = where, lead + exc.message
    new.args = (f"{where}: {new.message}",)
    return new


def _publish(holder: Path, tmp: Path, out: Path, mtmp: Path | None, manifest: Path,
             force: bool) -> None:
    """Rename the finished output (and a one-file output's manifest) into place.

    An existing output is moved into the holder first (removed with it afterwards), never
    deleted before the new one is in place. A one-file output's manifest goes first: a
    crash between the two renames leaves an orphan manifest, which the next run removes.
    """
    if out.exists() or out.is_symlink():
        if not force:
            raise UnusableInput("output appeared while the repaired copy was written "
                                "(give --force to replace it)", str(out))
        os.rename(out, holder / ".replaced")
    if mtmp is not None:
        if manifest.exists() or manifest.is_symlink():
            os.rename(manifest, holder / ".replaced-manifest")
        os.replace(mtmp, manifest)
    os.replace(tmp, out)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except FileNotFoundError:
            pass
