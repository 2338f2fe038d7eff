"""lrdoctor's torch built-in schedules against the real torch.optim.lr_scheduler classes."""

from __future__ import annotations

import warnings

import pytest

from lrdoctor.core.state import ScheduleSpec, Unit
from lrdoctor.schedules import floor_progress, lr_at, problems, torch_steps

torch = pytest.importorskip("torch")
S = torch.optim.lr_scheduler

pytestmark = pytest.mark.frameworks


def close(a: float, b: float) -> bool:
    return abs(a - b) <= max(1e-12 * max(abs(a), abs(b)), 1e-15)


def make_opt(lr):
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr, momentum=0.9)


def spec_from(sched, opt):
    """What a reader builds from a saved scheduler + optimizer param group."""
    group = opt.param_groups[0]
    params = dict(sched.state_dict())
    kind = type(sched).__name__
    if kind in ("SequentialLR", "ChainedScheduler"):
        params["_schedulers"] = [dict(sd, kind=type(ch).__name__)
                                 for sd, ch in zip(params["_schedulers"], sched._schedulers)]
    horizon = params.get("total_iters", params.get("T_max", params.get("total_steps")))
    if kind == "OneCycleLR":  # its LRs live in the param group
        return ScheduleSpec(family="torch", kind=kind, max_lr=group["max_lr"],
                            init_lr=group["initial_lr"], min_lr=group["min_lr"],
                            unit=Unit.SCHEDULER_CALLS, horizon=horizon, params=params)
    return ScheduleSpec(family="torch", kind=kind, max_lr=group["initial_lr"],
                        unit=Unit.SCHEDULER_CALLS, horizon=horizon, params=params)


BUILDERS = {
    "linear-warmup": lambda o: S.LinearLR(o, start_factor=0.01, end_factor=1.0, total_iters=97),
    "linear-decay": lambda o: S.LinearLR(o, start_factor=1.0, end_factor=0.0, total_iters=150),
    "linear-default": lambda o: S.LinearLR(o),
    "cosine": lambda o: S.CosineAnnealingLR(o, T_max=100),
    "cosine-eta": lambda o: S.CosineAnnealingLR(o, T_max=77, eta_min=1e-5),
    "cosine-short": lambda o: S.CosineAnnealingLR(o, T_max=3, eta_min=1e-4),
    "onecycle": lambda o: S.OneCycleLR(o, max_lr=1e-2, total_steps=300),
    "onecycle-linear-3": lambda o: S.OneCycleLR(o, max_lr=[3e-3], total_steps=251, pct_start=0.25,
                                                anneal_strategy="linear", three_phase=True,
                                                div_factor=10.0, final_div_factor=100.0),
    "step": lambda o: S.StepLR(o, step_size=30, gamma=0.5),
    "multistep": lambda o: S.MultiStepLR(o, milestones=[50, 120, 120, 200], gamma=0.3),
    "exponential": lambda o: S.ExponentialLR(o, gamma=0.99),
    "constant": lambda o: S.ConstantLR(o, factor=0.25, total_iters=40),
    "polynomial": lambda o: S.PolynomialLR(o, total_iters=180, power=2.0),
    "polynomial-half": lambda o: S.PolynomialLR(o, total_iters=90, power=0.5),
    "seq-warmup-cosine": lambda o: S.SequentialLR(
        o, [S.LinearLR(o, start_factor=1e-3, total_iters=50),
            S.CosineAnnealingLR(o, T_max=250, eta_min=1e-6)], milestones=[50]),
    "seq-three": lambda o: S.SequentialLR(
        o, [S.ConstantLR(o, factor=0.1, total_iters=20), S.ExponentialLR(o, gamma=0.98),
            S.PolynomialLR(o, total_iters=100, power=1.5)], milestones=[30, 130]),
    "seq-step-multistep": lambda o: S.SequentialLR(
        o, [S.StepLR(o, step_size=7, gamma=0.9), S.MultiStepLR(o, milestones=[0, 10, 60])],
        milestones=[40]),
    "seq-linear-linear": lambda o: S.SequentialLR(
        o, [S.LinearLR(o, start_factor=0.1, total_iters=25),
            S.LinearLR(o, start_factor=1.0, end_factor=0.05, total_iters=200)], milestones=[25]),
    "chained-warmup-exp": lambda o: S.ChainedScheduler(
        [S.LinearLR(o, start_factor=0.2, total_iters=4), S.ExponentialLR(o, gamma=0.97)],
        optimizer=o),
    "chained-three": lambda o: S.ChainedScheduler(
        [S.ConstantLR(o, factor=0.5, total_iters=30), S.MultiStepLR(o, milestones=[0, 90, 200]),
         S.PolynomialLR(o, total_iters=300, power=1.5)], optimizer=o),
    "chained-warmup-cosine": lambda o: S.ChainedScheduler(
        [S.LinearLR(o, start_factor=0.1, total_iters=25),
         S.CosineAnnealingLR(o, T_max=150, eta_min=1e-5), S.StepLR(o, step_size=70, gamma=0.8)],
        optimizer=o),
    "cyclic-triangular": lambda o: S.CyclicLR(o, 1e-4, 3e-3, step_size_up=37, step_size_down=23),
    "cyclic-triangular2": lambda o: S.CyclicLR(o, 1e-4, 3e-3, step_size_up=40, mode="triangular2"),
    "cyclic-exp-range": lambda o: S.CyclicLR(o, 1e-4, 3e-3, step_size_up=25, mode="exp_range",
                                             gamma=0.995),
}
STEPS = {"onecycle": 300, "onecycle-linear-3": 251}


