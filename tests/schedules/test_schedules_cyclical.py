"""lrdoctor's cyclical model (lrdoctor.schedules.cyclical) against PyTorch-Ignite 0.5's own
``CosineAnnealingScheduler``, called by hand over a whole run: at every call the LR the
optimizer holds equals the model at the progress read back from the scheduler's own
``state_dict()`` (event_index + finished cycles), to 1e-9 relative."""

from __future__ import annotations

import math

import pytest

from lrdoctor.core.state import ScheduleSpec, Unit
from lrdoctor.read.scan.shapes import SCHED_CYCLICAL, state_kind
from lrdoctor.schedules import lr_at, problems, shape
from lrdoctor.schedules.cyclical import total_calls

torch = pytest.importorskip("torch")
param_scheduler = pytest.importorskip("ignite.handlers.param_scheduler")

pytestmark = pytest.mark.frameworks

CASES = [
    {"start_value": 1e-3, "end_value": 1e-5, "cycle_size": 9},
    {"start_value": 1e-3, "end_value": 1e-5, "cycle_size": 7, "cycle_mult": 1.5},
    {"start_value": 2e-3, "end_value": 0.0, "cycle_size": 20, "cycle_mult": 0.8,
     "start_value_mult": 0.5, "end_value_mult": 0.9},
    {"start_value": 2e-3, "end_value": 1e-6, "cycle_size": 10, "cycle_mult": 1.25,
     "start_value_mult": 0.5, "end_value_mult": 0.9},
    {"start_value": 1e-3, "end_value": 1e-4, "cycle_size": 6, "cycle_mult": 2.0,
     "warmup_duration": 3, "start_value_mult": 0.7},
    {"start_value": 5e-4, "end_value": 5e-5, "cycle_size": 5, "warmup_duration": 2},
]


def _spec(state: dict, kind: str = "cosine") -> tuple[ScheduleSpec, int]:
    got = total_calls(state)
    assert got is not None, state
    calls, params, start, end = got
    return ScheduleSpec("cyclical", kind, start, Unit.UPDATES, min_lr=end,
                        horizon=float(params["cycle_size"]), params=params), calls


@pytest.mark.parametrize("kwargs", CASES)
def test_cyclical_model_is_ignite_cosine_annealing_scheduler(kwargs):
    """PyTorch-Ignite 0.5.5 CosineAnnealingScheduler, every call of a 60-call run."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=kwargs["start_value"])
    sched = param_scheduler.CosineAnnealingScheduler(opt, "lr", **kwargs)
    first_spec, _ = _spec(sched.state_dict())
    assert not problems(first_spec)
    for n in range(1, 61):
        sched(None)
        state = sched.state_dict()
        assert state_kind(state) == SCHED_CYCLICAL
        want = opt.param_groups[0]["lr"]
        got = lr_at(first_spec, n)
        assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-15), (n, got, want)
        if total_calls(state) is None:  # a shrinking cycle truncated: 10 and 11 both give 8
            assert kwargs.get("cycle_mult", 1.0) < 1 and state["cycle"] > 0
            continue
        spec, calls = _spec(state)  # read back mid-run: the same progress and LR
        assert calls == n, (n, state)
        assert math.isclose(lr_at(spec, calls), want, rel_tol=1e-9, abs_tol=1e-15), n


@pytest.mark.parametrize(("monotonic", "kwargs"), [
    (False, {"start_value": 1e-3, "end_value": 1e-5, "cycle_size": 8, "cycle_mult": 1.5}),
    (True, {"start_value": 1e-3, "end_value": 1e-5, "cycle_size": 6, "warmup_duration": 3,
            "end_value_mult": 0.5}),
])
def test_cyclical_linear_model_is_ignite_linear_cyclical_scheduler(monotonic, kwargs):
    """PyTorch-Ignite 0.5.5 LinearCyclicalScheduler (the same saved keys as the cosine one):
    the "linear" / "linear-monotonic" models equal it at every call of a 50-call run."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=kwargs["start_value"])
    sched = param_scheduler.LinearCyclicalScheduler(opt, "lr", monotonic=monotonic, **kwargs)
    spec, _ = _spec(sched.state_dict(), "linear-monotonic" if monotonic else "linear")
    assert not problems(spec)
    for n in range(1, 51):
        sched(None)
        want = opt.param_groups[0]["lr"]
        assert math.isclose(lr_at(spec, n), want, rel_tol=1e-9, abs_tol=1e-15), n
        spec_now, calls = _spec(sched.state_dict(), spec.kind)
        assert calls == n and math.isclose(lr_at(spec_now, calls), want, rel_tol=1e-9), n


