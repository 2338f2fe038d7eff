"""BatchLogRecorder: what it writes is what `lrdoctor replay` reads, even after a crash."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest
import torch

from lrdoctor.core.state import BATCH_LOG_COLUMNS, batch_log_format
from lrdoctor.replay import ReplayOptions, batchlog
from lrdoctor.replay.batchlog import read_batch_log
from lrdoctor.runtime.record import BatchLogRecorder, tokens_per_sample
from tests.helpers.paths import REPO

ROOT = REPO


@pytest.mark.parametrize("ext", ["jsonl", "csv", "parquet"])
def test_round_trip_every_format(tmp_path, ext):
    path = tmp_path / "logs" / f"b.{ext}"
    with BatchLogRecorder(path, rank=1) as rec:
        rec.log(0, torch.tensor([5, 7]), prompt_ids=["p0", "p0"], docs=[1, 2])
        rec.log(0, [3], prompt_ids=["p1"], docs=[1])  # a second micro-batch of step 0
        rec.log(1, (9, 11, 13), prompt_ids=["p2", "p3", "p3"], docs=torch.tensor([1, 1, 3]))
    df = read_batch_log(path)
    assert df["step"].tolist() == [0, 0, 0, 1, 1, 1]
    assert df["tokens"].tolist() == [5, 7, 3, 9, 11, 13]
    assert df["prompt_id"].tolist() == ["p0", "p0", "p1", "p2", "p3", "p3"]
    assert df["docs"].tolist() == [1, 2, 1, 1, 1, 3]
    assert df["rank"].tolist() == [1] * 6
    assert rec.rows == 6 and rec.steps == 2


def test_rank_in_the_path(tmp_path):
    with BatchLogRecorder(tmp_path / "b.{rank}.jsonl", rank=3) as rec:
        rec.log(0, [4])
    assert rec.path == tmp_path / "b.3.jsonl" and read_batch_log(rec.path)["rank"].tolist() == [3]


def test_a_step_is_written_whole_when_the_next_begins(tmp_path):
    path = tmp_path / "b.jsonl"
    rec = BatchLogRecorder(path)
    rec.log(0, [1, 2])
    rec.log(0, [3])
    assert path.read_bytes() == b""  # step 0 may still grow
    rec.log(1, [4])
    text = path.read_text()
    assert text.endswith("\n") and text.count("\n") == 3  # all of step 0, none of step 1
    rec.close()
    assert read_batch_log(path)["tokens"].tolist() == [1, 2, 3, 4]


KILLED = textwrap.dedent("""
    import os, signal, sys
    from lrdoctor.runtime.record import BatchLogRecorder
    rec = BatchLogRecorder(sys.argv[1])
    for step in range(200):
        for micro in range(4):
            rec.log(step, [100 + step, 200 + micro])
        if step == 150:
            os.kill(os.getpid(), signal.SIGKILL)  # no close, no flush, no atexit
