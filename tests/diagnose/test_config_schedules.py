"""Schedules rebuilt from the config saved beside the checkpoint (issue 27, part B).

torchtune saves no scheduler state: its recipe rebuilds the LambdaLR from the config
(``torchtune_config.yaml``, ``lr_scheduler._component_``) with ``num_training_steps =
total_epochs x steps_per_epoch``, a number saved nowhere that the counters give (the
optimizer's step / ``epochs_run``). The schedule is torchtune's own
``get_cosine_schedule_with_warmup`` (tests/helpers/pkgsrc.py), stepped in the loop of its
``full_finetune_single_device`` recipe; ``recipe_state.pt`` carries the keys of
torchtune's checkpointing constants.

GENERALITY (a framework neither the corpus nor the layout registry names): a Hydra-style
config (``_target_: transformers.get_linear_schedule_with_warmup``, OmegaConf) beside a
hand-written loop's ``torch.save`` checkpoint, whose LR was computed from an iteration
counter that counts micro-batches.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.inspect_api import inspect_path
from tests.helpers.pkgsrc import load
from tests.helpers.verdicts import silent, the

pytestmark = pytest.mark.frameworks


def _torchtune():
    """torchtune's lr_schedulers, checkpoint key constants and metric loggers, its own
    files."""
    import logging

    sched = load("torchtune.training.lr_schedulers", stubs={
        "torchtune.training.memory": {"OptimizerInBackwardWrapper": type(
            "OptimizerInBackwardWrapper", (), {})}})
    keys = load("torchtune.training.checkpointing._utils", stubs={
        "torchtune.utils._logging": {"get_logger": logging.getLogger}})
    loggers = load("torchtune.training.metric_logging", stubs={
        "torchtune.utils": {"get_logger": logging.getLogger,
                            "get_world_size_and_rank": lambda: (1, 0)}})
    return sched, keys, loggers


def _torchtune_run(out: Path, *, per_micro: bool, ga: int = 3, batches: int = 12,
                   epochs: int = 3, epochs_done: int = 2) -> dict:
    """The recipe's train loop (``(idx + 1) % GA == 0``: optimizer.step, then
    lr_scheduler.step()), the planted bug stepping the scheduler per micro-batch; the
    config as ``DiskLogger.log_config`` writes it (OmegaConf.save) and the intermediate
    ``recipe_state/recipe_state.pt`` of ``save_checkpoint`` after ``epochs_done`` epochs."""
    import torch
    from omegaconf import OmegaConf

    tt, keys, loggers = _torchtune()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    steps_per_epoch = batches // ga
    sched = tt.get_cosine_schedule_with_warmup(opt, num_warmup_steps=3,
                                               num_training_steps=epochs * steps_per_epoch)
    cfg = OmegaConf.create({
        "output_dir": str(out),
        "optimizer": {"_component_": "torch.optim.AdamW", "lr": 2e-3},
        "lr_scheduler": {"_component_":
                         "torchtune.training.lr_schedulers.get_cosine_schedule_with_warmup",
                         "num_warmup_steps": 3},
        "epochs": epochs, "max_steps_per_epoch": None, "gradient_accumulation_steps": ga,
        "batch_size": 2})
    out.mkdir(parents=True)
    metric_logger = loggers.DiskLogger(log_dir=str(out / "logs"))
    metric_logger.log_config(cfg)  # writes output_dir/torchtune_config.yaml
    step = 0
    for epoch in range(epochs_done):
        for idx in range(batches):
            (model(torch.randn(2, 4)).pow(2).mean() / ga).backward()
            if per_micro:
                sched.step()
            if (idx + 1) % ga == 0:
                opt.step()
                opt.zero_grad(set_to_none=True)
                if not per_micro:
                    sched.step()
                step += 1
                metric_logger.log_dict({"loss": 0.5, "lr": opt.param_groups[0]["lr"]}, step=step)
        (out / f"epoch_{epoch}").mkdir()
        torch.save(model.state_dict(), out / f"epoch_{epoch}" / "model-00001-of-00001.bin")
    (out / "recipe_state").mkdir()
    torch.save({keys.SEED_KEY: 0, keys.EPOCHS_KEY: epochs_done, keys.TOTAL_EPOCHS_KEY: epochs,
                keys.MAX_STEPS_KEY: None, keys.OPT_KEY: opt.state_dict()},
               out / "recipe_state" / "recipe_state.pt")
    return {"steps": epochs_done * steps_per_epoch, "horizon": epochs * steps_per_epoch,
            "lr": opt.param_groups[0]["lr"]}


def test_torchtune_schedule_from_its_config_and_the_saved_lr(tmp_path):
    """Per-micro-batch stepping under GA 3: the saved LR is the cosine at 3 x the
    optimizer's step, and 3 is the config's gradient_accumulation_steps: an error naming
    it; the horizon 12 = total_epochs 3 x (step 8 / epochs_run 2), said with its fields."""
    bug = _torchtune_run(tmp_path / "bug", per_micro=True)
    (rep,) = inspect_path(tmp_path / "bug")
    spec = rep.state["schedule"]
    assert (spec["family"], spec["kind"], spec["warmup"], spec["horizon"]) == \
        ("hf", "cosine", 3, bug["horizon"]) == ("hf", "cosine", 3, 12)
    assert "total_epochs 3 x steps per epoch 4 = optimizer step 8" in spec["source"]
    assert "/ epochs_run 2 (" in spec["source"] and "recipe_state.pt:epochs_run)" in spec["source"]
    f = the(rep, "LRD133")
    assert f.severity is Severity.ERROR
    assert (f.evidence["counter_value"], f.evidence["k"]) == (8, 3)
    assert f.evidence["named_by"] == ("torchtune_config.yaml:gradient_accumulation_steps",)
    assert f.evidence["lr"] == pytest.approx(bug["lr"], rel=1e-12)
    assert not [x for x in rep.findings if x.code in ("LRD111", "LRD115")]
    # the DiskLogger's lr column is a second witness: every logged LR is f(3 x its step)
    assert (f.evidence["logged_points"], f.evidence["logged_at_k"]) == (8, 8)
    assert "8 of the 8 LRs logged in logs/log_" in f.message


def test_torchtune_recipe_as_written_is_silent(tmp_path):
    ok = _torchtune_run(tmp_path / "ok", per_micro=False)
    (rep,) = inspect_path(tmp_path / "ok")
    silent(rep)
    assert rep.state["stateless"].startswith("torchtune rebuilds its LR scheduler")
    assert rep.state["schedule"]["horizon"] == ok["horizon"] == 12


def _hydra_loop(out: Path, *, lr_from: str, ga: int = 4, updates: int = 6) -> dict:
    """A hand-written loop configured by a Hydra-style YAML (``_target_`` = transformers'
    builder, which the loop calls with the config's values) that sets the LR itself from a
    counter each micro-batch, as nanoGPT-style loops do: ``lr_from`` "iter" (the bug:
    ``iter_num`` counts micro-batches) or "update" (the optimizer's updates)."""
    import torch
    from omegaconf import OmegaConf
    from transformers import get_linear_schedule_with_warmup

    cfg = OmegaConf.create({
        "optimizer": {"_target_": "torch.optim.AdamW", "lr": 1e-3},
        "scheduler": {"_target_": "transformers.get_linear_schedule_with_warmup",
                      "num_warmup_steps": 2, "num_training_steps": 40},
        "train": {"micro_batches_per_step": ga}})
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.optimizer.lr)
    sched = get_linear_schedule_with_warmup(opt, **{k: v for k, v in cfg.scheduler.items()
                                                    if k != "_target_"})
    lam = sched.lr_lambdas[0]
    iter_num = update = 0
    for _ in range(updates * ga):
        iter_num += 1
        for g in opt.param_groups:
            g["lr"] = cfg.optimizer.lr * lam(iter_num if lr_from == "iter" else update + 1)
        (model(torch.randn(2, 4)).pow(2).mean() / ga).backward()
        if iter_num % ga == 0:
            opt.step()
            opt.zero_grad()
            update += 1
    out.mkdir(parents=True)
    OmegaConf.save(cfg, out / "config.yaml")
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "iter_num": iter_num}, out / "ckpt.pt")
    return {"iter_num": iter_num, "updates": update, "lr": opt.param_groups[0]["lr"]}


