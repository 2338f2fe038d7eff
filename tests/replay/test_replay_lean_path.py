"""The default replay's lean path: numpy columns instead of pandas, and one plan per
distinct step (issue 21's speed goal). Each change must leave every number as it was."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from lrdoctor.replay import batchlog, engine, packing, planning
from lrdoctor.replay.config import config_from_dict, load_config
from lrdoctor.replay.table import Samples

REPO = Path(__file__).resolve().parents[2]


def _imports(args: list[str]) -> tuple[set[str], dict]:
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "lrdoctor", "replay", *args,
                        "--json"], capture_output=True, text=True, cwd=REPO,
                       env={**os.environ, "PYTHONPATH": str(REPO)})
    assert p.returncode in (0, 1), p.stderr[-2000:]
    mods = {ln.rsplit("|", 1)[-1].strip().split(".")[0]
            for ln in p.stderr.splitlines() if ln.startswith("import time:")}
    return mods, json.loads(p.stdout)


@pytest.mark.parametrize("config", [
    "examples/onevision-offbyone.yaml",  # a plain torch loop, synthetic lengths
    "examples/skyrl-stepwise.yaml",      # SkyRL, its own JSONL batch log
])
def test_default_replay_does_not_import_pandas(config):
    mods, doc = _imports(["-c", config])
    assert "numpy" in mods and "pandas" not in mods and "torch" not in mods
    assert doc["summary"]["micro_batches"] > 0 and doc["summary"]["train_steps"] > 0


def _plans(infos):
    return [(i.step, i.dp, i.samples, i.docs, i.mb_docs, i.plan.boundaries,
             [([r.tolist() for r in mb.ranks], list(mb.padded_len), list(mb.tokens))
              for mb in i.plan.micro_batches], json.dumps(i.plan.notes, sort_keys=True,
                                                          default=str))
            for i in infos]


def _log(steps: int, per: int, seed: int, repeat_every: int) -> pd.DataFrame:
    """A batch log whose steps repeat every ``repeat_every`` (rows and docs alike)."""
    rng = np.random.default_rng(seed)
    base = [rng.integers(50, 3000, per) for _ in range(repeat_every)]
    docs = [rng.integers(1, 5, per) for _ in range(repeat_every)]
    return pd.DataFrame({"step": np.repeat(np.arange(steps), per),
                         "tokens": np.concatenate([base[s % repeat_every] for s in range(steps)]),
                         "docs": np.concatenate([docs[s % repeat_every] for s in range(steps)])})


@pytest.mark.parametrize("batching", [
    {"strategy": "static"},
    {"strategy": "karmarkar_karp", "max_tokens_per_microbatch": 4096},  # verl >= 0.9.1
    {"strategy": "karmarkar_karp", "max_tokens_per_microbatch": 4096, "flavor": "openrlhf"},
    {"strategy": "token_budget", "max_tokens_per_microbatch": 4096},
])
def test_steps_with_equal_rows_share_a_plan_equal_to_planning_each_step(batching):
    cfg = config_from_dict({
        "schedule": {"family": "megatron", "kind": "cosine", "max_lr": 1e-3, "min_lr": 0,
                     "warmup": 2},
        "train": {"steps": 12, "samples_per_step": 32, "micro_batch_size": 4,
                  "gradient_accumulation": 2},
        "dp": {"size": 2, "changes": [{"at_step": 7, "size": 4}]},
        "batching": batching,
    }, "run.yaml")
    log = _log(12, 32, seed=3, repeat_every=3)
    shared = planning.plan_steps(cfg, log)
    each = planning.plan_steps(cfg, log, planner=packing.plan_step)  # no sharing
    assert _plans(shared) == _plans(each)
    # step 3 repeats step 0 at the same dp: one plan; step 9 repeats it at another dp
    assert shared[3].plan is shared[0].plan and shared[9].plan is not shared[0].plan
    assert shared[1].plan is not shared[0].plan
    t1, t2 = engine.micro_batch_table(cfg, shared), engine.micro_batch_table(cfg, each)
    assert t1.keys() == t2.keys()
    for k in t1:
        np.testing.assert_array_equal(t1[k], t2[k], err_msg=k)


def test_numpy_columns_replay_as_the_dataframe_did(tmp_path):
    """Text prompt ids (the row-by-row reader) and a JSONL log: same trace either way."""
    rows = [{"step": s, "tokens": 100 + 37 * i % 900, "prompt_id": f"p{(s * 8 + i) // 3}"}
            for s in range(4) for i in range(8)]
    path = tmp_path / "log.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    cols = batchlog.read_batch_columns(path)
    table = Samples(cols)
    frame = batchlog.read_batch_log(path)
    assert table.columns == list(frame.columns) and len(table) == len(frame) == 32
    for c in table.columns:
        assert table[c].dtype == frame[c].to_numpy().dtype
        assert table[c].tolist() == frame[c].tolist()
    cfg = load_config(REPO / "examples/skyrl-stepwise.yaml")
    a = engine.replay_fast(cfg, Samples(batchlog.read_batch_columns(
        REPO / "examples/batchlogs/skyrl-stepwise.jsonl")))
    b = engine.replay_fast(cfg, batchlog.read_batch_log(
        REPO / "examples/batchlogs/skyrl-stepwise.jsonl"))
    for k in a.trace:
        np.testing.assert_array_equal(a.trace[k], b.trace[k], err_msg=k)
    with pytest.raises(ValueError, match="rows"):
        Samples({"step": np.arange(3), "tokens": np.arange(4)})


def test_arrow_columns_read_without_pandas_equal_pyarrow_to_numpy():
    """Chunked, sliced (non-zero offset) and narrow integer columns, and text."""
    import pyarrow as pa

    ints = pa.chunked_array([pa.array([5, 6, 7, 8], pa.int32()).slice(1),
                             pa.array([], pa.int32()), pa.array([9, 10], pa.int32())])
    wide = pa.chunked_array([pa.array([2**40, 3], pa.uint64())])
    text = pa.chunked_array([pa.array(["a", "bb"]).slice(1), pa.array(["c"], pa.large_string())
                             .cast(pa.string())])
    for arr, integer in ((ints, True), (wide, True), (text, False)):
        got = batchlog._arrow_numpy(arr, integer)
        want = arr.to_numpy() if integer else arr.to_numpy(zero_copy_only=False)
        assert got.dtype == want.dtype and got.tolist() == want.tolist()
        assert got.flags.writeable
    assert batchlog._arrow_numpy(pa.chunked_array([], pa.int64()), True).tolist() == []
