"""RL horizon units (issue 19's gap): rollout steps against optimizer updates, prompts
against responses.

RL trainers plan in rollout steps (a batch of prompts, n responses each) while the optimizer
steps once per PPO mini-batch, ``ppo_epochs`` times over each batch. A horizon computed in
the wrong one of these units ends the decay early or late; the finding (LRD119) names the
unit, the knobs that convert it and every other unit ruled out with its number. Each bug has
a healthy twin silent at warning level.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.inspect_api import inspect_path, read_state
from lrdoctor.rules.horizon_hypotheses import updates_per_rollout
from tests.helpers.verdicts import silent, the, tiny_adamw, train

pytestmark = pytest.mark.frameworks


def _model_opt(lr=1e-6):
    return tiny_adamw(lr)


def _update(m, opt) -> None:
    train(m, opt)


# ------------------------------------------------------------ verl: rollout steps vs updates

def _verl_run(tmp_path: Path, sched_per: str) -> Path:
    """verl's FSDP checkpoint layout (``global_step_N/actor/{model,optim,extra_state}_world_size
    _1_rank_0.pt``, written with ``torch.save``) and its resolved OmegaConf config beside it.
    The numbers are SkyRL issue 872's: ``train_batch_size`` 128 prompts per rollout step split
    into ``ppo_mini_batch_size`` 64, so 2 optimizer updates per rollout step, and the horizon
    ``total_training_steps`` = 20 counts rollout steps (len(dataloader) x epochs). verl steps
    its transformers cosine LambdaLR once per rollout step (the twin); a worker that steps it
    with the optimizer (SkyRL's fsdp_strategy, the bug) reaches the floor at rollout step 10."""
    import torch
    from omegaconf import OmegaConf
    from transformers import get_cosine_schedule_with_warmup

    total, tbs, mini, ppo_epochs, n, done = 20, 128, 64, 1, 5, 6
    m, opt = _model_opt()
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=0, num_training_steps=total)
    for _ in range(done):
        for _ in range(tbs // mini * ppo_epochs):
            _update(m, opt)
            if sched_per == "update":
                sched.step()
        if sched_per == "rollout":
            sched.step()
    run = tmp_path / f"verl-per-{sched_per}"
    ck = run / f"global_step_{done}" / "actor"
    ck.mkdir(parents=True)
    torch.save(m.state_dict(), ck / "model_world_size_1_rank_0.pt")
    torch.save(opt.state_dict(), ck / "optim_world_size_1_rank_0.pt")
    torch.save({"lr_scheduler": sched.state_dict(), "rng": torch.get_rng_state()},
               ck / "extra_state_world_size_1_rank_0.pt")
    (run / "latest_checkpointed_iteration.txt").write_text(str(done))
    cfg = OmegaConf.create({
        "data": {"train_batch_size": tbs, "max_prompt_length": 512},
        "actor_rollout_ref": {
            "actor": {"ppo_mini_batch_size": mini, "ppo_micro_batch_size_per_gpu": 8,
                      "ppo_epochs": ppo_epochs,
                      "optim": {"lr": 1e-6, "lr_warmup_steps": -1, "warmup_style": "cosine",
                                "total_training_steps": total}},
            "rollout": {"name": "vllm", "n": n, "temperature": 1.0}},
        "trainer": {"total_epochs": 1, "total_training_steps": total, "nnodes": 1,
                    "n_gpus_per_node": 8}})
    OmegaConf.save(cfg, run / f"global_step_{done}" / "config.yaml")
    return ck


def test_verl_horizon_in_rollout_steps_stepped_per_update_is_an_error(tmp_path):
    (r,) = inspect_path(_verl_run(tmp_path, "update"))
    assert r.format == "verl"
    f = the(r, "LRD119")
    assert f.severity == Severity.ERROR
    ev = f.evidence
    assert ev["step_unit"] == "rollout step"
    assert (ev["horizon"], ev["planned_end_updates"]) == (20, 20)
    assert ev["scheduler_calls_per_update"] == 2  # last_epoch 12 at global_step_6
    assert ev["hypothesis"]["hypothesis"].startswith(
        "the planned end counted in rollout steps while the scheduler steps per optimizer")
    assert "train_batch_size 128 / ppo_mini_batch_size 64" in ev["hypothesis"]["hypothesis"]
    assert ev["floor_at_update"] == 10  # rollout step 10 of 20
    assert "rollout step 10 of 20" in f.message and "50%" in f.message
    ruled = {t["hypothesis"]: t["predicts"] for t in ev["ruled_out"]}
    assert ruled["the planned end"] == 40
    assert ruled["the planned end counted in prompts, not responses"] == 8   # 40 / rollout.n 5
    assert ruled["the planned end counted in responses, not prompts"] == 200
    assert "trainer.total_training_steps" in ev["planned_end_from"]
    assert "actor_rollout_ref.actor.optim.total_training_steps" in ev["horizon_from"]
    assert r.exit_code("error") == 1
    # the rate finding names the RL knobs as its cause, not a gradient-accumulation window
    rate = the(r, "LRD103")
    assert "stepped per optimizer update, 2 per rollout step" in rate.message
    assert "ppo_mini_batch_size 64" in rate.message


def test_verl_stepped_per_rollout_twin_is_silent(tmp_path):
    """verl's own design: the scheduler once per rollout step while the optimizer steps twice
    (12 updates at global_step_6): the horizon 20 is the planned end, after a comparison."""
    ck = _verl_run(tmp_path, "rollout")
    (r,) = inspect_path(ck)
    silent(r)
    assert not [f for f in r.findings if f.code == "LRD119"]
    st = read_state(ck)
    assert st.counter("optimizer.step").value == 12
    u = updates_per_rollout(st)
    assert u is not None and u.value == 2
    assert r.state["derived"]["compared"]["agree"] is True


# ------------------------------------------------------------ prompts vs responses

def _plain_rl_loop(tmp_path: Path, horizon_in: str) -> Path:
    """GENERALITY: no reader was written for this layout. A plain PPO/GRPO loop (no
    framework) saves ``torch.save({"model", "optimizer", "lr_scheduler", "rollout_step"})``
    and its knobs only in an ``args.json`` beside it, under OpenRLHF's names:
    ``rollout_batch_size`` 16 prompts x ``n_samples_per_prompt`` 4 responses /
    ``train_batch_size`` 32 samples per update = 2 updates per rollout step, for
    ``num_rollout_steps`` 30, so 60 updates. The bug sizes torch's CosineAnnealingLR from the
    prompts (30 x 16 / 32 = 15, open-instruct issue 537's shape): the floor comes at update
    15 of 60."""
    import torch
    from torch.optim.lr_scheduler import CosineAnnealingLR

    rollouts, prompts, n, tbs = 30, 16, 4, 32
    per_step = prompts * n // tbs
    t_max = rollouts * prompts // tbs if horizon_in == "prompts" else rollouts * per_step
    m, opt = _model_opt(1e-5)
    sched = CosineAnnealingLR(opt, T_max=t_max, eta_min=0.0)
    done = 5
    for _ in range(done):
        for _ in range(per_step):
            _update(m, opt)
            sched.step()
    d = tmp_path / f"ppo-{horizon_in}" / "ckpt_5"
    d.mkdir(parents=True)
    torch.save({"model": m.state_dict(), "optimizer": opt.state_dict(),
                "lr_scheduler": sched.state_dict(), "rollout_step": done}, d / "state.pt")
    (d / "args.json").write_text(json.dumps({
        "rollout_batch_size": prompts, "n_samples_per_prompt": n, "train_batch_size": tbs,
        "micro_train_batch_size": 4, "num_rollout_steps": rollouts, "actor_learning_rate": 1e-5,
        "temperature": 1.0}))
    return d


def test_plain_loop_horizon_in_prompts_not_responses_is_an_error(tmp_path):
    (r,) = inspect_path(_plain_rl_loop(tmp_path, "prompts"))
    f = the(r, "LRD119")
    assert f.severity == Severity.ERROR
    ev = f.evidence
    assert (ev["horizon"], ev["planned_end_updates"]) == (15, 60)
    assert ev["hypothesis"]["hypothesis"] == "the planned end counted in prompts, not responses"
    assert ev["hypothesis"]["arithmetic"] == "60 / n_samples_per_prompt 4"
    assert ev["floor_at_update"] == 15 and "update 15 of 60" in f.message
    assert "args.json" in ev["planned_end_from"] and "num_rollout_steps" in ev["planned_end_from"]
    ruled = {t["hypothesis"].split(" (")[0]: t["predicts"] for t in ev["ruled_out"]}
    assert ruled["the planned end"] == 60
    assert ruled["the planned end counted in rollout steps while the scheduler steps per "
                 "optimizer update"] == 30
    assert ruled["the planned end counted in responses, not prompts"] == 240
    assert "step_unit" not in ev


def test_plain_loop_horizon_in_responses_twin_is_silent(tmp_path):
    d = _plain_rl_loop(tmp_path, "responses")
    (r,) = inspect_path(d)
    silent(r)
    assert not [f for f in r.findings if f.code == "LRD119"]
    u = updates_per_rollout(read_state(d))
    assert u is not None and u.value == 2
    assert u.arithmetic == "rollout_batch_size 16 x n_samples_per_prompt 4 / train_batch_size 32"


def test_rl_knobs_are_evidence_read_by_section(tmp_path):
    """``rollout.n`` is the responses per prompt only inside a ``rollout`` section, and the
    ``trainer``'s ``total_training_steps`` is the planned end in rollout steps while the
    optimizer's is the horizon (verl's config names both alike)."""
    st = read_state(_verl_run(tmp_path, "rollout"))
    got = {(e.role.value, e.quantity.value, e.where.split(":", 1)[1]): e.value
           for e in st.evidence if e.where.startswith("../config.yaml")
           or "config.yaml" in e.where}
    assert got[("factor", "responses per prompt", "actor_rollout_ref.rollout.n")] == 5
    assert got[("planned end", "rollouts", "trainer.total_training_steps")] == 20
    assert got[("horizon", "scheduler calls",
                "actor_rollout_ref.actor.optim.total_training_steps")] == 20
    assert got[("factor", "prompts per mini-batch", "actor_rollout_ref.actor.ppo_mini_batch_size")] \
        == 64
    assert got[("factor", "passes over each rollout batch",
                "actor_rollout_ref.actor.ppo_epochs")] == 1


# ------------------------------------------------------------ NeMo-RL: updates vs GRPO steps

def _nemo_rl_run(tmp_path: Path, horizon_in: str) -> Path:
    """NeMo-RL's checkpoint (``step_N/training_info.json``, ``config.yaml``, and
    ``policy/optimizer`` written with ``torch.distributed.checkpoint.save`` as
    ``{"optim": {"optim": get_optimizer_state_dict(...), "sched": ...}}``). Its worker steps
    the scheduler once per GRPO step while ``num_prompts_per_step`` 8 x
    ``num_generations_per_prompt`` 4 / ``train_global_batch_size`` 16 = 2 optimizer updates
    run per step. The bug sizes torch's LinearLR ``total_iters`` in optimizer updates
    (``max_num_steps`` 20 x 2 = 40): at the planned end half the decay is left. The reverse
    direction of the verl case, on a DCP layout."""
    import warnings

    import torch.distributed.checkpoint as tdcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
    from torch.optim.lr_scheduler import LinearLR

    steps, done, prompts, gens, gbs = 20, 4, 8, 4, 16
    per_step = prompts * gens // gbs
    total_iters = steps * per_step if horizon_in == "updates" else steps
    m, opt = _model_opt(1e-6)
    sched = LinearLR(opt, start_factor=1.0, end_factor=0.0, total_iters=total_iters)
    for _ in range(done):
        for _ in range(per_step):
            _update(m, opt)
        sched.step()
    ck = tmp_path / f"nemo-{horizon_in}" / f"step_{done}"
    (ck / "policy").mkdir(parents=True)
    (ck / "training_info.json").write_text(json.dumps(
        {"consumed_samples": done * prompts * gens, "current_step": done, "current_epoch": 0,
         "total_steps": done}))
    (ck / "config.yaml").write_text(
        f"grpo:\n  max_num_steps: {steps}\n  num_prompts_per_step: {prompts}\n"
        f"  num_generations_per_prompt: {gens}\npolicy:\n  train_global_batch_size: {gbs}\n"
        "  train_micro_batch_size: 4\n  scheduler:\n    name: torch.optim.lr_scheduler.LinearLR\n"
        f"    kwargs:\n      start_factor: 1.0\n      end_factor: 0.0\n"
        f"      total_iters: {total_iters}\n")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one process: "torch.distributed is disabled"
        tdcp.save({"model": m.state_dict()}, checkpoint_id=str(ck / "policy" / "weights"))
        tdcp.save({"optim": {"optim": get_optimizer_state_dict(m, opt),
                             "sched": sched.state_dict()}},
                  checkpoint_id=str(ck / "policy" / "optimizer"))
    return tmp_path / f"nemo-{horizon_in}"


def test_nemo_rl_horizon_in_updates_stepped_per_grpo_step_is_an_error(tmp_path):
    (r,) = inspect_path(_nemo_rl_run(tmp_path, "updates"))
    assert r.format == "nemo_rl"
    f = the(r, "LRD119")
    assert f.severity == Severity.ERROR
    ev = f.evidence
    assert (ev["horizon"], ev["planned_end_updates"], ev["step_unit"]) == (40, 20, "rollout step")
    assert ev["hypothesis"]["hypothesis"] == ("the planned end counted in optimizer updates "
                                              "while the scheduler steps per rollout step")
    assert ev["hypothesis"]["arithmetic"] == ("20 rollout steps x num_prompts_per_step 8 x "
                                              "num_generations_per_prompt 4 / "
                                              "train_global_batch_size 16")
    assert ev["decay_done_at_planned_end"] == pytest.approx(0.5)
    assert "grpo.max_num_steps" in ev["planned_end_from"]
    ruled = {t["hypothesis"]: t["predicts"] for t in ev["ruled_out"]}
    assert ruled["the planned end"] == 20
    assert ruled["the planned end counted in prompts, not responses"] == 5


def test_nemo_rl_horizon_in_grpo_steps_twin_is_silent(tmp_path):
    (r,) = inspect_path(_nemo_rl_run(tmp_path, "steps"))
    silent(r)
    assert r.state["derived"]["compared"]["agree"] is True
