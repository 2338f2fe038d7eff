"""OneVision-Encoder from its own launch script (tests/data/launch_scripts/onevision, a copy
of shells/ov_encoder_large_stage2_residual_8gpus.sh at EvolvingLMMs-Lab/OneVision-Encoder
c2cd3e0) and train.py's loop before and after PR 82 (b02db5b).

The loop is transcribed from training/train.py (the three lines PR 82 changed, the
``global_step`` counter from 0 past ``total_steps``) and drives the real torch scheduler
machinery with the transcribed ``PolynomialLRWarmup`` (tests/schedules/test_onevision.py);
the replay must give the same updates, windows and LR at every micro-step.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from lrdoctor.replay import ReplayOptions, replay_full
from lrdoctor.replay.config import load_config
from tests.helpers.paths import TESTS

SCRIPT = TESTS / "data" / "launch_scripts" / "onevision" / "shells" / \
    "ov_encoder_large_stage2_residual_8gpus.sh"
SMALL = "train.num_sampled_data=1280000"  # 1,280,000 / 20 / 8 = 8000 micro-steps + 1


def _train_py(num_sampled_data: int, before: bool) -> dict:
    """train.py's loop (c2cd3e0 / b02db5b^) on the script's arguments: per micro-step,
    whether the optimizer steps and the LR the micro-step's update uses."""
    torch = pytest.importorskip("torch")
    from tests.schedules.test_onevision import PolynomialLRWarmup

    batch_size, world_size, k, lr, warmup_ratio = 10 + 10, 8, 4, 0.00005, 0.001
    total_steps = int(num_sampled_data / batch_size / world_size)
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    iters = total_steps if before else total_steps // k
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = PolynomialLRWarmup(opt, int(iters * warmup_ratio), iters, 2)
        steps, lrs = [], []
        global_step = 0
        while True:
            lrs.append(opt.param_groups[0]["lr"])
            acc = (global_step % k != 0) if before else ((global_step + 1) % k != 0)
            if not acc:
                opt.step()
                if not before:
                    sched.step()
            if before:
                sched.step()
            steps.append(not acc)
            global_step += 1
            if global_step > total_steps:
                break
    return {"total_steps": total_steps, "is_update": steps, "lr": lrs}


def test_the_shipped_script_is_read_with_train_py_defaults():
    cfg = load_config(SCRIPT, (SMALL,))
    assert cfg._format == "onevision_encoder-config"
    assert cfg.dp.size == 8 and cfg.train.micro_batch_size == 20  # 10 + 10 per rank
    assert cfg.train.gradient_accumulation == 4 and cfg.train.steps == 8001
    assert cfg.schedule.family == "onevision" and cfg.schedule.max_lr == 5e-5
    assert cfg.schedule.horizon == 2000 and cfg.schedule.warmup == 2  # int(2000 x 0.001)
    assert cfg.scheduler.step_on == "update" and cfg.accumulation.rule == "correct"
    old = load_config(SCRIPT, (SMALL, "onevision.train_py=before-pr82"))
    assert old.schedule.horizon == 8000 and old.schedule.warmup == 8
    assert old.scheduler.step_on == "micro_step" and old.accumulation.rule == "off_by_one"


@pytest.mark.parametrize("before", [True, False])
def test_updates_windows_and_lrs_equal_train_py(before):
    sets = (SMALL,) + (("onevision.train_py=before-pr82",) if before else ())
    res = replay_full(str(SCRIPT), options=ReplayOptions(engine="fast", sets=sets))
    t, s = res.replay.trace, res.report.extra["summary"]
    real = _train_py(1_280_000, before)
    assert len(t["lr"]) == real["total_steps"] + 1 == 8001
    assert t["is_update"].tolist() == real["is_update"]
    assert s["actual_updates"] == (2001 if before else 2000)
    assert s["window_sizes"]["first"] == (1 if before else 4)
    assert np.array_equal(t["lr"], np.asarray(real["lr"]))  # bit for bit
    found = {f.code: f for f in res.report.findings}
    if not before:
        assert not found
        return
    # The off-by-one's extra update: the scheduler ends 1 micro-step past 8000.
    assert set(found) == {"LRD201", "LRD204", "LRD205"}
    assert "8001 micro-steps, 1.000125x its horizon of 8000" in found["LRD201"].message
    assert found["LRD201"].severity.name == "WARNING"


@pytest.mark.parametrize("train_py", ["pr82", "before-pr82"])
def test_step_runs_give_the_per_step_trace(train_py):
    """The run-length path (one plan per dp size, numpy-tiled columns) is the per-step
    path's trace, column for column: the same replay through a plain list of steps."""
    from lrdoctor.replay import analysis, engine
    from lrdoctor.replay.config import with_key
    from lrdoctor.replay.planning import StepRuns, plan_steps
    from lrdoctor.replay.samples import load_samples

    cfg = load_config(SCRIPT, (SMALL, f"onevision.train_py={train_py}"))
    # a dp change mid-run too: two runs, and k recomputed per dp size
    cfg = with_key(cfg, "dp.changes", [{"at_step": 3000, "size": 4}])
    cfg = with_key(cfg, "train.mini_batch_size", 640)
    runs = plan_steps(cfg, load_samples(cfg))
    assert isinstance(runs, StepRuns) and len(runs.runs) == 2 and len(runs) == 8001
    fast = engine.simulate(cfg, runs)
    slow = engine.simulate(cfg, list(runs))
    assert fast.trace.keys() == slow.trace.keys()
    for key in fast.trace:
        assert np.array_equal(fast.trace[key], slow.trace[key], equal_nan=True), key
    assert [f.code for f in analysis.findings(fast)] == [f.code for f in analysis.findings(slow)]


def test_a_given_planner_on_counts_only_is_not_called_a_cycled_log():
    """Counts only (no batch log): a test's planner walks the steps one by one, and the
    output does not claim a one-step batch log was cycled."""
    from lrdoctor.replay import packing
    from lrdoctor.replay.planning import plan_steps
    from lrdoctor.replay.samples import load_samples

    cfg = load_config(SCRIPT, (SMALL,))
    notes: dict = {}
    infos = plan_steps(cfg, load_samples(cfg), packing.plan_step, notes=notes)
    assert len(infos) == 8001 and "cycled" not in notes and "logged_steps" not in notes
