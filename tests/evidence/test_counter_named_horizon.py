"""A horizon in another unit, named by a saved counter (issue 27, item "horizons in another
unit"): the horizon equals a counter of the loop (its micro-batch step, Composer's
``timestamp.batch``, Fabric/LitGPT's ``iter_num``) while the scheduler's counter equals
another one (the optimizer's step, ``global_steps``, ``timestamp.epoch``) a saved factor
fewer. Each bug has its healthy twin that differs only by the fix; each error names every
number with its field, each twin is silent at warning level.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.inspect_api import inspect_path
from tests.helpers.factories import run_deepspeed
from tests.helpers.verdicts import silent, the

pytestmark = pytest.mark.frameworks

# ---------------------------------------------------------------- DeepSpeed

DS_GEN = r'''
import sys, torch, deepspeed
deepspeed.init_distributed(dist_backend="gloo", verbose=False)
out = sys.argv[1]
for name, in_micro in (("micro", True), ("healthy", False)):
    torch.manual_seed(0)
    epochs, micro, ga, n = 2, 2, 4, 32
    data = torch.utils.data.TensorDataset(torch.randn(n, 4), torch.randn(n, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=micro)
    total = len(loader) * epochs if in_micro else len(loader) * epochs // ga
    cfg = {"train_micro_batch_size_per_gpu": micro, "gradient_accumulation_steps": ga,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
           "scheduler": {"type": "WarmupDecayLR", "params": {
               "warmup_min_lr": 0.0, "warmup_max_lr": 1e-3, "warmup_num_steps": 2,
               "total_num_steps": total}},
           "zero_optimization": {"stage": 0}, "steps_per_print": 10 ** 9}
    m = torch.nn.Linear(4, 1)
    engine, _, _, _ = deepspeed.initialize(model=m, model_parameters=m.parameters(), config=cfg)
    step = 0
    for epoch in range(epochs):
        for x, y in loader:
            engine.backward(torch.nn.functional.mse_loss(engine(x), y))
            engine.step()
            step += 1
    engine.save_checkpoint(f"{out}/{name}", client_state={
        "epoch": epochs, "step": step, "args": {"epochs": epochs, "lr": 1e-3}})
'''


@pytest.fixture(scope="module")
def ds_runs(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ds_counter_horizon")
    run_deepspeed(out, DS_GEN, str(out))
    return out


def test_deepspeed_total_num_steps_is_the_loops_micro_step(ds_runs):
    """DeepSpeed (its engine, WarmupDecayLR, save_checkpoint with a client_state): the
    DeepSpeedExamples way, ``total_num_steps = len(loader) * epochs`` counts micro-batches
    (32) while the engine steps the scheduler per update (``global_steps`` 8, GA 4). The
    loop's own ``step`` 32 in the client state names the unit."""
    (r,) = inspect_path(ds_runs / "micro")
    f = the(r, "LRD119")
    assert f.severity == Severity.ERROR
    ev = f.evidence
    assert (ev["horizon"], ev["counter_value"], ev["scheduler_value"], ev["k"]) == (32, 32, 8, 4)
    assert ev["horizon_from"].endswith("ds_config.scheduler.params.total_num_steps")
    assert ev["counter_from"].endswith(":step") and ev["follows"] == "global_steps"
    assert ev["k_from"].startswith("gradient_accumulation_steps = 4")
    assert ev["decay_done"] == pytest.approx(0.25)
    for n in ("32", "last_batch_iteration + 1 = 8", "25%", "at the planned end"):
        assert n in f.message


def test_deepspeed_total_num_steps_in_updates_twin_is_silent(ds_runs):
    (r,) = inspect_path(ds_runs / "healthy")
    silent(r)


# ---------------------------------------------------------------- Lightning Fabric

def _fabric_run(d: Path, total_in_micro: bool) -> Path:
    """Lightning Fabric (fabric.setup, no_backward_sync, fabric.save of LitGPT's state
    dict: model, optimizer, scheduler, iter_num, step_count, epoch, hparams) with a
    OneCycleLR stepped per optimizer step under accumulation 4."""
    import torch
    from lightning_fabric import Fabric

    torch.manual_seed(0)
    fabric = Fabric(accelerator="cpu", devices=1)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = torch.utils.data.TensorDataset(torch.randn(32, 4), torch.randn(32, 1))
    loader = torch.utils.data.DataLoader(data, batch_size=2)
    hp = {"epochs": 2, "grad_accum": 4, "max_lr": 3e-3}
    total = len(loader) * hp["epochs"] // (1 if total_in_micro else hp["grad_accum"])
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=hp["max_lr"], total_steps=total)
    model, opt = fabric.setup(model, opt)
    loader = fabric.setup_dataloaders(loader)
    state = {"model": model, "optimizer": opt, "scheduler": sched, "iter_num": 0,
             "step_count": 0, "epoch": 0, "hparams": hp}
    for epoch in range(hp["epochs"]):
        for x, y in loader:
            state["iter_num"] += 1
            accumulating = state["iter_num"] % hp["grad_accum"] != 0
            with fabric.no_backward_sync(model, enabled=accumulating):
                fabric.backward(torch.nn.functional.mse_loss(model(x), y) / hp["grad_accum"])
            if not accumulating:
                opt.step()
                opt.zero_grad()
                sched.step()
                state["step_count"] += 1
        state["epoch"] = epoch + 1
    path = d / f"step-{state['step_count']:06d}.ckpt"
    fabric.save(path, state)
    return path


def test_fabric_onecycle_total_steps_is_iter_num(tmp_path):
    f = the(inspect_path(_fabric_run(tmp_path, True))[0], "LRD119")
    assert f.severity == Severity.ERROR
    ev = f.evidence
    assert (ev["horizon"], ev["counter"], ev["counter_value"]) == (32, "iter_num", 32)
    assert (ev["scheduler_value"], ev["follows"], ev["k"]) == (8, "step_count", 4)
    assert "hparams.grad_accum" in ev["k_from"]
    assert "at the planned end (epoch = 2" in f.message and "hparams.epochs" in f.message


def test_fabric_onecycle_total_steps_in_updates_twin_is_silent(tmp_path):
    silent(inspect_path(_fabric_run(tmp_path, False))[0])


# ---------------------------------------------------------------- Composer

COMPOSER = Path(__file__).resolve().parent.parent / "data" / "composer_0_32"


def test_composer_torch_scheduler_stepped_per_epoch_with_t_max_in_batches():
    """Composer 0.32.1's own Trainer (checked-in files, tests/data/composer_0_32/
    make_fixtures.py): a torch CosineAnnealingLR(T_max = 5 epochs x 11 batches) given
    without ``step_schedulers_every_batch`` is stepped once per epoch."""
    f = the(inspect_path(COMPOSER / "per_epoch")[0], "LRD119")
    assert f.severity == Severity.ERROR
    ev = f.evidence
    assert (ev["horizon"], ev["counter"], ev["counter_value"]) == (55, "batch", 55)
    assert (ev["scheduler_value"], ev["follows"], ev["k"]) == (5, "epoch", 11)
    assert ev["horizon_from"].endswith("state.schedulers.CosineAnnealingLR.T_max")
    assert ev["follows_from"].endswith("timestamp.Timestamp.epoch")
    assert ev["lr_now"] / ev["lr_peak"] > 0.97


def test_composer_torch_scheduler_stepped_per_batch_twin_is_silent():
    silent(inspect_path(COMPOSER / "per_batch")[0])