def test_lr_computed_from_a_micro_batch_counter_is_named_by_that_counter(tmp_path):
    """Both counters saved (iter_num 24 micro-batches, AdamW step 6): the LR is the
    config's schedule at iter_num, not at the optimizer's step. The LR is the witness:
    an error naming iter_num and its field."""
    bug = _hydra_loop(tmp_path / "bug", lr_from="iter")
    (rep,) = inspect_path(tmp_path / "bug" / "ckpt.pt")
    assert rep.state["schedule"]["source"].startswith("config.yaml:scheduler (hf linear")
    f = the(rep, "LRD133")
    assert f.severity is Severity.ERROR
    assert f.evidence["counter"] == "optimizer.step" and f.evidence["counter_value"] == 6
    assert f.evidence["k"] == 4 == bug["iter_num"] / bug["updates"]
    (named,) = f.evidence["named_by"]
    assert named == "iter_num (ckpt.pt:iter_num)"
    assert "is the schedule at iter_num = 24 iterations (ckpt.pt:iter_num), 4x 6" in f.message


def test_lr_computed_from_the_update_count_twin_is_silent(tmp_path):
    _hydra_loop(tmp_path / "ok", lr_from="update")
    (rep,) = inspect_path(tmp_path / "ok" / "ckpt.pt")
    silent(rep)
    assert rep.state["stateless"].startswith("the scheduler was built from the config")


def test_a_config_builder_that_is_not_modelled_is_named_never_guessed(tmp_path):
    """A Hydra-style ``lr_scheduler._target_`` naming the project's own builder: nothing to
    rebuild, so no placement is claimed; a note names the builder and LRD111 warns."""
    import torch
    from omegaconf import OmegaConf

    from tests.helpers.verdicts import tiny_adamw, train

    model, opt = tiny_adamw()
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda n: 1 / (n + 1))
    train(model, opt, 3)
    sched.step()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 3},
               tmp_path / "ckpt.pt")
    OmegaConf.save(OmegaConf.create({"lr_scheduler": {"_target_": "mylib.sched.rsqrt",
                                                      "warmup": 3}}), tmp_path / "config.yaml")
    (rep,) = inspect_path(tmp_path / "ckpt.pt")
    assert rep.state["schedule"] is None and rep.state["stateless"] is None
    assert any(n.startswith("config.yaml:lr_scheduler builds the schedule with mylib.sched.rsqrt")
               for n in rep.state["notes"])
    assert the(rep, "LRD111").severity is Severity.WARNING
    assert not [f for f in rep.findings if f.severity is Severity.ERROR]
