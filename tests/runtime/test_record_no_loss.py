"""Issue 23, item 5: the recorder never loses an existing batch log. It is continued
(``append``) or moved aside to ``NAME.1.EXT`` when the first new rows are written, never
truncated before: a run that raises (a strict guard) or is killed keeps every earlier row."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

from lrdoctor.replay.batchlog import read_batch_log
from lrdoctor.runtime.record import BatchLogRecorder
from tests.helpers.paths import REPO


def _log_64(path) -> bytes:
    with BatchLogRecorder(path) as rec:
        for step in range(16):
            rec.log(step, [10 + step] * 4)
    return path.read_bytes()


@pytest.mark.parametrize("name", ["b.jsonl", "b.csv", "b.parquet"])
def test_a_run_that_raises_before_logging_leaves_the_log_as_it_was(tmp_path, name):
    path = tmp_path / name
    before = _log_64(path)
    assert len(read_batch_log(path)) == 64
    with pytest.raises(RuntimeError):
        with BatchLogRecorder(path):
            raise RuntimeError("the strict guard stopped the run")  # before any row
    assert path.read_bytes() == before
    assert not list(tmp_path.glob("b.1.*"))


@pytest.mark.parametrize("name", ["b.jsonl", "b.csv", "b.parquet"])
def test_a_new_run_moves_the_old_log_aside_when_it_writes(tmp_path, name):
    path = tmp_path / name
    before = _log_64(path)
    with BatchLogRecorder(path) as rec:
        rec.log(0, [7, 8])
        rec.log(1, [9])
    rotated = path.with_name("b.1" + path.suffix)
    assert rec.rotated == rotated and rotated.read_bytes() == before
    assert read_batch_log(path)["tokens"].tolist() == [7, 8, 9]
    with BatchLogRecorder(path) as rec:  # again: the next free number
        rec.log(0, [1])
    assert path.with_name("b.2" + path.suffix).is_file() and rotated.read_bytes() == before


KILLED = textwrap.dedent("""
    import os, signal, sys
    from lrdoctor.runtime.record import BatchLogRecorder
    rec = BatchLogRecorder(sys.argv[1], append=sys.argv[2] == "append")
    for step in range(100, 200):
        rec.log(step, [step, step + 1])
        if step == 150:
            os.kill(os.getpid(), signal.SIGKILL)  # mid-run: no close, no flush
""")


@pytest.mark.parametrize("mode", ["append", "new"])
def test_a_recorder_killed_mid_run_keeps_the_earlier_rows(tmp_path, mode):
    path = tmp_path / "b.jsonl"
    before = _log_64(path)
    r = subprocess.run([sys.executable, "-c", KILLED, str(path), mode], cwd=REPO, timeout=60)
    assert r.returncode == -signal.SIGKILL
    if mode == "append":
        assert path.read_bytes().startswith(before)  # the 64 earlier rows, byte for byte
        df = read_batch_log(path)
        assert len(df) == 64 + 2 * 50 and df["step"].max() == 149
    else:
        assert path.with_name("b.1.jsonl").read_bytes() == before
        assert read_batch_log(path)["step"].tolist() == [s for s in range(100, 150)
                                                        for _ in range(2)]
