"""Stateless schedules rebuilt and placed by the saved LR (issue 19, item 3): a timm
scheduler saves no position, so `lr == f(k * step)` gives k. Fixtures are written by
timm's own scheduler classes in hand-written torch loops (tests/helpers/pkgsrc.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.inspect_api import inspect_path
from tests.helpers.pkgsrc import load
from tests.helpers.verdicts import silent, the

pytestmark = pytest.mark.frameworks


def _timm(mod: str, cls: str):
    return getattr(load(f"timm.scheduler.{mod}"), cls)


def _loop(path: Path, *, per_update: bool = True, ga: int = 1, bug_micro: bool = False,
          updates: int = 12, epochs: int = 0, iters: int = 5, save=None, cls=("cosine_lr",
          "CosineLRScheduler"), save_ga: bool = True, **kw) -> dict:
    """AdamW + a timm scheduler, stepped the way timm's train.py does (``step_update``
    after each optimizer update with the update count, or ``step(epoch + 1)`` at the end
    of each epoch), or with the bug: ``step_update`` on every micro-batch. ``save_ga``:
    the loop saves its accumulation count (``args.grad_accum_steps``, as timm's does)."""
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
    if save_ga and ga > 1:
        body["args"] = {"grad_accum_steps": ga}
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
    assert "is f(4 x 5), and 4 is saved: grad_accum_steps = 4 (bug.pt:args.grad_accum_steps)" \
        in f.message
    assert f.evidence["named_by"] == ("bug.pt:args.grad_accum_steps",)


def test_timm_k_that_no_saved_number_names_is_a_warning_naming_it(tmp_path):
    """The same bug with no accumulation count saved: k = 4 fits the LR, but no file says 4,
    so it is a warning that names the number that would confirm it (never an error)."""
    _loop(tmp_path / "bug.pt", ga=4, bug_micro=True, updates=5, t_initial=40, warmup_t=0,
          save_ga=False)
    (rep,) = inspect_path(tmp_path / "bug.pt")
    f = the(rep, "LRD133")
    assert f.severity is Severity.WARNING and f.evidence["k"] == 4
    assert "no saved number names 4 (a gradient-accumulation count or process count of 4" \
        in f.message


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
            model(torch.randn(2, 4)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            n += 1
        sched.step(n)  # the bug: the update count where timm wants the epoch
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                "epoch": epoch}, tmp_path / "bug.pt")
    (rep,) = inspect_path(tmp_path / "bug.pt")
    (f,) = [x for x in rep.findings if x.code == "LRD133"]
    assert f.severity is Severity.ERROR and f.evidence["k"] == 5
    assert f.evidence["counter"] == "loop.epoch" and f.evidence["counter_value"] == 3
    # the LR is the schedule at the saved optimizer step 20: that counter names the 5
    (named,) = f.evidence["named_by"]
    assert named.startswith("step (") and named.endswith("bug.pt:optimizer.state[0].step)")


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
                   iters: int = 4, opt_name: str = "sgd", **over) -> float:
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
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9) if opt_name == "sgd" \
        else torch.optim.AdamW(model.parameters(), lr=args.lr)
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


@pytest.mark.parametrize("opt_name", ["sgd", "adamw"])
@pytest.mark.parametrize("sched", ["cosine", "step"])
def test_timm_train_py_checkpoint_rebuilt_from_its_args(tmp_path, sched, opt_name):
    """Generality: the schedule is not saved at all, only timm train.py's ``args``
    Namespace inside the pickle (a layout the state-dict finder was not written for).
    With AdamW the saved optimizer step (12) is where the LR puts the schedule: an error
    naming it. SGD saves no step, and nothing saved says 4 iterations per epoch: a
    warning that names the missing number (issue 27: severity by entailment)."""
    _timm_train_py(tmp_path / "ok.pth.tar", per_iteration_bug=False, sched=sched,
                   opt_name=opt_name)
    (rep,) = inspect_path(tmp_path / "ok.pth.tar")
    assert _loud(rep) == [], rep.findings
    assert rep.state["schedule"]["source"].endswith("(timm create_scheduler)")
    _timm_train_py(tmp_path / "bug.pth.tar", per_iteration_bug=True, sched=sched,
                   epochs_done=3, iters=4, opt_name=opt_name)
    (rep,) = inspect_path(tmp_path / "bug.pth.tar")
    (f,) = [x for x in rep.findings if x.code == "LRD133"]
    assert f.evidence["counter"] == "loop.epoch"
    if opt_name == "adamw":
        assert f.severity is Severity.ERROR
        assert f.evidence["named_by"][0].endswith("bug.pth.tar:optimizer.state[0].step)")
    else:
        assert f.severity is Severity.WARNING and f.evidence["named_by"] == ()
        assert "no saved number names 4" in f.message
    if sched == "cosine":  # f(12) after 3 epochs of 4 iterations: epoch index 2, k = 4
        assert f.evidence["k"] == 4 and f.evidence["positions"] == ((12, 12),)


