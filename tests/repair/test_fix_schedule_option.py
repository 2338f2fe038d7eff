"""`fix --schedule`: the exact LR for a schedule that is code (issue 20).

OneVision-Encoder PR 82: a LambdaLR loop stepped per micro-batch (4 per update) comes
back from `fix` with last_epoch 1000 -> 250, but the param-group lr must also be what
the schedule gives at update 250, which the checkpoint cannot say (a lambda is code).
Written with torch's own LambdaLR and resumed with it: the first resumed update and
every one after have the healthy run's LR (rel 1e-9).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from lrdoctor.cli import app
from lrdoctor.core.errors import UnusableInput
from lrdoctor.repair import plan_fix, write_fix
from tests.helpers.fix_support import load, tree_hash

runner = CliRunner()
pytestmark = pytest.mark.filterwarnings("ignore:Detected call of")
LR, WARMUP, TOTAL, K, DONE = 1e-3, 100, 3000, 4, 250
SCHEDULE = f"{{family: hf, kind: cosine, max_lr: {LR}, warmup: {WARMUP}, horizon: {TOTAL}}}"


def lr_lambda(step: int) -> float:
    """OneVision-Encoder's warmup + cosine, written by hand as the project does."""
    if step < WARMUP:
        return step / max(1, WARMUP)
    progress = (step - WARMUP) / max(1, TOTAL - WARMUP)
    return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))


def loop(k: int, updates: int):
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    for _ in range(updates):
        for _ in range(k):  # PR 82: scheduler.step() inside the micro-batch loop
            model(torch.randn(2, 8)).pow(2).mean().backward()
            sched.step()
        opt.step()
        opt.zero_grad()
    return model, opt, sched


@pytest.fixture
def onevision(tmp_path):
    model, opt, sched = loop(K, DONE)
    path = tmp_path / "checkpoint_250.pt"
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "lr_scheduler": sched.state_dict(), "global_step": DONE}, path)
    return path


def resume(path):
    sd = load(path)
    model = torch.nn.Linear(8, 8)
    opt = torch.optim.AdamW(model.parameters(), lr=LR)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda)
    opt.load_state_dict(sd["optimizer"])
    sched.load_state_dict(sd["lr_scheduler"])
    return opt, sched


def test_schedule_option_sets_the_exact_lr_a_resumed_lambdalr_uses(onevision, tmp_path):
    before = tree_hash(onevision)
    assert load(onevision)["lr_scheduler"]["last_epoch"] == K * DONE
    out = tmp_path / "fixed.pt"
    r = runner.invoke(app, ["fix", str(onevision), "--out", str(out), "--schedule", SCHEDULE])
    assert r.exit_code == 0, r.output
    flat = " ".join(r.stdout.split())
    assert "--policy rescale --k 4" in flat and "verified by inspecting it again" in flat
    assert "warning:" not in flat
    assert tree_hash(onevision) == before

    _, healthy_opt, healthy = loop(1, DONE)  # the run as it should have been
    opt, sched = resume(out)
    assert sched.last_epoch == DONE
    assert math.isclose(opt.param_groups[0]["lr"], LR * lr_lambda(DONE), rel_tol=1e-9)
    for _ in range(20):  # the first resumed update, then every scheduler step after
        assert math.isclose(opt.param_groups[0]["lr"], healthy_opt.param_groups[0]["lr"],
                            rel_tol=1e-9)
        opt.step()
        sched.step()
        healthy_opt.step()
        healthy.step()
    doc = json.loads((tmp_path / "fixed.pt.lrdoctor-fix.json").read_text())
    assert math.isclose(doc["target"]["lr"], LR * lr_lambda(DONE), rel_tol=1e-12)


