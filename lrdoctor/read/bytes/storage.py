"""Checkpoints on object storage: one path type for local files and fsspec URLs.

Every command takes a path or a URL (``s3://``, ``gs://``, ``az://``,
``http(s)://``, ``memory://``, ``file://``). :func:`as_path` turns either into
something with the slice of :mod:`pathlib` the readers use; local paths stay a
plain :class:`pathlib.Path` and never import fsspec (the core install stays
light, ``inspect`` stays fast). URLs become a :class:`RemotePath` over an
fsspec filesystem, so the readers need no second code path: they call
``exists``/``iterdir``/``open`` as they would on a disk.

Why range reads: a checkpoint's metadata is a few KB to a few MB (a torch
zip's central directory and ``data.pkl``; a DCP ``.metadata``) while the file
is GBs. Files are opened with a small read-ahead block (:data:`BLOCK_SIZE`)
instead of the stores' defaults (s3fs reads 50 MiB blocks), so the safe loader,
which seeks, reads only what it looks at.

Credentials and endpoints come from where the stores' own clients look: the
cloud SDKs' environment and files (``AWS_PROFILE``, ``AWS_ACCESS_KEY_ID``,
``AWS_ENDPOINT_URL``, ``GOOGLE_APPLICATION_CREDENTIALS``,
``AZURE_STORAGE_CONNECTION_STRING`` ...) and fsspec's configuration
(``FSSPEC_S3_ENDPOINT_URL``-style variables, ``~/.config/fsspec/*.json``).
A missing extra is one line naming the ``pip install``.
"""

from __future__ import annotations

import os
import posixpath
import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any, BinaryIO, cast

from lrdoctor.core.errors import NotFound, UnusableInput

__all__ = ["RemotePath", "is_url", "as_path", "reader_path", "filesystem", "open_binary", "glob",
           "has_magic", "BLOCK_SIZE", "EXTRAS"]

# Remote files are read through fsspec's sparse block cache ("mmap"): a read
# fetches only the blocks it lacks, consecutive missing blocks in one request, and
# a block once fetched (the zip central directory, say) is not fetched again. A
# small block keeps the scattered reads cheap: one 4-byte optimizer ``step``
# costs one block.
BLOCK_SIZE = 16 * 1024
# Remote files kept open per thread, so read_values() of many small tensors of one
# file reuses the blocks already fetched (zip central directory included).
OPEN_FILES_PER_THREAD = 8

_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")

# protocol -> (extra, package) for the one-line "pip install" hint
EXTRAS: dict[str, tuple[str, str]] = {
    "s3": ("s3", "s3fs"), "s3a": ("s3", "s3fs"),
    "gs": ("gcs", "gcsfs"), "gcs": ("gcs", "gcsfs"),
    "az": ("azure", "adlfs"), "abfs": ("azure", "adlfs"), "abfss": ("azure", "adlfs"),
    "http": ("http", "aiohttp"), "https": ("http", "aiohttp"),
    "memory": ("s3", "fsspec"),
}


def is_url(path: Any) -> bool:
    """A ``scheme://`` string (or a RemotePath); ``file://`` counts as a URL too."""
    return isinstance(path, RemotePath) or bool(_URL.match(str(path)))


def as_path(path: Any) -> Path | RemotePath:
    """A local :class:`Path` or a :class:`RemotePath`, from either or from a string."""
    if isinstance(path, (RemotePath, Path)):
        return path
    text = os.fspath(path) if not isinstance(path, str) else path
    m = _URL.match(text)
    if not m:
        return Path(text)
    if m.group(1).lower() == "file":  # file:///abs/path: a local path, no fsspec
        from urllib.parse import unquote, urlparse

        return Path(unquote(urlparse(text).path))
    return RemotePath(text)


def reader_path(path: str | os.PathLike[str] | RemotePath) -> Path:
    """:func:`as_path`, typed as the :class:`Path` the scan and the layouts are written
    against. A :class:`RemotePath` has the slice of pathlib they use (tests/test_remote.py
    reads Megatron, HF, DCP and torch.save checkpoints from S3 through them), so they keep
    one path type; code that must tell a store from a disk (:func:`open_binary`,
    :class:`Staging`) takes :func:`as_path` and asks ``isinstance``."""
    return cast(Path, as_path(path))


