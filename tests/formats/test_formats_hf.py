"""HF Trainer reader against real transformers.Trainer runs on CPU."""

from __future__ import annotations

import math
import os
import pickle
import shutil

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.state import Unit
from lrdoctor.read.layouts import hf
from lrdoctor.schedules import lr_at
from tests.helpers.factories import hf_run
from tests.helpers.paths import REPO


def test_detect_and_find(hf_run_dir):
    root = hf_run_dir.root
    assert (root / "trainer_state.json").is_file()  # Trainer.save_state() at the end
    assert hf.detect(root)
    ckpts = hf.find_checkpoints(root)
    assert [p.name for p in ckpts] == ["checkpoint-4", "checkpoint-8", "checkpoint-12"]
    assert hf.find_checkpoints(ckpts[1]) == [ckpts[1]]
    assert hf.detect(ckpts[0] / "trainer_state.json")
    assert not hf.detect(root.parent)


def test_read_matches_live_trainer(hf_run_dir):
    for saved in hf_run_dir.saves:
        st = hf.read(saved.path)
        gs = saved.counters["global_step"]
        assert st.scheduler_progress.value == saved.scheduler["last_epoch"] == gs
        assert st.scheduler_progress.unit is Unit.UPDATES
        assert st.counter("trainer.global_step").value == gs
        assert st.nominal_progress.value == gs
        assert st.trainer_progress.value == gs
        assert (st.planned_end.value, st.planned_end.unit) == (12, Unit.UPDATES)
        assert st.counter("optimizer.step").value == saved.optimizer_step == gs
        assert st.optimizer_lrs == saved.lrs
        spec = st.schedule
        assert (spec.family, spec.kind, spec.unit) == ("hf", "cosine", Unit.UPDATES)
        assert (spec.max_lr, spec.warmup, spec.horizon) == (1e-3, 3, 12)
        assert spec.source == "training_args.bin"


def test_spec_reproduces_live_lrs(hf_run_dir):
    for saved in hf_run_dir.saves:
        st = hf.read(saved.path)
        want = saved.lrs[0]
        got = lr_at(st.schedule, st.scheduler_progress.value)
        assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-18)


def _copy(saved, tmp_path):
    dst = tmp_path / saved.path.name
    shutil.copytree(saved.path, dst)
    return dst


def test_missing_training_args_fits_log_history(hf_run_dir, tmp_path):
    ck = _copy(hf_run_dir.saves[-1], tmp_path)
    (ck / "training_args.bin").unlink()
    st = hf.read(ck)
    assert st.schedule.kind == "cosine" and st.schedule.warmup == 3
    assert st.schedule.horizon == 12 and st.schedule.max_lr == 1e-3
    assert "fitted from log_history" in st.schedule.source
    assert any("training_args.bin missing" in n for n in st.notes)


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch pwned",))


def test_refused_training_args_fits_and_runs_nothing(hf_run_dir, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ck = _copy(hf_run_dir.saves[1], tmp_path)
    (ck / "training_args.bin").write_bytes(pickle.dumps(_Evil()))
    st = hf.read(ck)
    assert not (tmp_path / "pwned").exists()
    assert "fitted" in st.schedule.source
    assert any("not used" in n and "system" in n for n in st.notes)
    assert st.scheduler_progress.value == 8


def test_linear_run_fit_equals_args(tmp_path):
    truth = hf_run(tmp_path / "out", max_steps=8, save_steps=8, scheduler="linear",
                   warmup_steps=2, lr=5e-4)
    ck = truth.last.path
    from_args = hf.read(ck).schedule
    (ck / "training_args.bin").unlink()
    fitted = hf.read(ck).schedule
    assert (fitted.kind, fitted.warmup, fitted.horizon, fitted.max_lr) == (
        from_args.kind, from_args.warmup, from_args.horizon, from_args.max_lr) == (
        "linear", 2, 8, 5e-4)


@pytest.mark.parametrize("warmup", [0, 0.1, 0.5, 7, 7.0])
def test_resolved_warmup_matches_transformers(warmup, tmp_path):
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path), warmup_steps=warmup, report_to=[],
                             use_cpu=True)
    for total in (1, 37, 1000):
        assert hf.resolved_warmup(vars(args), total) == args.get_warmup_steps(total)
    # transformers 4.x fields: warmup_steps int + warmup_ratio
    assert hf.resolved_warmup({"warmup_steps": 0, "warmup_ratio": 0.1}, 37) == 4


def test_unusable_inputs(hf_run_dir, tmp_path):
    ck = _copy(hf_run_dir.saves[0], tmp_path)
    (ck / "trainer_state.json").write_text("{not json")
    with pytest.raises(UnusableInput, match="trainer_state.json"):
        hf.read(ck)
    ck2 = _copy(hf_run_dir.saves[1], tmp_path)
    (ck2 / "scheduler.pt").write_bytes(b"\x00garbage")
    with pytest.raises(UnusableInput, match="scheduler.pt"):
        hf.read(ck2)


SAMPLES = REPO / "sample_checkpoints"


def test_sample_hf_healthy_reads_as_documented():
    assert [p.name for p in hf.find_checkpoints(SAMPLES / "hf-healthy")] == [
        "checkpoint-10", "checkpoint-20"]
    st = hf.read(SAMPLES / "hf-healthy")
    assert st.scheduler_progress.value == st.counter("optimizer.step").value == 20
    assert st.nominal_progress.value == 20 == st.planned_end.value
    assert math.isclose(lr_at(st.schedule, 20), st.optimizer_lrs[0], abs_tol=1e-18)
