"""Stateless schedules rebuilt and placed by the saved LR (issue 19, item 3): a timm
scheduler saves no position, so `lr == f(k * step)` gives k. Fixtures are written by
timm's own scheduler classes in hand-written torch loops (tests/helpers/pkgsrc.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.inspect_api import inspect_path
from tests.helpers.pkgsrc import load

pytestmark = pytest.mark.frameworks


def _timm(mod: str, cls: str):
    return getattr(load(f"timm.scheduler.{mod}"), cls)


def _loop(path: Path, *, per_update: bool = True, ga: int = 1, bug_micro: bool = False,
          updates: int = 12, epochs: int = 0, iters: int = 5, save=None, cls=("cosine_lr",
          "CosineLRScheduler"), **kw) -> dict:
    """AdamW + a timm scheduler, stepped the way timm's train.py does (``step_update``
    after each optimizer update with the update count, or ``step(epoch + 1)`` at the end
    of each epoch), or with the bug: ``step_update`` on every micro-batch."""
    import torch

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = _timm(*cls)(opt, t_in_epochs=not per_update, **kw)
    num_updates = micro = 0
    n_epochs = epochs or 1
    per_epoch = iters if epochs else updates
    for epoch in range(n_epochs):
        for _ in range(per_epoch):
            for _m in range(ga):
                model(torch.randn(2, 4)).pow(2).mean().backward()
                micro += 1
                if bug_micro:
                    sched.step_update(num_updates=micro)
            opt.step()
            opt.zero_grad()
            num_updates += 1
            if per_update and not bug_micro:
                sched.step_update(num_updates=num_updates)
        if not per_update:
            sched.step(epoch + 1)
    body = {"model": model.state_dict(), "optimizer": opt.state_dict(),
            "lr_scheduler": sched.state_dict(), "epoch": n_epochs - 1, "step": num_updates}
    if save is not None:
        body = save(body)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(body, path)
    return {"lr": opt.param_groups[0]["lr"], "updates": num_updates}


def _loud(rep):
    return [f for f in rep.findings if f.severity >= Severity.WARNING]


def test_timm_cosine_stepped_per_micro_batch_gives_k(tmp_path):
    truth = _loop(tmp_path / "bug.pt", ga=4, bug_micro=True, updates=5, t_initial=40,
                  warmup_t=0)
    (rep,) = inspect_path(tmp_path / "bug.pt")
    (f,) = [x for x in rep.findings if x.code == "LRD133"]
    assert f.severity is Severity.ERROR
    assert f.evidence["k"] == 4 and f.evidence["counter"] == "optimizer.step"
    assert f.evidence["counter_value"] == 5 and f.evidence["lr"] == truth["lr"]
    assert f.evidence["positions"] == ((20, 20),)
    assert "lr == f(4 x 5)" in f.message


def test_timm_cosine_per_update_healthy_twin_is_silent(tmp_path):
    _loop(tmp_path / "ok.pt", ga=4, updates=5, t_initial=40, warmup_t=2, warmup_lr_init=1e-5)
    (rep,) = inspect_path(tmp_path / "ok.pt")
    assert _loud(rep) == [], rep.findings
    assert rep.state["stateless"].startswith("timm CosineLRScheduler state")


def test_timm_epoch_schedule_healthy_and_stepped_by_updates(tmp_path):
    """t_in_epochs: timm's train.py calls step(epoch + 1) and saves the epoch index: silent.
    The bug twin passes the update count as the epoch (step(num_updates)): 5x too fast."""
    _loop(tmp_path / "ok.pt", per_update=False, epochs=4, iters=5, t_initial=30)
    (rep,) = inspect_path(tmp_path / "ok.pt")
    assert _loud(rep) == [], rep.findings

    def as_updates(body):  # what a loop that passed num_updates to step() leaves behind
        return body

    import torch

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = _timm("cosine_lr", "CosineLRScheduler")(opt, t_initial=30, t_in_epochs=True)
    n = 0
    for epoch in range(4):
        for _ in range(5):
            opt.step()
            n += 1
        sched.step(n)  # the bug: the update count where timm wants the epoch
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                "epoch": epoch}, tmp_path / "bug.pt")
    (rep,) = inspect_path(tmp_path / "bug.pt")
    (f,) = [x for x in rep.findings if x.code == "LRD133"]
    assert f.severity is Severity.ERROR and f.evidence["k"] == 5
    assert f.evidence["counter"] == "loop.epoch" and f.evidence["counter_value"] == 3


@pytest.mark.parametrize("cls,kw", [
    (("step_lr", "StepLRScheduler"), dict(decay_t=7, decay_rate=0.5)),
    (("poly_lr", "PolyLRScheduler"), dict(t_initial=50, power=2.0)),
    (("wsd_lr", "WSDLRScheduler"), dict(t_initial=30, decay_t=10, decay_fn="linear")),
])
def test_other_timm_kinds_healthy_and_buggy(tmp_path, cls, kw):
    _loop(tmp_path / "ok.pt", cls=cls, updates=9, **kw)
    (rep,) = inspect_path(tmp_path / "ok.pt")
    assert _loud(rep) == [], rep.findings
    _loop(tmp_path / "bug.pt", cls=cls, updates=9, ga=3, bug_micro=True, **kw)
    (rep,) = inspect_path(tmp_path / "bug.pt")
    (f,) = [x for x in rep.findings if x.code == "LRD133"]
    assert f.severity is Severity.ERROR and f.evidence["k"] == 3


def test_timm_in_a_nested_checkpoint_of_another_layout(tmp_path):
    """Generality: the timm state nested two levels down inside a Composer-like
    ``{"state": {"schedulers": {...}}}`` dict with its counter under ``timestamp`` -- a
    layout the finder was not written against (it was written for a flat loop dict)."""
    def nest(body):
        return {"state": {"optimizers": {"AdamW": body["optimizer"]},
                          "schedulers": {"CosineLRScheduler": body["lr_scheduler"]},
                          "timestamp": {"batch": body["step"]}}, "rng": []}

    _loop(tmp_path / "ep0-ba10-rank0.pt", ga=2, bug_micro=True, updates=10, t_initial=100,
          save=nest)
    (rep,) = inspect_path(tmp_path / "ep0-ba10-rank0.pt")
    (f,) = [x for x in rep.findings if x.code == "LRD133"]
    assert f.evidence["k"] == 2 and f.evidence["counter_value"] == 10


def _timm_train_py(path: Path, *, per_iteration_bug: bool, epochs_done: int = 3,
                   iters: int = 4, **over) -> float:
    """timm's train.py as it runs: args -> ``create_scheduler_v2(opt, **scheduler_kwargs(args))``
    (timm's own factory), ``lr_scheduler.step(epoch + 1)`` at each epoch's end, and
    ``CheckpointSaver``'s dict (epoch, arch, state_dict, optimizer, version, args, metric):
    no scheduler state is saved. The bug steps it with the update count per iteration."""
    import argparse

    import torch

    factory = load("timm.scheduler.scheduler_factory")
    args = argparse.Namespace(**{"sched": "cosine", "epochs": 30, "warmup_epochs": 2,
                                 "warmup_lr": 1e-5, "min_lr": 1e-6, "lr": 1e-3,
                                 "sched_on_updates": False, "decay_epochs": 10,
                                 "decay_rate": 0.5, **over})
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    sched, _ = factory.create_scheduler_v2(opt, **factory.scheduler_kwargs(args))
    n = 0
    for epoch in range(epochs_done):
        for _ in range(iters):
            model(torch.randn(2, 4)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            n += 1
            if per_iteration_bug:
                sched.step(n)
        if not per_iteration_bug:
            sched.step(epoch + 1)
    torch.save({"epoch": epoch, "arch": "linear", "state_dict": model.state_dict(),
                "optimizer": opt.state_dict(), "version": 2, "args": args, "metric": 0.5},
               path)
    return opt.param_groups[0]["lr"]


@pytest.mark.parametrize("sched", ["cosine", "step"])
def test_timm_train_py_checkpoint_rebuilt_from_its_args(tmp_path, sched):
    """Generality: the schedule is not saved at all, only timm train.py's ``args``
    Namespace inside the pickle (a layout the state-dict finder was not written for)."""
    _timm_train_py(tmp_path / "ok.pth.tar", per_iteration_bug=False, sched=sched)
    (rep,) = inspect_path(tmp_path / "ok.pth.tar")
    assert _loud(rep) == [], rep.findings
    assert rep.state["schedule"]["source"].endswith("(timm create_scheduler)")
    _timm_train_py(tmp_path / "bug.pth.tar", per_iteration_bug=True, sched=sched,
                   epochs_done=3, iters=4)
    (rep,) = inspect_path(tmp_path / "bug.pth.tar")
    (f,) = [x for x in rep.findings if x.code == "LRD133"]
    assert f.severity is Severity.ERROR and f.evidence["counter"] == "loop.epoch"
    if sched == "cosine":  # f(12) after 3 epochs of 4 iterations: epoch index 2, k = 4
        assert f.evidence["k"] == 4 and f.evidence["positions"] == ((12, 12),)
