"""Findings as hypotheses over all the evidence (issue 19, items 1, 2 and 5).

Each bug shape has its healthy twin; every checkpoint is written by the frameworks' own
code (torch schedulers and optimizers, megatron-core's OptimizerParamScheduler,
transformers' schedule builders, OmegaConf) into layouts no reader was written for,
unless a test says otherwise. Each bug must give an error carrying the numbers that prove
it; each twin must stay silent at warning level.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.inspect_api import inspect_path, read_state
from tests.helpers.verdicts import silent, the, tiny_adamw, train

pytestmark = pytest.mark.frameworks


_train = train


def _model_opt(lr=1e-3):
    return tiny_adamw(lr)


# ------------------------------------------------------------ horizon in micro-batches

def _accum_loop(tmp_path: Path, t_max_from: str) -> Path:
    """A hand-written loop with gradient accumulation 4, stepping its CosineAnnealingLR
    once per optimizer update. GENERALITY: no reader was written for this layout; its
    scheduler, knobs and counters live under names no reader lists (``lr_sched``,
    ``hparams.accum_iter``, ``hparams.loader_len``, ``progress.completed_steps``)."""
    from torch.optim.lr_scheduler import CosineAnnealingLR

    epochs, loader_len, accum = 2, 200, 4
    updates_per_epoch = math.ceil(loader_len / accum)
    t_max = epochs * loader_len if t_max_from == "batches" else epochs * updates_per_epoch
    m, opt = _model_opt()
    sched = CosineAnnealingLR(opt, T_max=t_max, eta_min=1e-5)
    done = 30
    for _ in range(done):
        _train(m, opt)
        sched.step()
    p = tmp_path / f"run-{t_max_from}" / "last.pth"
    p.parent.mkdir(parents=True)
    import torch

    torch.save({"net": m.state_dict(), "opt": opt.state_dict(), "lr_sched": sched.state_dict(),
                "progress": {"completed_steps": done},
                "hparams": {"epochs": epochs, "accum_iter": accum, "loader_len": loader_len}},
               p)
    return p


def test_horizon_counted_in_micro_batches_is_an_error_with_the_numbers(tmp_path):
    (r,) = inspect_path(_accum_loop(tmp_path, "batches"))
    f = the(r, "LRD119")
    assert f.severity == Severity.ERROR
    ev = f.evidence
    assert ev["horizon"] == 400 and ev["planned_end_updates"] == 100
    assert ev["scheduler_calls_per_update"] == 1  # last_epoch 30 == optimizer step 30
    assert ev["hypothesis"]["predicts"] == 400
    assert "micro-batches" in ev["hypothesis"]["hypothesis"]
    # the healthy explanation is ruled out by its own number
    ruled = {t["hypothesis"]: t["predicts"] for t in ev["ruled_out"]}
    assert ruled["the planned end"] == 100
    assert ev["decay_done_at_planned_end"] == pytest.approx(0.25)
    # CosineAnnealingLR at 100 of T_max 400: the LR is still far above eta_min
    lr_end = 1e-5 + (1e-3 - 1e-5) * (1 + math.cos(math.pi * 100 / 400)) / 2
    assert ev["lr_at_planned_end"] == pytest.approx(lr_end, rel=1e-6)
    assert "lr_sched.T_max" in f.message and "Ruled out" in f.message
    assert r.exit_code("error") == 1


def test_horizon_in_updates_twin_is_silent_and_compared(tmp_path):
    (r,) = inspect_path(_accum_loop(tmp_path, "updates"))
    silent(r)
    assert not r.findings
    assert r.state["derived"]["compared"]["agree"] is True


# ------------------------------------------------------------ horizon = total - warmup

def _areal_like(tmp_path: Path, decay_from: str) -> Path:
    """megatron-core's OptimizerParamScheduler in a custom trainer's engine dict, the way
    AReaL PR 1289 built it (``lr_decay_steps = total - warmup``). GENERALITY: an
    AReaL-style layout (``engine.lr_scheduler``, ``step_info.global_step``,
    ``config.total_train_steps``) that no reader was written for."""
    import torch

    from tests.helpers.factories import _quiet_megatron

    Sched = _quiet_megatron()
    total, warmup = 100, 10
    decay = total - warmup if decay_from == "total-warmup" else total
    m, opt = _model_opt()
    sched = Sched(opt, init_lr=0.0, max_lr=1e-3, min_lr=1e-5, lr_warmup_steps=warmup,
                  lr_decay_steps=decay, lr_decay_style="cosine", start_wd=0.0, end_wd=0.0,
                  wd_incr_steps=total, wd_incr_style="constant")
    for _ in range(40):
        _train(m, opt)
        sched.step(1)
    p = tmp_path / decay_from / "global_step40" / "engine_state.pt"
    p.parent.mkdir(parents=True)
    torch.save({"engine": {"model": m.state_dict(), "optimizer": opt.state_dict(),
                           "lr_scheduler": sched.state_dict()},
                "step_info": {"global_step": 40, "epoch": 0},
                "config": {"total_train_steps": total, "warmup_steps_proportion": 0.1}}, p)
    return p


def test_horizon_total_minus_warmup_floor_arrives_a_warmup_early(tmp_path):
    (r,) = inspect_path(_areal_like(tmp_path, "total-warmup"))
    f = the(r, "LRD119")
    assert f.severity == Severity.ERROR
    ev = f.evidence
    assert ev["hypothesis"]["hypothesis"] == "the planned end minus the warmup"
    assert (ev["horizon"], ev["planned_end_updates"], ev["floor_at_update"]) == (90, 100, 90)
    assert "update 90 of 100" in f.message and "10%" in f.message
    assert any(t["hypothesis"] == "the planned end" and t["predicts"] == 100
               for t in ev["ruled_out"])


def test_horizon_total_twin_is_silent(tmp_path):
    (r,) = inspect_path(_areal_like(tmp_path, "total"))
    silent(r)
    assert r.state["derived"]["compared"]["agree"] is True


# ------------------------------------------------------------ a nominal never filled

def test_consumed_samples_never_filled_is_compared_through_the_optimizer_step(tmp_path):
    """A trainer that never fills ``consumed_train_samples`` and steps megatron-core's
    scheduler once per micro-batch: num_steps / global batch is 4x the optimizer's own
    30 updates. Today's Megatron reader compared nothing and said "agree"."""
    from tests.helpers.factories import megatron_run

    truth = megatron_run(tmp_path / "ck", save_at=(30,), train_iters=40, fill_consumed=False,
                         sched_per_micro=True)
    (r,) = inspect_path(truth.root)
    f = the(r, "LRD104")
    assert f.severity == Severity.ERROR
    assert f.evidence["ratio"] == 4.0
    assert f.evidence["nominal_progress"] == 30 * 16
    assert f.evidence["scheduler_progress"] == 30 * 4 * 16
    assert "never filled" in f.evidence["nominal_from"]


