"""Rewriting a torch zip checkpoint without torch: ``fix`` on the light core install.

``torch.save`` (since 1.6) writes one zip: ``<archive>/data.pkl`` (a protocol-2
pickle whose tensors are ``torch._utils._rebuild_tensor_v2`` calls on persistent
ids ``('storage', torch.<Type>Storage, key, location, numel)``), the storages'
raw bytes in ``<archive>/data/<key>``, and ``version``/``byteorder``/
``.data/serialization_id`` records. A fix changes a few numbers in data.pkl, so
this module re-pickles data.pkl faithfully and copies every other record
byte-for-byte: no tensor is ever materialised and torch is never imported.

Faithful means inert: after the safe reader (:mod:`lrdoctor.read.bytes.safeload`, the
allow-list and limits ``inspect`` uses) has accepted the file, the same data.pkl
bytes (read once, from one open file: the file changing on disk cannot slip
other bytes past the check) are parsed again by :class:`_Reader`, which calls
nothing from the file and runs on the same limited machine
(:mod:`lrdoctor.read.bytes.limited_pickle`), so it is bounded by the same limits on its
own, not only because the safe reader accepted the bytes. Every global
becomes a :class:`GlobalRef` (its name), every call a :class:`Reduced` (name,
arguments, state) that pickles back as the same opcodes; only plain containers
(``collections.OrderedDict``, ``argparse.Namespace``) and the stand-ins of
:mod:`lrdoctor.repair.standins` are real, so ``apply_changes`` edits ints,
floats and lists in dicts, lists and Namespaces as with torch. A 0-d tensor
(an optimizer ``step``) reads as its value; changing it writes a new storage.
Records are 64-byte aligned with torch's own ``FB`` zip extra-field padding,
so ``torch.load(mmap=True)`` maps the copied storages. The other records are
copied from the same open file; if the input is replaced or changed on disk
before the copy is finished, the rewrite is refused and its output removed.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import io
import os
import pickle
import struct
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.read.bytes import limits, safeload, unsafe_globals
from lrdoctor.read.bytes.limited_pickle import LimitedUnpickler
from lrdoctor.repair.standins import EnumStandIn, PlainStandIn

_ALIGN = 64  # torch's kFieldAlignment: storage data starts on a 64-byte boundary
_CHUNK = 8 << 20
_TENSOR = ("torch._utils", "_rebuild_tensor_v2")


class GlobalRef:
    """A global the pickle names (``torch.FloatStorage``, ``torch.device``): a name, never imported."""

    __slots__ = ("module", "name")

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __call__(self, *args: Any) -> Reduced:  # REDUCE: remembered, not called
        return (TensorLeaf if (self.module, self.name) == _TENSOR else Reduced)(self, args)

    def __repr__(self) -> str:
        return f"{self.module}.{self.name}"


class Reduced:
    """``GLOBAL(args)`` (REDUCE) or ``GLOBAL.__new__(args)`` (NEWOBJ), plus BUILD state and items."""

    def __init__(self, ref: GlobalRef, args: tuple, newobj: bool = False):
        self.ref, self.args, self.newobj = ref, args, newobj
        self.state: Any = None
        self.has_state = False
        self.items: list[Any] = []  # APPENDS / SETITEMS onto the object, in order

    def __setstate__(self, state: Any) -> None:
        self.state, self.has_state = state, True

    def __setitem__(self, key: Any, value: Any) -> None:
        self.items.append(("set", key, value))

    def append(self, value: Any) -> None:
        self.items.append(("append", value))

    def extend(self, values: Any) -> None:
        for v in values:
            self.append(v)

    def __repr__(self) -> str:
        return f"<{self.ref!r}{self.args!r}>"


@dataclasses.dataclass(eq=False)
class StorageRef:
    """One storage of the zip: the persistent id as written, and bytes if new."""

    storage_type: GlobalRef
    key: str
    location: str
    numel: int
    archive: Any = None  # the _Archive it lives in (None for a new storage)
    data: bytes | None = None  # a new storage's bytes

    @property
    def dtype(self) -> str:
        from lrdoctor.read.bytes.safeload import _STORAGE_DTYPES

        dtype = _STORAGE_DTYPES.get(self.storage_type.name)
        if dtype is None:
            raise UnusableInput(f"unknown storage type {self.storage_type!r}")
        return dtype


class TensorLeaf(Reduced):
    """A tensor as ``_rebuild_tensor_v2(storage, offset, size, stride, ...)``; its bytes stay put.

    0-d and one-element tensors compare and convert as their value (an optimizer's
    ``step``), so planned 'before' values are checked as with torch.
    """

    @property
    def storage(self) -> StorageRef:
        return self.args[0]

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.args[2])

    def _code(self) -> tuple[int, str]:
        from lrdoctor.read.bytes.safeload import _DTYPES

        size, code = _DTYPES[self.storage.dtype]
        if code is None or code == "?":
            if self.storage.dtype != "bool":
                raise UnusableInput(f"cannot read a {self.storage.dtype} value without torch")
        return size, code or "?"

    def value(self) -> int | float | bool:
        n = 1
        for s in self.shape:
            n *= s
        if n != 1:
            raise TypeError("only one-element tensors have a value")
        size, code = self._code()
        st = self.storage
        off = self.args[1] * size
        if type(off) is not int or off < 0:
            raise UnusableInput("a tensor record with a malformed storage offset")
        raw = st.data[off:off + size] if st.data is not None else st.archive.read(st.key, off, size)
        if len(raw) != size:
            raise UnusableInput("a tensor lies outside its storage", str(st.archive.path)
                                if st.archive is not None else None)
        return struct.unpack("<" + code, raw)[0]

    def with_value(self, value: Any) -> TensorLeaf:
        """This tensor holding ``value`` in a new one-element storage of the same dtype."""
        size, code = self._code()
        if code in "efd":
            value = float(value)
        elif code == "?":
            value = bool(value)
        else:
            value = int(value)
        st = self.storage
        new = StorageRef(st.storage_type, "", st.location, 1,
                         data=struct.pack("<" + code, value))
        args = (new, 0, self.args[2], self.args[3], *self.args[4:])
        return TensorLeaf(self.ref, args)

    def __float__(self) -> float:
        return float(self.value())

    def __int__(self) -> int:
        return int(self.value())

    def __index__(self) -> int:
        return int(self.value())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, (int, float)):
            try:
                return self.value() == other
            except TypeError:
                return False
        return other is self

    __hash__ = object.__hash__


class _Archive:
    """The input zip, open once: data.pkl's bytes as the safe reader accepted them, and the
    file the other records are copied from (checked unchanged when the copy is done)."""

    def __init__(self, path: Path, f: Any, zf: zipfile.ZipFile, prefix: str, data_pkl: bytes):
        self.path, self.f, self.zf = path, f, zf
        self.prefix = prefix  # "<archive>/"
        self.data_pkl = data_pkl
        self.digest = hashlib.sha256(data_pkl).digest()
        self.stat = _identity(os.fstat(f.fileno()))
        self.names = zf.namelist()
        self.storage_keys: set[str] = set()  # what the input's data.pkl references
        order = f"{self.prefix}byteorder"
        if order in self.names and self.zf.read(order).strip() not in (b"little", b""):
            raise UnusableInput("a big-endian torch file can only be rewritten with torch: "
                                "pip install 'lrdoctor[torch]'", str(path))

    def read(self, key: str, offset: int, size: int) -> bytes:
        """``size`` bytes at ``offset`` of the storage ``key``: what one value costs (a
        deflated storage is inflated only up to ``deflated_bytes``)."""
        info = self.zf.getinfo(f"{self.prefix}data/{key}")
        with safeload.open_record(self.zf, info, str(self.path), offset + size) as m:
            m.seek(offset)
            return m.read(size)

    def close(self) -> None:
        self.zf.close()
        self.f.close()

    def check_unchanged(self) -> None:
        """Refuse if the input changed on disk since it was opened (replaced, rewritten in
        place): the copy would mix what was checked with what was not."""
        try:
            same = (_identity(os.fstat(self.f.fileno())) == self.stat
                    and _identity(os.stat(self.path)) == self.stat)
            if same:
                with zipfile.ZipFile(self.path) as zf:
                    info = zf.getinfo(f"{self.prefix}data.pkl")
                    same = info.file_size == len(self.data_pkl) and \
                        hashlib.sha256(zf.read(info)).digest() == self.digest
        except (OSError, KeyError, zipfile.BadZipFile):
            same = False
        if not same:
            raise UnusableInput("the file changed on disk while lrdoctor was rewriting it; "
                                "nothing was written (run fix again)", str(self.path))


def _identity(st: os.stat_result) -> tuple[int, ...]:
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class _Reader(LimitedUnpickler):
    """The limited unpickler with every global a name and every call a record.

    Bounded by :mod:`lrdoctor.read.bytes.limits` through :class:`LimitedUnpickler` (opcodes, memo,
    items, depth, integer sizes, key hashing); only what a faithful re-read needs differs:
    globals resolve to :class:`GlobalRef` (never imported), a call of one (REDUCE, NEWOBJ)
    is a :class:`Reduced` record, which may take APPENDs, SETITEMs and BUILD state.
    """

    buildable = (Reduced, argparse.Namespace, OrderedDict, PlainStandIn)
    children = staticmethod(lambda obj: _children(obj))

    def __init__(self, file: Any, archive: _Archive, size: int):
        super().__init__(file, str(archive.path), encoding="ASCII", size=size)
        self.archive = archive
        self.refs: dict[tuple[str, str], GlobalRef] = {}
        self.storages: dict[str, StorageRef] = {}

    def find_class(self, module: str, name: str) -> Any:
        from lrdoctor.repair import standins

        if (module, name) == ("collections", "OrderedDict"):
            return OrderedDict
        if (module, name) == ("argparse", "Namespace"):
            return argparse.Namespace
        cls = standins.classes().get(f"{module}.{name}")
        if cls is not None:
            return cls
        if not safeload.allow_listed(f"{module}.{name}"):  # builtins.list is data
            unsafe_globals.refuse(str(self.archive.path), f"{module}.{name}")
        return self.refs.setdefault((module, name), GlobalRef(module, name))

    def persistent_load(self, pid: Any) -> StorageRef:
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"
                and isinstance(pid[1], GlobalRef) and isinstance(pid[2], str)):
            raise UnusableInput(f"unexpected persistent id {pid!r:.80}", str(self.archive.path))
        _, stype, key, location, numel = pid
        st = self.storages.get(key)
        if st is None:
            st = self.storages[key] = StorageRef(stype, key, location, numel, self.archive)
        return st

    def check_key(self, key: Any) -> None:
        if isinstance(key, EnumStandIn):  # hashes as (name, value): as cheap as its value
            key = key.value
        super().check_key(key)

    def new_instance(self, cls: Any, args: tuple, kwargs: dict) -> Any:
        if not isinstance(cls, GlobalRef):  # Namespace, OrderedDict, a stand-in
            return super().new_instance(cls, args, kwargs)
        if kwargs:
            raise UnusableInput("NEWOBJ_EX with keyword arguments", str(self.archive.path))
        self.charge(len(args))
        return Reduced(cls, args, newobj=True)

    def _list_target(self, what: str) -> Any:
        if type(self.stack[-1]) is Reduced:
            return self.stack[-1]
        return super()._list_target(what)

    def _dict_target(self) -> Any:
        if type(self.stack[-1]) is Reduced:
            return self.stack[-1]
        return super()._dict_target()

    def set_state(self, inst: Any, state: Any) -> None:
        if isinstance(inst, (Reduced, OrderedDict)):
            super().set_state(inst, state)
            return
        # Namespace, a plain stand-in: the stdlib's __dict__ (and slot-state) update,
        # string keys only, so the record writes back as it was read.
        parts = state if isinstance(state, tuple) and len(state) == 2 else (state, None)
        for part in parts:
            if part is None:
                continue
            if not isinstance(part, dict) or not all(type(k) is str for k in part):
                raise pickle.UnpicklingError(f"malformed {type(inst).__name__} state")
            inst.__dict__.update(part)


def _children(obj: Any) -> Any:
    """What :func:`lrdoctor.read.bytes.limits.check_tree` walks in the re-read graph."""
    if isinstance(obj, dict):
        return [*obj.keys(), *obj.values(), *getattr(obj, "__dict__", {}).values()]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return obj
    if isinstance(obj, Reduced):
        return [*obj.args, obj.state, *(v for item in obj.items for v in item[1:])]
    if isinstance(obj, (argparse.Namespace, PlainStandIn)):
        return list(vars(obj).values())
    return None


def read_pickle(data: bytes, archive: _Archive) -> tuple[Any, dict[str, StorageRef]]:
    """data.pkl's editable object graph and the storages it references, within the limits.

    Checks what the safe reader checks, by itself: the size (``pickle_bytes``), the limited
    machine while it runs, then depth and repeated references of the result (``nodes``).
    """
    path = str(archive.path)
    limits.check_size("pickle_bytes", len(data), path, "data.pkl")
    reader = _Reader(io.BytesIO(data), archive, len(data))
    try:
        obj = reader.load()
        limits.check_tree(obj, path, what="data.pkl", children=_children)
    except UnusableInput:
        raise
    except RecursionError:
        raise UnusableInput("cannot load for rewriting: nested too deeply", path) from None
    except Exception as exc:  # noqa: BLE001 - one line for the user
        raise UnusableInput(f"cannot load for rewriting: {exc}"[:240], path) from None
    return obj, reader.storages


def is_torch_zip(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as zf:
            return any(n.endswith("/data.pkl") and n.count("/") == 1 for n in zf.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def load(path: Path) -> Any:
    """The object graph of ``path``'s data.pkl, editable and writable by :func:`write`.

    The safe reader checks the file first (allow-list, limits), exactly as for ``inspect``;
    the file is opened once and both readers parse the same data.pkl bytes.
    """
    from lrdoctor.read.bytes import safeload
    from lrdoctor.read.layouts import _common

    path = Path(path)
    if not is_torch_zip(path):
        _common.load(path)  # refuses what inspect refuses (a missing file too)
        from lrdoctor.extras import MissingExtra

        raise MissingExtra("torch", f"rewriting {path.name} (a legacy, non-zip torch file)")
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise UnusableInput(f"cannot read: {exc.strerror}", str(path)) from None
    try:
        read = safeload.read_torch_zip(f, str(path))
        archive = _Archive(path, f, read.zf, read.prefix + "/", read.data)
        obj, storages = read_pickle(archive.data_pkl, archive)
        archive.storage_keys = set(storages)
    except BaseException:
        f.close()
        raise
    return _Loaded(obj, archive)


@dataclasses.dataclass
class _Loaded:
    root: Any
    archive: _Archive


def tensor_changes(obj: Any, changes: list) -> list:
    """``changes`` with each new value for a one-element tensor made a tensor holding it."""
    from lrdoctor.core.repair import get_at

    out = []
    for c in changes:
        try:
            cur = get_at(obj, c.key)
        except (KeyError, IndexError, AttributeError, TypeError):
            cur = None
        if isinstance(cur, TensorLeaf) and not isinstance(c.after, TensorLeaf):
            c = dataclasses.replace(c, after=cur.with_value(c.after))
        out.append(c)
    return out


class _Writer:
    """The standins pickler (stand-ins under their original names) for records and refs."""

    def __new__(cls, file: Any) -> Any:
        from lrdoctor.repair.standins import _Pickler

        class W(_Pickler):
            used: list[StorageRef]

            def persistent_id(self, obj: Any) -> Any:
                if isinstance(obj, StorageRef):
                    self.used.append(obj)
                    return ("storage", obj.storage_type, obj.key, obj.location, obj.numel)
                return None

            def save(self, obj: Any, save_persistent_id: bool = True) -> None:
                if isinstance(obj, (GlobalRef, Reduced)):
                    x = self.memo.get(id(obj))
                    if x is not None:
                        self.write(self.get(x[0]))
                        return
                    if isinstance(obj, GlobalRef):
                        self.write(pickle.GLOBAL + obj.module.encode() + b"\n"
                                   + obj.name.encode() + b"\n")
                        self.memoize(obj)
                        return
                    self._save_reduced(obj)
                    return
                super().save(obj, save_persistent_id)

            def _save_reduced(self, obj: Reduced) -> None:
                self.save(obj.ref)
                self.save(tuple(obj.args))
                self.write(pickle.NEWOBJ if obj.newobj else pickle.REDUCE)
                self.memoize(obj)
                for item in obj.items:
                    if item[0] == "append":
                        self.save(item[1])
                        self.write(pickle.APPEND)
                    else:
                        self.save(item[1])
                        self.save(item[2])
                        self.write(pickle.SETITEM)
                if obj.has_state:
                    self.save(obj.state)
                    self.write(pickle.BUILD)

        w = W(file, 2)
        w.used = []
        return w


def _extra(offset: int, name: str, zip64: bool) -> bytes:
    """torch's padding: an ``FB`` extra field of 'Z's so the record's data starts aligned."""
    start = offset + 30 + len(name.encode()) + (20 if zip64 else 0)
    pad = (-start) % _ALIGN
    if pad == 0:
        return b""
    if pad < 4:
        pad += _ALIGN
    return b"FB" + struct.pack("<H", pad - 4) + b"Z" * (pad - 4)


def _put(zf: zipfile.ZipFile, name: str, size: int, chunks: Any) -> None:
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    info.file_size = size
    zip64 = size * 1.05 > zipfile.ZIP64_LIMIT
    assert zf.fp is not None  # an open archive, being written
    info.extra = _extra(zf.fp.tell(), name, zip64)
    with zf.open(info, "w", force_zip64=zip64) as f:
        for chunk in chunks:
            f.write(chunk)


def _copy(src: zipfile.ZipFile, name: str, path: str) -> Any:
    """A member's bytes, in chunks, checked by zipfile against the member's CRC-32 as they
    are read: a corrupt record is one line naming it (and no output is published)."""
    import zlib

    try:
        with src.open(name) as f:
            while chunk := f.read(_CHUNK):
                yield chunk
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError) as exc:
        raise UnusableInput(f"cannot copy the record {name}: {str(exc).splitlines()[0][:120]} "
                            "(a corrupt checkpoint file)", path) from None


def write(loaded: _Loaded, dst: Path) -> None:
    """``loaded`` (as edited) to ``dst``: data.pkl re-pickled, every other record copied verbatim."""
    arch = loaded.archive
    buf = io.BytesIO()
    w = _Writer(buf)
    try:
        w.dump(loaded.root)
    except (pickle.PicklingError, TypeError, AttributeError) as exc:
        raise UnusableInput(f"cannot write the repaired copy: {exc}"[:240], str(dst)) from None
    keys = {st.key for st in w.used if st.data is None}
    taken = set(keys) | {n[len(arch.prefix) + 5:] for n in arch.names
                         if n.startswith(f"{arch.prefix}data/")}
    new: list[StorageRef] = []
    nxt = 0
    for st in w.used:
        if st.data is not None and not st.key:
            while str(nxt) in taken:
                nxt += 1
            st.key = str(nxt)
            taken.add(st.key)
            new.append(st)
    if new:  # the keys were empty while pickling: pickle again with them
        buf = io.BytesIO()
        w = _Writer(buf)
        w.dump(loaded.root)
    data_pkl = buf.getvalue()
    for n in arch.names:  # a copy inflates a deflated record whole: bounded first
        info = arch.zf.getinfo(n)
        if info.compress_type != zipfile.ZIP_STORED and info.file_size > limits.get(
                "deflated_bytes"):
            raise limits.over("deflated_bytes", str(arch.path),
                              f"record {n} is compressed: copying it means inflating "
                              f"{info.file_size:,} bytes")
    old_refs = arch.storage_keys
    dropped = {f"{arch.prefix}data/{k}" for k in old_refs - keys}  # storages no longer used
    dst.parent.mkdir(parents=True, exist_ok=True)
    data_members = [n for n in arch.names if n.startswith(f"{arch.prefix}data/")]
    after = data_members[-1] if data_members else f"{arch.prefix}data.pkl"
    with open(dst, "wb") as fo, zipfile.ZipFile(fo, "w", zipfile.ZIP_STORED,
                                                allowZip64=True) as zf:
        for n in arch.names:
            if n == f"{arch.prefix}data.pkl":
                _put(zf, n, len(data_pkl), [data_pkl])
            elif n not in dropped:
                _put(zf, n, arch.zf.getinfo(n).file_size, _copy(arch.zf, n, str(arch.path)))
            if n == after:
                for st in new:
                    _put(zf, f"{arch.prefix}data/{st.key}", len(st.data or b""), [st.data])
        zf.close()
        fo.flush()
        os.fsync(fo.fileno())
    try:
        arch.check_unchanged()
    except UnusableInput:
        dst.unlink(missing_ok=True)
        raise


def rewrite(src: Path, dst: Path, changes: list) -> None:
    """Load ``src``, apply ``changes`` (:func:`lrdoctor.core.repair.apply_changes`), write ``dst``."""
    from lrdoctor.core.repair import apply_changes

    loaded = load(src)
    try:
        apply_changes(loaded.root, tensor_changes(loaded.root, changes), src)
        write(loaded, dst)
    finally:
        loaded.archive.close()