def _timm_on_updates(path: Path, *, bug_micro: bool, ga: int = 3, batches: int = 12,
                     epochs_done: int = 2, save_ga: bool = True) -> dict:
    """timm train.py with ``--sched-on-updates``: ``create_scheduler_v2(...,
    updates_per_epoch=ceil(len(loader) / ga))`` (timm's own factory), ``step_update``
    after each update with ``num_updates`` (or, the bug, on every micro-batch), and
    CheckpointSaver's dict (epoch index, version 2, args): no scheduler state, and the
    updates per epoch saved nowhere."""
    import argparse

    import torch

    factory = load("timm.scheduler.scheduler_factory")
    args = argparse.Namespace(sched="cosine", epochs=8, warmup_epochs=1, warmup_lr=1e-5,
                              min_lr=1e-5, lr=1e-3, sched_on_updates=True, lr_cycle_decay=0.5,
                              **({"grad_accum_steps": ga} if save_ga else {}))
    upe = (batches + ga - 1) // ga
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    sched, _ = factory.create_scheduler_v2(opt, **factory.scheduler_kwargs(args),
                                           updates_per_epoch=upe)
    micro = 0
    for epoch in range(epochs_done):
        num_updates = epoch * upe
        for i in range(batches):
            model(torch.randn(2, 4)).pow(2).mean().backward()
            micro += 1
            if i == batches - 1 or (i + 1) % ga == 0:
                opt.step()
                opt.zero_grad()
                num_updates += 1
                if not bug_micro:
                    sched.step_update(num_updates=num_updates)
            if bug_micro:
                sched.step_update(num_updates=micro)
        sched.step(epoch + 1)  # a no-op for a schedule stepped on updates
    torch.save({"epoch": epoch, "arch": "linear", "state_dict": model.state_dict(),
                "optimizer": opt.state_dict(), "version": 2, "args": args, "metric": 0.5},
               path)
    return {"lr": opt.param_groups[0]["lr"], "updates": epochs_done * upe, "micro": micro,
            "upe": upe}


def test_timm_sched_on_updates_rebuilt_with_updates_per_epoch_from_the_counters(tmp_path):
    """timm ``--sched-on-updates``: every length is epochs x updates per epoch, a number timm
    saves nowhere. The optimizer's step over the completed epochs (epoch index + 1, as
    ``resume_checkpoint`` reads version 2) gives it, said with its provenance; the saved LR
    then places the schedule. Per-micro-batch stepping with ``args.grad_accum_steps`` 3
    saved is an error naming both; the healthy loop is silent."""
    ok = _timm_on_updates(tmp_path / "ok.pth.tar", bug_micro=False)
    (rep,) = inspect_path(tmp_path / "ok.pth.tar")
    silent(rep)
    sched = rep.state["schedule"]
    assert sched["unit"] == "optimizer updates" and sched["horizon"] == 8 * ok["upe"] == 32
    assert "updates per epoch = optimizer step 8" in sched["source"]
    assert "/ 2 completed epochs (epoch 1 + 1, timm checkpoint version 2)" in sched["source"]

    bug = _timm_on_updates(tmp_path / "bug.pth.tar", bug_micro=True)
    (rep,) = inspect_path(tmp_path / "bug.pth.tar")
    f = the(rep, "LRD133")
    assert f.severity is Severity.ERROR
    assert (f.evidence["counter_value"], f.evidence["k"]) == (bug["updates"], 3)
    assert f.evidence["positions"][0][0] <= bug["micro"] == 24 <= f.evidence["positions"][0][1]
    assert f.evidence["named_by"] == ("bug.pth.tar:args.grad_accum_steps",)


