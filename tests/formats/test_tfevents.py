"""lrdoctor/read/bytes/tfevents.py on its own: framing, checksums, the protobuf decoder, hostile bytes.

Pure (no tensorboard, no torch): the events are encoded by hand here. The same reader
against Lightning's own TensorBoardLogger files and tensorboard's EventAccumulator is
tests/formats/test_formats_lightning_tblog.py.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lrdoctor.core.errors import LimitExceeded, UnusableInput
from lrdoctor.read.bytes import tfevents


def record(data: bytes) -> bytes:
    head = struct.pack("<Q", len(data))
    return (head + struct.pack("<I", tfevents._masked(head)) + data
            + struct.pack("<I", tfevents._masked(data)))


def ld(field: int, body: bytes) -> bytes:
    """A length-delimited protobuf field (lengths < 128 here: one-byte varints)."""
    assert len(body) < 128
    return bytes([field << 3 | 2, len(body)]) + body


def event(step: int, tag: bytes, value: bytes) -> bytes:
    """An Event with one Summary.Value: ``value`` is its value field(s), encoded."""
    return (b"\x09" + struct.pack("<d", 1.5) + b"\x10" + bytes([step])
            + ld(5, ld(1, ld(1, tag) + value)))


def f32(x: float) -> bytes:
    return b"\x15" + struct.pack("<f", x)  # simple_value


def test_crc32c_is_castagnoli():
    assert tfevents.crc32c(b"123456789") == 0xE3069283
    assert tfevents.crc32c(b"") == 0


@pytest.mark.parametrize("data, why", [
    (b"", "no complete record"),
    (b"step,lr-AdamW\n0,0.001\n", "bad length checksum"),
    (record(b"\x08\x01")[:-1] + b"\x00", "bad data checksum"),
    (record(b"\x2a\x05\x0a\xff\xff\xff\xff"), "a varint runs past its message"),
    (record(b"\x2a\x03\x0a\x09\x00"), "a length-delimited field runs past its message"),
    (record(b"\x0f"), "wire type 7"),
    (record(b"\x0b"), "wire type 3"),
    (record(b"\x10" + b"\xff" * 12), "varint"),
    (record(b"\x00\x01"), "field number 0"),
    (record(b"\x09\x00\x00"), "a 64-bit field runs past its message"),
    (record(event(1, b"\xff\xfe", f32(1.0))), "a tag that is not UTF-8"),
])
def test_malformed_bytes_are_refused_in_one_line(data, why):
    with pytest.raises(UnusableInput) as e:
        tfevents.parse(data, "ev")
    assert str(e.value).startswith("ev: ") and why in str(e.value) and "\n" not in str(e.value)


def test_other_values_are_skipped_and_steps_are_int64():
    """An image-like value, a string tensor, a 2-element tensor: no scalar; a negative
    int64 step is decoded as such (two's complement varint)."""
    neg = b"\x10" + b"\xff" * 9 + b"\x01" + ld(5, ld(1, ld(1, b"lr-AdamW") + f32(0.5)))
    data = (record(event(1, b"img", ld(4, b"\x08\x01")))
            + record(event(2, b"txt", ld(8, b"\x08\x07" + ld(8, b"hi"))))
            + record(event(3, b"two", ld(8, b"\x08\x01" + ld(5, struct.pack("<2f", 1, 2)))))
            + record(neg))
    out = tfevents.parse(data, "ev")
    assert out.values == {"lr-AdamW": [(-1, 0.5)]} and out.records == 4


def test_the_items_limit_counts_records(monkeypatch):
    data = record(event(1, b"lr-AdamW", f32(1.0))) * 10
    assert len(tfevents.parse(data, "ev").values["lr-AdamW"]) == 10
    monkeypatch.setenv("LRDOCTOR_MAX_ITEMS", "12")
    with pytest.raises(LimitExceeded, match="LRDOCTOR_MAX_ITEMS"):
        tfevents.parse(data, "ev")


FUZZ = settings(max_examples=150, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
# simple_value, then a TensorProto {dtype: DT_FLOAT, tensor_content: 1.0f}
SEED = (record(event(3, b"lr-AdamW", f32(1e-3)))
        + record(event(4, b"lr-", ld(8, b"\x08\x01" + ld(4, struct.pack("<f", 1.0))))))


@FUZZ
@given(payload=st.binary(max_size=64), cut=st.integers(0, 200), framed=st.booleans())
def test_fuzzed_event_bytes_parse_or_refuse_in_one_line(payload, cut, framed):
    """Raw bytes (checksums fail early) and framed ones (checksums pass, so the protobuf
    decoder itself sees the noise): a result, or one line naming the file."""
    if framed:  # a cut event's bytes + noise, correctly framed
        (n,) = struct.unpack_from("<Q", SEED)
        data = record(SEED[12:12 + cut % (n + 1)] + payload)
    else:  # noise inserted anywhere in the file
        base = SEED[:cut % (len(SEED) + 1)]
        data = base + payload + SEED[len(base):]
    try:
        out = tfevents.parse(data, "ev")
    except UnusableInput as exc:
        assert str(exc).startswith("ev: ") and "\n" not in str(exc)
    else:
        assert all(isinstance(s, int) and isinstance(v, float)
                   for vals in out.values.values() for s, v in vals)


def test_the_seed_decodes():
    out = tfevents.parse(SEED, "ev")
    assert out.values["lr-AdamW"] == [(3, pytest.approx(1e-3, rel=1e-7))]
    assert out.values["lr-"] == [(4, 1.0)]


def test_a_varint_field_in_a_summary_is_skipped_not_a_traceback():
    """Bug found by typing the decoder's fields (a varint's value is an int, a
    length-delimited one's a (start, stop) pair): the Summary loop unpacked every field
    as a pair, so a varint field there (a newer writer's field, or hostile bytes) raised
    an unexpected TypeError instead of being skipped as protobuf skips unknown fields."""
    summary = b"\x10\x07" + ld(1, ld(1, b"lr") + f32(0.5)) + b"\x08\x03"
    data = record(b"\x10\x04" + ld(5, summary))
    out = tfevents.parse(data, "x.tfevents")
    assert out.values == {"lr": [(4, 0.5)]} and out.records == 1
