"""lrdoctor fix on real Megatron-LM checkpoints, loaded back with megatron-core."""

from __future__ import annotations

import json
import math

import pytest
from typer.testing import CliRunner

from lrdoctor.cli import app
from lrdoctor.core.findings import Severity
from lrdoctor.repair import MANIFEST, plan_fix, write_fix
from tests.helpers.fix_support import (
    GBS,
    ITERS,
    TRAIN_ITERS,
    diff,
    load,
    mcore_scheduler,
    megatron_run,
    tree_hash,
)

pytestmark = pytest.mark.frameworks
RANK = "iter_0000050/mp_rank_{:02d}/model_optim_rng.pt"


@pytest.fixture(scope="module")
def bad_run(tmp_path_factory):
    return megatron_run(tmp_path_factory.mktemp("mg") / "run")


def healthy_lr() -> float:
    """The LR megatron-core gives after ITERS correct steps of the same schedule."""
    import torch

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    s = mcore_scheduler(opt)
    for _ in range(ITERS):
        s.step(increment=GBS)
    return opt.param_groups[0]["lr"]


def test_nominal_fix_resumes_at_the_nominal_lr(bad_run, tmp_path):
    import torch

    before = tree_hash(bad_run)
    plan = plan_fix(bad_run)
    assert plan.target.policy == "nominal"
    assert set(plan.target.motivated_by) >= {"LRD104"}
    out = tmp_path / "fixed"
    res = write_fix(plan, out)
    assert tree_hash(bad_run) == before  # input untouched
    assert [f.code for f in res.after_findings if f.severity >= Severity.WARNING] == []
    # Only the tracker and the fixed iteration, plus the manifest.
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()) == sorted(
        ["latest_checkpointed_iteration.txt", MANIFEST, RANK.format(0), RANK.format(1)])
    for r in range(2):
        a, b = load(bad_run / RANK.format(r)), load(out / RANK.format(r))
        changed = diff(a, b)
        assert set(changed) == {("opt_param_scheduler", "num_steps"),
                                ("optimizer", "optimizer", "param_groups", 0, "lr")}
        assert b["opt_param_scheduler"]["num_steps"] == ITERS * GBS
        assert isinstance(b["opt_param_scheduler"]["num_steps"], int)
        # Load it the way Megatron-LM does (checkpoint values must equal the class's).
        opt = torch.optim.AdamW(torch.nn.Linear(8, 8).parameters(), lr=3e-4)
        opt.load_state_dict(b["optimizer"]["optimizer"])
        sched = mcore_scheduler(opt, use_checkpoint_opt_param_scheduler=False)
        sched.load_state_dict(b["opt_param_scheduler"])
        assert sched.num_steps == ITERS * GBS
        assert math.isclose(sched.get_lr(opt.param_groups[0]), healthy_lr(), rel_tol=1e-12)
        assert math.isclose(b["optimizer"]["optimizer"]["param_groups"][0]["lr"], healthy_lr(),
                            rel_tol=1e-12)
    doc = json.loads((out / MANIFEST).read_text())
    assert doc["policy"] == "nominal"
    keys = {(c["file"], c["key"]) for c in doc["changes"]}
    assert (RANK.format(1), "opt_param_scheduler.num_steps") in keys
    assert {c["file"] for c in doc["changed_files"]} == {RANK.format(0), RANK.format(1)}
    import hashlib
    for c in doc["changed_files"]:
        assert hashlib.sha256((out / c["file"]).read_bytes()).hexdigest() == c["sha256"]


def test_extend_horizon_ends_the_schedule_at_the_planned_end(bad_run, tmp_path):
    import torch

    plan = plan_fix(bad_run, policy="extend-horizon")
    # 50 of 100 iterations left, the loop advances 4 x GBS samples per iteration.
    assert plan.target.horizon == 4 * ITERS * GBS + (TRAIN_ITERS - ITERS) * 4 * GBS
    out = tmp_path / "ext"
    write_fix(plan, out)
    b = load(out / RANK.format(0))
    opt = torch.optim.AdamW(torch.nn.Linear(8, 8).parameters(), lr=3e-4)
    opt.load_state_dict(b["optimizer"]["optimizer"])
    sched = mcore_scheduler(opt, use_checkpoint_opt_param_scheduler=True)
    sched.load_state_dict(b["opt_param_scheduler"])
    assert sched.lr_decay_steps == plan.target.horizon
    lrs = []
    for _ in range(TRAIN_ITERS - ITERS):  # the unchanged loop: 4 scheduler steps per update
        for _ in range(4):
            sched.step(increment=GBS)
        lrs.append(opt.param_groups[0]["lr"])
    assert all(x > 3e-5 for x in lrs[:-1])  # no longer stuck at min_lr
    assert math.isclose(lrs[-1], 3e-5, rel_tol=1e-12)  # reaches it exactly at the end
    assert lrs == sorted(lrs, reverse=True)


def test_rescale_divides_num_steps(bad_run, tmp_path):
    plan = plan_fix(bad_run, policy="rescale")
    assert plan.target.k == 4
    assert plan.target.progress == ITERS * GBS
    write_fix(plan, tmp_path / "r")
    assert load(tmp_path / "r" / RANK.format(1))["opt_param_scheduler"]["num_steps"] == 1600


