"""Today's framework layouts read by content (issue 9): verl, SkyRL, Composer, torchtune.

None of these frameworks installs here (verl/SkyRL need ray and vLLM, Composer and
torchtune pin older torch), so each layout is built from the framework's source,
named in each fixture, with the real objects it saves: torch schedulers and
optimizers, transformers' warmup+cosine LambdaLR (what verl builds), OmegaConf
configs (SkyRL's ``trainer_state.pt``). Each has a healthy twin (silent at warning
level) and a buggy one (its error, with the numbers).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.diagnose import diagnose
from lrdoctor.inspect_api import read_state
from tests.helpers.factories import _tiny_model, _train_step, composer_state
from tests.helpers.paths import REPO

ROOT = REPO


def loud(findings) -> list[str]:
    return [f.code for f in findings if f.severity >= Severity.WARNING]


def lrdoctor(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120")
    return subprocess.run([sys.executable, "-m", "lrdoctor", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def train(steps: int, updates_per_step: int, sched_per_update: bool, *, total: int = 100):
    """An actor trained like verl/SkyRL: ``updates_per_step`` mini-batch updates per
    training step; the scheduler (transformers' warmup + cosine LambdaLR) stepped per
    update (SkyRL) or once per step (verl)."""
    import torch
    from transformers import get_cosine_schedule_with_warmup

    model = _tiny_model(5)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=2, num_training_steps=total)
    for s in range(steps):
        for u in range(updates_per_step):
            _train_step(model, opt, s * 100 + u)
            if sched_per_update:
                sched.step()
        if not sched_per_update:
            sched.step()
    return model, opt, sched


def rng_state() -> dict:
    """verl's ``get_rng_state``: cpu/numpy/random states (cuda omitted on CPU)."""
    import numpy as np
    import torch

    return {"cpu": torch.get_rng_state(), "numpy": np.random.get_state(),
            "random": random.getstate()}


# ---------------------------------------------------------------- verl (FSDP)

def verl_run(root: Path, *, step: int, sched_per_update: bool, world: int = 2) -> Path:
    """verl/utils/checkpoint/fsdp_checkpoint_manager.py save_checkpoint + ray_trainer
    _save_checkpoint: global_step_N/actor/{model,optim,extra_state}_world_size_W_rank_R.pt,
    data.pt, root latest_checkpointed_iteration.txt."""
    import torch

    model, opt, sched = train(step, 4, sched_per_update)
    actor = root / f"global_step_{step}" / "actor"
    actor.mkdir(parents=True)
    for r in range(world):
        torch.save(model.state_dict(), actor / f"model_world_size_{world}_rank_{r}.pt")
        torch.save(opt.state_dict(), actor / f"optim_world_size_{world}_rank_{r}.pt")
        torch.save({"lr_scheduler": sched.state_dict(), "rng": rng_state()},
                   actor / f"extra_state_world_size_{world}_rank_{r}.pt")
    (actor / "fsdp_config.json").write_text(json.dumps({"FSDP_version": 1, "world_size": world}))
    torch.save({"_num_yielded": step * 8}, root / f"global_step_{step}" / "data.pt")
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return root


def test_verl_healthy_is_silent_and_not_megatron(tmp_path):
    run = verl_run(tmp_path / "ckpts", step=20, sched_per_update=False)
    st = read_state(run)
    assert st.format == "verl"
    assert st.scheduler_progress.value == 20 and st.nominal_progress.value == 20
    assert st.counter("optimizer.step").value == 80  # 4 mini-batch updates per step, by design
    assert loud(diagnose(st)) == []
    r = lrdoctor("inspect", str(run), "--fail-on", "warning")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "extra_state_world_size_2_rank_0.pt" in r.stdout


def test_verl_scheduler_per_mini_batch_is_lrd103(tmp_path):
    run = verl_run(tmp_path / "ckpts", step=20, sched_per_update=True)
    f = [x for x in diagnose(read_state(run)) if x.code == "LRD103"]
    assert f and f[0].severity == Severity.ERROR
    assert f[0].evidence["scheduler_progress"] == 80 and f[0].evidence["nominal_progress"] == 20
    assert f[0].evidence["k"] == 4


# ---------------------------------------------------------------- SkyRL (FSDP)

def skyrl_run(root: Path, *, step: int, updates_per_step: int) -> Path:
    """skyrl_train/trainer.py save_checkpoints: global_step_N/{trainer_state.pt (global_step,
    OmegaConf config), data.pt, policy/extra_state_world_size_W_rank_R.pt}."""
    import torch
    from omegaconf import OmegaConf

    model, opt, sched = train(step, updates_per_step, True)
    ck = root / f"global_step_{step}"
    pol = ck / "policy"
    pol.mkdir(parents=True)
    torch.save(model.state_dict(), pol / "model_world_size_1_rank_0.pt")
    torch.save(opt.state_dict(), pol / "optim_world_size_1_rank_0.pt")
    torch.save({"lr_scheduler": sched.state_dict(), "world_size": 1, "client_state": {}},
               pol / "extra_state_world_size_1_rank_0.pt")
    cfg = OmegaConf.create({"trainer": {"train_batch_size": 32, "policy_mini_batch_size": 8,
                                        "update_epochs_per_batch": 1, "epochs": 1,
                                        "policy": {"optimizer_config": {"lr": 1e-6}}},
                            "generator": {"n_samples_per_prompt": 4}})
    torch.save({"global_step": step, "config": cfg}, ck / "trainer_state.pt")
    torch.save({"_num_yielded": step}, ck / "data.pt")
    (root / "latest_ckpt_global_step.txt").write_text(str(step))
    return root


def test_skyrl_healthy_reads_the_omegaconf_config_as_data(tmp_path):
    run = skyrl_run(tmp_path / "ckpts", step=10, updates_per_step=4)
    st = read_state(run)
    assert st.format == "skyrl"
    assert st.extras["nominal_updates_per_step"] == 4
    assert st.scheduler_progress.value == 40 and st.nominal_progress.value == 40
    assert any("opaque" in n and "omegaconf" in n for n in st.notes)
    assert loud(diagnose(st)) == []


def test_skyrl_extra_updates_per_step_are_lrd103(tmp_path):
    # Step-wise trajectories (SkyRL PR 1483): 5 mini-batches per step instead of 4.
    run = skyrl_run(tmp_path / "ckpts", step=10, updates_per_step=5)
    f = [x for x in diagnose(read_state(run)) if x.code == "LRD103"]
    assert f and f[0].severity == Severity.ERROR
    assert f[0].evidence["scheduler_progress"] == 50 and f[0].evidence["nominal_progress"] == 40


# ---------------------------------------------------------------- Composer

def composer_ckpt(root: Path, *, batches: int, k: int) -> Path:
    """composer/core/state.py State.state_dict + time.py Timestamp.state_dict, saved as
    ep{E}-ba{B}-rank0.pt = {"state": ..., "rng": ...}; schedulers stepped per batch."""
    import torch

    state = composer_state(batches=batches, k=k)
    root.mkdir(parents=True)
    f = root / f"ep1-ba{batches}-rank0.pt"
    torch.save({"state": state, "rng": [{"python": random.getstate(),
                                         "torch": torch.get_rng_state()}]}, f)
    return root


def test_composer_healthy_and_stepped_twice(tmp_path):
    st = read_state(composer_ckpt(tmp_path / "ok", batches=50, k=1))
    assert st.format == "composer" and st.nominal_progress.name == "composer.timestamp.batch"
    assert st.counter("composer.timestamp.batch").source.endswith(
        "ep1-ba50-rank0.pt:state.timestamp.Timestamp.batch")
    assert loud(diagnose(st)) == []
    bad = read_state(composer_ckpt(tmp_path / "bad", batches=50, k=2))
    f = [x for x in diagnose(bad) if x.code == "LRD103"]
    assert f and f[0].evidence["k"] == 2 and f[0].evidence["scheduler_progress"] == 100


# ---------------------------------------------------------------- torchtune

def torchtune_ckpt(root: Path, *, updates: int, steps_run: int) -> Path:
    """recipes/full_finetune_single_device.py save_checkpoint: recipe_state/recipe_state.pt
    (torchtune/training/checkpointing/_utils.py keys); no scheduler state."""
    import torch

    model = _tiny_model(7)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-5)
    for u in range(updates):
        _train_step(model, opt, u)
    d = root / "recipe_state"
    d.mkdir(parents=True)
    torch.save({"optimizer": opt.state_dict(), "seed": 42, "epochs_run": 1, "total_epochs": 3,
                "max_steps_per_epoch": 100, "steps_run": steps_run,
                "dataloader": {"sampler": {"epoch": 1}}}, d / "recipe_state.pt")
    (root / "epoch_0").mkdir()
    torch.save(model.state_dict(), root / "epoch_0" / "model-00001-of-00001.bin")
    return root