def run_case(name, lr=3e-3, steps=None):
    opt = make_opt(lr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = BUILDERS[name](opt)
        spec = spec_from(sched, opt)
        seen = []
        for n in range((steps or STEPS.get(name, 420)) + 1):
            seen.append((n, lr_at(spec, n), opt.param_groups[0]["lr"]))
            opt.step()
            if n < (steps or STEPS.get(name, 420)):
                sched.step()
    return spec, seen


@pytest.mark.parametrize("name", list(BUILDERS))
def test_exact_replay_matches_torch(name):
    spec, seen = run_case(name)
    bad = [(n, got, want) for n, got, want in seen if got != want]
    assert not bad[:3], bad[:3]  # bit-identical within EXACT_STEPS
    assert problems(spec) == []


@pytest.mark.parametrize("name", list(BUILDERS))
def test_telescoped_form_matches_torch(name, monkeypatch):
    monkeypatch.setattr(torch_steps, "EXACT_STEPS", 0)
    monkeypatch.setattr(torch_steps, "EXACT_POW_STEPS", 0)
    _, seen = run_case(name, lr=0.7)
    bad = [(n, got, want) for n, got, want in seen if not close(got, want)]
    assert not bad[:3], bad[:3]


def test_cosine_many_cycles_long_run():
    """Past T_max torch climbs back up; many restarts, beyond EXACT_STEPS."""
    opt = make_opt(1e-3)
    sched = S.CosineAnnealingLR(opt, T_max=700, eta_min=1e-5)
    spec = spec_from(sched, opt)
    for n in range(1, 7001):
        opt.step()
        sched.step()
        if n % 37 == 0 or n in (700, 701, 702, 1400, 1401, 2101, 2102):
            got, want = lr_at(spec, n), opt.param_groups[0]["lr"]
            assert close(got, want), (n, got, want)
    assert lr_at(spec, 700) == pytest.approx(1e-5, rel=1e-12)
    assert lr_at(spec, 1400) == pytest.approx(1e-3, rel=1e-9)


def test_progress_is_floored_and_floor_progress():
    spec, _ = run_case("linear-decay", steps=1)
    assert lr_at(spec, 10.9) == lr_at(spec, 10)
    assert floor_progress(spec) == 150
    assert lr_at(spec, 150) == 0.0
    seq, _ = run_case("seq-warmup-cosine", steps=1)
    assert floor_progress(seq) == 300
    assert lr_at(seq, 300) == pytest.approx(1e-6, rel=1e-9)
    one, _ = run_case("onecycle", steps=1)
    assert floor_progress(one) == 299
    assert lr_at(one, 10_000) == lr_at(one, 300)  # torch raises past total_steps
    exp, _ = run_case("exponential", steps=1)
    assert floor_progress(exp) is None


def test_onecycle_without_group_values_uses_div_factors():
    spec, seen = run_case("onecycle")
    spec.init_lr = spec.min_lr = 0.0
    for n, _, want in seen:
        assert lr_at(spec, n) == want


def test_onecycle_group_values_in_params():
    spec, seen = run_case("onecycle-linear-3")
    spec.params.update(initial_lr=spec.init_lr, min_lr=[spec.min_lr])
    spec.init_lr = spec.min_lr = 0.0
    for n, _, want in seen:
        assert lr_at(spec, n) == want


def test_sequential_kinds_as_parallel_list():
    spec, seen = run_case("seq-three")
    children = spec.params["_schedulers"]
    spec.params["_scheduler_kinds"] = [c.pop("kind") for c in children]
    for n, _, want in seen:
        assert lr_at(spec, n) == want
    assert floor_progress(spec) == 230


def spec(kind, lr=1e-3, horizon=None, **params):
    return ScheduleSpec(family="torch", kind=kind, max_lr=lr, unit=Unit.SCHEDULER_CALLS,
                        horizon=horizon, params=params)


@pytest.mark.parametrize("bad,needle", [
    (spec("CosineAnnealingLR", T_max=0), "T_max=0 is not positive"),
    (spec("CosineAnnealingLR", T_max=10, eta_min=1e-2), "eta_min=0.01 exceeds initial_lr=0.001"),
    (spec("LinearLR", start_factor=0.0, total_iters=10), "start_factor=0.0 is outside (0, 1]"),
    (spec("LinearLR", end_factor=2.0, total_iters=10), "end_factor=2.0 is outside [0, 1]"),
    (spec("LinearLR", horizon=-5), "total_iters=-5 is not positive"),
    (spec("StepLR", step_size=0), "step_size=0 is not positive"),
    (spec("OneCycleLR", lr=1e-4, total_steps=100, initial_lr=1e-3), "does not hold"),
    (spec("ExponentialLR", lr=-1.0, gamma=0.9), "initial_lr=-1.0 is negative"),
    (spec("LambdaLR"), "does not save its lambda"),
    (spec("NoamLR"), "kind='NoamLR' is not one of"),
    (spec("CyclicLR", total_size=8.0, step_ratio=1.5), "do not make a cycle"),
    (spec("CyclicLR", total_size=8.0, step_ratio=0.5, _scale_fn_custom={"a": 1}),
     "custom scale_fn is code"),
    (spec("SequentialLR", _milestones=[10, 5],
          _schedulers=[{"kind": "ConstantLR"}, {"kind": "StepLR", "step_size": 3},
                       {"kind": "CosineAnnealingLR", "T_max": 0}]),
     "_milestones=[10, 5] are not positive and increasing"),
    (spec("SequentialLR", _milestones=[10],
          _schedulers=[{"kind": "ConstantLR"}, {"kind": "CosineAnnealingLR", "T_max": 0}]),
     "_schedulers[1] (CosineAnnealingLR) T_max=0 is not positive: it starts at milestone 10 "
     "(the warmup), so the schedule was sized for 10 steps in all"),
    (spec("SequentialLR", _milestones=[10, 20], _schedulers=[{"kind": "ConstantLR"}]),
     "has 1 _schedulers but 2 _milestones"),
])
def test_problems(bad, needle):
    found = problems(bad)
    assert any(needle in line for line in found), found


def test_sequential_with_a_lambda_child_is_exact_past_its_milestone():
    """torch SequentialLR([LambdaLR warmup, CosineAnnealingLR], milestones=[m]): the lambda is
    code torch does not save, yet every later child starts from its own closed form, so the
    LR from the milestone on, the horizon (m + T_max) and the floor are exact; before the
    milestone the LR is unknown (a ValueError, never a guess)."""
    from lrdoctor.read.layouts._torchstate import torch_scheduler

    opt = make_opt(1e-3)
    sched = S.SequentialLR(opt, [S.LambdaLR(opt, lambda s: (s + 1) / 7),
                                 S.CosineAnnealingLR(opt, T_max=30, eta_min=1e-5)],
                           milestones=[7])
    seen = [opt.param_groups[0]["lr"]]
    for _ in range(80):
        opt.step()
        sched.step()
        seen.append(opt.param_groups[0]["lr"])
    spec, _, notes = torch_scheduler(sched.state_dict(), unit=Unit.UPDATES, source="s")
    assert spec is not None, notes
    assert spec.horizon == 37 and floor_progress(spec) == 37 and problems(spec) == []
    for n in range(7, 81):
        assert close(lr_at(spec, n), seen[n]), n
    with pytest.raises(ValueError, match="LR before milestone 7 is unknown"):
        lr_at(spec, 3)


def test_sequential_last_child_sized_below_zero_names_the_warmup_longer_than_the_run():
    """torch SequentialLR([LinearLR warmup 100, CosineAnnealingLR T_max = 20 - 100]) in a
    20-step run: the schedule has no decay horizon, and the problem says the warmup 100 is
    longer than the 20 steps the schedule was sized for."""
    from lrdoctor.read.layouts._torchstate import torch_scheduler

    opt = make_opt(1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = S.SequentialLR(opt, [S.LinearLR(opt, start_factor=0.01, total_iters=100),
                                     S.CosineAnnealingLR(opt, T_max=-80)], milestones=[100])
        for _ in range(20):
            opt.step()
            sched.step()
    spec, _, _ = torch_scheduler(sched.state_dict(), unit=Unit.UPDATES, source="s")
    assert spec is not None and spec.horizon is None
    assert lr_at(spec, 20) == opt.param_groups[0]["lr"]  # still warming up
    (line,) = problems(spec)
    assert "T_max=-80" in line and "milestone 100" in line and "sized for 20 steps" in line
    assert "the warmup is longer than the run" in line


def test_chained_floor_and_horizon():
    """ChainedScheduler: the product floors where its last decaying child does; a warmup
    child sets none; a child that keeps decaying (ExponentialLR, StepLR) leaves none."""
    three, _ = run_case("chained-three", steps=1)
    assert floor_progress(three) == 300
    warm_exp, _ = run_case("chained-warmup-exp", steps=1)
    assert floor_progress(warm_exp) is None
    from lrdoctor.schedules.torch_builtin import chained_floor

    assert chained_floor(three.params) == (300.0, 2)


@pytest.mark.parametrize("name,wraps,end", [
    ("cosine", True, 100), ("seq-warmup-cosine", True, 300), ("linear-decay", False, 150),
    ("polynomial", False, 180), ("onecycle", False, 300), ("exponential", False, None),
    ("chained-warmup-cosine", True, None), ("chained-three", False, 300),
    ("cyclic-triangular", True, None)])
def test_shape_decay_end_floor_and_wraps_against_torch(name, wraps, end):
    """schedules.shape: where the decay ends and whether the schedule wraps, checked
    against the real class run past its end (a wrapping one climbs, the rest do not)."""
    from lrdoctor.schedules import shape

    spec, seen = run_case(name, steps=STEPS.get(name, 420))
    sh = shape(spec)
    assert sh.wraps is wraps
    assert sh.decay_end == end
    if sh.floor_at is not None:
        lrs = [want for _, _, want in seen]
        at = int(sh.floor_at)
        assert lrs[at] == min(lrs[: at + 1])  # the floor comes there
        assert sh.floor_lr == lrs[at]
        # (OneCycleLR: torch refuses to step past total_steps; its last step is not a wrap)
        later = lrs[at + 1:] if name != "onecycle" else []
        assert (max(later) > lrs[at]) is wraps if later else not wraps