""")


def test_a_killed_run_leaves_complete_steps_only(tmp_path):
    path = tmp_path / "b.jsonl"
    r = subprocess.run([sys.executable, "-c", KILLED, str(path)], cwd=ROOT, timeout=60)
    assert r.returncode == -signal.SIGKILL
    df = read_batch_log(path)
    assert df["step"].max() == 149  # step 150 was pending, never half-written
    assert (df.groupby("step").size() == 8).all() and df["step"].nunique() == 150
    assert df[df["step"] == 7]["tokens"].tolist() == [107, 200, 107, 201, 107, 202, 107, 203]


def test_append_continues_a_log_and_drops_a_torn_line(tmp_path):
    path = tmp_path / "b.jsonl"
    path.write_text('{"step":0,"tokens":5}\n{"step":1,"tok')  # another writer died mid-line
    with BatchLogRecorder(path, append=True) as rec:
        rec.log(1, [6, 7])
    df = read_batch_log(path)
    assert df["step"].tolist() == [0, 1, 1] and df["tokens"].tolist() == [5, 6, 7]

    csv = tmp_path / "b.csv"
    with BatchLogRecorder(csv) as rec:
        rec.log(0, [1])
    with BatchLogRecorder(csv, append=True) as rec:
        rec.log(1, [2])
    assert csv.read_text().count("step") == 1  # one header
    assert read_batch_log(csv)["tokens"].tolist() == [1, 2]


def test_bad_rows_are_refused_at_log_time(tmp_path):
    rec = BatchLogRecorder(tmp_path / "b.jsonl")
    with pytest.raises(ValueError, match="tokens: 0"):
        rec.log(0, [3, 0])
    with pytest.raises(ValueError, match="step"):
        rec.log(-1, [3])
    with pytest.raises(ValueError, match="2 values for 3 samples"):
        rec.log(0, [1, 2, 3], prompt_ids=["a", "b"])
    rec.log(0, [1], prompt_ids=["a"])
    with pytest.raises(ValueError, match="same fields"):
        rec.log(1, [1])  # prompt_id missing where the log has it
    rec.close()
    with pytest.raises(ValueError, match="closed"):
        rec.log(2, [1], prompt_ids=["b"])
    assert read_batch_log(tmp_path / "b.jsonl")["tokens"].tolist() == [1]


def test_tokens_per_sample_reads_the_usual_batches():
    am = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    assert tokens_per_sample({"input_ids": torch.ones(2, 4, dtype=torch.long),
                              "attention_mask": am}) == [3, 2]
    assert tokens_per_sample({"input_ids": torch.ones(3, 5, dtype=torch.long)}) == [5, 5, 5]
    packed = {"input_ids": torch.ones(1, 9, dtype=torch.long),
              "position_ids": torch.tensor([[0, 1, 2, 0, 1, 0, 1, 2, 3]])}
    assert tokens_per_sample(packed) == [3, 2, 4]
    assert tokens_per_sample((torch.ones(2, 6, dtype=torch.long), torch.zeros(2))) == [6, 6]
    assert tokens_per_sample((torch.randn(2, 6),)) is None  # features, not tokens
    assert tokens_per_sample({"x": torch.randn(2, 4)}) is None


def test_recorded_from_a_hand_written_loop_replays(tmp_path):
    """GA=2, micro-batches of 2 padded sequences: the log holds what the loop really saw."""
    from lrdoctor import replay

    g = torch.Generator().manual_seed(0)
    lengths = torch.randint(3, 17, (48,), generator=g)
    ids = torch.zeros(48, 16, dtype=torch.long)
    mask = (torch.arange(16)[None, :] < lengths[:, None]).long()
    ids[mask.bool()] = 1
    loader = torch.utils.data.DataLoader(
        [{"input_ids": i, "attention_mask": m} for i, m in zip(ids, mask, strict=True)],
        batch_size=2)
    model = torch.nn.Embedding(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    log = tmp_path / "b.parquet"
    step = 0
    with BatchLogRecorder(log) as rec:
        for i, batch in enumerate(loader):
            rec.log(step, tokens_per_sample(batch))
            (model(batch["input_ids"]).squeeze(-1) * batch["attention_mask"]).sum().backward()
            if (i + 1) % 2 == 0:
                opt.step()
                opt.zero_grad()
                step += 1
    df = read_batch_log(log)
    assert df["tokens"].tolist() == lengths.tolist()
    assert df.groupby("step").size().tolist() == [4] * 12

    cfg = tmp_path / "run.yaml"
    cfg.write_text(textwrap.dedent("""
        schedule: {family: hf, kind: linear, max_lr: 1.0e-3, min_lr: 0.0, warmup: 0}
        train: {steps: 12, samples_per_step: 4, micro_batch_size: 2, gradient_accumulation: 2}
        batching: {strategy: static}
        scheduler: {step_on: update}
    """))
    report = replay.run(str(cfg), batch_log=str(log), options=ReplayOptions(engine="fast"))
    assert [f.code for f in report.findings if f.code in ("LRD201", "LRD202")] == []
    assert report.extra["summary"]["actual_updates"] == 12
    assert os.path.getsize(log) > 0


def test_the_recorder_and_the_reader_share_one_schema(tmp_path):
    # Every column the reader knows (with its aliases) is one the recorder writes, in order.
    assert tuple(batchlog.ALIASES) == BATCH_LOG_COLUMNS
    assert batch_log_format("b.JSONL") == "jsonl" and batch_log_format("b.csv.gz") == "csv"
    assert batch_log_format("b.pq") == "parquet" and batch_log_format("b.log") is None
    # A name that does not say: the recorder writes JSONL, and the reader sniffs it back.
    with BatchLogRecorder(tmp_path / "b.log") as rec:
        rec.log(0, [3, 4], prompt_ids=["a", "b"], docs=[1, 1], rank=0)
    df = read_batch_log(str(tmp_path / "b.log"))
    assert list(df["tokens"]) == [3, 4] and list(df["prompt_id"]) == ["a", "b"]
