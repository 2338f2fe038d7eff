"""Bad input through the real command line: exit 2, one stderr line naming the file or
key, never a traceback; and the text a user reads at 80 columns."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.docs import reports as doc_reports
from tests.helpers.paths import REPO

ROOT = REPO
SAMPLES = ROOT / "sample_checkpoints"
EXAMPLE = ROOT / "examples" / "verl-dynamic-bsz.yaml"


def lrdoctor(*args, cwd: Path, columns: int = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": str(columns)}
    env.pop("GITHUB_ACTIONS", None)
    return subprocess.run([sys.executable, "-m", "lrdoctor", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=120)


def assert_unusable(p: subprocess.CompletedProcess, *names: str) -> str:
    assert "Traceback" not in p.stderr + p.stdout
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for n in names:
        assert n in lines[0], (n, lines[0])
    assert lines[0].startswith("lrdoctor: error: ")
    return lines[0]


@pytest.fixture
def blocked(tmp_path: Path) -> Path:
    """A directory that cannot be created: its parent is a regular file."""
    f = tmp_path / "a-file"
    f.write_text("x")
    return f / "sub"


def test_truncated_checkpoint(tmp_path):
    data = (SAMPLES / "torch-microstep" / "checkpoint_60.pt").read_bytes()[:500]
    (tmp_path / "trunc.pt").write_bytes(data)
    for cmd in (["inspect", "trunc.pt"], ["fix", "trunc.pt", "--out", "o.pt"]):
        assert_unusable(lrdoctor(*cmd, cwd=tmp_path), "trunc.pt", "truncated")
    assert not (tmp_path / "o.pt").exists()


def test_not_a_checkpoint_and_empty_dir(tmp_path):
    (tmp_path / "notes.pt").write_text("hello\n")
    (tmp_path / "empty").mkdir()
    line = assert_unusable(lrdoctor("inspect", "notes.pt", cwd=tmp_path), "notes.pt")
    assert "not a checkpoint" in line
    line = assert_unusable(lrdoctor("inspect", "empty", cwd=tmp_path), "empty", "--format")
    assert "not a checkpoint lrdoctor recognises: scanned 1 folder: no files" in line
    assert_unusable(lrdoctor("inspect", "missing", cwd=tmp_path), "missing")


def _refused_json(tmp_path: Path, name: str, *opts: str) -> tuple[dict, str]:
    """``inspect NAME --json``-like run that is refused: (stdout document, stderr line)."""
    p = lrdoctor("inspect", name, *opts, cwd=tmp_path)
    line = assert_unusable(p, name)
    return json.loads(p.stdout), line


def test_refused_inspect_json_is_a_structured_record_on_stdout(tmp_path):
    """Never silent in machine output: exit 2 and the one stderr line, and on stdout the
    report shape --json always has, with one LRD303 finding: the same line and what was
    scanned (the record check's LRD303 carries)."""
    (tmp_path / "empty").mkdir()
    doc, line = _refused_json(tmp_path, "empty", "--json")
    assert {k: doc[k] for k in ("command", "target", "format", "state")} == {
        "command": "inspect", "target": "empty", "format": None, "state": {}}
    (f,) = doc["findings"]
    assert (f["code"], f["severity"]) == ("LRD303", "error")
    assert line == "lrdoctor: error: " + f["message"]
    assert f["evidence"] == {"target": "empty", "scanned": {
        "path": "empty", "files": 0, "folders": 1, "hidden": 0, "cut_by_bound": None,
        "seen": [], "not_described": 0}}

    d = tmp_path / "misc"
    d.mkdir()
    (d / "README.md").write_text("# a model\n")
    (d / "train.csv").write_text("a,b\n1,2\n")
    (d / "model.safetensors").write_bytes(b"\x08" + b"\x00" * 7 + b"{}")
    doc, line = _refused_json(tmp_path, "misc", "--output-format", "json", "--format", "torch")
    (f,) = doc["findings"]
    assert doc["format"] == "torch" and line == "lrdoctor: error: " + f["message"]
    assert f["evidence"]["scanned"]["files"] == 3
    assert f["evidence"]["scanned"]["seen"] == [
        {"file": "model.safetensors",
         "found": "weights only (safetensors), no scheduler/optimizer/trainer state"},
        {"file": "README.md", "found": "not checkpoint state (.md)"},
        {"file": "train.csv", "found": "data (.csv), not checkpoint state"}]
    # SARIF: the same finding as a result; text: the stderr line alone.
    sarif, _ = _refused_json(tmp_path, "misc", "--output-format", "sarif")
    (res,) = sarif["runs"][0]["results"]
    assert res["ruleId"] == "LRD303" and "scanned 3 files in 1 folder" in res["message"]["text"]
    text = lrdoctor("inspect", "misc", cwd=tmp_path)
    assert_unusable(text, "misc") and text.stdout == ""


def test_not_recognised_says_what_was_scanned_for_every_command(tmp_path):
    """Never silent: inspect, fix and report refuse a folder of unrelated files with one
    line that counts what was scanned and says what the telling files are."""
    d = tmp_path / "e"
    (d / "sub").mkdir(parents=True)
    (d / "notes.txt").write_text("hi\n")
    (d / "sub" / "x.json").write_text('{"a": 1}')
    want = ("e: not a checkpoint lrdoctor recognises: scanned 2 files in 2 folders: "
            "sub/x.json: JSON with keys [a], no scheduler/optimizer/trainer state; "
            "notes.txt: not checkpoint state (.txt) (use --format to force one of: ")
    for cmd in (["inspect", "e"], ["inspect", "e", "--json"], ["fix", "e", "--out", "o"],
                ["report", "e", "--out", "rep"]):
        line = assert_unusable(lrdoctor(*cmd, cwd=tmp_path), want)
        assert line.count("lrdoctor recognises") == 1
    assert not (tmp_path / "o").exists()


def test_inspect_plot_unwritable(tmp_path, blocked):
    p = lrdoctor("inspect", SAMPLES / "torch-microstep", "--plot", blocked / "lr.png",
                 cwd=tmp_path)
    assert_unusable(p, str(blocked / "lr.png"), "--plot")


def test_inspect_plot_leaves_no_temp_file(tmp_path):
    p = lrdoctor("inspect", SAMPLES / "torch-microstep", "--plot", "lr.png", cwd=tmp_path)
    assert p.returncode == 1, p.stderr
    assert [x.name for x in tmp_path.iterdir()] == ["lr.png"]
    assert (tmp_path / "lr.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_report_missing_target_says_why_on_stderr(tmp_path):
    missing = tmp_path / "no-such-ckpt"
    p = lrdoctor("report", missing, SAMPLES / "hf-healthy", "--out", "rep", cwd=tmp_path)
    line = assert_unusable(p, str(missing))
    assert "no such file" in line
    # The page is still written for the targets that could be used.
    assert (tmp_path / "rep" / "index.html").is_file()


def test_check_missing_target_keeps_the_absolute_path(tmp_path):
    missing = tmp_path / "gone"
    p = lrdoctor("check", "--inspect", missing, "--json", cwd=ROOT)
    assert_unusable(p, str(missing))
    doc = json.loads(p.stdout)
    (rep,) = doc_reports(doc)
    assert rep["target"] == str(missing)
    assert rep["findings"][0]["code"] == "LRD303"


def test_report_out_unwritable(tmp_path, blocked):
    p = lrdoctor("report", SAMPLES / "hf-healthy", "--out", blocked, cwd=tmp_path)
    assert_unusable(p, str(blocked))


def test_fix_existing_output_without_force(tmp_path):
    (tmp_path / "fixed").mkdir()
    p = lrdoctor("fix", SAMPLES / "torch-microstep", "--out", "fixed", cwd=tmp_path)
    assert_unusable(p, "fixed", "--force")
    assert list((tmp_path / "fixed").iterdir()) == []


def test_fix_without_out(tmp_path):
    assert_unusable(lrdoctor("fix", SAMPLES / "torch-microstep", cwd=tmp_path), "--out")


def test_replay_bad_config_key_and_value(tmp_path):
    text = EXAMPLE.read_text()
    (tmp_path / "key.yaml").write_text(text.replace("  warmup: 10", "  warmupp: 10"))
    (tmp_path / "val.yaml").write_text(text.replace("  steps: 100", "  steps: many"))
    (tmp_path / "broken.yaml").write_text("x: [1\n")
    assert_unusable(lrdoctor("replay", "-c", "key.yaml", cwd=tmp_path),
                    "key.yaml", "schedule.warmupp")
    assert_unusable(lrdoctor("replay", "-c", "val.yaml", cwd=tmp_path), "val.yaml", "train.steps")
    assert_unusable(lrdoctor("replay", "-c", "broken.yaml", cwd=tmp_path), "broken.yaml", "line")
    assert_unusable(lrdoctor("replay", "-c", "nope.yaml", cwd=tmp_path), "nope.yaml")


@pytest.mark.parametrize("flag,value,named", [
    ("--synthetic", "bogus:1", "bogus"),
    ("--synthetic", "lognormal:mean=abc", "mean"),
    ("--sweep", "nokey", "--sweep"),
    ("--sweep", "batching.nope=1,2", "batching.nope"),
    ("--sweep", "batching.max_tokens_per_microbatch=abc,2", "max_tokens_per_microbatch"),
])
def test_replay_bad_specs(tmp_path, flag, value, named):
    args = ["replay", "-c", EXAMPLE, "--fast", flag, value]
    if flag == "--sweep":
        args += ["--synthetic", "fixed:2000"]
    assert_unusable(lrdoctor(*args, cwd=tmp_path), named)


@pytest.mark.parametrize("flag,name", [("--plot", "lr.png"), ("--trace", "t.csv")])
def test_replay_outputs_unwritable(tmp_path, blocked, flag, name):
    p = lrdoctor("replay", "-c", EXAMPLE, "--fast", "--no-knob-check", flag, blocked / name,
                 cwd=tmp_path)
    assert_unusable(p, str(blocked / name))


def test_fix_output_format_and_fail_on(tmp_path):
    ckpt = SAMPLES / "torch-microstep"
    # --dry-run gates on the findings as they are now: LRD103/LRD101 are errors.
    assert lrdoctor("fix", ckpt, "--dry-run", "--fail-on", "error", cwd=tmp_path).returncode == 1
    assert lrdoctor("fix", ckpt, "--dry-run", cwd=tmp_path).returncode == 0
    sarif = lrdoctor("fix", ckpt, "--dry-run", "--output-format", "sarif", cwd=tmp_path)
    rules = {r["ruleId"] for r in json.loads(sarif.stdout)["runs"][0]["results"]}
    assert {"LRD103", "LRD101"} <= rules
    # After the write the repaired copy is clean, so even --fail-on info passes.
    p = lrdoctor("fix", ckpt, "--out", "fixed", "--fail-on", "info", "--json", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert {"lrdoctor", "command", "target", "format", "state", "findings"} <= set(doc)
    assert doc["command"] == "fix" and doc["findings_after"] == []
    for f in doc["findings"]:
        assert set(f) >= {"code", "severity", "title", "message", "evidence", "fix"}


def test_inspect_text_fits_80_columns(tmp_path):
    p = lrdoctor("inspect", SAMPLES / "roll-overshoot", cwd=tmp_path, columns=80)
    assert p.returncode == 1
    lines = p.stdout.splitlines()
    # The verdict line is a one-line diagnostic (`path: CODE ...`, grepped in logs, never
    # wrapped whatever the path's length); everything after it fits the terminal.
    verdict = [x for x in lines if x.startswith(str(SAMPLES / "roll-overshoot"))]
    assert len(verdict) == 1 and verdict[0].endswith("(+1 more)"), verdict
    assert max(len(x.rstrip()) for x in lines if x not in verdict) <= 80
    # Counter names are not split mid-word, and wrapped finding text stays indented.
    # (ROLL's num_steps counts scheduler calls, labelled so since issue 29 item 4)
    assert any(x.startswith("scheduler    scheduler.num_steps = 8,429 scheduler calls")
               for x in lines)
    i = next(i for i, x in enumerate(lines) if x.startswith("LRD101 error"))
    body = lines[i + 1:]
    assert body and all(x.startswith("  ") for x in body), body


def test_replay_sweep_table_not_cut_at_80_columns(tmp_path):
    p = lrdoctor("replay", "-c", ROOT / "examples" / "roll-sokoban-dynamic.yaml", "--batch-log",
                 ROOT / "examples" / "batchlogs" / "roll-sokoban.csv", "--fast",
                 "--no-knob-check", "--sweep", "batching.max_tokens_per_microbatch=4096,16384",
                 cwd=tmp_path, columns=80)
    assert p.returncode == 1, p.stderr
    assert "…" not in p.stdout
    assert "sweep over batching.max_tokens_per_microbatch" in p.stdout
    assert "progress: scheduler's, in optimizer updates" in p.stdout


@pytest.mark.parametrize("cmd", [["inspect", SAMPLES / "hf-healthy"], ["replay", "-c", EXAMPLE]])
def test_plot_needs_a_png_name(tmp_path, cmd):
    assert_unusable(lrdoctor(*cmd, "--plot", "lr.txt", cwd=tmp_path), "lr.txt", ".png")
    assert not (tmp_path / "lr.txt").exists()


def test_trend_names_not_cut_at_80_columns(tmp_path):
    p = lrdoctor("inspect", SAMPLES / "roll-overshoot", "--all", cwd=tmp_path, columns=80)
    names = [ln.split("│")[0].strip() for ln in p.stdout.splitlines()
             if "│" in ln and "checkpoint-" in ln]
    assert names == ["checkpoint-100", "checkpoint-200", "checkpoint-299"]


def test_report_page_does_not_call_an_ungated_error_ok(tmp_path):
    p = lrdoctor("report", SAMPLES / "torch-microstep", "--out", "rep", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    page = (tmp_path / "rep" / "index.html").read_text()
    row = page.split("<tbody>", 1)[1].split("</tr>", 1)[0]
    assert "error" in row and "not gated" in row and '<span class="ok">ok</span>' not in row
    assert lrdoctor("report", SAMPLES / "torch-microstep", "--out", "rep2", "--fail-on", "error",
                    cwd=tmp_path).returncode == 1


def test_replay_constant_schedule_never_reaches_floor_on_plan_either(tmp_path):
    p = lrdoctor("replay", "-c", ROOT / "examples" / "skyrl-stepwise.yaml", "--batch-log",
                 ROOT / "examples" / "batchlogs" / "skyrl-stepwise.jsonl", "--fast", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    row = next(ln for ln in p.stdout.splitlines() if "LR reaches its floor" in ln)
    assert row.split("│")[2].strip() == "never" and row.split("│")[3].strip() == "never"


def test_fix_k_must_be_positive(tmp_path):
    p = lrdoctor("fix", SAMPLES / "torch-microstep", "--dry-run", "--policy", "rescale",
                 "--k", "0", cwd=tmp_path)
    assert_unusable(p, "--k 0", "greater than 0")


def test_fix_prints_its_table_on_github_actions(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    env = {**os.environ, "COLUMNS": "120"}
    p = subprocess.run([sys.executable, "-m", "lrdoctor", "fix", str(SAMPLES / "torch-microstep"),
                        "--dry-run"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert p.returncode == 0 and "::error" not in p.stdout
    assert "lrdoctor fix --policy rescale" in p.stdout and "dry run: nothing written" in p.stdout


def test_replay_json_and_batch_log_kinds(tmp_path):
    (tmp_path / "rep.yaml").write_text("{\n")
    line = assert_unusable(lrdoctor("fix", SAMPLES / "torch-microstep", "--out", "o",
                                    "--from-replay", "rep.yaml", cwd=tmp_path), "rep.yaml")
    assert "not JSON" in line
    (tmp_path / "logs").mkdir()
    line = assert_unusable(lrdoctor("replay", "--config", EXAMPLE, "--batch-log", "logs",
                                    cwd=tmp_path), "logs")
    assert "is a directory" in line


def test_refused_fix_and_replay_json_are_structured_records_on_stdout(tmp_path):
    """fix and replay refuse like inspect: exit 2, the one stderr line, and with --json
    the report shape on stdout with one LRD303 finding carrying that line (fix: and what
    was scanned, as the scan found it, not the staging copy)."""
    d = tmp_path / "e"
    d.mkdir()
    (d / "notes.txt").write_text("hi\n")
    p = lrdoctor("fix", "e", "--out", "fx", "--json", cwd=tmp_path)
    line = assert_unusable(p, "e")
    doc = json.loads(p.stdout)
    (f,) = doc["findings"]
    assert (doc["command"], doc["target"], f["code"]) == ("fix", "e", "LRD303")
    assert line == "lrdoctor: error: " + f["message"]
    assert f["evidence"]["scanned"]["seen"] == [
        {"file": "notes.txt", "found": "not checkpoint state (.txt)"}]
    assert not (tmp_path / "fx").exists()

    (tmp_path / "bad.yaml").write_text("train: {steps: -1}\n")
    p = lrdoctor("replay", "-c", "bad.yaml", "--json", cwd=tmp_path)
    line = assert_unusable(p, "bad.yaml")
    doc = json.loads(p.stdout)
    (f,) = doc["findings"]
    assert (doc["command"], doc["target"], f["code"]) == ("replay", "bad.yaml", "LRD303")
    assert line == "lrdoctor: error: " + f["message"] and "train.steps" in line
    text = lrdoctor("replay", "-c", "bad.yaml", cwd=tmp_path)
    assert_unusable(text, "bad.yaml") and text.stdout == ""