def test_consumed_samples_never_filled_twin_is_silent_after_a_real_comparison(tmp_path):
    from tests.helpers.factories import megatron_run

    truth = megatron_run(tmp_path / "ck", save_at=(30,), train_iters=40, fill_consumed=False)
    (r,) = inspect_path(truth.root)
    silent(r)
    cmp = r.state["derived"]["compared"]
    assert cmp["agree"] and cmp["scheduler_value"] == cmp["other_value"] == 30 * 16


# ------------------------------------------------------------ no "agree" without a comparison

def test_repaired_roll_checkpoint_without_budget_is_not_called_agreeing(tmp_path):
    """The demo's repaired ROLL checkpoint: the scheduler was set to the nominal budget, the
    optimizer's step is the real update count, and no budget is saved. With the fix's
    record beside it, the record's nominal progress is compared (issue 22); copied without
    it, nothing can be compared, so "could not judge" (a warning a CI gate sees), never
    "agree"."""
    import shutil

    from typer.testing import CliRunner

    from lrdoctor.cli import app

    src = Path(__file__).resolve().parents[2] / "sample_checkpoints" / "roll-overshoot"
    shutil.copytree(src, tmp_path / "run")
    ck = tmp_path / "run" / "actor_train" / "checkpoint-100"
    out = tmp_path / "fixed"  # as scripts/demo.py writes it: outside the run folder
    res = CliRunner().invoke(app, ["fix", str(ck), "--out", str(out)])
    assert res.exit_code == 0, res.output
    (r,) = inspect_path(out)
    silent(r)
    assert r.state["derived"]["compared"]["other"].startswith("lrdoctor-fix.json")
    (out / "lrdoctor-fix.json").unlink()  # the repaired copy moved on its own
    (r,) = inspect_path(out)
    f = the(r, "LRD111")
    assert f.severity == Severity.WARNING
    assert "808" in f.message and "2,836" in f.message
    assert r.exit_code("warning") == 1
    res = CliRunner().invoke(app, ["inspect", str(out)])
    assert "trainer agree" not in res.output


