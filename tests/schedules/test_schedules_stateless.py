"""The stateless scheduler families (timm, torchtitan, torchtune) against the frameworks'
own code, to 1e-12 relative. See tests/helpers/pkgsrc.py for how the scheduler files are
loaded where the package's other dependencies have no CPU wheel."""

from __future__ import annotations

import dataclasses
import math

import pytest

from lrdoctor.core.state import ScheduleSpec, Unit
from lrdoctor.schedules import floor_progress, lr_at, problems
from lrdoctor.schedules import timm as timm_family
from lrdoctor.schedules import torchtitan as titan_family
from tests.helpers.pkgsrc import load

pytestmark = pytest.mark.frameworks


def _opt(lr=1e-3):
    import torch

    return torch.optim.AdamW(torch.nn.Linear(2, 1).parameters(), lr=lr)


TIMM = {
    "cosine": ("cosine_lr", "CosineLRScheduler",
               dict(t_initial=20, lr_min=1e-5, warmup_t=3, warmup_lr_init=1e-6)),
    "cosine_prefix": ("cosine_lr", "CosineLRScheduler",
                      dict(t_initial=10, warmup_t=4, warmup_prefix=True, k_decay=1.5)),
    "cosine_cycles": ("cosine_lr", "CosineLRScheduler",
                      dict(t_initial=6, cycle_mul=2.0, cycle_decay=0.5, cycle_limit=3)),
    "poly": ("poly_lr", "PolyLRScheduler", dict(t_initial=15, power=0.9, lr_min=1e-6)),
    "step": ("step_lr", "StepLRScheduler", dict(decay_t=4, decay_rate=0.5, warmup_t=2)),
    "multistep": ("multistep_lr", "MultiStepLRScheduler",
                  dict(decay_t=[5, 9, 14], decay_rate=0.3, warmup_t=2)),
    "wsd_1sqrt": ("wsd_lr", "WSDLRScheduler", dict(t_initial=30, decay_t=8, warmup_t=3,
                                                   lr_min=1e-5)),
    "wsd_rsqrt_exp": ("wsd_lr", "WSDLRScheduler",
                      dict(t_initial=40, decay_t=10, warmup_t=4, stable_fn="rsqrt",
                           decay_fn="exp", decay_ratio=0.2)),
    "wsd_power_cos": ("wsd_lr", "WSDLRScheduler",
                      dict(t_initial=25, decay_t=25, warmup_t=0, stable_fn="power",
                           stable_timescale=5, stable_power=0.3, decay_fn="cosine")),
}


@pytest.mark.parametrize("name", sorted(TIMM))
def test_timm_family_matches_the_real_classes(name):
    mod, cls, kw = TIMM[name]
    real = getattr(load(f"timm.scheduler.{mod}"), cls)
    opt = _opt()
    sched = real(opt, t_in_epochs=False, **kw)
    sd = sched.state_dict()
    assert timm_family.kind_of(sd) == cls
    spec = ScheduleSpec("timm", cls, sd["base_values"][0], Unit.UPDATES, params=sd)
    assert problems(spec) == []
    for t in range(0, 60):
        sched.step_update(t)
        assert math.isclose(lr_at(spec, t), opt.param_groups[0]["lr"], rel_tol=1e-12,
                            abs_tol=1e-18), (name, t)
    if "t_initial" in kw:
        assert floor_progress(spec) == sched.get_cycle_length()


@pytest.mark.parametrize("decay_ratio,decay_type,min_lr_factor,warmup",
                         [(None, "linear", 0.0, 2), (0.5, "cosine", 0.1, 3),
                          (0.3, "sqrt", 0.0, 0), (0.9, "linear", 0.2, 5), (None, "cosine", 0.0, 29)])
def test_torchtitan_family_matches_its_config_build(decay_ratio, decay_type, min_lr_factor,
                                                    warmup):
    import logging

    class Configurable:
        @dataclasses.dataclass(kw_only=True, slots=True)
        class Config:
            pass

    src = load("torchtitan.components.optimizer.lr_scheduler", stubs={
        "torchtitan.config": {"Configurable": Configurable},
        "torchtitan.tools.logging": {"logger": logging.getLogger("titan")},
        "torchtitan.components.optimizer.optimizer": {"OptimizersContainer": list},
    })
    opt = _opt(3e-4)
    total = 30
    container = src.LRSchedulersContainer.Config(
        warmup_steps=warmup, decay_ratio=decay_ratio, decay_type=decay_type,
        min_lr_factor=min_lr_factor).build(optimizers=[opt], training_steps=total)
    params = titan_family.build_params(total, warmup, decay_ratio, min_lr_factor)
    spec = ScheduleSpec("torchtitan", decay_type, 3e-4, Unit.UPDATES, horizon=total,
                        params=params)
    assert math.isclose(lr_at(spec, 0), opt.param_groups[0]["lr"], rel_tol=1e-12)
    for k in range(1, total + 3):
        opt.step()
        container.step()
        assert container.state_dict() == {"last_epoch": k}
        assert math.isclose(lr_at(spec, k), opt.param_groups[0]["lr"], rel_tol=1e-12), k


