"""``lrdoctor replay`` on the command line: exit codes, JSON document, trace, plot, sweep."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from lrdoctor.cli import app

runner = CliRunner()

OVERSHOOT = """
schedule: {family: megatron, kind: cosine, max_lr: 1.0e-6, min_lr: 0.0}
budget: {formula: roll}
train: {steps: 8, samples_per_step: 64, micro_batch_size: 2, gradient_accumulation: 4}
dp: {size: 2}
batching: {strategy: token_budget, max_tokens_per_microbatch: 8192}
"""

CLEAN = """
schedule: {family: hf, kind: linear, max_lr: 1.0e-4, warmup: 2}
train: {steps: 5, samples_per_step: 16, micro_batch_size: 2, gradient_accumulation: 4}
dp: {size: 2}
batching: {strategy: static}
"""


@pytest.fixture
def files(tmp_path):
    (tmp_path / "over.yaml").write_text(OVERSHOOT)
    (tmp_path / "clean.yaml").write_text(CLEAN)
    rng = np.random.default_rng(0)
    # Every sequence > 4096 tokens: one per micro-batch, 16 per rank -> 4 windows of 4
    # instead of the nominal 2 updates per step.
    log = pd.DataFrame({"step": np.repeat(np.arange(8), 64),
                        "tokens": rng.integers(4097, 8192, 8 * 64)})
    log.to_csv(tmp_path / "log.csv", index=False)
    return tmp_path


def _invoke(*args):
    return runner.invoke(app, ["replay", *map(str, args)])


def test_clean_run_exits_0_with_the_torch_path(files):
    r = _invoke("--config", files / "clean.yaml", "--json", "--torch")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["findings"] == []
    s = doc["summary"]
    assert s["engine"] == "torch" and s["device"] in ("cpu", "cuda")
    assert s["actual_updates"] == s["budget_updates"] == 5  # 16 / 2 ranks / 2 = 4 = GA
    assert s["progress_ratio"] == 1.0


def test_default_on_cpu_is_fast_never_imports_torch_and_says_so(files):
    """The default replay (examples/verl-ppo-megatron.sh: verl's Megatron
    launch script, Karmarkar-Karp, a knob check) must not import torch: the import alone
    was 6.6 s of a 10 s replay. It says the real-loop cross-check did not run and how to
    run it."""
    import os
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[2]
    p = subprocess.run([sys.executable, "-X", "importtime", "-m", "lrdoctor", "replay", "-c",
                        "examples/verl-ppo-megatron.sh", "--json"], capture_output=True,
                       text=True, cwd=repo, env={**os.environ, "PYTHONPATH": str(repo)})
    assert p.returncode in (0, 1), p.stderr[-2000:]
    imported = {ln.rsplit("|", 1)[-1].strip().split(".")[0]
                for ln in p.stderr.splitlines() if ln.startswith("import time:")}
    assert "numpy" in imported and "torch" not in imported  # the list is real; no torch
    assert json.loads(p.stdout)["summary"]["cross_check"]["ran"] is False
    r = _invoke("--config", files / "clean.yaml", "--device", "cpu")
    assert r.exit_code == 0, r.output
    text = " ".join(r.stdout.split())
    assert "real execution: not run: not asked for (--cross-check runs a real torch" in text
    assert "fast path on CPU (no torch cross-check: --cross-check runs one)" in text
    doc = json.loads(_invoke("--config", files / "clean.yaml", "--device", "cpu",
                             "--json").stdout)
    assert doc["summary"]["cross_check"]["ran"] is False
    assert "--cross-check" in doc["summary"]["cross_check"]["why"]


def test_cross_check_on_request_runs_torch_and_agrees(files):
    r = _invoke("--config", files / "clean.yaml", "--device", "cpu", "--cross-check")
    assert r.exit_code == 0, r.output
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("real execution:"))
    assert "torch ran" in line and "agrees with the fast trace" in line, line
    doc = json.loads(_invoke("--config", files / "clean.yaml", "--device", "cpu",
                             "--cross-check", "--json").stdout)
    c = doc["summary"]["cross_check"]
    assert c["ran"] and c["agree"] and c["micro_batches"] == c["of"]  # checked whole
    assert doc["summary"]["engine_reason"].startswith("fast path on CPU, cross-checked")


def test_overshoot_exits_1_and_json_document_has_the_shared_shape(files):
    r = _invoke("--config", files / "over.yaml", "--batch-log", files / "log.csv", "--json",
                "--fast")
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    assert set(doc) >= {"lrdoctor", "command", "target", "format", "state", "findings",
                        "summary"}
    assert doc["command"] == "replay" and doc["format"] == "run-config"
    codes = [f["code"] for f in doc["findings"]]
    assert "LRD201" in codes and "LRD203" in codes
    f = next(f for f in doc["findings"] if f["code"] == "LRD201")
    assert set(f) >= {"code", "severity", "title", "message", "evidence", "fix"}
    s = doc["summary"]
    # budget 8 * 64 // (2 * 4) // 2 = 32; replayed 8 steps x 4 updates = 64.
    assert (s["budget_updates"], s["actual_updates"], s["progress_ratio"]) == (32, 64, 2.0)
    assert s["corrected"]["per_update_increment"] == 0.5
    assert s["floor_step"] == 4 and s["engine"] == "fast"
    # --fail-on error still fails; never passes.
    assert _invoke("--config", files / "over.yaml", "--batch-log", files / "log.csv",
                   "--fail-on", "never", "--json").exit_code == 0


def test_text_output_shows_the_comparison_table(files):
    r = _invoke("--config", files / "over.yaml", "--batch-log", files / "log.csv")
    assert r.exit_code == 1
    assert "optimizer updates per train step" in r.stdout
    assert "LRD201" in r.stdout and "after step 4 of 8" in r.stdout


@pytest.mark.parametrize("text, expected", [
    ("train: {steps: 3, samples_per_step: 8}\nbatching: {strategy: magic}\n",
     "key 'batching.strategy': got 'magic'"),
    ("train: {steps: 3, samples_per_step: 8, micro_batchsize: 2}\n",
     "unknown key 'train.micro_batchsize'"),
])
def test_bad_config_key_is_one_line_exit_2(tmp_path, text, expected):
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    r = _invoke("--config", p)
    assert r.exit_code == 2
    err = r.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in r.output
    assert err.startswith(f"lrdoctor: error: {p}: ") and expected in err


def test_missing_inputs_exit_2(files, tmp_path):
    # A missing input is said the one way every command says it (commands/_common's check
    # before any work): the path, then "no such file or directory".
    r = _invoke("--config", tmp_path / "nope.yaml")
    assert r.exit_code == 2
    assert r.stderr.strip() == f"lrdoctor: error: {tmp_path / 'nope.yaml'}: no such file or directory"
    r = _invoke("--config", files / "over.yaml")
    assert r.exit_code == 2 and "needs sample lengths" in r.stderr
    r = _invoke("--config", files / "clean.yaml", "--sweep", "batching.nope=1,2")
    assert r.exit_code == 2 and "unknown key 'batching.nope'" in r.stderr
    r = _invoke("--config", files / "clean.yaml", "--trace", tmp_path / "t.txt")
    assert r.exit_code == 2 and ".parquet or .csv" in r.stderr
    bad = tmp_path / "warm.yaml"
    bad.write_text(OVERSHOOT.replace("min_lr: 0.0}", "min_lr: 0.0, warmup: 500}"))
    r = _invoke("--config", bad, "--batch-log", files / "log.csv")
    assert r.exit_code == 2 and r.stderr.startswith(f"lrdoctor: error: {bad}: schedule: ")
    assert "lr_warmup_steps=500" in r.stderr and len(r.stderr.strip().splitlines()) == 1


def test_trace_and_plot_are_written(files, tmp_path):
    trace, png = tmp_path / "t.parquet", tmp_path / "lr.png"
    r = _invoke("--config", files / "over.yaml", "--batch-log", files / "log.csv",
                "--trace", trace, "--plot", png, "--json", "--torch", "--device", "cpu")
    assert r.exit_code == 1, r.output
    df = pd.read_parquet(trace)
    for col in ("train_step", "epoch", "micro_index", "rows", "padded_len", "tokens", "window",
                "window_size", "is_update", "update_index", "failed", "scheduler_progress",
                "lr", "dp", "loss_weight"):
        assert col in df.columns
    assert int(df["is_update"].sum()) == 64 and len(df) == 8 * 32
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 20_000
    import os

    mask = os.umask(0)
    os.umask(mask)
    # Written through a temp sibling (0600) but ending with the mode open() would give.
    assert (png.stat().st_mode & 0o777) == (trace.stat().st_mode & 0o777) == 0o666 & ~mask
    csv = tmp_path / "t.csv"
    assert _invoke("--config", files / "clean.yaml", "--trace", csv, "--json").exit_code == 0
    assert len(pd.read_csv(csv)) == 5 * 4


def test_sweep_compares_a_memory_knob(files, tmp_path):
    png = tmp_path / "sweep.png"
    r = _invoke("--config", files / "over.yaml", "--batch-log", files / "log.csv", "--json",
                "--sweep", "batching.max_tokens_per_microbatch=8192,16384,32768", "--plot", png)
    assert r.exit_code == 1, r.output
    doc = json.loads(r.stdout)
    rows = doc["sweep"]["rows"]
    assert [row["actual_updates"] for row in rows] == [64, 32, 16]
    f = next(f for f in doc["findings"] if f["code"] == "LRD203")
    assert "--sweep" in f["message"]
    assert png.exists()


def test_replay_api_run_returns_the_report(files):
    from lrdoctor.replay import ReplayOptions, run

    rep = run(str(files / "over.yaml"), batch_log=str(files / "log.csv"), options=ReplayOptions(engine="fast", knob_check=False))
    assert rep.command == "replay"
    assert [f.code for f in rep.findings] == ["LRD201"]
    assert rep.extra["summary"]["progress_ratio"] == 2.0


def test_help_lists_examples():
    r = runner.invoke(app, ["replay", "--help"])
    assert r.exit_code == 0
    text = " ".join(r.stdout.split())
    assert "--sweep" in text and "batching.max_tokens_per_microbatch" in text
    assert "Exit codes" in text
    assert textwrap.dedent("lrdoctor replay --config run.yaml") in text


def test_registering_the_command_imports_no_heavy_modules():
    import subprocess
    import sys

    code = ("import sys, lrdoctor.cli, lrdoctor.replay, lrdoctor.replay.config; "
            "heavy = [m for m in ('torch', 'pandas', 'matplotlib', 'numpy') if m in sys.modules]; "
            "print(heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


def _bad_inputs(d):
    import pyarrow as pa
    import pyarrow.parquet as pq

    (d / "tb.yaml").write_text("train: {steps: 2, samples_per_step: 8}\n"
                               "batching: {strategy: token_budget, max_tokens_per_microbatch: 99}\n")
    (d / "bad.csv").write_text("step,tokens\n0,100\n0,abc\n")
    (d / "bad.jsonl").write_text('{"step": 0, "tokens": 5}\n{"step": 0, "tokens":\n')
    pq.write_table(pa.table({"step": [0] * 50, "tokens": list(range(1, 51))}), d / "ok.parquet")
    (d / "trunc.parquet").write_bytes((d / "ok.parquet").read_bytes()[:200])
    (d / "key.yaml").write_text("train: {steps: 2}\nschedul: {}\n")
    (d / "dir").mkdir()
    tb = d / "tb.yaml"
    return {
        "missing config": ["--config", d / "nope.yaml"],
        "config is a directory": ["--config", d / "dir"],
        "binary config": ["--config", d / "ok.parquet"],
        "bad YAML key": ["--config", d / "key.yaml"],
        "missing batch log": ["--config", tb, "--batch-log", d / "nope.csv"],
        "truncated parquet": ["--config", tb, "--batch-log", d / "trunc.parquet"],
        "CSV bad row": ["--config", tb, "--batch-log", d / "bad.csv"],
        "JSONL bad row": ["--config", tb, "--batch-log", d / "bad.jsonl"],
        "sweep without =": ["--config", tb, "--synthetic", "fixed:9", "--sweep", "foo"],
        "sweep bad value": ["--config", tb, "--synthetic", "fixed:9",
                            "--sweep", "train.steps=0,2"],
        "synthetic unknown": ["--config", tb, "--synthetic", "bogus:1"],
        "synthetic zero length": ["--config", tb, "--synthetic", "fixed:0"],
        "synthetic bad number": ["--config", tb, "--synthetic", "lognormal:mean=x"],
        "plot in missing dir": ["--config", tb, "--synthetic", "fixed:9",
                                "--plot", d / "no" / "p.png"],
        "trace in missing dir": ["--config", tb, "--synthetic", "fixed:9",
                                 "--trace", d / "no" / "t.csv"],
    }


BAD_CASES = ["missing config", "config is a directory", "binary config", "bad YAML key",
             "missing batch log", "truncated parquet", "CSV bad row", "JSONL bad row",
             "sweep without =", "sweep bad value", "synthetic unknown", "synthetic zero length",
             "synthetic bad number", "plot in missing dir", "trace in missing dir"]


@pytest.mark.parametrize("case", BAD_CASES)
def test_bad_input_is_one_line_exit_2(tmp_path, case):
    args = _bad_inputs(tmp_path)[case]
    r = _invoke(*args, "--fast", "--no-knob-check")
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert r.exit_code == 2, r.output
    err = r.stderr.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("lrdoctor: error: ")
    assert "Traceback" not in r.output


def test_cli_source_overrides_the_configs_data(tmp_path):
    """--batch-log replaces data.synthetic from the config instead of clashing with it."""
    cfg = tmp_path / "c.yaml"
    cfg.write_text(CLEAN + "data: {synthetic: 'fixed:64'}\n")
    (tmp_path / "l.csv").write_text("step,tokens\n" + "0,5\n" * 16)
    r = _invoke("--config", cfg, "--batch-log", tmp_path / "l.csv", "--json", "--fast")
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["state"]["samples"] == 16


@pytest.mark.parametrize("config", ["fast-llm-trainer.yaml", "verl-dynamic-bsz.yaml"])
def test_no_other_frameworks_jargon_in_what_a_user_reads(config):
    """Issue 29 item 19: a Fast-LLM user read "ROLL issue 442's direction" in the fix, and
    a verl user "(automatic 2x check; reused: ...)". Fast-LLM's trainer YAML (LRD201 with
    the corrected scale) and verl's dynamic-batch config (the token cap compared at 2x
    without a second replay): the text and the JSON say what was done in plain words."""
    path = str(Path(__file__).resolve().parents[2] / "examples" / config)
    text = runner.invoke(app, ["replay", "-c", path]).stdout
    doc = runner.invoke(app, ["replay", "-c", path, "--json"]).stdout
    for out in (text, doc):
        assert "442" not in out and "automatic 2x" not in out and "reused:" not in out
    summary = json.loads(doc)["summary"]
    if config.startswith("verl"):
        assert "twice the cap" in " ".join(text.split())
        assert "without a second replay" in json.dumps(summary)
    else:
        assert "Scale every scheduler advance by nominal/actual" in doc
