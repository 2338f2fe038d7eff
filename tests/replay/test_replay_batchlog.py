"""Batch logs: three formats read alike, bad rows named by number, synthetic lengths."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.batchlog import read_batch_log, synthetic, write_batch_log

ROWS = [
    {"step": 0, "tokens": 812, "prompt_id": "p0", "docs": 2, "rank": 0},
    {"step": 0, "tokens": 4096, "prompt_id": "p0", "docs": 1, "rank": 1},
    {"step": 1, "tokens": 77, "prompt_id": "p1", "docs": 3, "rank": 0},
]


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _write_csv(path, rows):
    pd.DataFrame(rows).to_csv(path, index=False)


@pytest.mark.parametrize("ext", ["jsonl", "csv", "parquet"])
def test_formats_round_trip(tmp_path, ext):
    df = pd.DataFrame(ROWS)
    f = tmp_path / f"log.{ext}"
    write_batch_log(df, f)
    got = read_batch_log(f)
    assert list(got.columns) == ["step", "tokens", "prompt_id", "docs", "rank"]
    assert got["tokens"].tolist() == [812, 4096, 77]
    assert got["step"].dtype == np.int64
    assert got["prompt_id"].tolist() == ["p0", "p0", "p1"]


def test_sniffed_without_extension_and_aliases(tmp_path):
    f = tmp_path / "log"
    f.write_text('{"global_step": 3, "seq_len": 10}\n\n{"global_step": 3, "seq_len": 11}\n')
    got = read_batch_log(f)
    assert got["step"].tolist() == [3, 3]
    assert got["tokens"].tolist() == [10, 11]
    pq.write_table(pa.table({"step": [1], "length": [5]}), tmp_path / "pq.bin")
    assert read_batch_log(tmp_path / "pq.bin")["tokens"].tolist() == [5]


@pytest.mark.parametrize(
    ("bad", "msg"),
    [
        ({"step": 1, "tokens": "abc"}, "row 3: tokens is 'abc'; expected an integer"),
        ({"step": 1, "tokens": 0}, "row 3: tokens is 0; it must be >= 1"),
        ({"step": -1, "tokens": 5}, "row 3: step is -1; it must be >= 0"),
        ({"step": 1, "tokens": 2.5}, "row 3: tokens is 2.5; expected an integer"),
        ({"step": 1}, "row 3: no 'tokens' field"),
    ],
)
def test_jsonl_bad_row_number(tmp_path, bad, msg):
    f = tmp_path / "log.jsonl"
    _write_jsonl(f, [ROWS[0], ROWS[1], bad])
    with pytest.raises(UnusableInput) as exc:
        read_batch_log(f)
    assert str(exc.value) == f"{f}: {msg}"
    assert "\n" not in str(exc.value)


def test_jsonl_broken_json_line(tmp_path):
    f = tmp_path / "log.jsonl"
    f.write_text('{"step": 0, "tokens": 5}\n{"step": 0, "tokens": \n')
    with pytest.raises(UnusableInput, match=r"row 2: not valid JSON"):
        read_batch_log(f)


def test_csv_bad_row_number(tmp_path):
    f = tmp_path / "log.csv"
    f.write_text("step,tokens,rank\n0,100,0\n0,200,1\n1,-5,0\n")
    with pytest.raises(UnusableInput, match=r"row 3: tokens is -5; it must be >= 1"):
        read_batch_log(f)
    f.write_text("step,tokens\n0,100\n0,200,7\n")
    with pytest.raises(UnusableInput, match=r"row 2 \(line 3\): 3 fields, the header has 2"):
        read_batch_log(f)
    f.write_text("step,tokens\n0,100\n1,\n")
    with pytest.raises(UnusableInput, match=r"row 2: tokens is None; expected an integer"):
        read_batch_log(f)


def test_parquet_bad_row_number(tmp_path):
    f = tmp_path / "log.parquet"
    pq.write_table(pa.table({"step": [0, 0, 1, 1], "tokens": [10, 20, None, 40]}), f)
    with pytest.raises(UnusableInput, match=r"row 3: tokens is None; expected an integer"):
        read_batch_log(f)
    pq.write_table(pa.table({"step": [0, 1], "tokens": [1.0, 7.5]}), f)
    with pytest.raises(UnusableInput, match=r"row 2: tokens is 7.5"):
        read_batch_log(f)
    f.write_bytes(b"PAR1 not really")
    with pytest.raises(UnusableInput, match="not a readable Parquet file"):
        read_batch_log(f)


def test_missing_column_and_missing_file(tmp_path):
    f = tmp_path / "log.csv"
    f.write_text("step,len_bytes\n0,1\n")
    with pytest.raises(UnusableInput, match=r"no 'tokens' column \(found: step, len_bytes\)"):
        read_batch_log(f)
    with pytest.raises(UnusableInput, match="no such batch log file"):
        read_batch_log(tmp_path / "absent.jsonl")


def test_whole_floats_accepted(tmp_path):
    # pandas writes int columns with NaN elsewhere as floats; 12.0 is a fine token count.
    f = tmp_path / "log.jsonl"
    _write_jsonl(f, [{"step": 0, "tokens": 12.0}, {"step": 0, "tokens": 13}])
    assert read_batch_log(f)["tokens"].tolist() == [12, 13]


# ---------------------------------------------------------------- synthetic


def test_synthetic_shapes_and_determinism():
    df = synthetic("uniform:512:8192", steps=10, samples_per_step=64, seed=3)
    assert len(df) == 640
    assert df["step"].value_counts().tolist() == [64] * 10
    assert df["tokens"].between(512, 8192).all()
    again = synthetic("uniform:512:8192", steps=10, samples_per_step=64, seed=3)
    assert df.equals(again)
    assert not df.equals(synthetic("uniform:512:8192", steps=10, samples_per_step=64, seed=4))


def test_synthetic_lognormal_mean_and_cap():
    df = synthetic("lognormal:mean=2048,sigma=0.6,max=16384", 50, 400, seed=0)
    assert abs(df["tokens"].mean() - 2048) / 2048 < 0.03
    assert df["tokens"].max() <= 16384
    fixed = synthetic("fixed:4096", 2, 3)
    assert fixed["tokens"].tolist() == [4096] * 6


def test_synthetic_turns_prompt_ids_contiguous_per_step():
    df = synthetic("normal:mean=1000,std=200;turns:1:5;docs:1:3", 20, 50, seed=1)
    for _, g in df.groupby("step"):
        pid = g["prompt_id"].to_numpy()
        runs = np.flatnonzero(np.diff(pid)) + 1
        sizes = np.diff(np.concatenate(([0], runs, [len(pid)])))
        assert sizes.max() <= 5
        assert len(set(pid.tolist())) == len(sizes)  # contiguous
    # prompts never cross steps
    assert df.groupby("prompt_id")["step"].nunique().max() == 1
    assert df["docs"].between(1, 3).all()


@pytest.mark.parametrize(
    ("spec", "msg"),
    [
        ("zipf:2", "unknown distribution 'zipf'"),
        ("uniform:10", "uniform needs LO:HI"),
        ("lognormal:sigma=0.5", "lognormal needs mean"),
        ("turns:1:5", "no length distribution"),
        ("uniform:1:x", "'x' is not a number"),
    ],
)
def test_synthetic_bad_specs(spec, msg):
    with pytest.raises(UnusableInput, match=msg):
        synthetic(spec, 2, 2)
