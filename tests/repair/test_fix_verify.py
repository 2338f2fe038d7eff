"""Verification that cannot lie (issue 20): a fix is "verified" only when inspecting the
written copy shows none of the findings it was asked to repair and nothing new at warning
or above; otherwise exit 1 with those findings and never the word "verified"."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from typer.testing import CliRunner

from lrdoctor.cli import app
from lrdoctor.repair import MANIFEST, plan_fix, write_fix
from tests.helpers.docs import reports as doc_reports
from tests.helpers.fix_support import load, tree_hash
from tests.repair.test_fix_torch import LR, TOTAL, make_sched

runner = CliRunner()
SAMPLE = Path(__file__).resolve().parents[2] / "sample_checkpoints" / "torch-microstep"


def _codes(args: list[str]) -> tuple[int, set[str]]:
    r = runner.invoke(app, ["inspect", "--json", *args])
    doc = json.loads(r.stdout)
    (doc,) = doc_reports(doc)
    return r.exit_code, {f["code"] for f in doc["findings"]
                         if f["severity"] in ("warning", "error")}


def test_extend_horizon_of_the_sample_is_not_verified_while_lrd103_stays(tmp_path):
    """The repro of issue 20: T_max 100 -> 400 said "verified" while inspect gave LRD105
    and LRD118. Now the param-group lr follows the moved cosine and LRD118 measures the
    planned end at the scheduler's own pace (4 calls per update), as extend-horizon does.
    Issue 29 item 3: the copy still has LRD103 (an error: the loop steps 4x per update),
    so it is not "verified" (it was, with exit 0): exit 1, and the step that clears it
    is named as a command on the input."""
    src = SAMPLE / "checkpoint_60.pt"
    before = tree_hash(src)
    out = tmp_path / "t.pt"
    r = runner.invoke(app, ["fix", str(src), "--out", str(out), "--policy", "extend-horizon"])
    text = " ".join(r.stdout.split())
    assert r.exit_code == 1, r.output
    assert "verified by inspecting it again" not in text and "NOT a repaired" in text
    assert f"to clear it: `--policy rescale --k 4` clears LRD103: `lrdoctor fix {src} " \
           f"--out {src.with_name('checkpoint_60-fixed.pt')} --policy rescale --k 4`" in text
    code, left = _codes([str(out)])
    assert left == {"LRD103"} and code == 1  # what fix said remains, inspect says too
    sd = load(out)
    assert sd["scheduler"]["T_max"] == 400
    closed = 3e-5 + (3e-4 - 3e-5) * (1 + math.cos(math.pi * 240 / 400)) / 2
    assert math.isclose(sd["optimizer"]["param_groups"][0]["lr"], closed, rel_tol=1e-9)
    assert sd["scheduler"]["_last_lr"] == [sd["optimizer"]["param_groups"][0]["lr"]]
    assert tree_hash(src) == before


def test_cosine_extend_horizon_resumes_on_the_moved_curve(tmp_path):
    """CosineAnnealingLR is chainable (each LR from the previous group lr): a real torch
    resume of the extended copy gives, at every later update, exactly the LR a scheduler
    built with the new T_max from the start gives (rel 1e-9)."""
    k, n = 4, 50
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 4)
    o = torch.optim.SGD(m.parameters(), lr=LR)
    s = make_sched(o, "cosine")
    for _ in range(n):
        o.step()
        for _ in range(k):
            s.step()
    src = tmp_path / "bad.pt"
    torch.save({"model": m.state_dict(), "optimizer": o.state_dict(),
                "scheduler": s.state_dict(), "step": n, "total_steps": TOTAL}, src)
    plan = plan_fix(src, policy="extend-horizon")
    new_t = plan.target.horizon
    assert new_t == TOTAL * k
    res = write_fix(plan, tmp_path / "ext.pt")
    # LRD103 stays (the loop steps 4x per update): written, but not "verified" (issue 29)
    assert not res.verified and {f.code for f in res.unresolved} == {"LRD103"}

    o2 = torch.optim.SGD(torch.nn.Linear(4, 4).parameters(), lr=LR)
    s2 = torch.optim.lr_scheduler.CosineAnnealingLR(o2, T_max=TOTAL, eta_min=1e-5)
    sd = load(tmp_path / "ext.pt")
    o2.load_state_dict(sd["optimizer"])
    s2.load_state_dict(sd["scheduler"])
    ref_o = torch.optim.SGD(torch.nn.Linear(4, 4).parameters(), lr=LR)
    ref = torch.optim.lr_scheduler.CosineAnnealingLR(ref_o, T_max=new_t, eta_min=1e-5)
    for _ in range(n * k):
        ref_o.step()
        ref.step()
    for _ in range(TOTAL - n):
        for _ in range(k):
            o2.step()
            s2.step()
            ref_o.step()
            ref.step()
        assert math.isclose(o2.param_groups[0]["lr"], ref_o.param_groups[0]["lr"],
                            rel_tol=1e-9), s2.last_epoch
    assert math.isclose(o2.param_groups[0]["lr"], 1e-5, rel_tol=1e-9)


def test_a_copy_that_still_shows_the_finding_exits_1_and_is_never_called_verified(
        tmp_path, monkeypatch):
    """A writer that leaves the param-group lr behind (the bug before issue 20): the copy
    shows a new LRD105, so the command exits 1, lists it, and says NOT verified."""
    import lrdoctor.repair.torchstate as ts

    monkeypatch.setattr(ts, "optimizer_changes", lambda *a, **kw: [])
    src = SAMPLE / "checkpoint_60.pt"
    out = tmp_path / "t.pt"
    r = runner.invoke(app, ["fix", str(src), "--out", str(out), "--policy", "extend-horizon"])
    assert r.exit_code == 1, r.output
    assert "verified" not in r.stdout.replace("NOT a repaired", "")
    assert "LRD105" in r.stdout
    doc = json.loads((tmp_path / f"t.pt.{MANIFEST}").read_text())
    assert doc["verified"] is False
    # LRD105 (the writer's), and LRD103: an error the extend-horizon copy keeps (issue 29)
    assert [f["code"] for f in doc["unresolved_findings"]] == ["LRD103", "LRD105"]
    r = runner.invoke(app, ["fix", str(src), "--out", str(tmp_path / "j.pt"), "--policy",
                            "extend-horizon", "--json"])
    assert r.exit_code == 1
    rep = json.loads(r.stdout)
    assert rep["verified"] is False
    assert "LRD105" in [f["code"] for f in rep["unresolved_findings"]]


def test_a_finished_run_says_the_fix_changes_nothing_useful(tmp_path):
    """The final checkpoint of a run whose LinearLR was stepped 4x per update: rescaling
    it is right, but the LR is end_factor x lr before and after and nothing is left to run."""
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 4)
    o = torch.optim.SGD(m.parameters(), lr=LR)
    s = make_sched(o, "linear")
    for _ in range(TOTAL):
        o.step()
        for _ in range(4):
            s.step()
    src = tmp_path / "final.pt"
    torch.save({"model": m.state_dict(), "optimizer": o.state_dict(),
                "scheduler": s.state_dict(), "step": TOTAL, "total_steps": TOTAL}, src)
    plan = plan_fix(src)
    assert plan.target.policy == "rescale"
    assert any(n.startswith("this changes nothing useful") for n in plan.notes), plan.notes
    r = runner.invoke(app, ["fix", str(src), "--out", str(tmp_path / "o.pt")])
    assert r.exit_code == 0 and "changes nothing useful" in " ".join(r.stdout.split())


def test_linear_extend_horizon_resumes_on_the_moved_line(tmp_path):
    """LinearLR is chainable too (each factor applies to the previous group lr): after
    total_iters 100 -> 400 the copy's group lr is the moved line's value, so every later
    step of a real resume matches a LinearLR built with total_iters 400 (rel 1e-9)."""
    k, n = 4, 50

    def linear(o, total):
        return torch.optim.lr_scheduler.LinearLR(o, start_factor=1.0, end_factor=0.1,
                                                 total_iters=total)

    torch.manual_seed(0)
    m = torch.nn.Linear(4, 4)
    o = torch.optim.SGD(m.parameters(), lr=LR)
    s = linear(o, TOTAL)
    for _ in range(n):
        o.step()
        for _ in range(k):
            s.step()
    src = tmp_path / "bad.pt"
    torch.save({"model": m.state_dict(), "optimizer": o.state_dict(),
                "scheduler": s.state_dict(), "step": n, "total_steps": TOTAL}, src)
    plan = plan_fix(src, policy="extend-horizon")
    assert plan.target.horizon == TOTAL * k
    res = write_fix(plan, tmp_path / "ext.pt")
    assert res.written is not None and {f.code for f in res.unresolved} == {"LRD103"}
    sd = load(tmp_path / "ext.pt")
    o2 = torch.optim.SGD(torch.nn.Linear(4, 4).parameters(), lr=LR)
    s2 = linear(o2, TOTAL)
    o2.load_state_dict(sd["optimizer"])
    s2.load_state_dict(sd["scheduler"])
    ref_o = torch.optim.SGD(torch.nn.Linear(4, 4).parameters(), lr=LR)
    ref = linear(ref_o, TOTAL * k)
    for _ in range(n * k):
        ref_o.step()
        ref.step()
    for _ in range((TOTAL - n) * k):
        assert math.isclose(o2.param_groups[0]["lr"], ref_o.param_groups[0]["lr"],
                            rel_tol=1e-9), s2.last_epoch
        o2.step()
        s2.step()
        ref_o.step()
        ref.step()
    assert math.isclose(o2.param_groups[0]["lr"], 0.1 * LR, rel_tol=1e-9)
