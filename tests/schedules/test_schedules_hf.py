"""lrdoctor's HF schedules against transformers.get_scheduler (real LambdaLR)."""

from __future__ import annotations

import warnings

import pytest

from lrdoctor.core.state import ScheduleSpec, Unit
from lrdoctor.schedules import floor_progress, lr_at, problems

torch = pytest.importorskip("torch")
optimization = pytest.importorskip("transformers.optimization")

pytestmark = pytest.mark.frameworks


def close(a: float, b: float) -> bool:
    return abs(a - b) <= max(1e-12 * max(abs(a), abs(b)), 1e-15)


def spec_of(kind, lr, warmup, total, **kw):
    return ScheduleSpec(family="hf", kind=kind, max_lr=lr, unit=Unit.UPDATES,
                        warmup=warmup, horizon=total, params=dict(kw))


CASES = [
    # kind, lr, warmup, total, kwargs
    ("linear", 5e-5, 30, 300, {}),
    ("linear", 1e-3, 0, 257, {}),
    ("cosine", 5e-5, 30, 300, {}),
    ("cosine", 2e-4, 7, 211, {"num_cycles": 1.5}),
    ("cosine_with_restarts", 5e-5, 30, 300, {"num_cycles": 3}),
    ("cosine_with_restarts", 3e-4, 0, 199, {}),
    ("polynomial", 5e-5, 30, 300, {"power": 2.0, "lr_end": 1e-6}),
    ("polynomial", 1e-3, 10, 250, {}),
    ("constant", 5e-5, 30, 300, {}),
    ("constant_with_warmup", 5e-5, 30, 300, {}),
    ("constant_with_warmup", 5e-5, 0, 300, {}),
    ("inverse_sqrt", 5e-5, 30, 300, {}),
    ("inverse_sqrt", 5e-5, 30, 300, {"timescale": 100}),
    ("inverse_sqrt", 5e-5, 0, 300, {}),
    ("cosine_with_min_lr", 5e-5, 30, 300, {"min_lr": 1e-6}),
    ("cosine_with_min_lr", 5e-5, 30, 300, {"min_lr_rate": 0.1, "num_cycles": 0.75}),
    ("cosine_warmup_with_min_lr", 5e-5, 30, 300, {"min_lr_rate": 0.1}),
    ("cosine_warmup_with_min_lr", 5e-5, 30, 300, {"min_lr": 1e-6, "warmup_lr_rate": 0.05}),
    ("warmup_stable_decay", 5e-5, 30, 300, {"num_decay_steps": 100}),
    ("warmup_stable_decay", 5e-5, 30, 300, {"num_decay_steps": 80, "warmup_type": "cosine",
                                            "decay_type": "linear", "min_lr_ratio": 0.1}),
    ("warmup_stable_decay", 5e-5, 30, None, {"num_decay_steps": 90, "num_stable_steps": 120,
                                             "warmup_type": "1-sqrt", "decay_type": "1-sqrt",
                                             "min_lr_ratio": 0.05}),
    ("warmup_stable_decay", 5e-5, 25, 300, {"num_decay_steps": 100, "num_cycles": 1.0}),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[2]}-{len(c[4])}")
def test_matches_get_scheduler(case):
    kind, lr, warmup, total, kw = case
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = optimization.get_scheduler(kind, opt, num_warmup_steps=warmup,
                                           num_training_steps=total,
                                           scheduler_specific_kwargs=dict(kw))
        spec = spec_of(kind, lr, warmup, total, **kw)
        # Past num_training_steps too: HF does not clamp there.
        for step in range(int((total or 300) * 1.4)):
            assert sched.last_epoch == step
            got, want = lr_at(spec, step), opt.param_groups[0]["lr"]
            assert close(got, want), (step, got, want)
            opt.step()
            sched.step()
    assert problems(spec) == []


def test_floor_progress():
    assert floor_progress(spec_of("linear", 1.0, 10, 100)) == 100
    assert floor_progress(spec_of("cosine", 1.0, 10, 100)) == 100
    assert floor_progress(spec_of("cosine", 1.0, 10, 100, num_cycles=1.0)) == 55
    assert floor_progress(spec_of("constant_with_warmup", 1.0, 10, 100)) is None
    wsd = spec_of("warmup_stable_decay", 1.0, 10, 100, num_decay_steps=20)
    assert floor_progress(wsd) == 100
    assert lr_at(wsd, 100) == 0
    # cosine rises again past its horizon: a scheduler stepped too far shows it
    cos = spec_of("cosine", 1.0, 0, 100)
    assert lr_at(cos, 100) == pytest.approx(0, abs=1e-15)
    assert lr_at(cos, 150) == pytest.approx(0.5)


