"""Issue 22's wrong outputs, one test each: every one of these printed something false
(a batch log applied to a config it was not for, a first window of k - 1 that was 1,
"agree" where nothing was compared, stale figures counted, a cycled log said only in
JSON, "1 per train step instead of 1")."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from lrdoctor.core.report import Report
from lrdoctor.render.verdict import verdict_line
from tests.helpers.docs import reports as doc_reports
from tests.helpers.paths import REPO

ROLL = "examples/roll-sokoban-dynamic.yaml"
ONEVISION = "examples/onevision-offbyone.yaml"
ROLL_LOG = "examples/batchlogs/roll-sokoban.csv"


def lrd(*args, cwd=REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    e = {**os.environ, "COLUMNS": "120", "PYTHONPATH": str(REPO), **(env or {})}
    e.pop("GITHUB_ACTIONS", None)
    return subprocess.run([sys.executable, "-m", "lrdoctor", *map(str, args)], cwd=cwd,
                          env=e, capture_output=True, text=True, timeout=600)


def test_a_bare_batch_log_with_two_configs_is_refused_in_one_line(tmp_path):
    p = lrd("report", ROLL, ONEVISION, "--batch-log", ROLL_LOG, "-o", tmp_path / "r")
    assert p.returncode == 2
    assert len(p.stderr.strip().splitlines()) == 1, p.stderr
    assert "ambiguous with 2 replayed configs" in p.stderr
    assert f"--batch-log CONFIG={ROLL_LOG}" in p.stderr
    assert not (tmp_path / "r" / "index.html").exists()


def test_a_batch_log_per_config_applies_to_its_config_only():
    # ROLL's log judges ROLL's config (LRD201 at 2x); OneVision's config keeps its own
    # data (synthetic fixed:1024): no LRD201 there (it had 4x with ROLL's log).
    p = lrd("check", "--replay", ROLL, "--replay", ONEVISION,
            "--batch-log", f"{ROLL}={ROLL_LOG}", "--json", "--fail-on", "never")
    docs = {d["target"]: d for d in doc_reports(json.loads(p.stdout))}
    roll = next(d for t, d in docs.items() if t.endswith("roll-sokoban-dynamic.yaml"))
    ov = next(d for t, d in docs.items() if t.endswith("onevision-offbyone.yaml"))
    assert "LRD201" in {f["code"] for f in roll["findings"]}
    assert roll["summary"]["logged_steps"] == 4
    assert "LRD201" not in {f["code"] for f in ov["findings"]}
    assert ov["summary"].get("logged_steps") != 4 and not ov["summary"].get("cycled")
    assert ov["summary"]["train_steps"] == 8000


def test_a_config_named_in_batch_log_must_be_replayed(tmp_path):
    p = lrd("report", ONEVISION, "--batch-log", f"{ROLL}={ROLL_LOG}", "-o", tmp_path / "r")
    assert p.returncode == 2 and "is not one of the replayed configs" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_lrd204_verdict_reads_the_real_first_window():
    # A first window of 1 of 4 (global_step % k off by one) read "3 of 4": k - 1 assumed.
    from lrdoctor.rules.lrd204_short_first_window import RULE, ShortFirstWindow

    f = RULE.finding("m", ShortFirstWindow(window_sizes_head=[1, 4, 4, 4], k=4,
                                           rule="off_by_one"))
    rep = Report(command="replay", target="x.yaml", format="lrdoctor", findings=[f])
    assert verdict_line(rep)[2] == "first window 1 of 4 micro-batches"
    f2 = RULE.finding("m", ShortFirstWindow(window_sizes_head=[3, 4, 4], k=4, rule="x"))
    assert verdict_line(Report("replay", "x", None, findings=[f2]))[2].startswith(
        "first window 3 of 4")


def test_lrd204_verdict_line_matches_the_detail_end_to_end():
    p = lrd("replay", "-c", ONEVISION, "--fast")
    first = p.stdout.splitlines()[0]
    assert "LRD204 error first window 1 of 4 micro-batches" in first
    assert "window sizes 1, 4, 4, 4" in " ".join(p.stdout.split())


def test_agree_only_after_a_comparison_and_the_fix_record_gives_the_nominal(tmp_path):
    agree = "the scheduler and the trainer agree"
    # Repaired by lrdoctor fix (nominal from the run's YAML beside the run): the copy holds
    # lrdoctor-fix.json, whose nominal progress is compared with the scheduler.
    src = REPO / "sample_checkpoints/roll-overshoot/actor_train/checkpoint-100"
    out = tmp_path / "fixed"
    f = lrd("fix", src, "-o", out)
    assert f.returncode == 0, f.stderr
    doc = json.loads(lrd("inspect", out, "--json").stdout)
    nominal = doc["state"]["nominal_progress"]
    manifest = json.loads((out / "lrdoctor-fix.json").read_text())
    assert nominal["value"] == manifest["target"]["progress"] == 808
    assert doc["state"]["derived"]["progress_ratio"] == 1.0
    assert agree in lrd("inspect", out).stdout
    # The same checkpoint without its record: ROLL saves no budget, nothing is compared,
    # so never "agree" (it was printed over "nominal progress not computed").
    bare = tmp_path / "bare" / "checkpoint-100"
    shutil.copytree(out, bare)
    (bare / "lrdoctor-fix.json").unlink()
    p = lrd("inspect", bare)
    assert agree not in p.stdout
    # issue 19: "could not judge" is a finding a CI gate sees (LRD111, warning)
    assert "LRD111 warning" in p.stdout and "2,836" in p.stdout
    # A record that no longer describes the checkpoint is not used (and said so).
    manifest["target"]["progress"] = 900
    (out / "lrdoctor-fix.json").write_text(json.dumps(manifest))
    state = json.loads(lrd("inspect", out, "--json").stdout)["state"]
    assert state.get("nominal_progress") is None
    assert any("lrdoctor-fix.json: not used" in n for n in state["notes"])
    assert agree not in lrd("inspect", out).stdout


def test_report_into_an_existing_out_counts_and_keeps_only_its_own_figures(tmp_path):
    out = tmp_path / "rep"
    a = lrd("report", "sample_checkpoints/roll-overshoot", "sample_checkpoints/torch-microstep",
            "-o", out)
    assert a.returncode == 0, a.stderr
    assert len(list(out.glob("*.png"))) == 2
    mine = out / "notes.png"  # not lrdoctor's name: never removed
    mine.write_bytes(b"\x89PNG")
    b = lrd("report", "sample_checkpoints/hf-healthy", "-o", out)
    assert b.returncode == 0, b.stderr
    page = (out / "index.html").read_text()
    embedded = page.count("data:image/png;base64,")
    assert f"(1 target(s), {embedded} figure(s))" in b.stdout
    ours = sorted(p.name for p in out.glob("*.png") if p != mine)
    assert len(ours) == embedded and all(n in page for n in ours)
    assert mine.exists()


def test_a_cycled_batch_log_is_said_in_the_text():
    p = lrd("replay", "-c", ROLL, "--batch-log", ROLL_LOG, "--fast")
    text = " ".join(p.stdout.split())
    assert "batch log: the batch log holds 4 steps; cycled over 1024" in text
    assert "engine: --fast" in text
    assert "memory-knob check: batching.max_tokens_per_microbatch = 8192, 16384" in text


def test_lrd201_names_the_budget_when_the_rate_is_as_planned(tmp_path):
    # 1 update per train step as planned; the budget counts 50 of the 200 train steps.
    cfg = tmp_path / "budget.yaml"
    cfg.write_text(Path(REPO / "tests/commands/data/short-budget.yaml").read_text())
    p = lrd("replay", "-c", cfg, "--fast", "--json")
    f = next(f for f in json.loads(p.stdout)["findings"] if f["code"] == "LRD201")
    assert "instead of 1" not in f["message"]
    assert "1 per train step as planned, but the budget covers only 50 of the 200 train " \
           "steps" in f["message"]
