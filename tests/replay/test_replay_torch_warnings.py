"""torch's warnings during a replay are the replayed loop's: held, counted and reported
(LRD216 for the step-order one), never printed at lrdoctor's torch_exec.py after the
verdict. A plain torch loop (OneVision's, written as an lrdoctor run config) with the
window rule fixed but the scheduler still stepped per micro-batch."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers.paths import REPO


def _config(tmp_path, rule: str = "correct"):
    """The example, 200 micro-steps long instead of 8000 (the whole run goes through torch)."""
    text = (REPO / "examples/onevision-offbyone.yaml").read_text()
    for a, b in (("  rule: off_by_one", f"  rule: {rule}"), ("warmup: 400", "warmup: 10"),
                 ("horizon: 8000", "horizon: 200"), ("total: 8000", "total: 200"),
                 ("steps: 8000", "steps: 200")):
        assert a in text
        text = text.replace(a, b)
    cfg = tmp_path / f"{rule}.yaml"
    cfg.write_text(text)
    return cfg


def _run(*args):
    env = {**os.environ, "COLUMNS": "120", "PYTHONPATH": str(REPO)}
    env.pop("GITHUB_ACTIONS", None)
    return subprocess.run([sys.executable, "-m", "lrdoctor", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=600, cwd=REPO)


def test_step_order_warning_is_a_finding_not_a_stray_line(tmp_path):
    cfg = _config(tmp_path)
    p = _run("replay", "-c", cfg, "--torch")
    assert "torch_exec.py" not in p.stderr and "Detected call" not in p.stderr, p.stderr
    assert "LRD216 warning: The scheduler steps before the first optimizer update" in p.stdout
    doc = json.loads(_run("replay", "-c", cfg, "--torch", "--json").stdout)
    f = next(f for f in doc["findings"] if f["code"] == "LRD216")
    assert f["evidence"]["count"] == 1 and "optimizer.step()" in f["evidence"]["warning"]
    # The fast path cross-checked by torch from the first step says it too.
    auto = json.loads(_run("replay", "-c", cfg, "--cross-check", "--json").stdout)
    assert "LRD216" in {f["code"] for f in auto["findings"]}


def test_a_loop_stepping_in_order_has_no_lrd216(tmp_path):
    # OneVision's rule as shipped: the first micro-batch closes a window (off by one), so
    # the optimizer steps first and torch does not warn.
    doc = json.loads(_run("replay", "-c", _config(tmp_path, "off_by_one"), "--torch",
                          "--json").stdout)
    assert "LRD216" not in {f["code"] for f in doc["findings"]}
    assert not doc["summary"].get("torch_warnings")
