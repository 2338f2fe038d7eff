"""lrdoctor fix on plain torch.save checkpoints, resumed with torch's own schedulers."""

from __future__ import annotations

import json
import math

import pytest
import torch
from typer.testing import CliRunner

from lrdoctor.cli import app
from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.findings import Severity
from lrdoctor.repair import MANIFEST, plan_fix, write_fix
from tests.helpers.fix_support import diff, load, tree_hash

N, TOTAL, K, LR = 50, 100, 4, 1e-3


def _lambda(i):
    return max(0.0, 1 - i / TOTAL)


def make_sched(opt, kind):
    if kind == "linear":
        return torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.1, total_iters=TOTAL)
    if kind == "lambda":
        return torch.optim.lr_scheduler.LambdaLR(opt, _lambda)
    if kind == "cosine":
        return torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=TOTAL, eta_min=1e-5)
    raise ValueError(kind)


def train(kind, k, n=N):
    torch.manual_seed(0)
    m = torch.nn.Linear(8, 8)
    o = torch.optim.AdamW(m.parameters(), lr=LR)
    s = make_sched(o, kind)
    for _ in range(n):
        m(torch.randn(2, 8)).pow(2).mean().backward()
        o.step()
        o.zero_grad()
        for _ in range(k):
            s.step()
    return m, o, s


def save(path, kind, k):
    m, o, s = train(kind, k)
    torch.save({"model": m.state_dict(), "optimizer": o.state_dict(), "scheduler": s.state_dict(),
                "step": N, "total_steps": TOTAL}, path)
    return path


def resume(path, kind):
    m = torch.nn.Linear(8, 8)
    o = torch.optim.AdamW(m.parameters(), lr=LR)
    s = make_sched(o, kind)
    sd = load(path)
    o.load_state_dict(sd["optimizer"])
    s.load_state_dict(sd["scheduler"])
    return o, s


@pytest.mark.parametrize("kind", ["linear", "cosine"])
def test_rescale_resumes_exactly_like_a_healthy_run(tmp_path, kind):
    src = save(tmp_path / "bad.pt", kind, K)
    before = tree_hash(src)
    plan = plan_fix(src)
    assert plan.target.policy == "rescale" and plan.target.k == K
    out = tmp_path / "fixed.pt"
    res = write_fix(plan, out)
    assert tree_hash(src) == before
    assert [f.code for f in res.after_findings if f.severity >= Severity.WARNING] == []
    a, b = load(src), load(out)
    assert set(diff(a, b)) == {("scheduler", "last_epoch"), ("scheduler", "_step_count"),
                               ("scheduler", "_last_lr", 0),
                               ("optimizer", "param_groups", 0, "lr")}
    assert json.loads((tmp_path / ("fixed.pt." + MANIFEST)).read_text())["policy"] == "rescale"

    _, ho, hs = train(kind, 1)  # the run as it should have been
    o, s = resume(out, kind)
    assert s.last_epoch == N
    assert math.isclose(o.param_groups[0]["lr"], ho.param_groups[0]["lr"], rel_tol=1e-12)
    for _ in range(TOTAL - N):
        o.step()
        s.step()
        ho.step()
        hs.step()
        assert math.isclose(o.param_groups[0]["lr"], ho.param_groups[0]["lr"],
                            rel_tol=1e-9, abs_tol=1e-15)


def test_lambda_rescale_needs_k_and_keeps_the_unknown_lr(tmp_path):
    src = save(tmp_path / "bad.pt", "lambda", K)
    # The schedule is code, yet calls vs updates gives k (issue 9): no --k needed.
    inferred = plan_fix(src, policy="rescale")
    assert inferred.target.progress == N
    plan = plan_fix(src, policy="rescale", k=K)
    assert plan.target.lr is None
    assert len(plan.warnings) == 1 and "--schedule" in plan.warnings[0]
    assert plan.warnings[0].startswith("param-group lr left at ")
    out = tmp_path / "fixed.pt"
    write_fix(plan, out)
    assert set(diff(load(src), load(out))) == {("scheduler", "last_epoch"),
                                               ("scheduler", "_step_count")}
    _, ho, hs = train("lambda", 1)
    o, s = resume(out, "lambda")
    s.step()
    hs.step()
    assert math.isclose(o.param_groups[0]["lr"], ho.param_groups[0]["lr"], rel_tol=1e-12)


def test_cosine_extend_horizon_reaches_eta_min_at_the_planned_end(tmp_path):
    src = save(tmp_path / "bad.pt", "cosine", K)
    plan = plan_fix(src, policy="extend-horizon")
    assert plan.target.horizon == K * N + (TOTAL - N) * K
    out = tmp_path / "ext.pt"
    write_fix(plan, out)
    o, s = resume(out, "cosine")
    assert s.T_max == plan.target.horizon
    lrs = []
    for _ in range(TOTAL - N):
        for _ in range(K):  # the loop is unchanged: still K scheduler steps per update
            s.step()
        lrs.append(o.param_groups[0]["lr"])
    assert math.isclose(lrs[-1], 1e-5, rel_tol=1e-6)
    assert lrs == sorted(lrs, reverse=True) and lrs[0] > 1e-4


def test_nominal_with_progress_and_from_replay(tmp_path):
    src = save(tmp_path / "bad.pt", "linear", K)
    plan = plan_fix(src, progress=30)
    assert plan.target.policy == "nominal" and plan.target.progress == 30
    write_fix(plan, tmp_path / "p.pt")
    o, s = resume(tmp_path / "p.pt", "linear")
    assert s.last_epoch == 30
    assert math.isclose(o.param_groups[0]["lr"], LR * (1 - 0.9 * 30 / TOTAL), rel_tol=1e-12)

    rep = tmp_path / "replay.json"
    rep.write_text(json.dumps({"command": "replay", "summary": {"nominal_updates": 100,
                                                                "actual_updates": 400}}))
    plan = plan_fix(src, replay=rep)
    assert plan.target.progress == N * K / 4
    rep.write_text(json.dumps({"summary": {"engine": "cpu"}}))
    with pytest.raises(UnusableInput, match="nominal/actual"):
        plan_fix(src, replay=rep)


def test_fix_refuses_an_unsafe_pickle_without_running_it(tmp_path):
    class Boom:
        def __reduce__(self):
            return (print, ("pwned",))

    bad = save(tmp_path / "bad.pt", "linear", K)
    sd = torch.load(bad, weights_only=True)
    sd["extra"] = Boom()
    torch.save(sd, bad)
    r = CliRunner().invoke(app, ["fix", str(bad), "--out", str(tmp_path / "o.pt")])
    assert r.exit_code == 2 and "pwned" not in r.output
    assert not (tmp_path / "o.pt").exists()


def test_a_directory_in_gives_a_directory_out(tmp_path):
    d = tmp_path / "ckpts"
    d.mkdir()
    save(d / "checkpoint_50.pt", "linear", K)
    (d / "notes.txt").write_text("kept out of the fix")
    out = tmp_path / "fixed"
    write_fix(plan_fix(d), out)
    assert sorted(p.name for p in out.iterdir()) == ["checkpoint_50.pt", MANIFEST]
    assert load(out / "checkpoint_50.pt")["scheduler"]["last_epoch"] == N
    again = plan_fix(out)
    assert again.noop and again.target is None