def has_magic(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


# ------------------------------------------------------------------ filesystems

_FS: dict[str, Any] = {}
_FS_LOCK = threading.Lock()


def _missing_extra(protocol: str) -> UnusableInput:
    hint = EXTRAS.get(protocol)
    if hint is None:
        return UnusableInput(f"{protocol}:// URLs need fsspec and the package for that store: "
                             "pip install fsspec and its backend for the protocol")
    from lrdoctor.extras import MissingExtra

    return MissingExtra(hint[1], f"a {protocol}:// URL")


def _endpoint_options(protocol: str) -> dict[str, Any]:
    """AWS_ENDPOINT_URL(_S3) for S3-compatible stores (MinIO, Ceph, moto, R2).

    Recent botocore reads it too; passing it keeps older clients and aiobotocore
    in step. fsspec's own configuration (FSSPEC_S3_*) is applied on top by fsspec.
    """
    if protocol not in ("s3", "s3a"):
        return {}
    url = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    return {"client_kwargs": {"endpoint_url": url}} if url else {}


def filesystem(protocol: str) -> Any:
    """One fsspec filesystem per protocol and process (its listings cache is shared)."""
    protocol = protocol.lower()
    with _FS_LOCK:
        fs = _FS.get(protocol)
        if fs is not None:
            return fs
        try:
            import fsspec
            from fsspec.config import apply_config
        except ImportError:
            raise _missing_extra(protocol) from None
        try:
            cls = fsspec.get_filesystem_class(protocol)
        except ImportError:
            raise _missing_extra(protocol) from None
        except ValueError:
            raise UnusableInput(f"{protocol}:// is not a storage protocol fsspec knows") from None
        options = _endpoint_options(protocol)
        conf = apply_config(cls, {})
        if "client_kwargs" in conf and "client_kwargs" in options:  # FSSPEC_* wins
            options["client_kwargs"] = {**options["client_kwargs"], **conf["client_kwargs"]}
        try:
            fs = fsspec.filesystem(protocol, **options)
        except ImportError:
            raise _missing_extra(protocol) from None
        _FS[protocol] = fs
        return fs


def reset() -> None:
    """Forget the cached filesystems and this thread's open files (after credentials,
    endpoints or the objects changed)."""
    with _FS_LOCK:
        _FS.clear()
    files = getattr(_LOCAL, "files", None)
    while files:
        files.popitem()[1].close()


def _one_line(exc: BaseException) -> str:
    text = (str(exc).strip().splitlines() or [""])[0][:200]
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _call(url: str, fn: Callable[..., Any], *args: Any, missing_ok: bool = False,
          **kwargs: Any) -> Any:
    """A filesystem call whose failures are one line naming the URL.

    ``missing_ok``: a missing object is an answer (``exists`` -> False); otherwise
    it is a FileNotFoundError, as pathlib gives. A refused credential or an
    unreachable endpoint is UnusableInput (never read as "no such file").
    """
    try:
        return fn(*args, **kwargs)
    except UnusableInput:
        raise
    except FileNotFoundError:
        if missing_ok:
            return None
        import errno

        # as pathlib raises it: readers catch OSError for "not there" as they do on disk
        raise FileNotFoundError(errno.ENOENT, "No such file or directory", url) from None
    except PermissionError as exc:
        raise UnusableInput(f"access denied ({_one_line(exc)})", url) from None
    except Exception as exc:  # noqa: BLE001 - network/credential errors: one line, no traceback
        raise UnusableInput(f"cannot read from the store ({_one_line(exc)})", url) from None


# ------------------------------------------------------------------ paths


class RemotePath:
    """A file or folder on an fsspec store, with the part of pathlib readers use.

    ``str()`` is the URL as the user spells it (``s3://bucket/run/iter_0000100``).
    Folders are prefixes: on object stores a "directory" exists when some object
    lies under it, and has no modification time (``stat().st_mtime`` is 0).
    """

    __slots__ = ("protocol", "_key")

    def __init__(self, url: str, _key: str | None = None):
        m = _URL.match(url)
        if not m:
            raise ValueError(f"not a URL: {url!r}")
        self.protocol = m.group(1).lower()
        key = url[m.end():] if _key is None else _key
        # "bucket/key" (http: "host/path"), no leading or trailing slash
        self._key = key.strip("/")

    @classmethod
    def _child(cls, protocol: str, key: str) -> RemotePath:
        obj = cls.__new__(cls)
        obj.protocol = protocol
        obj._key = key.strip("/")
        return obj

    # -- identity
    def __str__(self) -> str:
        return f"{self.protocol}://{self._key}"

    def __repr__(self) -> str:
        return f"RemotePath({str(self)!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RemotePath) and str(self) == str(other)

    def __hash__(self) -> int:
        return hash(str(self))

    def __lt__(self, other: RemotePath) -> bool:
        return str(self) < str(other)

    @property
    def fs(self) -> Any:
        return filesystem(self.protocol)

    @property
    def fs_path(self) -> str:
        """The path as the filesystem wants it (http keeps the scheme)."""
        return str(self) if self.protocol in ("http", "https") else self._key

    # -- pure path operations
    def __truediv__(self, other: Any) -> RemotePath:
        other = str(other)
        key = posixpath.normpath(posixpath.join(self._key, other)).lstrip("/")
        return RemotePath._child(self.protocol, key)

    def joinpath(self, *others: Any) -> RemotePath:
        out = self
        for o in others:
            out = out / o
        return out

    @property
    def name(self) -> str:
        return posixpath.basename(self._key)

    @property
    def suffix(self) -> str:
        return Path(self.name).suffix

    @property
    def suffixes(self) -> list[str]:
        return Path(self.name).suffixes

    @property
    def stem(self) -> str:
        return Path(self.name).stem

    @property
    def parent(self) -> RemotePath:
        head = posixpath.dirname(self._key)
        return RemotePath._child(self.protocol, head) if head else self

    @property
    def parents(self) -> tuple[RemotePath, ...]:
        """The ancestors, nearest first, as ``Path.parents`` (discovery asks whether a
        folder lies under the run it walks)."""
        out, p = [], self
        while p.parent != p:
            p = p.parent
            out.append(p)
        return tuple(out)

    @property
    def parts(self) -> tuple[str, ...]:
        return (f"{self.protocol}://", *[p for p in self._key.split("/") if p])

    def with_name(self, name: str) -> RemotePath:
        return self.parent / name

    def with_suffix(self, suffix: str) -> RemotePath:
        return self.with_name(self.stem + suffix)

    def relative_to(self, other: Any) -> Path:
        base = str(other).rstrip("/") + "/"
        if not str(self).startswith(base):
            raise ValueError(f"{self} is not under {other}")
        return Path(str(self)[len(base):])

    def resolve(self, strict: bool = False) -> RemotePath:
        return self

    absolute = resolve

    def as_posix(self) -> str:
        return str(self)

    def match(self, pattern: str) -> bool:
        from pathlib import PurePosixPath

        return PurePosixPath(self._key).match(pattern)

    # -- queries (each goes to the store, through fsspec's listings cache)
    def exists(self) -> bool:
        return bool(_call(str(self), self.fs.exists, self.fs_path, missing_ok=True))

    def is_file(self) -> bool:
        return bool(_call(str(self), self.fs.isfile, self.fs_path, missing_ok=True))

    def is_dir(self) -> bool:
        return bool(_call(str(self), self.fs.isdir, self.fs_path, missing_ok=True))

    def is_symlink(self) -> bool:
        return False

    def stat(self) -> SimpleNamespace:
        info = _call(str(self), self.fs.info, self.fs_path)
        mtime = 0.0
        for key in ("LastModified", "mtime", "last_modified", "updated", "created"):
            v = info.get(key)
            if hasattr(v, "timestamp"):
                mtime = v.timestamp()
                break
            if isinstance(v, (int, float)):
                mtime = float(v)
                break
        is_dir = info.get("type") == "directory"
        return SimpleNamespace(st_size=int(info.get("size") or 0), st_mtime=mtime,
                               st_mode=0o040755 if is_dir else 0o100644)

    def iterdir(self) -> Iterator[RemotePath]:
        entries = _call(str(self), self.fs.ls, self.fs_path, detail=False)
        own = self.fs_path.rstrip("/")
        for e in sorted(entries or []):
            e = e.rstrip("/")
            if e == own:  # some stores list the prefix itself
                continue
            yield self._from_fs(e)

    def glob(self, pattern: str) -> Iterator[RemotePath]:
        full = posixpath.join(self.fs_path, pattern)
        for e in sorted(_call(str(self), self.fs.glob, full) or []):
            yield self._from_fs(e.rstrip("/"))

    def rglob(self, pattern: str) -> Iterator[RemotePath]:
        return self.glob(f"**/{pattern}")

    def _from_fs(self, fs_path: str) -> RemotePath:
        if _URL.match(fs_path):
            return RemotePath(fs_path)
        return RemotePath._child(self.protocol, fs_path.lstrip("/"))

    # -- contents
    def read_bytes(self) -> bytes:
        data = _call(str(self), self.fs.cat_file, self.fs_path)
        if not isinstance(data, bytes):  # fsspec is untyped: its answer is checked, not trusted
            raise UnusableInput(f"the store returned {type(data).__name__}, not bytes", str(self))
        return data

    def read_text(self, encoding: str | None = "utf-8", errors: str | None = None) -> str:
        return self.read_bytes().decode(encoding or "utf-8", errors or "strict")

    def open(self, mode: str = "rb", buffering: int = -1, encoding: str | None = None,
             errors: str | None = None, newline: str | None = None) -> Any:
        """A seekable file doing range reads in blocks of :data:`BLOCK_SIZE` (read modes)."""
        if "r" in mode:
            f = _call(str(self), self.fs.open, self.fs_path, "rb", block_size=BLOCK_SIZE,
                      cache_type="mmap")
            if "b" in mode:
                return f
            import io

            return io.TextIOWrapper(f, encoding=encoding or "utf-8", errors=errors,
                                    newline=newline)
        return _call(str(self), self.fs.open, self.fs_path, mode)


_LOCAL = threading.local()


class _Borrowed:
    """A shared open remote file lent to one ``with`` block: closing it keeps it open."""

    def __init__(self, f: Any):
        self._f = f

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)

    def close(self) -> None:
        pass

    @property
    def closed(self) -> bool:
        return False

    def __enter__(self) -> _Borrowed:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def open_binary(path: Any) -> BinaryIO:
    """A seekable binary file for a local path or a URL (range reads for URLs).

    Remote files stay open in a small per-thread cache (:data:`OPEN_FILES_PER_THREAD`),
    so a reader that opens one file many times (``read_values`` for every optimizer
    ``step``) fetches the zip's central directory once. :func:`reset` forgets them.
    """
    p = as_path(path)
    if isinstance(p, Path):
        return open(p, "rb")
    from collections import OrderedDict

    files = getattr(_LOCAL, "files", None)
    if files is None:
        files = _LOCAL.files = OrderedDict()
    key = str(p)
    f = files.get(key)
    if f is None:
        f = p.open("rb")
        files[key] = f
        while len(files) > OPEN_FILES_PER_THREAD:
            _, old = files.popitem(last=False)
            old.close()
    else:
        files.move_to_end(key)
    f.seek(0)
    # fsspec's file (untyped) is a seekable binary file; _Borrowed hands on every method
    return cast(BinaryIO, _Borrowed(f))


