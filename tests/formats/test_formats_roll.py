"""ROLL reader against checkpoints in ROLL's mcore_adapter layout, written with
megatron-core's OptimizerParamScheduler (ROLL's MegatronLRScheduler subclasses it
without changing its state_dict)."""

from __future__ import annotations

import math
import shutil

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.state import Unit
from lrdoctor.read.layouts import hf, megatron, roll
from lrdoctor.schedules import lr_at
from tests.helpers.factories import roll_run
from tests.helpers.paths import REPO


def test_detect_and_find(roll_run_dir):
    out = roll_run_dir.root
    assert roll.detect(out)
    ckpts = roll.find_checkpoints(out)
    assert [p.name for p in ckpts] == ["checkpoint-4", "checkpoint-9"]
    assert all(p.parent.name == "actor_train" for p in ckpts)
    assert roll.find_checkpoints(out / "actor_train") == ckpts
    assert roll.find_checkpoints(ckpts[0]) == [ckpts[0]]
    assert roll.detect(ckpts[0] / "scheduler.pt")
    assert not hf.detect(out) and not megatron.detect(out)


def test_read_matches_live_scheduler(roll_run_dir):
    for saved in roll_run_dir.saves:
        st = roll.read(saved.path)
        sch = saved.scheduler
        n = saved.counters["pipeline_step"]
        spec = st.schedule
        assert (spec.family, spec.kind, spec.unit) == ("megatron", "cosine", Unit.UPDATES)
        assert spec.horizon == sch["lr_decay_steps"] == 40
        assert spec.warmup == sch["lr_warmup_steps"] == 2
        assert spec.max_lr == sch["max_lr"] and spec.min_lr == sch["min_lr"]
        assert st.scheduler_progress.value == sch["num_steps"] == (n + 1) * 4
        assert st.scheduler_progress.unit is Unit.UPDATES
        assert st.counter("roll.pipeline_step").value == n
        assert st.trainer_progress.value == n + 1
        assert st.trainer_progress.unit is Unit.ROLLOUT_STEPS
        assert st.counter("optimizer.step").value == saved.optimizer_step == (n + 1) * 4
        assert st.optimizer_lrs == saved.lrs
        assert (st.planned_end.value, st.planned_end.unit) == (10, Unit.ROLLOUT_STEPS)
        assert st.nominal_progress.value == (n + 1) * 40 / 10
        assert st.extras["pipeline_state_step"] == n
        assert st.extras["pipeline_logged_lr"] == saved.lrs[0]
        assert math.isclose(lr_at(spec, st.scheduler_progress.value), saved.lrs[0],
                            rel_tol=1e-12, abs_tol=1e-20)


def test_dynamic_batching_overshoot(tmp_path):
    """More real updates per pipeline step than the nominal budget assumed."""
    truth = roll_run(tmp_path / "out", pipeline_max_steps=10, nominal_per_step=4,
                     updates_per_step=lambda s: 9 + s % 3, save_at=(7,))
    saved = truth.last
    st = roll.read(saved.path)
    real = sum(9 + s % 3 for s in range(8))
    assert st.scheduler_progress.value == saved.scheduler["num_steps"] == real
    assert st.nominal_progress.value == 8 * 4
    assert st.scheduler_progress.value > st.schedule.horizon  # past the decay: at min_lr
    assert st.optimizer_lrs == saved.lrs == [0.0]
    assert st.extras["actual_updates_per_pipeline_step"] == real / 8
    assert st.extras["config"]["use_dynamic_batching_in_train"] is True


def test_without_config_no_nominal(tmp_path):
    truth = roll_run(tmp_path / "out", save_at=(3,), write_config=False)
    st = roll.read(truth.last.path)
    assert st.nominal_progress is None and st.planned_end is None
    assert st.scheduler_progress.value == 16
    assert any("max_steps unknown" in n for n in st.notes)


def test_cluster_subdir_layout(roll_run_dir, tmp_path):
    """critic-style workers save under checkpoint-N/<cluster_name>/."""
    src = roll_run_dir.saves[0].path
    ck = tmp_path / "out" / "critic" / "checkpoint-4"
    shutil.copytree(src, ck / "critic")
    assert roll.detect(tmp_path / "out")
    st = roll.read(ck)
    assert st.scheduler_progress.value == roll_run_dir.saves[0].scheduler["num_steps"]
    assert st.counter("roll.pipeline_step").value == 4


def test_unusable_inputs(roll_run_dir, tmp_path):
    ck = tmp_path / "checkpoint-4"
    shutil.copytree(roll_run_dir.saves[0].path, ck)
    (ck / "scheduler.pt").write_bytes(b"junk")
    with pytest.raises(UnusableInput, match="scheduler.pt"):
        roll.read(ck)
    import torch

    torch.save({"last_epoch": 3}, ck / "scheduler.pt")
    with pytest.raises(UnusableInput, match="lacks"):
        roll.read(ck)


def test_dispatch_picks_each_format(roll_run_dir, megatron_run_dir, hf_run_dir, tmp_path):
    """lrdoctor.read.layouts.detect sends each real layout to its own reader."""
    from lrdoctor.read import layouts as formats
    from tests.helpers.factories import torch_loop

    loop = torch_loop(tmp_path / "loop" / "ckpt.pt", updates=3).last.path
    cases = {
        roll_run_dir.root: "roll", roll_run_dir.last.path: "roll",
        megatron_run_dir.root: "megatron", megatron_run_dir.last.path: "megatron",
        hf_run_dir.root: "hf", hf_run_dir.last.path: "hf",
        loop: "torch", loop.parent: "torch",
    }
    for path, name in cases.items():
        assert formats.detect(path).NAME == name, path


SAMPLES = REPO / "sample_checkpoints"


def test_sample_roll_overshoot_reads_as_documented():
    st = roll.read(SAMPLES / "roll-overshoot")
    assert st.path.endswith("checkpoint-299")
    assert st.scheduler_progress.value == 8429 and st.schedule.horizon == 2400
    assert st.nominal_progress.value == 2400 and st.planned_end.value == 300
    assert st.counter("optimizer.step").value == 8429
    assert st.optimizer_lrs == [pytest.approx(1e-7)]


def test_dist_optimizer_noted(roll_run_dir, tmp_path):
    ck = tmp_path / "actor_train" / "checkpoint-4"
    shutil.copytree(roll_run_dir.saves[0].path, ck)
    (ck / "iter_0000001" / "mp_rank_00" / "optimizer.pt").unlink()
    (ck / "iter_0000001" / "dist_optimizer").mkdir()
    (ck / "iter_0000001" / "dist_optimizer" / ".metadata").write_bytes(b"")
    st = roll.read(ck)
    assert st.optimizer_lrs == [] and st.counter("optimizer.step") is None
    assert any("dist_optimizer" in n for n in st.notes)
    assert st.scheduler_progress.value == roll_run_dir.saves[0].scheduler["num_steps"]
