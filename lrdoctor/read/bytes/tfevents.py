"""Scalars from TensorBoard event files (``events.out.tfevents.*``), without tensorboard.

Lightning's default logger is ``TensorBoardLogger``: many runs keep their
``LearningRateMonitor`` LR only in ``<save_dir>/<name>/version_N/events.out.
tfevents.*``. Reading one needs neither tensorboard nor protobuf (no runtime
dependency, and ``inspect`` stays light): the file is TFRecord framing around
serialized ``Event`` protos, and a scalar needs a few fields of them.

Framing, per record: ``uint64 length``, ``uint32 masked crc32c(length)``,
``length`` bytes of data, ``uint32 masked crc32c(data)`` (little-endian). Both
CRCs are checked. Protobuf fields read (``tensorboard/compat/proto``)::

    Event        wall_time=1 (double), step=2 (int64), summary=5 (Summary)
    Summary      value=1 (repeated Value)
    Value        tag=1 (string), simple_value=2 (float), tensor=8 (TensorProto)
    TensorProto  dtype=1 (DT_FLOAT=1, DT_DOUBLE=2), tensor_content=4,
                 float_val=5, double_val=6

``SummaryWriter.add_scalar`` writes ``simple_value``; with ``new_style=True``
(and TF2 / tensorboard's own writers) a one-element ``tensor``. Any other value
(images, histograms, text) is skipped.

Untrusted input, read within :mod:`lrdoctor.read.bytes.limits`: the file's size is capped
by ``tfevents_bytes`` before it is read, records and values count against
``items``, the decoder is iterative over a fixed nesting (no recursion), every
length is checked against what is left, and every failure is
:class:`UnusableInput`, one line naming the file. A truncated *last* record is
what a writer mid-flush leaves (tensorboard ignores it too): it ends the read
and is reported in ``truncated``, not refused.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass, field

from lrdoctor.core.errors import Corrupt, UnusableInput, cannot_read
from lrdoctor.read.bytes import limits

__all__ = ["Scalars", "crc32c", "parse", "read"]

PREFIX = "events.out.tfevents."  # TensorBoard's file name (EventFileWriter)
DT_FLOAT, DT_DOUBLE = 1, 2


def _table() -> list[int]:
    poly, out = 0x82F63B78, []  # Castagnoli, reflected
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        out.append(c)
    return out


_CRC = _table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli) of ``data``: the checksum TFRecord framing uses."""
    crc, t = 0xFFFFFFFF, _CRC
    for b in data:
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(data: bytes) -> int:
    c = crc32c(data)
    return ((((c >> 15) | (c << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


@dataclass
class Scalars:
    """The scalars of one event file: ``tag -> [(step, value), ...]`` in file order."""

    values: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    records: int = 0
    truncated: bool = False  # the last record was cut short (a writer mid-flush)


class _Bad(Exception):
    """A malformed protobuf field: turned into UnusableInput with the record's number."""


def _varint(b: bytes, i: int, end: int) -> tuple[int, int]:
    shift = value = 0
    while True:
        if i >= end or shift > 63:
            raise _Bad("a varint runs past its message")
        c = b[i]
        i += 1
        value |= (c & 0x7F) << shift
        if not c & 0x80:
            return value & 0xFFFFFFFFFFFFFFFF, i
        shift += 7


# A field's value: the integer of a varint (wire type 0), else the (start, stop) of its bytes.
FieldValue = int | tuple[int, int]


def _fields(b: bytes, i: int, end: int) -> Iterator[tuple[int, int, FieldValue]]:
    """(field number, wire type, value or (start, stop) of a length-delimited field)."""
    while i < end:
        key, i = _varint(b, i, end)
        num, wt = key >> 3, key & 7
        if num == 0:
            raise _Bad("field number 0")
        if wt == 0:
            v, i = _varint(b, i, end)
            yield num, wt, v
        elif wt == 1:
            if i + 8 > end:
                raise _Bad("a 64-bit field runs past its message")
            yield num, wt, (i, i + 8)
            i += 8
        elif wt == 5:
            if i + 4 > end:
                raise _Bad("a 32-bit field runs past its message")
            yield num, wt, (i, i + 4)
            i += 4
        elif wt == 2:
            n, i = _varint(b, i, end)
            if n > end - i:
                raise _Bad("a length-delimited field runs past its message")
            yield num, wt, (i, i + n)
            i += n
        else:  # groups (3, 4) are not in these messages; 6, 7 do not exist
            raise _Bad(f"wire type {wt}")


def _tensor_scalar(b: bytes, s: int, e: int) -> float | None:
    """The one float of a scalar TensorProto, or None (another dtype, or not one element)."""
    dtype, content = 0, None
    vals: list[float] = []
    for num, wt, v in _fields(b, s, e):
        if isinstance(v, int):  # wire type 0
            if num == 1:
                dtype = v
        elif num == 4 and wt == 2:
            content = b[v[0]:v[1]]
        elif num == 5 and wt == 5:
            vals.append(struct.unpack_from("<f", b, v[0])[0])
        elif num == 5 and wt == 2 and (v[1] - v[0]) % 4 == 0 and v[1] - v[0] <= 8:
            vals += [x for (x,) in struct.iter_unpack("<f", b[v[0]:v[1]])]
        elif num == 6 and wt == 1:
            vals.append(struct.unpack_from("<d", b, v[0])[0])
        elif num == 6 and wt == 2 and (v[1] - v[0]) % 8 == 0 and v[1] - v[0] <= 16:
            vals += [x for (x,) in struct.iter_unpack("<d", b[v[0]:v[1]])]
        if len(vals) > 1:
            return None
    if content is not None and not vals:
        fmt = {DT_FLOAT: "<f", DT_DOUBLE: "<d"}.get(dtype)
        if fmt is None or len(content) != struct.calcsize(fmt):
            return None
        value: float = struct.unpack(fmt, content)[0]
        return value
    if len(vals) == 1 and dtype in (DT_FLOAT, DT_DOUBLE, 0):
        return vals[0]
    return None


def _event(b: bytes, s: int, e: int, out: Scalars, budget: list[int], path: str | None) -> None:
    step = 0
    summaries: list[tuple[int, int]] = []
    for num, wt, v in _fields(b, s, e):
        if isinstance(v, int):  # wire type 0
            if num == 2:
                step = v - (1 << 64) if v >> 63 else v  # int64, two's complement
        elif num == 5 and wt == 2:
            summaries.append(v)
    for ss, se in summaries:
        for num, wt, sv in _fields(b, ss, se):
            # Summary.value (field 1) only: a field of another number or wire type (a
            # varint has no bytes to read) is skipped, as protobuf skips unknown fields.
            if num != 1 or wt != 2 or isinstance(sv, int):
                continue
            vs, ve = sv
            tag: str | None = None
            value: float | None = None
            for fn, fw, fv in _fields(b, vs, ve):
                if isinstance(fv, int):  # wire type 0: no Value field this reader reads
                    continue
                if fn == 1 and fw == 2:
                    try:
                        tag = b[fv[0]:fv[1]].decode("utf-8")
                    except UnicodeDecodeError:
                        raise _Bad("a tag that is not UTF-8") from None
                elif fn == 2 and fw == 5:
                    value = struct.unpack_from("<f", b, fv[0])[0]
                elif fn == 8 and fw == 2:
                    value = _tensor_scalar(b, fv[0], fv[1])
            if tag is None or value is None:
                continue
            budget[0] -= 1
            if budget[0] < 0:
                raise limits.over("items", path, "the event file holds too many records/values")
            out.values.setdefault(tag, []).append((step, float(value)))


def parse(data: bytes, path: str | None) -> Scalars:
    """The scalars of an event file's bytes; :class:`UnusableInput` for anything malformed."""
    out, budget = Scalars(), [limits.get("items")]
    i, n = 0, len(data)
    while i < n:
        if n - i < 12:
            out.truncated = True
            break
        header = data[i:i + 8]
        (length,), (hcrc,) = struct.unpack("<Q", header), struct.unpack_from("<I", data, i + 8)
        if _masked(header) != hcrc:
            raise UnusableInput(f"not a TensorBoard event file: record {out.records + 1} "
                                f"at byte {i}: bad length checksum", path)
        if length + 16 > n - i:
            out.truncated = True
            break
        s, e = i + 12, i + 12 + length
        (dcrc,) = struct.unpack_from("<I", data, e)
        if _masked(data[s:e]) != dcrc:
            raise Corrupt(f"corrupt TensorBoard event file: record {out.records + 1} "
                          f"at byte {i}: bad data checksum", path)
        out.records += 1
        budget[0] -= 1
        if budget[0] < 0:
            raise limits.over("items", path, "the event file holds too many records/values")
        try:
            _event(data, s, e, out, budget, path)
        except _Bad as exc:
            raise UnusableInput(f"not a valid TensorBoard Event: record {out.records} at byte "
                                f"{i}: {exc}", path) from None
        i = e + 4
    if out.records == 0:
        raise UnusableInput("no complete record: not a TensorBoard event file", path)
    return out


def read(path: str | os.PathLike[str]) -> Scalars:
    """The scalars of the event file ``path``, its size capped by ``tfevents_bytes``."""
    from lrdoctor.read.bytes.storage import as_path, open_binary

    p = str(path)
    try:
        limits.check_size("tfevents_bytes", as_path(p).stat().st_size, p,
                          "the TensorBoard event file")
        with open_binary(p) as f:
            raw = f.read(limits.get("tfevents_bytes") + 1)
    except OSError as exc:
        raise cannot_read(exc, p) from None
    limits.check_size("tfevents_bytes", len(raw), p, "the TensorBoard event file")
    return parse(raw, p)