def test_without_a_schedule_fix_writes_the_counters_and_one_warning_line(onevision,
                                                                         tmp_path):
    """No schedule: no guess. The counters are written, the lr left as saved, and ONE
    warning line names it, says what it should be and the option that sets it."""
    saved = load(onevision)["optimizer"]["param_groups"][0]["lr"]
    plan = plan_fix(onevision)
    assert plan.target.lr is None and len(plan.warnings) == 1
    line = plan.warnings[0]
    assert f"{saved:.6g}" in line and "lr_lambda(250)" in line and "--schedule" in line
    # Issue 29 item 8: the values the checkpoint holds and placeholders, never an example
    # that reads as advice (the fixed one matched this very run by chance).
    assert ("--schedule '{family: <hf|torch|megatron|deepspeed>, kind: <KIND>, max_lr: "
            "0.001, warmup: <WARMUP>, horizon: <HORIZON>}' (max_lr from "
            "checkpoint_250.pt:optimizer.param_groups[0].initial_lr") in line, line
    out = tmp_path / "counters.pt"
    r = runner.invoke(app, ["fix", str(onevision), "--out", str(out)])
    assert r.exit_code == 0
    warn = [ln for ln in r.stdout.splitlines() if ln.startswith("warning:")]
    assert len(warn) == 1
    sd = load(out)
    assert sd["lr_scheduler"]["last_epoch"] == DONE
    assert sd["optimizer"]["param_groups"][0]["lr"] == saved  # not guessed
    # The option the line names exists and sets it.
    other = tmp_path.parent / (tmp_path.name + "-set")  # not inside the checkpoint folder
    other.mkdir()
    write_fix(plan_fix(onevision, schedule=SCHEDULE), other / "set.pt")
    assert math.isclose(load(other / "set.pt")["optimizer"]["param_groups"][0]["lr"],
                        LR * lr_lambda(DONE), rel_tol=1e-9)


def test_schedule_from_a_yaml_file_and_bad_schedules_are_one_line(onevision, tmp_path):
    cfg = tmp_path / "run.yaml"  # a whole run config: its schedule section is used
    cfg.write_text(f"train:\n  steps: 10\nschedule:\n  family: hf\n  kind: cosine\n"
                   f"  max_lr: {LR}\n  warmup: {WARMUP}\n  horizon: {TOTAL}\n")
    plan = plan_fix(onevision, schedule=str(cfg))
    assert math.isclose(plan.target.lr, LR * lr_lambda(DONE), rel_tol=1e-9)
    for bad in ("{family: nope}", "{family: hf, kind: cosine, max_lr: -1}", "[1, 2]"):
        with pytest.raises(UnusableInput):
            plan_fix(onevision, schedule=bad)
        r = runner.invoke(app, ["fix", str(onevision), "--out", str(tmp_path / "x.pt"),
                                "--schedule", bad])
        assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output


def test_from_replay_gives_the_schedule_it_replayed(onevision, tmp_path):
    """`lrdoctor replay --json` of the loop's own config (the OneVision example, scaled to
    this run) carries the schedule section: `fix --policy rescale --from-replay` sets the
    exact LR from it, as --schedule does."""
    src = (Path(__file__).resolve().parents[2] / "examples" / "onevision-offbyone.yaml")
    text = src.read_text()
    for a, b in (("max_lr: 1.0e-4", f"max_lr: {LR}"), ("warmup: 400", f"warmup: {WARMUP}"),
                 ("horizon: 8000", f"horizon: {TOTAL}"), ("total: 8000", f"total: {TOTAL}"),
                 ("steps: 8000", "steps: 64")):
        assert a in text
        text = text.replace(a, b)
    cfg = tmp_path / "ov.yaml"
    cfg.write_text(text)
    r = runner.invoke(app, ["replay", "--config", str(cfg), "--json"])
    assert r.exit_code in (0, 1), r.output
    rep = tmp_path / "replay.json"
    rep.write_text(r.stdout)
    plan = plan_fix(onevision, policy="rescale", replay=rep)
    assert plan.target.progress == DONE
    assert math.isclose(plan.target.lr, LR * lr_lambda(DONE), rel_tol=1e-9)
    assert any("--from-replay" in n for n in plan.notes)