def test_cyclical_shape_wraps_at_its_cycle():
    """PyTorch-Ignite 0.5.5 CosineAnnealingScheduler: the call after cycle_size calls restarts
    at start_value (the LR climbs back), so the model says it wraps and its decay ends at
    cycle_size; its end_value is never held."""
    spec, _ = _spec({"event_index": 0, "cycle": 0, "start_value": 1e-3, "end_value": 1e-5,
                     "cycle_size": 9, "cycle_mult": 1.0, "warmup_duration": 0})
    sh = shape(spec)
    assert sh.wraps and sh.decay_end == 9 and sh.floor_at is None
    assert lr_at(spec, 10) == 1e-3 and lr_at(spec, 9) < lr_at(spec, 8)


def test_cycle_sizes_that_truncation_cannot_tell_apart_give_no_progress():
    """Ignite truncates int(cycle_size x cycle_mult): with mult 0.5 after 1 cycle a saved
    cycle_size 3 came from 6 or 7, so the finished cycle's length, hence the progress, is
    not derivable (None), never guessed."""
    assert total_calls({"event_index": 2, "cycle": 1, "start_value": 1e-3, "end_value": 0.0,
                        "cycle_size": 3, "cycle_mult": 0.5, "warmup_duration": 0}) is None


@pytest.mark.parametrize(("warmup", "kwargs"), [
    (2, {"start_value": 1e-3, "end_value": 1e-5, "cycle_size": 7}),
    (5, {"start_value": 1e-3, "end_value": 1e-5, "cycle_size": 6, "cycle_mult": 1.5}),
])
def test_cyclical_after_a_warmup_is_ignite_create_lr_scheduler_with_warmup(warmup, kwargs):
    """PyTorch-Ignite 0.5.5 create_lr_scheduler_with_warmup around a CosineAnnealingScheduler:
    a ConcatScheduler of a PiecewiseLinear warm-up (in a param-group wrapper) and the cosine.
    Read back from the concatenation's own state_dict() at every call of a 40-call run, the
    progress (the cosine's calls + the durations before it) is the calls made and the model's
    LR is the optimizer's, to 1e-9 (warm-up calls included, once the cosine drives)."""
    from lrdoctor.schedules.cyclical import concatenated

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=kwargs["start_value"])
    cos = param_scheduler.CosineAnnealingScheduler(opt, "lr", **kwargs)
    sched = param_scheduler.create_lr_scheduler_with_warmup(
        cos, warmup_start_value=0.0, warmup_duration=warmup)
    seen = []
    for n in range(1, 41):
        sched(None)
        seen.append(opt.param_groups[0]["lr"])
        state = sched.state_dict()
        sub = state["schedulers"][1]
        where = concatenated(state, sub)
        if where is None:  # still warming up: the cosine is not driving yet
            assert state["_scheduler_index"] == 0
            continue
        offset, before = where
        assert before is not None
        _, calls = _spec(sub)
        assert calls + offset == n
        spec, _ = _spec(sub)
        spec = ScheduleSpec("cyclical", "cosine", spec.max_lr, Unit.UPDATES, min_lr=spec.min_lr,
                            params={**spec.params, "offset": offset, "before": before})
        for t in range(1, n + 1):
            assert math.isclose(lr_at(spec, t), seen[t - 1], rel_tol=1e-9, abs_tol=1e-15), (n, t)


@pytest.mark.parametrize("pairs", [
    [(0, 0.0), (4, 1e-3), (20, 1e-5)],
    [(3, 5e-4), (10, 1e-3), (11, 2e-4), (30, 0.0)],
])
def test_piecewise_model_is_ignite_piecewise_linear(pairs):
    """PyTorch-Ignite 0.5.5 PiecewiseLinear, every call of a 40-call run (past its last
    milestone it holds the last value: no wrap, the floor from the last milestone's call)."""
    from lrdoctor.read.scan.shapes import SCHED_PIECEWISE

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    sched = param_scheduler.PiecewiseLinear(opt, "lr", milestones_values=pairs)
    st = sched.state_dict()
    assert state_kind(st) == SCHED_PIECEWISE
    vals = [float(v) for v in st["values"]]
    spec = ScheduleSpec("cyclical", "piecewise", max(vals), Unit.UPDATES, min_lr=min(vals),
                        horizon=float(st["milestones"][-1]) + 1,
                        params={"milestones": list(st["milestones"]), "values": vals})
    assert not problems(spec)
    for n in range(1, 41):
        sched(None)
        assert sched.state_dict()["event_index"] == n
        want = opt.param_groups[0]["lr"]
        assert math.isclose(lr_at(spec, n), want, rel_tol=1e-9, abs_tol=1e-15), n
    sh = shape(spec)
    assert not sh.wraps and sh.floor_at == pairs[-1][0] + 1
