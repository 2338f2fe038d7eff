"""Dispatch, curves and purity of lrdoctor.schedules (no framework needed).

Per-family agreement with the real classes: tests/schedules/test_schedules_{megatron,hf,torch,deepspeed}.py.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from lrdoctor.core.state import ScheduleSpec, Unit
from lrdoctor.schedules import curve, floor_progress, lr_at, problems


def mk(family, kind, **kw):
    return ScheduleSpec(family=family, kind=kind, max_lr=kw.pop("max_lr", 1e-3),
                        unit=Unit.UPDATES, **kw)


HEALTHY = [
    mk("megatron", "cosine", min_lr=1e-5, warmup=10, horizon=100),
    mk("hf", "linear", warmup=10, horizon=100),
    mk("torch", "CosineAnnealingLR", horizon=100, params={"T_max": 100}),
    mk("deepspeed", "WarmupDecayLR", params={"total_num_steps": 100, "warmup_num_steps": 10}),
]


@pytest.mark.parametrize("spec", HEALTHY, ids=lambda s: s.family)
def test_healthy_specs_have_no_problems_and_a_floor(spec):
    assert problems(spec) == []
    fp = floor_progress(spec)
    assert fp is not None and 90 <= fp <= 101
    assert 0 <= lr_at(spec, 37) <= spec.max_lr


@pytest.mark.parametrize("spec", HEALTHY, ids=lambda s: s.family)
def test_warmup_beyond_horizon_is_reported(spec):
    spec.warmup = 500
    spec.params = {**spec.params, "warmup_num_steps": 500}
    found = problems(spec)
    if spec.family == "torch":  # torch schedulers carry no warmup of their own
        assert found == []
    else:
        assert any("500" in line and "100" in line for line in found), found


def test_unknown_family():
    bad = mk("keras", "cosine")
    from lrdoctor.schedules import FAMILIES

    assert "onevision" in FAMILIES  # (every family module is named, the newest too)
    assert problems(bad) == [f"schedule family='keras' is not one of {', '.join(FAMILIES)}"]
    with pytest.raises(ValueError, match="keras"):
        lr_at(bad, 1)


def test_curve_endpoints_and_count():
    spec = HEALTHY[1]
    pts = curve(spec, 0, 200, points=400)
    assert len(pts) == 400
    assert pts[0] == (0.0, lr_at(spec, 0)) and pts[-1] == (200.0, lr_at(spec, 200))
    xs = [x for x, _ in pts]
    assert xs == sorted(xs)
    assert curve(spec, 5, 5) == [(5.0, lr_at(spec, 5))]


def test_schedules_import_no_heavy_modules():
    code = ("import sys, lrdoctor.schedules as s\n"
            "from lrdoctor.schedules import megatron, hf, torch_builtin, deepspeed\n"
            "bad = [m for m in ('torch', 'numpy', 'pandas', 'matplotlib') if m in sys.modules]\n"
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
