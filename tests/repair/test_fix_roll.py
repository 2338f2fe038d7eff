"""lrdoctor fix on ROLL (mcore_adapter) checkpoints, loaded back with megatron-core."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from lrdoctor.repair import plan_fix, write_fix
from tests.helpers.factories import roll_run
from tests.helpers.fix_support import diff, load, tree_hash

pytestmark = pytest.mark.frameworks
STEPS, NOMINAL, REAL, SAVE = 10, 4, 9, 4  # 9 real updates per step where 4 were budgeted


def sched_for(opt, horizon=STEPS * NOMINAL):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    return OptimizerParamScheduler(opt, init_lr=0.0, max_lr=1e-6, min_lr=0.0,
                                   lr_warmup_steps=2, lr_decay_steps=horizon,
                                   lr_decay_style="cosine", start_wd=0.0, end_wd=0.0,
                                   wd_incr_steps=0, wd_incr_style="constant",
                                   use_checkpoint_opt_param_scheduler=True)


@pytest.fixture(scope="module")
def overshoot(tmp_path_factory):
    return roll_run(tmp_path_factory.mktemp("roll") / "out", pipeline_max_steps=STEPS,
                    nominal_per_step=NOMINAL, updates_per_step=lambda s: REAL,
                    save_at=(SAVE,)).last.path


def test_overshoot_defaults_to_nominal_as_roll_issue_442_proposes(overshoot):
    plan = plan_fix(overshoot)  # no --policy: a non-whole ratio is dynamic batching
    t = plan.target
    assert (t.policy, t.chosen_by, t.alternative) == ("nominal", "findings",
                                                       "--policy extend-horizon")
    assert t.progress == (SAVE + 1) * NOMINAL
    assert t.motivated_by[0] == "LRD103" and "LRD101" in t.motivated_by


def test_nominal_rewinds_num_steps_to_the_budget(overshoot, tmp_path):
    before = tree_hash(overshoot.parent.parent)
    plan = plan_fix(overshoot, policy="nominal")
    assert plan.target.progress == (SAVE + 1) * NOMINAL
    out = tmp_path / overshoot.name
    write_fix(plan, out)
    assert tree_hash(overshoot.parent.parent) == before
    a, b = load(overshoot / "scheduler.pt"), load(out / "scheduler.pt")
    assert diff(a, b) == [("num_steps",)]
    opt_rel = "iter_0000001/mp_rank_00/optimizer.pt"
    changed = diff(load(overshoot / opt_rel), load(out / opt_rel))
    assert changed == [("optimizer", "param_groups", 0, "lr")]
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-6)
    s = sched_for(opt)
    s.load_state_dict(b)
    healthy = sched_for(torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-6))
    healthy.step((SAVE + 1) * NOMINAL)
    want = healthy.optimizer.param_groups[0]["lr"]
    assert math.isclose(opt.param_groups[0]["lr"], want, rel_tol=1e-12)
    assert math.isclose(load(out / opt_rel)["optimizer"]["param_groups"][0]["lr"], want,
                        rel_tol=1e-12)


def test_extend_horizon_follows_the_real_update_count(overshoot, tmp_path):
    plan = plan_fix(overshoot, policy="extend-horizon")
    assert plan.target.horizon == STEPS * REAL
    out = tmp_path / "ext"
    write_fix(plan, out)
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-6)
    s = sched_for(opt, horizon=STEPS * REAL)
    s.load_state_dict(load(out / "scheduler.pt"))
    lrs = []
    for _ in range(STEPS - SAVE - 1):
        for _ in range(REAL):
            s.step(1)
        lrs.append(opt.param_groups[0]["lr"])
    assert lrs[-1] == 0.0 and all(x > 0 for x in lrs[:-1])