def test_agree_names_the_two_counters_compared(tmp_path):
    from typer.testing import CliRunner

    from lrdoctor.cli import app

    res = CliRunner().invoke(app, ["inspect", str(_accum_loop(tmp_path, "updates"))])
    assert res.exit_code == 0, res.output
    line = next(ln for ln in res.output.splitlines() if ln.startswith("No findings"))
    assert "the scheduler and the trainer agree" in line
    assert "lr_sched.last_epoch" in line or "scheduler.last_epoch" in line
    assert "= 30" in line


# ------------------------------------------------------------ harm ahead

def test_roll_step_wise_floor_comes_before_the_planned_end(tmp_path):
    """ROLL issue 407: a step-wise env manager makes ~10 updates per pipeline step where
    the budget counted 6: from the first checkpoint, the pipeline step where the floor
    will come (20 x 6 / 10 = 12 of 20) is given."""
    from tests.helpers.factories import roll_run

    truth = roll_run(tmp_path / "out", pipeline_max_steps=20, nominal_per_step=6,
                     updates_per_step=lambda step: 10, save_at=(4,), style="linear")
    (r,) = inspect_path(truth.root / "actor_train" / "checkpoint-4")
    f = the(r, "LRD103")
    assert f.severity == Severity.ERROR
    harm = f.evidence["harm_ahead"]
    assert harm["floor_at_step"] == pytest.approx(12, abs=0.01)
    assert harm["planned_end"] == 20
    assert "of 20 planned" in f.message


def test_roll_nominal_rate_twin_is_silent(tmp_path):
    from tests.helpers.factories import roll_run

    truth = roll_run(tmp_path / "out", pipeline_max_steps=20, nominal_per_step=6,
                     save_at=(4,), style="linear")
    (r,) = inspect_path(truth.root / "actor_train" / "checkpoint-4")
    silent(r)


def _behind_loop(tmp_path: Path, every: int) -> Path:
    """A loop stepping its LinearLR only every ``every`` optimizer updates, with its budget
    saved: when every > 1 the decay can never finish by the planned end."""
    import torch
    from torch.optim.lr_scheduler import LinearLR

    m, opt = _model_opt()
    sched = LinearLR(opt, start_factor=1.0, end_factor=0.01, total_iters=60)
    for i in range(1, 21):
        _train(m, opt)
        if i % every == 0:
            sched.step()
    p = tmp_path / f"every{every}.pt"
    torch.save({"model": m.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "step": 20, "total_steps": 60}, p)
    return p


def test_scheduler_behind_that_never_finishes_is_an_error(tmp_path):
    (r,) = inspect_path(_behind_loop(tmp_path, 2))
    f = the(r, "LRD108")
    assert f.severity == Severity.ERROR
    harm = f.evidence["harm_ahead"]
    assert harm["floor_at_step"] == pytest.approx(120) and harm["planned_end"] == 60
    assert harm["decay_left_at_planned_end"] == pytest.approx(0.5, abs=0.01)


def test_scheduler_stepped_every_update_twin_is_silent(tmp_path):
    silent(inspect_path(_behind_loop(tmp_path, 1))[0])


def test_rampup_decay_unfinished_at_planned_end_is_an_error(tmp_path):
    """Megatron-Bridge 2609: the harm at the planned end is certain, so LRD118 is an error."""
    from tests.helpers.factories import megatron_run

    truth = megatron_run(tmp_path / "ck", rampup_batch_size=[4, 4, 96], train_iters=40,
                         save_at=(20,))
    (r,) = inspect_path(truth.root)
    assert the(r, "LRD118").severity == Severity.ERROR