runner = CliRunner()


def test_cli_dry_run_json_force_and_noop(bad_run, tmp_path):
    out = tmp_path / "cli"
    r = runner.invoke(app, ["fix", str(bad_run), "--out", str(out), "--dry-run", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["command"] == "fix" and doc["dry_run"] is True
    assert {c["key"] for c in doc["changes"]} >= {"opt_param_scheduler.num_steps"}
    assert not out.exists()

    r = runner.invoke(app, ["fix", str(bad_run), "--out", str(out), "--dry-run"])
    assert r.exit_code == 0 and "num_steps" in r.stdout and "6400" in r.stdout
    assert "1600" in r.stdout and not out.exists()

    r = runner.invoke(app, ["fix", str(bad_run), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert (out / MANIFEST).is_file()
    r = runner.invoke(app, ["fix", str(bad_run), "--out", str(out)])
    assert r.exit_code == 2 and "--force" in r.stderr
    # Fixing the fixed copy is a no-op that writes nothing.
    again = tmp_path / "again"
    r = runner.invoke(app, ["fix", str(out), "--out", str(again)])
    assert r.exit_code == 0 and "no output written" in " ".join(r.stdout.split())
    assert "already repaired" in " ".join(r.stdout.split())
    assert not again.exists()

    r = runner.invoke(app, ["fix", str(bad_run), "--out", str(out), "--force",
                            "--policy", "extend-horizon"])
    # Written over the old copy, but not "verified": LRD104 (an error) stays when only the
    # horizon moves, and the step that clears it is named (issue 29 item 3; was exit 0).
    assert r.exit_code == 1, r.output
    assert "`--policy nominal` clears LRD104" in " ".join(r.stdout.split())
    assert json.loads((out / MANIFEST).read_text())["policy"] == "extend-horizon"


def test_cli_refuses_writing_into_the_input(bad_run):
    before = tree_hash(bad_run)
    for out in (bad_run, bad_run / "sub"):
        r = runner.invoke(app, ["fix", str(bad_run), "--out", str(out)])
        assert r.exit_code == 2
        assert r.stderr.count("\n") == 1
    r = runner.invoke(app, ["fix", str(bad_run)])
    assert r.exit_code == 2 and "--out" in r.stderr
    r = runner.invoke(app, ["fix", str(bad_run), "--out", "/tmp/x", "--policy", "nominal",
                            "--k", "3"])
    assert r.exit_code == 2 and "--k" in r.stderr
    assert tree_hash(bad_run) == before


def test_verification_failure_leaves_nothing(bad_run, tmp_path, monkeypatch):
    import lrdoctor.repair.engine as eng

    before = tree_hash(bad_run)
    plan = plan_fix(bad_run)
    plan.target.progress = 999  # the written copy will not hold what was planned

    with pytest.raises(eng.FixFailed):
        write_fix(plan, tmp_path / "bad")
    assert not (tmp_path / "bad").exists()
    assert list(tmp_path.iterdir()) == []  # no temporary sibling left either
    assert tree_hash(bad_run) == before


def test_ranks_that_disagree_are_refused(tmp_path):
    import torch

    run = megatron_run(tmp_path / "run")
    f = run / RANK.format(1)
    sd = load(f)  # memory-mapped: write a new file and rename, never truncate under it
    sd["opt_param_scheduler"]["num_steps"] = 4800
    torch.save(sd, f.with_suffix(".tmp"))
    f.with_suffix(".tmp").replace(f)
    before = tree_hash(run)
    r = runner.invoke(app, ["fix", str(run), "--out", str(tmp_path / "out"), "--format",
                            "megatron"])
    assert r.exit_code == 2 and "disagree" in r.stderr and r.stderr.count("\n") == 1
    assert not (tmp_path / "out").exists() and tree_hash(run) == before
    r = runner.invoke(app, ["fix", str(run), "--out", str(tmp_path / "out"), "--format", "nope"])
    assert r.exit_code == 2 and "unknown format" in r.stderr


def test_lr_set_by_hand_is_synced_and_a_single_rank_file_works(tmp_path):
    run = megatron_run(tmp_path / "run", steps_per_update=1, ranks=1, lr_by_hand=2.5e-4)
    f = run / RANK.format(0)
    plan = plan_fix(f)
    assert plan.target.policy == "sync-lr" and plan.target.motivated_by == ["LRD105"]
    assert [c.key_str for c in plan.changes] == ["optimizer.optimizer.param_groups[0].lr"]
    out = tmp_path / "fixed.pt"
    write_fix(plan, out)
    b = load(out)
    assert b["opt_param_scheduler"]["num_steps"] == ITERS * GBS
    assert math.isclose(b["optimizer"]["optimizer"]["param_groups"][0]["lr"], healthy_lr(),
                        rel_tol=1e-12)
    assert json.loads((tmp_path / ("fixed.pt." + MANIFEST)).read_text())["policy"] == "sync-lr"