def test_torchtune_cosine_is_the_hf_cosine():
    """torchtune's get_cosine_schedule_with_warmup is HF's cosine lambda (no min LR): the
    hf family rebuilds it exactly."""
    src = load("torchtune.training.lr_schedulers",
               stubs={"torchtune.training.memory": {"OptimizerInBackwardWrapper": type(
                   "OptimizerInBackwardWrapper", (), {})}})
    opt = _opt(2e-5)
    sched = src.get_cosine_schedule_with_warmup(opt, num_warmup_steps=5, num_training_steps=40)
    spec = ScheduleSpec("hf", "cosine", 2e-5, Unit.UPDATES, warmup=5, horizon=40,
                        params={"num_cycles": 0.5})
    for k in range(1, 45):
        opt.step()
        sched.step()
        assert math.isclose(lr_at(spec, k), opt.param_groups[0]["lr"], rel_tol=1e-12,
                            abs_tol=1e-20), k


def _titan_container(opt, total: int, **cfg):
    """torchtitan's own LRSchedulersContainer.Config(...).build, as the trainer calls it."""
    import logging

    class Configurable:
        @dataclasses.dataclass(kw_only=True, slots=True)
        class Config:
            pass

    src = load("torchtitan.components.optimizer.lr_scheduler", stubs={
        "torchtitan.config": {"Configurable": Configurable},
        "torchtitan.tools.logging": {"logger": logging.getLogger("titan")},
        "torchtitan.components.optimizer.optimizer": {"OptimizersContainer": list},
    })
    return src.LRSchedulersContainer.Config(**cfg).build(optimizers=[opt], training_steps=total)


def _titan_run(root, *, config_steps: int, run_steps: int = 20, done: int = 10):
    """A torchtitan-layout DCP checkpoint (checkpoint/step-N: flat optimizer, lr_scheduler
    = {"last_epoch"}, train_state) of a loop driven by torchtitan's own scheduler container
    over ``run_steps``, with a job config TOML in the dump folder saying ``config_steps``."""
    import warnings

    import torch
    import torch.distributed.checkpoint as tdcp

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = _titan_container(opt, run_steps, warmup_steps=2, decay_type="cosine",
                             min_lr_factor=0.1)
    for _ in range(done):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    names = {id(p): n for n, p in model.named_parameters()}
    osd = opt.state_dict()
    params = [p for g in opt.param_groups for p in g["params"]]
    flat = {f"state.{names[id(params[i])]}.{k}": v for i, s in osd["state"].items()
            for k, v in s.items()}
    for g, live in zip(osd["param_groups"], opt.param_groups, strict=True):
        for p in live["params"]:
            flat.update({f"param_groups.{names[id(p)]}.{k}": v for k, v in g.items()
                         if k != "params"})
    state = {**model.state_dict(), "optimizer": flat, "lr_scheduler": sched.state_dict(),
             "train_state": {"step": done, "ntokens_seen": done * 64}}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tdcp.save(state, checkpoint_id=str(root / "checkpoint" / f"step-{done}"))
    (root / "job_config.toml").write_text(
        "[optimizer]\nname = \"AdamW\"\nlr = 1e-3\n\n[lr_scheduler]\nwarmup_steps = 2\n"
        f"decay_type = \"cosine\"\nmin_lr_factor = 0.1\n\n[training]\nsteps = {config_steps}\n")
    return opt.param_groups[0]["lr"]


def test_torchtitan_schedule_rebuilt_from_the_job_config(tmp_path):
    from lrdoctor.core.findings import Severity
    from lrdoctor.inspect_api import inspect_path

    lr = _titan_run(tmp_path / "ok", config_steps=20)
    (rep,) = inspect_path(tmp_path / "ok")
    s = rep.state["schedule"]
    assert s["family"] == "torchtitan" and s["horizon"] == 20 and s["kind"] == "cosine"
    assert math.isclose(rep.state["optimizer_lrs"][0], lr, rel_tol=1e-12)
    assert not [f for f in rep.findings if f.severity >= Severity.WARNING], rep.findings
    # The job config beside the checkpoint was edited (40 steps) after the run saved: the
    # LR the run used is not what the config's schedule gives at last_epoch 10.
    _titan_run(tmp_path / "edited", config_steps=40)
    (rep,) = inspect_path(tmp_path / "edited")
    (f,) = [x for x in rep.findings if x.code == "LRD105"]
    assert math.isclose(f.evidence["optimizer_lrs"][0], lr, rel_tol=1e-12)
