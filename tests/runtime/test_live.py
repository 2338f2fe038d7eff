"""Live fixes on real torch and megatron-core schedulers."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from lrdoctor.core.state import ScheduleSpec, Unit
from lrdoctor.runtime.guard import NormalizedStepper, SchedulerStepError, StepGuard


def opt():
    return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)


def mcore(o, horizon=40):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    return OptimizerParamScheduler(o, init_lr=0.0, max_lr=1e-3, min_lr=1e-5, lr_warmup_steps=4,
                                   lr_decay_steps=horizon, lr_decay_style="cosine",
                                   start_wd=0.0, end_wd=0.0, wd_incr_steps=1,
                                   wd_incr_style="constant")


@pytest.mark.frameworks
def test_megatron_scheduler_follows_the_budget_with_twice_the_updates():
    o, ho = opt(), opt()
    s, healthy = mcore(o), mcore(ho)
    g = NormalizedStepper(s, nominal_steps=40, actual_steps=80)
    lrs = []
    for _ in range(80):
        lrs.append(g.step()[0])
    for k in range(1, 41):  # after 2k real updates == k budgeted updates
        healthy.step(increment=1)
        assert math.isclose(lrs[2 * k - 1], ho.param_groups[0]["lr"], rel_tol=1e-9)
    assert math.isclose(s.num_steps, 40.0) and math.isclose(lrs[-1], 1e-5, rel_tol=1e-9)
    assert lrs[-2] > 1e-5  # the floor is reached at the end, not halfway


@pytest.mark.parametrize("make", [
    lambda o: torch.optim.lr_scheduler.LinearLR(o, 1.0, 0.1, total_iters=10),
    lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10, eta_min=1e-5),
    lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda p: max(0.0, 1 - p / 10)),
    lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=1e-3, total_steps=11),
], ids=["LinearLR", "CosineAnnealingLR", "LambdaLR", "OneCycleLR"])
def test_torch_schedulers_follow_the_budget(make):
    o, ho = opt(), opt()
    s, healthy = make(o), make(ho)
    g = NormalizedStepper(s, nominal_steps=10, actual_steps=30)
    for k in range(1, 11):
        for _ in range(3):
            o.step()
            g.step()
        ho.step()
        healthy.step()
        assert math.isclose(o.param_groups[0]["lr"], ho.param_groups[0]["lr"], rel_tol=1e-9,
                            abs_tol=1e-15), k
        assert s.last_epoch == healthy.last_epoch == k
        assert s.get_last_lr() == pytest.approx(healthy.get_last_lr(), rel=1e-9)
    assert math.isclose(g.progress, 10.0)


def test_fractional_progress_sits_between_whole_steps():
    o = opt()
    s = torch.optim.lr_scheduler.LinearLR(o, 1.0, 0.0, total_iters=10)
    g = NormalizedStepper(s, nominal_steps=1, actual_steps=2)
    g.step()
    assert s.last_epoch == 0 and math.isclose(o.param_groups[0]["lr"], 1e-3 * 0.95)
    sd = g.state_dict()
    g2 = NormalizedStepper(s, 1, 1)
    g2.load_state_dict(sd)
    assert g2.progress == 0.5 and g2.ratio == 0.5


def test_rebase_per_train_batch_keeps_exact_budget():
    """ROLL: 4 updates budgeted per pipeline step, 3..9 taken."""
    o = opt()
    spec = ScheduleSpec(family="megatron", kind="linear", max_lr=1e-3, min_lr=0.0,
                        unit=Unit.UPDATES, horizon=40)
    s = torch.optim.lr_scheduler.LambdaLR(o, lambda p: 1.0)  # LR comes from the spec
    g = NormalizedStepper(s, 4, 4, schedule=spec)
    for step in range(10):
        actual = 3 + (step * 5) % 7
        g.rebase(4, actual)
        for _ in range(actual):
            g.step()
        assert math.isclose(g.progress, 4 * (step + 1), rel_tol=1e-12)
    assert o.param_groups[0]["lr"] == pytest.approx(0.0, abs=1e-15)


def test_unsupported_scheduler_is_named():
    o = opt()
    s = torch.optim.lr_scheduler.MultiplicativeLR(o, lambda e: 0.9)
    with pytest.raises(TypeError, match="MultiplicativeLR"):
        NormalizedStepper(s, 1, 2)
    with pytest.raises(ValueError):
        NormalizedStepper(torch.optim.lr_scheduler.LinearLR(opt()), 1, 0)


def test_guard_raises_on_per_micro_batch_stepping():
    o = opt()
    s = torch.optim.lr_scheduler.LinearLR(o, 1.0, 0.1, total_iters=100)
    with StepGuard(o, s) as guard:
        for micro in range(4):  # the buggy loop: scheduler stepped on every micro-batch
            if micro == 0:
                o.step()
            if micro == 1:
                with pytest.raises(SchedulerStepError, match="2 times"):
                    s.step()
                break
            s.step()
    assert guard.optimizer_steps == 1 and guard.violations == 1
    assert "step" not in s.__dict__  # restored


def test_guard_silent_on_a_correct_loop_and_warns_once():
    o = opt()
    s = torch.optim.lr_scheduler.LinearLR(o, 1.0, 0.1, total_iters=100)
    with StepGuard(o, s) as guard:
        for i in range(16):  # accumulation of 4: optimizer and scheduler step together
            if (i + 1) % 4 == 0:
                o.step()
                s.step()
    assert guard.violations == 0 and guard.scheduler_steps == guard.optimizer_steps == 4

    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with StepGuard(o, s, action="warn") as guard:
            for i in range(8):
                if (i + 1) % 4 == 0:
                    o.step()
                s.step()
    # windows of 4 with the scheduler stepped on each micro-batch: 5 extra steps
    assert guard.violations == 5 and len([x for x in w if "LRD103" in str(x.message)]) == 1


@pytest.mark.frameworks
def test_guard_on_megatron_scheduler():
    o = opt()
    s = mcore(o)
    with StepGuard(o, s) as guard:
        o.step()
        s.step(increment=1)
        with pytest.raises(SchedulerStepError):
            s.step(increment=1)
    assert guard.scheduler_steps == 2
