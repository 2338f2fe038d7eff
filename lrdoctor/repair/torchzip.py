"""Rewriting a torch zip checkpoint without torch: ``fix`` on the light core install.

``torch.save`` (since 1.6) writes one zip: ``<archive>/data.pkl`` (a protocol-2
pickle whose tensors are ``torch._utils._rebuild_tensor_v2`` calls on persistent
ids ``('storage', torch.<Type>Storage, key, location, numel)``), the storages'
raw bytes in ``<archive>/data/<key>``, and ``version``/``byteorder``/
``.data/serialization_id`` records. A fix changes a few numbers in data.pkl, so
this module re-pickles data.pkl faithfully and copies every other record
byte-for-byte: no tensor is ever materialised and torch is never imported.

Faithful means inert: after the safe reader (:mod:`lrdoctor.safeload`, the
allow-list and limits ``inspect`` uses) has accepted the file, data.pkl is read
again by :class:`_Reader`, which calls nothing from the file. Every global
becomes a :class:`GlobalRef` (its name), every call a :class:`Reduced` (name,
arguments, state) that pickles back as the same opcodes; only plain containers
(``collections.OrderedDict``, ``argparse.Namespace``) and the stand-ins of
:mod:`lrdoctor.repair.standins` are real, so ``apply_changes`` edits ints,
floats and lists in dicts, lists and Namespaces as with torch. A 0-d tensor
(an optimizer ``step``) reads as its value; changing it writes a new storage.
Records are 64-byte aligned with torch's own ``FB`` zip extra-field padding,
so ``torch.load(mmap=True)`` maps the copied storages.
"""

from __future__ import annotations

import argparse
import dataclasses
import io
import os
import pickle
import struct
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

from lrdoctor.errors import UnusableInput

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
        from lrdoctor.safeload import _STORAGE_DTYPES

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
        from lrdoctor.safeload import _DTYPES

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
        raw = st.data if st.data is not None else st.archive.read(st.key)
        off = self.args[1] * size
        return struct.unpack("<" + code, raw[off:off + size])[0]

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
    """The input zip, opened for reading the small storages a value needs."""

    def __init__(self, path: Path):
        self.path = path
        self.zf = zipfile.ZipFile(path)
        names = self.zf.namelist()
        pkl = [n for n in names if n.endswith("data.pkl") and n.count("/") == 1]
        if not pkl:
            raise UnusableInput("not a torch zip checkpoint (no <archive>/data.pkl)", str(path))
        self.prefix = pkl[0][: -len("data.pkl")]
        self.names = names
        order = f"{self.prefix}byteorder"
        if order in names and self.zf.read(order).strip() not in (b"little", b""):
            raise UnusableInput("a big-endian torch file can only be rewritten with torch: "
                                "pip install 'lrdoctor[torch]'", str(path))

    def read(self, key: str) -> bytes:
        return self.zf.read(f"{self.prefix}data/{key}")


class _Reader(pickle._Unpickler):  # type: ignore[name-defined]
    """The pure-Python unpickler with every global a name and every call a record."""

    dispatch = dict(pickle._Unpickler.dispatch)  # type: ignore[attr-defined]

    def __init__(self, file: Any, archive: _Archive):
        super().__init__(file)
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

    def _newobj(self, args: tuple) -> None:
        cls = self.stack.pop()
        if isinstance(cls, GlobalRef):
            self.append(Reduced(cls, tuple(args), newobj=True))
        else:  # Namespace, OrderedDict, a stand-in
            self.append(cls.__new__(cls, *args))

    def load_newobj(self) -> None:
        self._newobj(self.stack.pop())

    def load_newobj_ex(self) -> None:
        kwargs = self.stack.pop()
        args = self.stack.pop()
        if kwargs:
            raise UnusableInput("NEWOBJ_EX with keyword arguments", str(self.archive.path))
        self._newobj(args)

    dispatch[pickle.NEWOBJ[0]] = load_newobj
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex


def is_torch_zip(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as zf:
            return any(n.endswith("/data.pkl") and n.count("/") == 1 for n in zf.namelist())
    except (OSError, zipfile.BadZipFile):
        return False


def load(path: Path) -> Any:
    """The object graph of ``path``'s data.pkl, editable and writable by :func:`write`.

    The safe reader checks the file first (allow-list, limits), exactly as for ``inspect``.
    """
    from lrdoctor.formats import _common

    path = Path(path)
    _common.load(path)
    if not is_torch_zip(path):
        from lrdoctor.extras import MissingExtra

        raise MissingExtra("torch", f"rewriting {path.name} (a legacy, non-zip torch file)")
    archive = _Archive(path)
    try:
        raw = archive.zf.read(f"{archive.prefix}data.pkl")
        reader = _Reader(io.BytesIO(raw), archive)
        obj = reader.load()
    except UnusableInput:
        raise
    except Exception as exc:  # noqa: BLE001 - one line for the user
        raise UnusableInput(f"cannot load for rewriting: {exc}"[:240], str(path)) from None
    return _Loaded(obj, archive)


@dataclasses.dataclass
class _Loaded:
    root: Any
    archive: _Archive


def tensor_changes(obj: Any, changes: list) -> list:
    """``changes`` with each new value for a one-element tensor made a tensor holding it."""
    from lrdoctor.repair.writer import get_at

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
    info.extra = _extra(zf.fp.tell(), name, zip64)
    with zf.open(info, "w", force_zip64=zip64) as f:
        for chunk in chunks:
            f.write(chunk)


def _copy(src: zipfile.ZipFile, name: str) -> Any:
    with src.open(name) as f:
        while chunk := f.read(_CHUNK):
            yield chunk


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
    old_refs = _ref_keys(arch)
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
                _put(zf, n, arch.zf.getinfo(n).file_size, _copy(arch.zf, n))
            if n == after:
                for st in new:
                    _put(zf, f"{arch.prefix}data/{st.key}", len(st.data or b""), [st.data])
        zf.close()
        fo.flush()
        os.fsync(fo.fileno())


def _ref_keys(arch: _Archive) -> set[str]:
    """The storage keys the input's data.pkl references."""
    r = _Reader(io.BytesIO(arch.zf.read(f"{arch.prefix}data.pkl")), arch)
    r.load()
    return set(r.storages)


def rewrite(src: Path, dst: Path, changes: list) -> None:
    """Load ``src``, apply ``changes`` (:func:`lrdoctor.repair.writer.apply_changes`), write ``dst``."""
    from lrdoctor.repair.writer import apply_changes

    loaded = load(src)
    try:
        apply_changes(loaded.root, tensor_changes(loaded.root, changes), src)
        write(loaded, dst)
    finally:
        loaded.archive.zf.close()
