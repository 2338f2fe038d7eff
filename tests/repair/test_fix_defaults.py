"""`lrdoctor fix` on the shipped samples as a new user runs it: no --policy, the
findings' one recommendation, and an --out that names a file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.helpers.paths import REPO

ROOT = REPO
SAMPLES = ROOT / "sample_checkpoints"


def lrdoctor(*args, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("GITHUB_ACTIONS", None)
    return subprocess.run([sys.executable, "-m", "lrdoctor", *map(str, args)], cwd=cwd,
                          env=env, capture_output=True, text=True, timeout=180)


def test_roll_overshoot_is_fixed_without_a_policy(tmp_path):
    p = lrdoctor("fix", SAMPLES / "roll-overshoot", "--out", "fixed", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "chose --policy nominal from the findings" in p.stdout
    assert "the alternative: --policy extend-horizon" in p.stdout
    again = lrdoctor("inspect", "fixed", "--json", cwd=tmp_path)
    codes = {f["code"] for f in json.loads(again.stdout)["findings"]}
    assert not codes & {"LRD101", "LRD103"}, codes


def test_torch_microstep_findings_name_one_repair(tmp_path):
    p = lrdoctor("inspect", SAMPLES / "torch-microstep", "--json", cwd=tmp_path)
    fixes = {f["code"]: f["fix"] for f in json.loads(p.stdout)["findings"]}
    assert set(fixes) >= {"LRD101", "LRD103"}
    for code in ("LRD101", "LRD103"):
        assert "it applies `--policy rescale --k 4`" in fixes[code], fixes[code]
        assert "the alternative: `--policy nominal`" in fixes[code]
    d = lrdoctor("fix", SAMPLES / "torch-microstep", "--dry-run", "--json", cwd=tmp_path)
    target = json.loads(d.stdout)["repair"]
    assert (target["policy"], target["k"], target["chosen_by"]) == ("rescale", 4.0, "findings")
    assert target["alternative"] == "--policy nominal"
    assert target["motivated_by"] == ["LRD103", "LRD101"]


def test_out_with_a_file_name_writes_that_file(tmp_path):
    """`fix <dir holding one .pt> --out fixed.pt` writes fixed.pt, not a folder fixed.pt/."""
    import torch

    p = lrdoctor("fix", SAMPLES / "torch-microstep", "--out", "fixed.pt", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    out = tmp_path / "fixed.pt"
    assert out.is_file(), sorted(x.name for x in tmp_path.iterdir())
    assert (tmp_path / "fixed.pt.lrdoctor-fix.json").is_file()
    state = torch.load(out, weights_only=False)  # our own fixture: torch's own loader
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(
        torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=3e-4), T_max=100,
        eta_min=3e-5)
    sched.load_state_dict(state["scheduler"])
    assert sched.last_epoch == 60
    # A name without a file suffix still gets the checkpoint's folder layout.
    p = lrdoctor("fix", SAMPLES / "torch-microstep", "--out", "fixed-dir", cwd=tmp_path)
    assert p.returncode == 0 and (tmp_path / "fixed-dir" / "checkpoint_60.pt").is_file()