def test_sample_based_rampup_healthy_run_is_silent(tmp_path):
    """Megatron-LM sample-based training with ``--rampup-batch-size`` (megatron-core's
    OptimizerParamScheduler and ramp-up calculator; ``train_iters`` computed as
    ``update_train_iters`` does): 48 iterations consume 628 samples along the ramp, not
    48 x the final global batch 16 = 768. With warmup 128, 768 - 128 = 640 = the horizon
    made a false "planned end minus the warmup" LRD119 (issue 27): 768 is no saved number."""
    from tests.helpers.factories import megatron_run

    truth = megatron_run(tmp_path / "ck", save_at=(10, 44), rampup_batch_size=[4, 4, 96],
                         train_iters=None, train_samples=640, lr_decay_samples=640,
                         lr_warmup_samples=128, update_train_iters=True)
    (r,) = inspect_path(truth.root)
    silent(r)
    assert r.state["planned_end"]["value"] == 628


# ------------------------------------------------------------ a horizon unset (-1)

def _verl_like(tmp_path: Path, horizon: int) -> Path:
    """verl issue 6683: the FSDP worker builds transformers' linear schedule with
    ``total_training_steps`` -1, so the LR is 0 from the first step. GENERALITY: the
    horizon is only in a YAML config beside the checkpoint (an OmegaConf dump, key path
    ``actor_rollout_ref.actor.optim.total_training_steps``); the LambdaLR saves none."""
    import torch
    from omegaconf import OmegaConf
    from transformers import get_linear_schedule_with_warmup

    m, opt = _model_opt(1e-6)
    sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=0,
                                            num_training_steps=horizon)
    for _ in range(5):
        _train(m, opt)
        sched.step()
    run = tmp_path / f"verl-{horizon}"
    ck = run / "global_step_5" / "actor"
    ck.mkdir(parents=True)
    torch.save(m.state_dict(), ck / "model_world_size_1_rank_0.pt")
    torch.save(opt.state_dict(), ck / "optim_world_size_1_rank_0.pt")
    torch.save({"lr_scheduler": sched.state_dict(), "rng": torch.get_rng_state()},
               ck / "extra_state_world_size_1_rank_0.pt")
    cfg = OmegaConf.create({"actor_rollout_ref": {"actor": {"optim": {
        "lr": 1e-6, "total_training_steps": horizon, "lr_warmup_steps": 0}}},
        "trainer": {"total_epochs": 1}})
    OmegaConf.save(cfg, run / "global_step_5" / "config.yaml")
    return ck


def test_horizon_unset_gives_lr_zero_error(tmp_path):
    (r,) = inspect_path(_verl_like(tmp_path, -1))
    f = the(r, "LRD120")
    assert f.severity == Severity.ERROR
    assert f.evidence["horizon"] == -1 and f.evidence["lr"] == 0.0
    assert f.evidence["peak_lr"] == pytest.approx(1e-6)
    assert "total_training_steps" in f.evidence["horizon_from"]


def test_horizon_set_twin_has_no_lrd120(tmp_path):
    (r,) = inspect_path(_verl_like(tmp_path, 100))
    assert not [f for f in r.findings if f.code == "LRD120"]
    assert not [f for f in r.findings if f.severity >= Severity.ERROR]


# ------------------------------------------------------------ the evidence model

def test_evidence_items_carry_unit_and_field_from_every_source(tmp_path):
    """Counters, horizons, LRs and factors from an optimizer, a scheduler, an argparse
    Namespace and an OmegaConf config inside the pickle, and a TOML config beside it."""
    import torch
    from omegaconf import OmegaConf
    from torch.optim.lr_scheduler import OneCycleLR

    m, opt = _model_opt()
    sched = OneCycleLR(opt, max_lr=1e-3, total_steps=50)
    for _ in range(7):
        _train(m, opt)
        sched.step()
    d = tmp_path / "ck"
    d.mkdir()
    torch.save({"model": m.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "tokens_seen": 7 * 4096,
                "args": argparse.Namespace(max_steps=50, gradient_accumulation_steps=2),
                "cfg": OmegaConf.create({"trainer": {"num_train_epochs": 3}})}, d / "state.pt")
    (d / "train.toml").write_text("[optim]\nwarmup_steps = 5\nworld_size = 8\n")
    st = read_state(d)
    got = {(e.role.value, e.quantity.value, e.where): e.value for e in st.evidence}
    assert got[("progress", "optimizer steps", "state.pt:optimizer.state[0].step")] == 7
    assert got[("progress", "scheduler calls", "state.pt:scheduler.last_epoch")] == 7
    assert got[("horizon", "scheduler calls", "state.pt:scheduler.total_steps")] == 50
    assert got[("progress", "tokens", "state.pt:tokens_seen")] == 7 * 4096
    assert got[("planned end", "iterations", "state.pt:args.max_steps")] == 50
    assert got[("factor", "micro-batches per update",
                "state.pt:args.gradient_accumulation_steps")] == 2
    assert got[("planned end", "epochs", "state.pt:cfg.trainer.num_train_epochs")] == 3
    assert got[("warmup", "scheduler calls", "train.toml:optim.warmup_steps")] == 5
    assert got[("factor", "processes", "train.toml:optim.world_size")] == 8
    assert ("lr", "lr", "state.pt:optimizer.param_groups[0].lr") in got
    doc = json.loads(json.dumps(st.to_dict()))
    assert any(e["ref"]["file"] == "train.toml" for e in doc["evidence"])


