"""Diagnosis rules on normalized run states (the format tests feed real checkpoints)."""

from __future__ import annotations

import math

import pytest

from lrdoctor.core.facts import Facts, Invariant
from lrdoctor.core.findings import Severity
from lrdoctor.core.state import Counter, RunState, ScheduleSpec, Unit
from lrdoctor.diagnose import diagnose
from lrdoctor.schedules import lr_at


def megatron_state(num_steps, consumed, *, decay=2400 * 256, train_iters=2400, gbs=256,
                   iteration=None, lr=None, style="cosine", warmup=0):
    spec = ScheduleSpec(family="megatron", kind=style, max_lr=3e-4, min_lr=3e-5,
                        unit=Unit.SAMPLES, warmup=warmup, horizon=decay)
    iteration = consumed // gbs if iteration is None else iteration
    st = RunState(
        format="megatron", path="x", schedule=spec,
        facts=Facts(invariant=Invariant.MEGATRON_SAMPLES),
        scheduler_progress=Counter("scheduler.num_steps", num_steps, Unit.SAMPLES),
        counters=[Counter("megatron.iteration", iteration, Unit.UPDATES),
                  Counter("consumed_train_samples", consumed, Unit.SAMPLES)],
        samples_per_update=gbs,
        planned_end=Counter("train_iters", train_iters, Unit.UPDATES),
        trainer_progress=Counter("megatron.iteration", iteration, Unit.UPDATES),
        nominal_progress=Counter("consumed_train_samples - skipped_train_samples", consumed,
                                 Unit.SAMPLES),
    )
    st.optimizer_lrs = [lr_at(spec, num_steps) if lr is None else lr]
    return st


def codes(findings, at_least=Severity.INFO):
    return sorted(f.code for f in findings if f.severity >= at_least)


def test_healthy_megatron_is_silent():
    assert diagnose(megatron_state(1200 * 256, 1200 * 256)) == []


def test_megatron_counter_mismatch_and_past_horizon():
    st = megatron_state(4 * 1000 * 256, 1000 * 256)
    f = {x.code: x for x in diagnose(st)}
    assert set(f) == {"LRD101", "LRD104"}
    assert f["LRD104"].evidence["ratio"] == 4.0
    ev = f["LRD101"].evidence
    assert ev["progress_over_horizon"] == pytest.approx(1024000 / 614400)
    assert ev["fraction_of_progress_at_min_lr"] == pytest.approx(1 - 614400 / 1024000, abs=1e-6)
    assert ev["training_fraction_done"] == pytest.approx(1000 / 2400, abs=1e-6)


def test_configured_tail_is_info_not_error():
    # lr_decay_iters 800 < train_iters 1000: by design, and counters agree.
    st = megatron_state(900 * 256, 900 * 256, decay=800 * 256, train_iters=1000)
    f = diagnose(st)
    assert codes(f) == ["LRD102"]
    assert f[0].severity == Severity.INFO
    assert f[0].evidence["tail_fraction"] == pytest.approx(0.2)


def roll_state(num_steps=8429, decay=2400, max_steps=None):
    spec = ScheduleSpec(family="megatron", kind="cosine", max_lr=1e-6, min_lr=0.0,
                        unit=Unit.UPDATES, horizon=decay)
    st = RunState(format="roll", path="x", schedule=spec,
                  scheduler_progress=Counter("scheduler.num_steps", num_steps, Unit.UPDATES),
                  counters=[Counter("optimizer.step", num_steps, Unit.UPDATES)])
    if max_steps:
        st.planned_end = Counter("max_steps", max_steps, Unit.UPDATES)
    st.optimizer_lrs = [0.0]
    return st


def test_roll_overshoot_without_nominal_is_error():
    f = diagnose(roll_state())
    assert codes(f, Severity.WARNING) == ["LRD101"]
    ev = f[0].evidence
    assert ev["fraction_of_progress_at_min_lr"] == pytest.approx((8429 - 2400) / 8429, abs=1e-6)
    assert "8,429" in f[0].message and "2,400" in f[0].message


def torch_state(last_epoch, opt_step, *, kind="LinearLR", horizon=1000, lrs=None):
    spec = ScheduleSpec(family="torch", kind=kind, max_lr=1e-3, unit=Unit.UPDATES,
                        horizon=horizon,
                        params={"start_factor": 1.0, "end_factor": 0.1, "total_iters": horizon})
    st = RunState(format="torchsave", path="x", schedule=spec,
                  scheduler_progress=Counter("scheduler.last_epoch", last_epoch, Unit.UPDATES),
                  counters=[Counter("optimizer.step", opt_step, Unit.UPDATES)],
                  nominal_progress=Counter("optimizer.step", opt_step, Unit.UPDATES))
    st.optimizer_lrs = lrs if lrs is not None else [lr_at(spec, last_epoch)]
    return st


def test_scheduler_k_times_fast():
    f = diagnose(torch_state(400, 100))
    assert codes(f) == ["LRD103"]
    assert f[0].evidence["k"] == 4
    assert "--k 4" in f[0].fix


def test_scheduler_non_integer_overshoot_still_flagged():
    f = diagnose(torch_state(351, 100))
    assert codes(f) == ["LRD103"]
    assert f[0].evidence["k"] == pytest.approx(3.51)


def test_off_by_one_is_tolerated():
    assert diagnose(torch_state(101, 100)) == []


def test_scheduler_behind_is_warning():
    f = diagnose(torch_state(50, 100))
    assert codes(f) == ["LRD108"] and f[0].severity == Severity.WARNING


def test_optimizer_lr_mismatch():
    f = diagnose(torch_state(100, 100, lrs=[5e-4]))
    assert codes(f) == ["LRD105"]
    assert math.isclose(f[0].evidence["schedule_lr"], 1e-3 * (1 - 0.9 * 100 / 1000))


def test_impossible_config():
    st = megatron_state(100 * 256, 100 * 256, warmup=3000 * 256)
    assert "LRD106" in codes(diagnose(st))


def test_unrecoverable_schedule_is_info():
    st = RunState(format="torchsave", path="x", notes=["LambdaLR saves no lambdas"])
    f = diagnose(st)
    assert codes(f)[0] == "LRD107" and f[0].severity == Severity.INFO
    assert "LambdaLR" in f[0].message
    # No scheduler progress at all: never silent, a warning names what was scanned.
    assert codes(f)[1:] == ["LRD111"] and f[1].severity == Severity.WARNING
    assert "scanned: x" in f[1].message
