"""torch.distributed.checkpoint (DCP) folders, read metadata-only and without torch.

Layout (``FileSystemWriter``)::

    <ckpt>/.metadata          # pickle of Metadata(state_dict_metadata, planner_data,
                              #   storage_data, storage_meta, version)
    <ckpt>/__<rank>_<n>.distcp  # the items, back to back

``state_dict_metadata`` maps each flattened key (fqn) to ``TensorStorageMetadata``
(dtype, global size, chunks) or ``BytesStorageMetadata`` (any other object);
``storage_data`` maps ``MetadataIndex(fqn, offset)`` to ``_StorageInfo(relative_path,
offset, length, transform_descriptors)``. A bytes item is ``torch.save(obj)``
(or the raw bytes of an ``io.BytesIO``) written at that offset; a tensor item is
``torch.save(tensor)`` or its raw bytes. ``planner_data`` of the default planner
maps each fqn to its path in the original nested dict (ints for list indices).

Why a reader of our own: DCP loads ``.metadata`` with plain ``pickle.load`` and
the bytes items with ``torch.load(weights_only=False)``: both run code from the
checkpoint. Here ``.metadata`` goes through :mod:`lrdoctor.read.bytes.safeload` (only the
DCP metadata classes are allow-listed, as inert records) and each bytes item is
located by offset/length and read with the same safe torch-zip reader. Tensors
stay :class:`~lrdoctor.read.bytes.safeload.TensorRef` (shape/dtype, no payload), except
one-element tensors (an optimizer ``step``, torchtitan's ``train_state.step``),
whose value is read. Items written through a transform (compression, ...)
cannot be decoded here and are refused with one line naming the key.

:func:`load` returns a :class:`DcpState`: the flat ``fqn -> value`` map and the
same values re-nested (``tree``), so layouts look them up like a ``torch.load`` dict.
No framework knowledge lives here; the DCP layout (any DCP folder) is
:mod:`lrdoctor.read.layouts.dcp`.
"""

from __future__ import annotations

import io
import os
import stat
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from lrdoctor.core.errors import Corrupt, UnsafePickle, UnusableInput
from lrdoctor.core.fieldref import FieldRef, Key
from lrdoctor.core.tree import dig
from lrdoctor.read.bytes import limits
from lrdoctor.read.bytes.storage import open_binary, reader_path
from lrdoctor.read.bytes.unsafe_globals import HostileRecord, resolves_a_global

METADATA = ".metadata"
SUFFIX = ".distcp"
MAX_METADATA_BYTES = 512 << 20  # a 512-rank checkpoint's chunk table is tens of MiB
# defaults of the limits dcp_item_bytes and dcp_bytes (read through limits.get)
MAX_ITEM_BYTES = limits.LIMITS["dcp_item_bytes"].default
MAX_TOTAL_BYTES = limits.LIMITS["dcp_bytes"].default
SMALL_TENSOR_BYTES = 1 << 20  # a one-element tensor item is a few KiB (a torch zip)

_BYTES = "torch.distributed.checkpoint.metadata.BytesStorageMetadata"
_TENSOR = "torch.distributed.checkpoint.metadata.TensorStorageMetadata"

# A record's fields as the untrusted ``.metadata`` pickle gives them: keys and values are
# whatever the file claims, so each is narrowed (isinstance) where it is used.
Fields = dict[object, object]
# One storage entry of an fqn: (chunk offsets, its ``_StorageInfo`` fields).
Chunk = tuple[tuple[object, ...], Fields]