def glob(pattern: str) -> list[str]:
    """Matches of a URL glob (``s3://bucket/runs/*/checkpoints``), sorted, as URLs."""
    p = RemotePath(pattern)
    fs = p.fs
    found = _call(pattern, fs.glob, p.fs_path) or []
    return sorted(str(p._from_fs(e.rstrip("/"))) for e in found)


# ------------------------------------------------------------------ fix: stage and publish

# What `fix` guarantees where it writes (docs/remote.md says the same):
ATOMICITY = {
    "local": "the output folder or file appears whole or not at all (a rename)",
    "object store": "each object appears whole or not at all (a single PUT or a completed "
                    "multipart upload); a folder of objects does not: the manifest "
                    "lrdoctor-fix.json is written last, so a folder without it is incomplete",
}
TMP_MARK = ".lrdoctor-tmp-"


class Staging:
    """Local stand-ins for a URL input and a URL output of ``fix``.

    ``fix`` rewrites whole files (it copies the checkpoint), so a remote input is
    downloaded once to a temporary folder and a remote output is written there
    first. :meth:`publish` then uploads it under a temporary prefix beside the
    destination (``<out>.lrdoctor-tmp-<id>/``: a failed or interrupted upload leaves
    nothing at ``<out>``), copies it into place within the store, the manifest last,
    and deletes the temporary prefix. Local paths pass through untouched.
    """

    def __init__(self, path: Any, out: Any):
        self.path, self.out = str(path), (None if out is None else str(out))
        self._tmp: str | None = None

    def __enter__(self) -> Staging:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._tmp:
            import shutil

            shutil.rmtree(self._tmp, ignore_errors=True)

    def _dir(self) -> Path:
        if self._tmp is None:
            import tempfile

            self._tmp = tempfile.mkdtemp(prefix="lrdoctor-fix-")
        return Path(self._tmp)

    @property
    def remote_out(self) -> bool:
        return self._remote_dest() is not None

    def _remote_dest(self) -> RemotePath | None:
        """``out`` on a store; None for a local path (a ``file://`` URL is one)."""
        dest = None if self.out is None else as_path(self.out)
        return dest if isinstance(dest, RemotePath) else None

    def local_input(self) -> Path:
        """The input as a local path: a URL's file or folder is downloaded (all of it)."""
        src = as_path(self.path)
        if isinstance(src, Path):  # a file:// URL is a local path
            return src
        if not src.exists():
            raise NotFound("no such file or directory", self.path)
        dst = self._dir() / "in" / (src.name or "checkpoint")
        dst.parent.mkdir(parents=True, exist_ok=True)
        recursive = src.is_dir()
        _call(self.path, src.fs.get, src.fs_path, str(dst), recursive=recursive)
        return dst

    def local_output(self, force: bool) -> Path | None:
        """Where ``write_fix`` writes: ``out`` itself, or a local folder to publish from."""
        if self.out is None:
            return None
        dest = as_path(self.out)
        if isinstance(dest, Path):  # a file:// URL is a local path
            return dest
        if "/" not in dest._key:
            raise UnusableInput("give a key inside the bucket, not the bucket itself", self.out)
        if dest.exists() and not force:
            raise UnusableInput("exists; give --force to replace it", self.out)
        local = self._dir() / "out" / (dest.name or "checkpoint")
        local.parent.mkdir(parents=True, exist_ok=True)
        return local

    def publish(self, local: Path, force: bool) -> None:
        """Upload ``local`` (the written output) to ``out``: temp prefix, copy, manifest last."""
        import uuid

        manifest = "lrdoctor-fix.json"
        dest = self._remote_dest()
        if dest is None or self.out is None:
            raise ValueError("publish() is for an output on a store (remote_out)")
        fs = dest.fs
        tmp_key = f"{dest._key}{TMP_MARK}{uuid.uuid4().hex[:8]}"
        if local.is_file():  # one file, and its manifest beside it
            pairs = [(local, dest.name)]
            side = local.with_name(f"{local.name}.{manifest}")
            if side.is_file():
                pairs.append((side, side.name))
            root = dest.parent
        else:
            pairs = [(f, f"{dest.name}/{f.relative_to(local).as_posix()}")
                     for f in sorted(local.rglob("*")) if f.is_file()]
            root = dest.parent
        for f, _ in pairs:  # the manifest names the URLs, not this machine's temp folder
            if f.name.endswith(manifest):
                f.write_text(self.rename(f.read_text(encoding="utf-8")), encoding="utf-8")
        pairs.sort(key=lambda fr: fr[0].name.endswith(manifest))  # the manifest last
        staged = [RemotePath._child(dest.protocol, f"{tmp_key}/{rel}") for _, rel in pairs]
        final = [root / rel for _, rel in pairs]
        try:
            for (f, _), tmp in zip(pairs, staged, strict=True):
                _call(self.out, fs.put_file, str(f), tmp.fs_path)
            for tmp, fin in zip(staged, final, strict=True):
                _call(self.out, fs.copy, tmp.fs_path, fin.fs_path)
            if force and dest.is_dir():  # objects of the replaced output that are not ours
                keep = {fin.fs_path for fin in final}
                stale = [p for p in (_call(self.out, fs.find, dest.fs_path) or [])
                         if p.lstrip("/") not in {k.lstrip("/") for k in keep}]
                if stale:
                    _call(self.out, fs.rm, stale)
        finally:
            try:
                fs.invalidate_cache()
                left = fs.find(RemotePath._child(dest.protocol, tmp_key).fs_path)
                if left:
                    fs.rm(left)
            except Exception:  # noqa: BLE001 - cleanup only; the error above is the one to show
                pass
        fs.invalidate_cache()

    def rename(self, text: str) -> str:
        """``text`` with the local staging folders named as the URLs they stand for."""
        if not self._tmp:
            return text
        if is_url(self.path):
            src = as_path(self.path)
            text = text.replace(str(Path(self._tmp) / "in" / (src.name or "checkpoint")),
                                self.path.rstrip("/"))
        dest = self._remote_dest()
        if dest is not None and self.out is not None:
            text = text.replace(str(Path(self._tmp) / "out" / (dest.name or "checkpoint")),
                                self.out.rstrip("/"))
        return text