def test_megatron_decay_iters_total_minus_warmup_is_an_error(tmp_path):
    """Megatron-LM issue 2258 in Megatron-LM's own layout (samples): lr_decay_iters 36 =
    train_iters 40 - lr_warmup_iters 4, so the floor arrives at iteration 36 of 40."""
    from tests.helpers.factories import megatron_run

    truth = megatron_run(tmp_path / "ck", save_at=(10,), train_iters=40, lr_warmup_iters=4,
                         lr_decay_iters=36)
    (r,) = inspect_path(truth.root)
    f = the(r, "LRD119")
    assert f.severity == Severity.ERROR
    ev = f.evidence
    assert ev["hypothesis"]["hypothesis"] == "the planned end minus the warmup"
    assert (ev["horizon"], ev["floor_at_update"], ev["planned_end_updates"]) == (36 * 16, 36, 40)
    assert not [x for x in r.findings if x.code == "LRD102"]  # explained, not a chosen tail


def test_megatron_configured_tail_twin_stays_info(tmp_path):
    """lr_decay_iters 30 of 40 with warmup 4: no hypothesis predicts 30, so it stays the
    configured tail (LRD102, info)."""
    from tests.helpers.factories import megatron_run

    truth = megatron_run(tmp_path / "ck", save_at=(10,), train_iters=40, lr_warmup_iters=4,
                         lr_decay_iters=30)
    (r,) = inspect_path(truth.root)
    silent(r)
    assert [f.code for f in r.findings] == ["LRD102"]


# ------------------------------------------------------------ objects registered for checkpointing

class _Progress:
    """The loop's own progress and plan, registered with accelerate for checkpointing."""

    def __init__(self, max_train_steps: int, epochs: int):
        self.completed_steps, self.max_train_steps, self.epochs = 0, max_train_steps, epochs

    def state_dict(self) -> dict:
        return {"completed_steps": self.completed_steps,
                "max_train_steps": self.max_train_steps, "num_train_epochs": self.epochs}

    def load_state_dict(self, sd: dict) -> None:
        self.__dict__.update(sd)


def _accelerate_run(tmp_path: Path, horizon_in: str) -> Path:
    """accelerate with gradient accumulation 4 and a LinearLR sized from the dataloader:
    ``len(train_dataloader) * epochs`` counts micro-batches (the bug) where
    ``max_train_steps`` counts updates (the twin). GENERALITY: the planned end lives only in
    an object registered with ``Accelerator.register_for_checkpointing``
    (``custom_checkpoint_0.pkl``), which no reader reads."""
    import torch
    from accelerate import Accelerator
    from torch.optim.lr_scheduler import LinearLR
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    acc = Accelerator(gradient_accumulation_steps=4, cpu=True)
    data = DataLoader(TensorDataset(torch.randn(80, 4), torch.randn(80, 1)), batch_size=2)
    epochs, ga = 2, 4
    max_train_steps = epochs * math.ceil(len(data) / ga)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    total = len(data) * epochs if horizon_in == "micro-batches" else max_train_steps
    sched = LinearLR(opt, start_factor=1.0, end_factor=0.0, total_iters=total)
    model, opt, data, sched = acc.prepare(model, opt, data, sched)
    progress = _Progress(max_train_steps, epochs)
    acc.register_for_checkpointing(progress)
    for x, y in data:  # one epoch of two
        with acc.accumulate(model):
            acc.backward(torch.nn.functional.mse_loss(model(x), y))
            opt.step()
            sched.step()
            opt.zero_grad()
        if acc.sync_gradients:
            progress.completed_steps += 1
    out = tmp_path / horizon_in / "checkpoint_0"
    acc.save_state(str(out))
    return out