@dataclass
class DcpState:
    """What :func:`load` found in one DCP folder."""

    path: Path
    flat: dict[str, Any]  # fqn -> value (bytes items unpickled, tensors as refs or values)
    tree: dict[str, Any]  # ``flat`` re-nested along the planner's paths (or the dots)
    files: list[str] = field(default_factory=list)  # .metadata, then every .distcp read
    skipped: dict[str, str] = field(default_factory=dict)  # fqn -> why it was not read
    # Bytes items the caller's ``leave`` chose not to read: fqn -> stored length (also
    # named in ``skipped``), so the caller can read them after all if it must.
    left: dict[str, int] = field(default_factory=dict)
    tensors: int = 0
    bytes_items: int = 0
    bytes_read: int = 0  # bytes of the bytes items read (bounded by the limit dcp_bytes)
    version: str | None = None
    # fqn -> the key path its value was re-nested at in ``tree`` (the planner's, else the
    # dots): how a field of ``tree`` is traced back to the item that holds it (:meth:`ref`).
    paths: dict[str, tuple[Key, ...]] = field(default_factory=dict)
    # Classes kept opaque in .metadata and the items, with the fields still read from them
    # (another framework's _StorageInfo: its offsets), and references kept as names.
    notes: list[str] = field(default_factory=list)

    def ref(self, key: tuple[Key, ...]) -> FieldRef | None:
        """The :class:`FieldRef` of the field at ``key`` in ``tree``: ``.metadata`` of this
        folder, ``item`` the fqn of the DCP item holding it, ``key`` the path inside that
        item's value (empty for a leaf item). None when no item read holds it."""
        best: tuple[str, int] | None = None
        for fqn, p in self.paths.items():
            if key[:len(p)] == p and (best is None or len(p) > best[1]):
                best = (fqn, len(p))
        if best is None:
            return None
        return FieldRef(str(self.path / METADATA), tuple(key[best[1]:]), best[0])

    def get(self, dotted: str, default: Any = None) -> Any:
        """A value by its fqn, or by a dotted path into ``tree``."""
        if dotted in self.flat:
            return self.flat[dotted]
        return dig(self.tree, dotted, default)


# ---------------------------------------------------------------- layout

def is_dcp(path: Path) -> bool:
    """A folder holding ``.metadata`` and at least one ``*.distcp`` (cheap, no unpickling)."""
    path = reader_path(path)
    try:
        return path.is_dir() and (path / METADATA).is_file() and any(
            p.suffix == SUFFIX for p in path.iterdir())
    except OSError:
        return False


def _inside(folder: Path, name: str) -> Path:
    """``folder/name`` if it is a regular file that stays inside ``folder`` (no ``..``, no
    symlink leading out): a checkpoint must not make lrdoctor read elsewhere."""
    if not name or name != os.path.basename(name) or name in (".", "..") or "\\" in name:
        raise UnusableInput(f"storage path {name[:80]!r} points outside the checkpoint",
                            str(folder))
    p = folder / name
    if not isinstance(p, Path):  # an object store (lrdoctor.read.bytes.storage): no symlinks there
        if not p.is_file():
            raise UnusableInput(f"missing data file {name}", str(folder))
        return p
    try:
        st = os.lstat(p)
    except OSError:
        raise UnusableInput(f"missing data file {name}", str(folder)) from None
    if stat.S_ISLNK(st.st_mode):
        real = Path(os.path.realpath(p))
        if real.parent != Path(os.path.realpath(folder)) or not real.is_file():
            raise UnusableInput(f"{name} is a symlink leading out of the checkpoint",
                                str(folder))
    elif not stat.S_ISREG(st.st_mode):
        raise UnusableInput(f"{name} is not a regular file", str(folder))
    return p


def _state(obj: object, cls: str | None = None) -> Fields:
    from lrdoctor.read.bytes.safeload import Opaque

    if isinstance(obj, Opaque) and (cls is None or obj.cls == cls) and isinstance(obj.state, dict):
        state: Fields = obj.state
        return state
    raise UnusableInput(f"malformed DCP metadata (expected {cls or 'a record'}, found "
                        f"{getattr(obj, 'cls', type(obj).__name__)})")


@dataclass(frozen=True)
class _Metadata:
    """``.metadata``'s ``Metadata`` record, its two tables checked to be dicts."""

    fields: Fields  # every field, as the file has them
    state_dict_metadata: Fields  # fqn -> TensorStorageMetadata / BytesStorageMetadata record
    storage_data: Fields  # MetadataIndex record -> _StorageInfo record