@pytest.mark.parametrize("kind,warmup,total,kw,needle", [
    ("linear", 300, 300, {}, "num_warmup_steps=300 is not below num_training_steps=300"),
    ("cosine", 10, None, {}, "num_training_steps=None is not positive"),
    ("cosine", 10, 0, {}, "num_training_steps=0 is not positive"),
    ("cosine", -1, 100, {}, "num_warmup_steps=-1 is negative"),
    ("polynomial", 10, 100, {"lr_end": 1e-3}, "lr_end=0.001 is not below the initial lr"),
    ("cosine_with_min_lr", 10, 100, {}, "needs min_lr or min_lr_rate"),
    ("cosine_with_min_lr", 10, 100, {"min_lr": 1e-6, "min_lr_rate": 0.1}, "both set"),
    ("cosine_with_min_lr", 10, 100, {"min_lr": 1e-3}, "min_lr=0.001 exceeds max_lr=0.0001"),
    ("warmup_stable_decay", 50, 100, {"num_decay_steps": 60}, "no room for the stable phase"),
    ("warmup_stable_decay", 5, 100, {}, "needs num_decay_steps"),
    ("warmup_stable_decay", 5, 100, {"num_decay_steps": 5, "decay_type": "exp"},
     "decay_type='exp'"),
    ("reduce_lr_on_plateau", 0, None, {}, "depends on metrics"),
    ("cosine_restarts", 0, 100, {}, "lr_scheduler_type='cosine_restarts' is not one of"),
])
def test_problems(kind, warmup, total, kw, needle):
    found = problems(spec_of(kind, 1e-4, warmup, total, **kw))
    assert any(needle in line for line in found), found


def test_negative_lr_is_a_problem():
    assert any("learning_rate=-0.1 is negative" in x
               for x in problems(spec_of("constant", -0.1, 0, None)))


def test_missing_horizon_is_a_clear_error():
    with pytest.raises(ValueError, match="needs num_training_steps"):
        lr_at(spec_of("cosine", 1e-4, 10, None), 20)
    assert lr_at(spec_of("cosine", 1e-4, 10, None), 5) == pytest.approx(5e-5)


@pytest.mark.parametrize("kw", [{"min_lr_rate": 0.1}, {"min_lr": 1e-6, "warmup_lr_rate": 0.05}])
def test_warmup_without_horizon_matches_transformers(kw):
    """Found by mypy: ``cosine_warmup_with_min_lr`` read the horizon before its warmup
    branch, so a spec without one raised TypeError inside warmup where every other
    horizon kind gives its ramp. transformers' own warmup values do not depend on
    num_training_steps (two very different totals agree); past warmup the missing
    horizon is the same clear ValueError as for the other kinds."""
    lr, warmup = 5e-5, 30
    spec = spec_of("cosine_warmup_with_min_lr", lr, warmup, None, **kw)
    for total in (300, 10_000):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr)
        sched = optimization.get_scheduler("cosine_warmup_with_min_lr", opt,
                                           num_warmup_steps=warmup, num_training_steps=total,
                                           scheduler_specific_kwargs=dict(kw))
        for step in range(warmup):
            assert close(lr_at(spec, step), opt.param_groups[0]["lr"]), (total, step)
            opt.step()
            sched.step()
    with pytest.raises(ValueError, match="needs num_training_steps"):
        lr_at(spec, warmup)


def test_shape_cosine_wraps_past_its_training_steps_against_transformers():
    """schedules.shape on transformers' cosine helper: no clamp past num_training_steps,
    the real LambdaLR climbs again, and the model says it wraps; linear does not."""
    from lrdoctor.schedules import shape

    for kind, wraps in (("cosine", True), ("linear", False)):
        opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
        sched = optimization.get_scheduler(kind, opt, num_warmup_steps=5, num_training_steps=50)
        lrs = []
        for _ in range(70):
            lrs.append(opt.param_groups[0]["lr"])
            opt.step()
            sched.step()
        spec = ScheduleSpec("hf", kind, 1e-3, Unit.UPDATES, warmup=5, horizon=50,
                            params={"num_cycles": 0.5} if kind == "cosine" else {})
        sh = shape(spec)
        assert sh.decay_end == 50 and sh.wraps is wraps
        assert (max(lrs[51:]) > lrs[50]) is wraps