def test_accelerate_horizon_in_micro_batches_with_plan_in_a_registered_object(tmp_path):
    ck = _accelerate_run(tmp_path, "micro-batches")
    (r,) = inspect_path(ck)
    f = the(r, "LRD119")
    # accelerate saves no accumulation count: the whole multiple is named as such, and an
    # explanation that needs a number no file holds is a warning naming that number
    assert f.severity == Severity.WARNING
    assert "gradient accumulation or process count of 4" in f.message
    ev = f.evidence
    assert (ev["horizon"], ev["planned_end_updates"]) == (80, 20)
    assert "custom_checkpoint_0.pkl" in ev["planned_end_from"]
    assert ev["hypothesis"]["predicts"] == 80 and "4 times smaller" in ev["hypothesis"][
        "hypothesis"]
    assert ev["hypothesis"]["missing"] == "a saved gradient accumulation or process count of 4"
    assert ev["decay_done_at_planned_end"] == pytest.approx(0.25)


def test_accelerate_horizon_in_updates_twin_is_silent(tmp_path):
    (r,) = inspect_path(_accelerate_run(tmp_path, "updates"))
    silent(r)
    assert r.state["derived"]["compared"]["agree"] is True


@pytest.mark.parametrize("calls_per_update", [2, 1])
def test_a_horizon_equal_to_the_planned_end_makes_the_update_count_nominal(tmp_path,
                                                                          calls_per_update):
    """Generality (a layout no reader was written for): a LinearLR in one file, the loop's
    own ``progress`` record in another (``updates_done``, ``max_updates``), no nominal
    counter any reader knows. The horizon 200 equals the planned end 200 updates, so the
    schedule was sized for one call per update: stepped twice per update it is LRD103 at
    2x with both files named; stepped once, the twin is silent."""
    import torch

    m, opt = _model_opt(3e-4)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.0,
                                              total_iters=200)
    for _ in range(40):
        _train(m, opt)
        for _ in range(calls_per_update):
            sched.step()
    ck = tmp_path / "ck"
    ck.mkdir()
    torch.save({"lr_sched": sched.state_dict()}, ck / "sched.pt")
    torch.save({"progress": {"updates_done": 40, "max_updates": 200}}, ck / "trainer.pt")
    (report,) = inspect_path(ck)
    if calls_per_update == 1:
        silent(report)
        return
    f = the(report, "LRD103")
    assert f.severity is Severity.ERROR
    assert "= 80 is 2x" in f.message and "updates_done" in f.message
    assert "max_updates" in f.message


@pytest.mark.parametrize("calls_per_update", [2, 1])
def test_the_same_loop_as_a_dcp_folder_is_judged_from_its_bytes_items(tmp_path,
                                                                      calls_per_update):
    """Generality (torch.distributed.checkpoint, a layout the evidence model was written
    without): the loop above saved with ``dcp.save`` under its own keys. The bytes items
    the DCP reader decoded (``trainer.updates_done``, ``trainer.max_updates``) are evidence
    too: LRD103 at 2x naming them; the twin stepped once per update is silent."""
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp

    m, opt = _model_opt(3e-4)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.0,
                                              total_iters=200)
    for _ in range(40):
        _train(m, opt)
        for _ in range(calls_per_update):
            sched.step()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled": one process
        dcp.save({"weights": m.state_dict(),
                  "trainer": {"lr_sched": sched.state_dict(), "updates_done": 40,
                              "max_updates": 200}},
                 checkpoint_id=str(tmp_path / "step_40"))
    (report,) = inspect_path(tmp_path / "step_40")
    if calls_per_update == 1:
        silent(report)
        return
    f = the(report, "LRD103")
    assert f.severity is Severity.ERROR
    assert "= 80 is 2x" in f.message and "trainer.updates_done" in f.message