def read_metadata(folder: Path) -> Fields:
    """The fields of the ``Metadata`` record in ``folder/.metadata`` (safe unpickler)."""
    return _read_metadata(folder).fields


def _read_metadata(folder: Path) -> _Metadata:
    from lrdoctor.read.bytes import safeload

    folder = reader_path(folder)
    f = _inside(folder, METADATA)
    size = f.stat().st_size
    if size > MAX_METADATA_BYTES:
        raise UnusableInput(f"{size >> 20} MiB of metadata; refusing more than "
                            f"{MAX_METADATA_BYTES >> 20} MiB", str(f))
    md = safeload.load(f)
    try:
        state = _state(md, "torch.distributed.checkpoint.metadata.Metadata")
    except UnusableInput as exc:
        raise exc.inside(str(f)) from None
    sd_meta, storage_data = state.get("state_dict_metadata"), state.get("storage_data")
    if not isinstance(sd_meta, dict) or not isinstance(storage_data, dict):
        raise UnusableInput("DCP metadata without state_dict_metadata/storage_data "
                            "(not written by FileSystemWriter?)", str(f))
    return _Metadata(state, sd_meta, storage_data)


# ---------------------------------------------------------------- read

def wanted(fqn: str, prefixes: tuple[str, ...] | None) -> bool:
    """Whether ``fqn`` is one of ``prefixes`` or lies under one (None: every item)."""
    return prefixes is None or any(fqn == p or fqn.startswith(p if p.endswith(("/", "."))
                                                              else p + ".") or
                                   fqn.startswith(p + "/") for p in prefixes)


def _storage_index(storage: Fields) -> dict[str, list[Chunk]]:
    """fqn -> [(chunk offsets, _StorageInfo fields)]."""
    out: dict[str, list[Chunk]] = {}
    for key, info in storage.items():
        k, v = _state(key), _state(info)
        fqn = k.get("fqn")
        if not isinstance(fqn, str):
            continue
        off = k.get("offset")
        out.setdefault(fqn, []).append((tuple(off) if isinstance(off, tuple) else (), v))
    return out


def _check_info(files: _Files, fqn: str, info: Fields, limit: int) -> tuple[str, int, int]:
    folder = files.folder
    rel, off, length = info.get("relative_path"), info.get("offset"), info.get("length")
    if not isinstance(rel, str) or type(off) is not int or type(length) is not int \
            or off < 0 or length < 0:
        raise UnusableInput(f"malformed storage entry for {fqn!r}", str(folder / METADATA))
    transforms = info.get("transform_descriptors")
    if transforms:
        # torch writes a list of names; a file may claim anything (shown, never iterated)
        shown = list(transforms)[:3] if isinstance(transforms, (list, tuple)) \
            else f"{transforms!r:.80}"
        raise UnusableInput(f"item {fqn!r} is stored through transforms "
                            f"{shown} that lrdoctor cannot "
                            "decode (compressed or encrypted DCP)", str(folder / rel))
    if length > limit:
        raise _TooBig(length)
    path, size = files.check(rel)
    if off + length > size:
        raise Corrupt(f"item {fqn!r} lies past the end of {rel} (truncated checkpoint)",
                      str(path))
    return rel, off, length


class _TooBig(Exception):
    def __init__(self, length: int):
        super().__init__(length)
        self.length = length


