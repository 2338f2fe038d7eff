"""lrdoctor's DeepSpeed schedules against deepspeed.runtime.lr_schedules."""

from __future__ import annotations

import logging

import pytest

from lrdoctor.core.state import ScheduleSpec, Unit
from lrdoctor.schedules import floor_progress, lr_at, problems

torch = pytest.importorskip("torch")
lr_schedules = pytest.importorskip("deepspeed.runtime.lr_schedules")

pytestmark = pytest.mark.frameworks


def close(a: float, b: float) -> bool:
    return abs(a - b) <= max(1e-12 * max(abs(a), abs(b)), 1e-15)


CASES = [
    ("WarmupLR", 1e-3, {"warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 100}),
    ("WarmupLR", 1e-3, {"warmup_min_lr": 1e-5, "warmup_max_lr": 3e-4, "warmup_num_steps": 50,
                        "warmup_type": "linear"}),
    ("WarmupLR", 1e-3, {"warmup_num_steps": 1}),  # max(2, 1) and warmup_max_lr = optimizer lr
    ("WarmupDecayLR", 1e-3, {"total_num_steps": 300, "warmup_min_lr": 0.0,
                             "warmup_max_lr": 1e-3, "warmup_num_steps": 40}),
    ("WarmupDecayLR", 1e-3, {"total_num_steps": 250, "warmup_min_lr": 1e-6,
                             "warmup_max_lr": 2e-4, "warmup_num_steps": 25,
                             "warmup_type": "linear"}),
    ("WarmupCosineLR", 1e-3, {"total_num_steps": 300, "warmup_num_steps": 30}),
    ("WarmupCosineLR", 2e-4, {"total_num_steps": 277, "warmup_num_steps": 20,
                              "warmup_type": "linear", "cos_min_ratio": 0.1,
                              "warmup_min_ratio": 0.01}),
    ("WarmupCosineLR", 2e-4, {"total_num_steps": 10, "warmup_num_steps": 20}),
]


def spec_for(kind, opt_lr, params):
    max_lr = params.get("warmup_max_lr", opt_lr) if kind != "WarmupCosineLR" else opt_lr
    return ScheduleSpec(family="deepspeed", kind=kind, max_lr=max_lr, unit=Unit.UPDATES,
                        min_lr=params.get("warmup_min_lr", 0.0),
                        warmup=params.get("warmup_num_steps", 1000),
                        horizon=params.get("total_num_steps"), params=dict(params))


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{sorted(c[2])}")
def test_matches_deepspeed(case):
    kind, opt_lr, params = case
    logging.getLogger("DeepSpeed").setLevel(logging.ERROR)
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=opt_lr)
    sched = getattr(lr_schedules, kind)(opt, **params)
    spec = spec_for(kind, opt_lr, params)
    total = params.get("total_num_steps", 200)
    for progress in range(int(total * 1.4) + 5):
        # progress = calls to step() = last_batch_iteration + 1
        assert sched.state_dict()["last_batch_iteration"] + 1 == progress
        got, want = lr_at(spec, progress), opt.param_groups[0]["lr"]
        assert close(got, want), (progress, got, want)
        sched.step()
    assert problems(spec) == [] or params.get("total_num_steps") == 10


def test_floor_progress_matches_flat_tail():
    for kind, opt_lr, params in CASES:
        spec = spec_for(kind, opt_lr, params)
        fp = floor_progress(spec)
        if kind == "WarmupLR":
            assert fp is None
            continue
        floor = lr_at(spec, 10_000)
        assert lr_at(spec, fp) == floor
        assert lr_at(spec, fp - 1) != floor


@pytest.mark.parametrize("kind,params,needle", [
    ("WarmupDecayLR", {"total_num_steps": 100, "warmup_num_steps": 100},
     "warmup_num_steps=100 is not below total_num_steps=100"),
    ("WarmupCosineLR", {"total_num_steps": 0, "warmup_num_steps": 10},
     "total_num_steps=0 is not positive"),
    ("WarmupLR", {"warmup_num_steps": 0}, "warmup_num_steps=0 is not a positive integer"),
    ("WarmupLR", {"warmup_min_lr": 1e-2, "warmup_max_lr": 1e-3}, "exceeds warmup_max_lr"),
    ("WarmupLR", {"warmup_type": "cos"}, "warmup_type='cos'"),
    ("WarmupCosineLR", {"total_num_steps": 100, "cos_min_ratio": 2.0}, "cos_min_ratio=2.0"),
    ("OneCycle", {}, "scheduler type='OneCycle' is not one of"),
])
def test_problems(kind, params, needle):
    found = problems(spec_for(kind, 1e-3, params))
    assert any(needle in line for line in found), found
