"""Output like the best linters: a one-line verdict per target first, details after;
--quiet (verdicts only), --verbose (every counter), no padding when piped; the HTML
report's header counts what its rows show, with readable figure names."""

from __future__ import annotations

import os
import subprocess
import sys

from tests.helpers.paths import REPO

ROOT = REPO
SAMPLES = ROOT / "sample_checkpoints"


def lrd(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "120"}
    env.pop("GITHUB_ACTIONS", None)
    return subprocess.run([sys.executable, "-m", "lrdoctor", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=300)


def test_verdict_first_then_details_and_no_padding_when_piped():
    p = lrd("inspect", "sample_checkpoints/roll-overshoot")
    lines = p.stdout.splitlines()
    assert lines[0] == ("sample_checkpoints/roll-overshoot/actor_train/checkpoint-299: "
                        "LRD103 error 3.51x the nominal progress (+1 more)")
    assert len(lines) > 10  # the details follow
    assert not [ln for ln in lines if ln != ln.rstrip()], "trailing padding on piped lines"
    assert "3 more counter(s) read: --verbose shows them" in p.stdout
    assert "read " not in p.stdout.replace("files read", "")  # raw counters: only verbose
    v = lrd("inspect", "sample_checkpoints/roll-overshoot", "--verbose")
    assert v.stdout.splitlines()[0] == lines[0]
    assert "optimizer.step" in v.stdout and "--verbose shows them" not in v.stdout


def test_quiet_is_one_line_per_target_with_the_exit_code():
    p = lrd("check", "--inspect", "sample_checkpoints/*/", "--quiet")
    assert p.returncode == 1
    assert p.stdout.splitlines() == [
        "sample_checkpoints/hf-healthy/checkpoint-20: ok",
        "sample_checkpoints/megatron-healthy/iter_0000400: ok",
        "sample_checkpoints/roll-overshoot/actor_train/checkpoint-299: LRD103 error 3.51x "
        "the nominal progress (+1 more)",
        "sample_checkpoints/torch-microstep/checkpoint_60.pt: LRD103 error 4x the nominal "
        "progress (+1 more)",
    ]
    q = lrd("inspect", "sample_checkpoints/hf-healthy", "-q")
    assert q.returncode == 0 and q.stdout == "sample_checkpoints/hf-healthy/checkpoint-20: ok\n"


def test_report_header_counts_what_the_rows_show_with_readable_figures(tmp_path):
    out = tmp_path / "rep"
    p = lrd("report", "sample_checkpoints/hf-healthy", "sample_checkpoints/roll-overshoot",
            "sample_checkpoints/torch-microstep", "-o", out)
    assert p.returncode == 0, p.stderr
    page = (out / "index.html").read_text()
    assert "3 target(s): 2 with errors, 1 clean; not gated (--fail-on never)" in page
    assert "0 failing" not in page
    assert "<code>sample_checkpoints/roll-overshoot/actor_train/checkpoint-299</code>" in page
    assert sorted(x.name for x in out.glob("*.png")) == [
        "00-inspect-hf-healthy-checkpoint-20-lr.png",
        "01-inspect-roll-overshoot-checkpoint-299-lr.png",
        "02-inspect-torch-microstep-checkpoint_60-lr.png"]
    p = lrd("report", "sample_checkpoints/roll-overshoot", "-o", tmp_path / "gated",
            "--fail-on", "warning")
    assert p.returncode == 1
    assert "1 target(s): 1 with errors; 1 failing their --fail-on threshold" in \
        (tmp_path / "gated" / "index.html").read_text()