def test_timm_sched_on_updates_with_updates_per_epoch_not_whole_is_not_judged(tmp_path):
    """The counters cannot give a whole number of updates per epoch (a resumed run with
    another loader, or a partial epoch): the schedule is not rebuilt, and the finding says
    which number is missing, never a guess."""
    import torch

    _timm_on_updates(tmp_path / "a.pth.tar", bug_micro=False)
    body = torch.load(tmp_path / "a.pth.tar", weights_only=False)
    body["epoch"] = 2  # 8 updates over 3 completed epochs
    torch.save(body, tmp_path / "b.pth.tar")
    (rep,) = inspect_path(tmp_path / "b.pth.tar")
    assert rep.state["schedule"] is None
    assert any("updates per epoch are not saved" in n and "over 3 completed epochs is not a "
               "whole number" in n for n in rep.state["notes"])
    assert any(f.severity >= Severity.WARNING for f in rep.findings)


def _timm_resumed_run(d: Path, *, reset: bool, ga: int = 2, batches: int = 8,
                      epochs: int = 4, resume_at: int = 2) -> list[float]:
    """A timm train.py run with ``--sched-on-updates`` pre-empted after ``resume_at``
    epochs and resumed: the scheduler is built again by timm's own factory (timm saves none)
    and the optimizer state restored; ``reset``: the bug, ``num_updates`` restarts at 0
    instead of ``start_epoch * updates_per_epoch``. CheckpointSaver's files
    ``checkpoint-E.pth.tar``; returns each checkpoint's LR."""
    import argparse

    import torch

    factory = load("timm.scheduler.scheduler_factory")
    args = argparse.Namespace(sched="cosine", epochs=6, warmup_epochs=1, warmup_lr=1e-5,
                              min_lr=1e-5, lr=1e-3, sched_on_updates=True, grad_accum_steps=ga)
    upe = batches // ga
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr)
    lrs = []
    for start, stop in ((0, resume_at), (resume_at, epochs)):
        if start:  # resume: the optimizer restored from the checkpoint, a fresh scheduler
            opt.load_state_dict(torch.load(d / f"checkpoint-{start - 1}.pth.tar",
                                           weights_only=False)["optimizer"])
        sched, _ = factory.create_scheduler_v2(opt, **factory.scheduler_kwargs(args),
                                               updates_per_epoch=upe)
        if start:
            sched.step_update(start * upe)
        num_updates = 0
        for epoch in range(start, stop):
            if not reset:
                num_updates = epoch * upe
            for i in range(batches):
                model(torch.randn(2, 4)).pow(2).mean().backward()
                if (i + 1) % ga == 0:
                    opt.step()
                    opt.zero_grad()
                    num_updates += 1
                    sched.step_update(num_updates=num_updates)
            torch.save({"epoch": epoch, "arch": "linear", "state_dict": model.state_dict(),
                        "optimizer": opt.state_dict(), "version": 2, "args": args,
                        "metric": 0.5}, d / f"checkpoint-{epoch}.pth.tar")
            lrs.append(opt.param_groups[0]["lr"])
    return lrs


def test_timm_num_updates_restarted_on_resume_is_lrd112_with_the_numbers(tmp_path):
    """Run level (issue 27): after the resume the saved LR is the schedule at step - 8,
    where 8 is checkpoint-1's saved optimizer step; checkpoint-3 repeats checkpoint-1's LR.
    One LRD112 error naming the steps, the LR and the resumed-from checkpoint."""
    from lrdoctor.inspect_api import inspect_path as inspect

    (tmp_path / "bug").mkdir()
    lrs = _timm_resumed_run(tmp_path / "bug", reset=True)
    assert lrs[3] == pytest.approx(lrs[1], rel=1e-12)
    reps = inspect(tmp_path / "bug", all=True)
    (f,) = [x for r in reps for x in r.findings if x.code == "LRD112"]
    assert f.severity is Severity.ERROR
    assert f.evidence["resumed_from"].endswith("checkpoint-1.pth.tar")
    assert f.evidence["to_checkpoint"].endswith("checkpoint-3.pth.tar")
    assert (f.evidence["updates"]["from"], f.evidence["updates"]["to"]) == (8, 16)
    assert f.evidence["scheduler"]["to"] == 8
    assert "at update 8 = 16 - 8, not at 16" in f.message
    assert "checkpoint-3.pth.tar's LR" in f.message and "is checkpoint-1.pth.tar's LR" in f.message

    (tmp_path / "ok").mkdir()
    _timm_resumed_run(tmp_path / "ok", reset=False)
    for r in inspect(tmp_path / "ok", all=True):
        silent(r)
