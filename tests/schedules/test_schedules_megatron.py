"""lrdoctor's Megatron schedule against megatron-core's OptimizerParamScheduler."""

from __future__ import annotations

import warnings

import pytest

from lrdoctor.core.state import ScheduleSpec, Unit
from lrdoctor.schedules import curve, floor_progress, lr_at, megatron, problems

torch = pytest.importorskip("torch")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    sched_mod = pytest.importorskip("megatron.core.optimizer_param_scheduler")

pytestmark = pytest.mark.frameworks


def close(a: float, b: float) -> bool:
    return abs(a - b) <= max(1e-12 * max(abs(a), abs(b)), 1e-15)


def spec_of(style, init_lr, max_lr, min_lr, warmup, decay, wsd=None, wsd_style=None):
    return ScheduleSpec(family="megatron", kind=style, max_lr=max_lr, unit=Unit.SAMPLES,
                        min_lr=min_lr, init_lr=init_lr, warmup=warmup, horizon=decay,
                        params={"wsd_decay_steps": wsd, "lr_wsd_decay_style": wsd_style})


def real(style, init_lr, max_lr, min_lr, warmup, decay, wsd=None, wsd_style=None):
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=123.0)
    return opt, sched_mod.OptimizerParamScheduler(
        opt, init_lr=init_lr, max_lr=max_lr, min_lr=min_lr, lr_warmup_steps=warmup,
        lr_decay_steps=decay, lr_decay_style=style, start_wd=0.01, end_wd=0.01,
        wd_incr_steps=decay, wd_incr_style="constant", wsd_decay_steps=wsd,
        lr_wsd_decay_style=wsd_style)


CASES = [
    # style, init_lr, max_lr, min_lr, warmup, decay, increment, wsd, wsd_style
    ("constant", 0.0, 3e-4, 0.0, 40, 400, 1, None, None),
    ("constant", 1e-6, 3e-4, 3e-5, 0, 400, 1, None, None),
    ("linear", 0.0, 3e-4, 3e-5, 40, 400, 1, None, None),
    ("linear", 1e-5, 1.0, 0.0, 0, 300, 3, None, None),
    ("cosine", 0.0, 3e-4, 3e-5, 50, 500, 1, None, None),
    ("cosine", 2e-5, 6e-4, 6e-5, 256 * 20, 256 * 300, 256, None, None),  # samples
    ("cosine", 0.0, 1e-3, 0.0, 0, 123, 1, None, None),
    ("inverse-square-root", 0.0, 1e-3, 1e-5, 30, 400, 1, None, None),
    ("inverse-square-root", 0.0, 1e-3, 2e-4, 0, 400, 1, None, None),
    ("WSD", 0.0, 3e-4, 3e-5, 20, 400, 1, 100, "linear"),
    ("WSD", 0.0, 3e-4, 3e-5, 20, 400, 1, 100, "cosine"),
    ("WSD", 0.0, 3e-4, 0.0, 20, 400, 1, 150, "exponential"),
    ("WSD", 1e-6, 3e-4, 3e-5, 0, 400, 2, 77, "minus_sqrt"),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[6]}-{c[8]}")
def test_matches_optimizer_param_scheduler(case):
    style, init_lr, max_lr, min_lr, warmup, decay, inc, wsd, wstyle = case
    opt, sched = real(style, init_lr, max_lr, min_lr, warmup, decay, wsd, wstyle)
    spec = spec_of(style, init_lr, max_lr, min_lr, warmup, decay, wsd, wstyle)
    n = 0
    # Step well past lr_decay_steps to cover the silent clamp to min_lr.
    while n <= decay * 1.3:
        got, want = lr_at(spec, n), opt.param_groups[0]["lr"]
        assert close(got, want), (n, got, want)
        sched.step(inc)
        n += inc
    assert problems(spec) == []


def test_clamps_to_min_lr_past_horizon_and_floor_progress():
    spec = spec_of("cosine", 0.0, 1e-3, 1e-4, 10, 100)
    assert lr_at(spec, 101) == 1e-4
    assert lr_at(spec, 10**9) == 1e-4
    assert floor_progress(spec) == 100
    assert lr_at(spec, 100) == pytest.approx(1e-4, rel=1e-12)
    assert floor_progress(spec_of("constant", 0.0, 1e-3, 0.0, 10, 100)) is None
    # inverse sqrt reaches min_lr (1e-3 * sqrt(10/n) = 1e-4 at n=1000) after the horizon
    isr = spec_of("inverse-square-root", 0.0, 1e-3, 1e-4, 10, 5000)
    assert floor_progress(isr) == pytest.approx(1000)
    assert lr_at(isr, 1000) == pytest.approx(1e-4, rel=1e-12)


def test_curve_spans_range():
    spec = spec_of("linear", 0.0, 1.0, 0.0, 0, 100)
    pts = curve(spec, 0, 200, points=5)
    assert [p for p, _ in pts] == [0, 50, 100, 150, 200]
    assert [v for _, v in pts] == pytest.approx([1.0, 0.5, 0.0, 0.0, 0.0])


@pytest.mark.parametrize("kwargs,needle", [
    (dict(warmup=400, decay=400), "lr_warmup_steps=400 is not below lr_decay_steps=400"),
    (dict(warmup=10, decay=0), "lr_decay_steps=0 is not positive"),
    (dict(min_lr=2e-3), "min_lr=0.002 exceeds max_lr=0.001"),
    (dict(min_lr=-1e-5), "min_lr=-1e-05 is negative"),
    (dict(init_lr=5e-3), "init_lr=0.005 exceeds max_lr=0.001"),
    (dict(style="polynomial"), "lr_decay_style='polynomial'"),
    (dict(style="WSD"), "wsd_decay_steps is not set"),
    (dict(style="WSD", wsd=50, wsd_style="square"), "lr_wsd_decay_style='square'"),
    (dict(style="WSD", wsd=395, wsd_style="linear"), "the anneal starts inside the warmup"),
])
def test_problems(kwargs, needle):
    base = dict(style="cosine", init_lr=0.0, max_lr=1e-3, min_lr=1e-5, warmup=10, decay=400)
    base.update(kwargs)
    found = problems(spec_of(**base))
    assert any(needle in line for line in found), found
    assert all("\n" not in line for line in found)
    assert megatron.problems(spec_of(**base)) == found


@pytest.mark.parametrize("style", ["cosine", "linear"])
def test_shape_holds_min_lr_past_the_horizon_against_megatron_core(style):
    """schedules.shape on megatron-core's OptimizerParamScheduler: the decay ends at
    lr_decay_steps, the floor is min_lr there, and past it the LR stays (no wrap)."""
    from lrdoctor.schedules import shape

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=3e-4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = sched_mod.OptimizerParamScheduler(
            opt, init_lr=0.0, max_lr=3e-4, min_lr=3e-5, lr_warmup_steps=16, lr_decay_steps=160,
            lr_decay_style=style, start_wd=0.0, end_wd=0.0, wd_incr_steps=160,
            wd_incr_style="constant")
    sh = shape(spec_of(style, 0.0, 3e-4, 3e-5, 16, 160))
    assert (sh.decay_end, sh.wraps) == (160, False)
    assert sh.floor_lr == pytest.approx(3e-5, rel=1e-12)
    sched.step(increment=200)  # well past the horizon: megatron-core holds min_lr
    assert opt.param_groups[0]["lr"] == pytest.approx(3e-5, rel=1e-12)