class _Files:
    """Open data files, validated once each (``_inside``), read by offset."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.handles: dict[str, BinaryIO] = {}
        self.sizes: dict[str, int] = {}

    def check(self, rel: str) -> tuple[Path, int]:
        if rel not in self.sizes:
            path = _inside(self.folder, rel)
            self.sizes[rel] = path.stat().st_size
        return self.folder / rel, self.sizes[rel]

    def read(self, rel: str, off: int, length: int) -> bytes:
        f = self.handles.get(rel)
        if f is None:
            f = self.handles[rel] = open_binary(self.folder / rel)  # closed below; range reads
        f.seek(off)
        return f.read(length)

    def close(self) -> None:
        for f in self.handles.values():
            f.close()
        self.handles.clear()


def _tensor_value(data: bytes, label: str, dtype: str) -> Any:
    """The single value of a one-element tensor item (torch zip or raw bytes)."""
    from lrdoctor.read.bytes import safeload

    if data[:2] == b"PK":
        ref = safeload.load_bytes(data, label)
        if not isinstance(ref, safeload.TensorRef) or ref.numel != 1:
            raise UnusableInput("a one-element tensor item holds something else", label)
        return safeload.read_values(ref, data=data)[0]
    return safeload.decode_values(dtype, data, 1)[0]


def _small_values(obj: Any, data: bytes) -> Any:
    """One-element tensors inside a bytes item (Megatron's ``common_step``) become their
    value: their bytes live in ``data``, which a TensorRef cannot point back to."""
    from lrdoctor.read.bytes.safeload import map_refs, read_values

    return map_refs(obj, lambda r: read_values(r, data=data)[0]
                    if r.numel == 1 and r.storage_key else r)


def _numel(size: tuple[int, ...]) -> int:
    n = 1
    for s in size:
        n *= s
    return n


def load(folder: Path, *, prefixes: Iterable[str] | None = None,
         select: Callable[[str], bool] | None = None,
         leave: Callable[[str, int], str | None] | None = None,
         unknown_as_opaque: bool | None = None, every: bool = False) -> DcpState:
    """Read one DCP folder metadata-only (see the module docstring).

    ``prefixes``: only items whose fqn is one of them or lies under one
    (``"lr_scheduler"``, ``"common_state/"``) are read; None reads every bytes item.
    ``select``: instead of ``prefixes``, a predicate on the fqn (a format that knows
    item names by pattern, e.g. Megatron's ``chained_<i>.optimizer.distributed...``).
    ``leave``: of the bytes items selected, called with the fqn and the item's stored
    length (from ``.metadata``, before any data file is opened); a reason leaves the item
    unread (``skipped`` says why, ``left`` its length), None reads it. Bytes items over
    the limit ``dcp_item_bytes``, or past ``dcp_bytes`` in all, are left out and named in
    ``skipped``; with ``every`` (a verdict on the folder, :mod:`lrdoctor.read.bytes.vet`)
    they are refused naming the limit instead, as is an item only kept as raw bytes that
    is a pickle after all: nothing is left unchecked. Raises UnusableInput / UnsafePickle with
    one line naming the file and key.
    """
    folder = reader_path(folder)
    md = _read_metadata(folder)
    want = tuple(prefixes) if prefixes is not None else None
    index = _storage_index(md.storage_data)
    version = md.fields.get("version")
    st = DcpState(path=folder, flat={}, tree={}, files=[str(folder / METADATA)],
                  version=version if isinstance(version, str) else None)
    todo: list[tuple[str, object, object]] = []
    for fqn, meta in md.state_dict_metadata.items():
        if not isinstance(fqn, str):
            continue
        cls = getattr(meta, "cls", None)
        if cls == _TENSOR:
            st.tensors += 1
        elif cls == _BYTES:
            st.bytes_items += 1
        if not (select(fqn) if select is not None else wanted(fqn, want)):
            continue
        if leave is not None and cls == _BYTES:
            length = _length(index.get(fqn))
            why = leave(fqn, length) if length is not None else None
            if why and length is not None:
                st.skipped[fqn] = why
                st.left[fqn] = length
                continue
        todo.append((fqn, cls, meta))
    # Read in file order, so a cold cache sees forward reads.
    todo.sort(key=lambda t: _where(index.get(t[0])))
    files = _Files(folder)
    try:
        for fqn, cls, meta in todo:
            _read_item(files, fqn, cls, meta, index.get(fqn) or [], st, unknown_as_opaque,
                       every)
    finally:
        files.close()
    st.files += sorted(str(folder / rel) for rel in files.sizes)
    st.tree = _nest(st.flat, md.fields.get("planner_data"), st.skipped, st.paths)
    from lrdoctor.read.bytes.safeload import opaque_notes

    st.notes = opaque_notes(md.fields, str(folder / METADATA)) + opaque_notes(
        st.flat, f"{folder} (DCP items)")
    return st


def _length(chunks: list[Chunk] | None) -> int | None:
    """A bytes item's stored length as ``.metadata`` records it (None if malformed)."""
    length = chunks[0][1].get("length") if chunks else None
    return length if type(length) is int and length >= 0 else None


def _where(chunks: list[Chunk] | None) -> tuple[str, int]:
    info: Fields = chunks[0][1] if chunks else {}
    rel, off = info.get("relative_path"), info.get("offset")
    return (rel if isinstance(rel, str) else "", off if type(off) is int else 0)


def _read_item(files: _Files, fqn: str, cls: object, meta: object, chunks: list[Chunk],
               st: DcpState,
               unknown_as_opaque: bool | None, every: bool = False) -> None:
    from lrdoctor.read.bytes import safeload

    if cls == _BYTES:
        item_limit = limits.get("dcp_item_bytes")
        budget = limits.get("dcp_bytes") - st.bytes_read
        if not chunks:
            st.skipped[fqn] = "no storage entry"
            return
        limit = min(item_limit, budget)
        try:
            rel, off, length = _check_info(files, fqn, chunks[0][1], limit)
        except _TooBig as big:
            if every:
                name = "dcp_item_bytes" if big.length > item_limit else "dcp_bytes"
                raise limits.over(name, str(files.folder / METADATA),
                                  f"item {fqn!r} is {big.length:,} bytes") from None
            st.skipped[fqn] = (f"bytes item of {big.length:,} bytes left unread (limit "
                               f"{limit:,} bytes)")
            return
        st.bytes_read += length
        data = files.read(rel, off, length)
        label = f"{files.folder / rel}[{fqn}]"
        try:
            st.flat[fqn] = _small_values(
                safeload.load_bytes(data, label, unknown_as_opaque=unknown_as_opaque), data)
        except UnsafePickle as exc:
            # DCP's default planner torch.saves an io.BytesIO value as a pickled BytesIO
            # (older torchtitan's loss logs): inert, left unread like any unknown class.
            if safeload.runs_code(exc.global_name) or isinstance(exc, HostileRecord):
                raise
            # An unknown (not on the allow-list) class in one item: that item stays
            # unread, the rest of the checkpoint can still be judged.
            st.skipped[fqn] = f"holds {exc.global_name}, not on the allow-list"
        except UnusableInput:
            if data[:1] in (b"PK", b"\x80") or (every and resolves_a_global(io.BytesIO(data),
                                                                             label)):
                raise
            st.flat[fqn] = data  # an io.BytesIO saved as is: its own format
    elif cls == _TENSOR:
        st.flat[fqn] = _tensor_entry(files, fqn, meta, chunks, st)
    else:
        st.skipped[fqn] = f"unknown storage type {cls}"


def _tensor_entry(files: _Files, fqn: str, meta: object, chunks: list[Chunk], st: DcpState
                  ) -> Any:
    from lrdoctor.read.bytes.safeload import Opaque, TensorRef

    m = _state(meta)
    props = getattr(m.get("properties"), "state", None)
    dtype = "?"
    if isinstance(props, tuple) and props and isinstance(props[0], str):
        dtype = props[0].removeprefix("torch.")
    elif isinstance(props, dict) and isinstance(props.get("dtype"), str):
        dtype = props["dtype"].removeprefix("torch.")
    claimed = m.get("size")
    # torch.Size (a tuple of ints through safeload); any other claim is no size
    size: tuple[int, ...] = claimed if isinstance(claimed, tuple) \
        and all(type(n) is int for n in claimed) else ()
    claimed_rel = chunks[0][1].get("relative_path", "") if chunks else ""
    rel = claimed_rel if isinstance(claimed_rel, str) else ""  # _check_info names a bad one
    folder = files.folder
    ref = TensorRef(dtype, size, str(folder / rel) if rel else str(folder / METADATA),
                    f"dcp:{fqn}", 0, ())
    if _numel(size) != 1 or len(chunks) != 1:
        return ref
    try:
        rel, off, length = _check_info(files, fqn, chunks[0][1], SMALL_TENSOR_BYTES)
    except _TooBig:
        return ref
    except UnusableInput as exc:
        st.skipped[fqn] = str(exc)
        return Opaque("dcp.unread_tensor", state={"dtype": dtype, "shape": size,
                                                  "reason": str(exc)})
    return _tensor_value(files.read(rel, off, length), f"{folder / rel}[{fqn}]", dtype)


def _nest(flat: dict[str, Any], planner: object, skipped: dict[str, str],
          paths: dict[str, tuple[Key, ...]]) -> dict[str, Any]:
    """Re-nest the flat items: along the default planner's recorded paths when present,
    else by splitting the fqn on dots. ``paths`` gets each item's path as re-nested (a
    list's int keys included, as :func:`_lists` turns them into lists)."""
    root: dict[Any, Any] = {}
    plan = planner if isinstance(planner, dict) else None
    mapped = plan is not None
    for fqn, value in flat.items():
        path = plan.get(fqn) if plan is not None else None
        if not (isinstance(path, tuple) and path and all(isinstance(p, (str, int)) for p in path)):
            path = tuple(fqn.split("."))
        node = root
        ok = True
        for part in path[:-1]:
            nxt = node.setdefault(part, {})
            if not isinstance(nxt, dict):
                ok = False
                break
            node = nxt
        if not ok or (path[-1] in node and isinstance(node[path[-1]], dict)):
            skipped.setdefault(fqn, "clashes with another key when re-nested (kept in flat)")
            continue
        node[path[-1]] = value
        paths[fqn] = path
    # The top level holds the state dict's names: a dict whatever the planner paths claim.
    tree = {str(k): _lists(v, mapped, k) for k, v in root.items()}
    for fqn, path in paths.items():
        paths[fqn] = _as_nested(tree, path)
    return tree


def _as_nested(tree: object, path: tuple[object, ...]) -> tuple[Key, ...]:
    """``path`` as it walks the re-nested ``tree``: a digit key where :func:`_lists` made a
    list becomes an int, an int key where it stayed a dict becomes a str."""
    out: list[Key] = []
    node = tree
    for part in path:
        if isinstance(node, list):
            k: Key = int(str(part))
        else:
            k = str(part)
        out.append(k)
        if isinstance(node, dict):
            node = node.get(k)
        elif isinstance(node, list) and isinstance(k, int) and 0 <= k < len(node):
            node = node[k]
        else:
            node = None
    return tuple(out)


def _lists(node: Any, mapped: bool, parent: object) -> Any:
    """Dicts keyed 0..n-1 become lists (param_groups): by the planner's int keys, or, with
    no planner data, only under ``param_groups`` (torch's ``state`` is keyed by ids)."""
    if not isinstance(node, dict):
        return node
    out = {k: _lists(v, mapped, k) for k, v in node.items()}
    keys = list(out)
    if keys and mapped and all(type(k) is int for k in keys) \
            and sorted(keys) == list(range(len(keys))):
        return [out[i] for i in range(len(keys))]
    if keys and not mapped and parent == "param_groups" and all(
            isinstance(k, str) and k.isdigit() for k in keys) \
            and sorted(int(k) for k in keys) == list(range(len(keys))):
        return [out[str(i)] for i in range(len(keys))]
    return {str(k): v for k, v in out.items()}