def test_torchtune_rebuilds_from_steps_run(tmp_path):
    st = read_state(torchtune_ckpt(tmp_path / "ok", updates=100, steps_run=100))
    assert st.format == "torchtune"
    assert st.scheduler_progress.value == 100 and st.nominal_progress.value == 100
    assert st.planned_end.value == 300
    assert loud(diagnose(st)) == []
    # A recipe that counted batches, not optimizer steps, under accumulation 4:
    bad = read_state(torchtune_ckpt(tmp_path / "bad", updates=100, steps_run=400))
    f = [x for x in diagnose(bad) if x.code == "LRD103"]
    assert f and f[0].evidence["k"] == 4


@pytest.mark.parametrize("maker", ["verl", "skyrl"])
def test_rl_layouts_json_names_each_counter_key(maker, tmp_path):
    run = (verl_run(tmp_path / "v", step=5, sched_per_update=False) if maker == "verl"
           else skyrl_run(tmp_path / "s", step=5, updates_per_step=4))
    r = lrdoctor("inspect", str(run), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    src = doc["state"]["scheduler_progress"]["source"]
    assert src.endswith(":lr_scheduler.last_epoch") and "extra_state_world_size_" in src


# ---------------------------------------------------------------- verl (Megatron)

def verl_megatron_run(root: Path, *, step: int, per_step: int) -> Path:
    """verl/utils/checkpoint/megatron_checkpoint_manager.py generate_state_dict: the
    megatron-core scheduler under ``lr_scheduler`` beside ``optimizer``, saved by Megatron's
    dist_checkpointing (torch_dist) in ``global_step_N/actor/dist_ckpt/``; megatron-core
    < 0.19 writes the non-sharded part as ``common.pt``, which is what is written here."""
    import torch

    from tests.helpers.factories import _quiet_megatron

    Sched = _quiet_megatron()
    model = _tiny_model(9)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    sched = Sched(opt, init_lr=0.0, max_lr=1e-6, min_lr=0.0, lr_warmup_steps=2,
                  lr_decay_steps=100, lr_decay_style="cosine", start_wd=0.0, end_wd=0.0,
                  wd_incr_steps=100, wd_incr_style="constant")
    for s in range(step):
        for _ in range(per_step):  # per_step > 1: stepped per mini-batch, the bug
            sched.step(1)
    d = root / f"global_step_{step}" / "actor" / "dist_ckpt"
    d.mkdir(parents=True)
    torch.save({"lr_scheduler": sched.state_dict(), "optimizer": {"param_groups": [
        {k: v for k, v in g.items() if k != "params"} | {"params": [0]}
        for g in opt.param_groups]}}, d / "common.pt")
    (d / "metadata.json").write_text(json.dumps({"sharded_backend": "torch_dist",
                                                 "sharded_backend_version": 1,
                                                 "common_backend": "torch",
                                                 "common_backend_version": 1}))
    (root / "latest_checkpointed_iteration.txt").write_text(str(step))
    return root


def test_verl_megatron_scheduler_counts_training_steps(tmp_path):
    st = read_state(verl_megatron_run(tmp_path / "ok", step=30, per_step=1))
    assert st.format == "verl" and st.extras["backend"] == "megatron"
    assert st.scheduler_progress.value == 30 and st.nominal_progress.value == 30
    assert loud(diagnose(st)) == []  # no LRD104 "0.03x": the unit is the training step
    bad = read_state(verl_megatron_run(tmp_path / "bad", step=30, per_step=4))
    codes = {f.code: f for f in diagnose(bad)}
    assert codes["LRD103"].evidence["k"] == 4
    assert codes["LRD101"].severity == Severity.ERROR  # 120 past lr_decay_steps 100
