"""Severity a CI gate can trust (issue 19, item 6): a truncated file the checkpoint needs
is an error, a path with no training state is exit 2, FSDP2's DTensor records are read
(never "corrupt"), and a scheduler stepped with fractional epochs the way torch's docs
show is healthy. Every fixture is written by torch's own code."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.findings import Severity
from lrdoctor.inspect_api import inspect_path
from lrdoctor.schedules import lr_at
from tests.helpers.factories import free_port, torch_loop

pytestmark = pytest.mark.frameworks


def _cli(*args) -> subprocess.CompletedProcess:
    env = {**os.environ, "COLUMNS": "120"}
    return subprocess.run([sys.executable, "-m", "lrdoctor", *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=120)


def _split_loop(d: Path, steps: int = 6) -> None:
    """A loop that saves optimizer.pt and scheduler.pt side by side (HF-like, no trainer)."""
    import torch

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)
    for i in range(steps):
        model(torch.randn(2, 4, generator=torch.Generator().manual_seed(i))).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    d.mkdir(parents=True)
    torch.save(opt.state_dict(), d / "optimizer.pt")
    torch.save(sched.state_dict(), d / "scheduler.pt")


def _truncate(f: Path) -> None:
    data = f.read_bytes()
    f.write_bytes(data[: len(data) // 2])


def test_half_written_scheduler_beside_good_optimizer_is_an_error(tmp_path):
    _split_loop(tmp_path / "bad")
    _truncate(tmp_path / "bad" / "scheduler.pt")
    (rep,) = inspect_path(tmp_path / "bad")
    f = next(x for x in rep.findings if x.code == "LRD130")
    assert f.severity is Severity.ERROR
    assert f.evidence["file"] == str(tmp_path / "bad" / "scheduler.pt")
    assert "truncated or corrupt" in f.evidence["why"]
    assert list(f.evidence["read"]) == [str(tmp_path / "bad" / "optimizer.pt")]
    p = _cli("inspect", tmp_path / "bad")
    assert p.returncode == 1, p.stdout + p.stderr
    assert "LRD130" in p.stdout


def test_healthy_twin_of_the_split_loop_is_silent(tmp_path):
    _split_loop(tmp_path / "ok")
    (rep,) = inspect_path(tmp_path / "ok")
    assert not [f for f in rep.findings if f.severity >= Severity.WARNING], rep.findings
    assert _cli("inspect", tmp_path / "ok").returncode == 0


def test_truncated_rank_file_of_a_torch_loop_dict_is_an_error(tmp_path):
    """Generality: a one-dict torch.save loop checkpoint (tests.helpers.factories.torch_loop)
    with a second, truncated rank file beside it, a layout LRD130 was not written against
    (it was written for HF-style split optimizer.pt/scheduler.pt)."""
    truth = torch_loop(tmp_path / "run" / "rank0.pt", scheduler="linear", updates=6)
    good = truth.saves[0].path
    (tmp_path / "run" / "rank1.pt").write_bytes(good.read_bytes()[:300])
    (rep,) = inspect_path(tmp_path / "run")
    bad = [f for f in rep.findings if f.code == "LRD130"]
    assert [f.evidence["file"] for f in bad] == [str(tmp_path / "run" / "rank1.pt")]
    assert bad[0].severity is Severity.ERROR


@pytest.mark.parametrize("what", ["dict", "weights"])
def test_no_training_state_is_unusable_like_an_empty_folder(tmp_path, what):
    import torch

    f = tmp_path / "x.pt"
    torch.save({"a": 1} if what == "dict" else torch.nn.Linear(3, 2).state_dict(), f)
    with pytest.raises(UnusableInput, match="no training state here"):
        inspect_path(f)
    p = _cli("inspect", f)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "x.pt" in lines[0], p.stderr
    assert ("keys [a]" if what == "dict" else "weights only") in lines[0]
    empty = tmp_path / "empty"
    empty.mkdir()
    assert _cli("inspect", empty).returncode == 2


def _fsdp2_checkpoint(d: Path) -> None:
    """FSDP2 (fully_shard) on a CPU gloo world of 1: the model and Adam moments are
    DTensors, saved both with torch.save and with torch.distributed.checkpoint."""
    code = f"""
import os, torch, torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="{free_port()}")
dist.init_process_group("gloo", rank=0, world_size=1)
mesh = init_device_mesh("cpu", (1,))
m = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))
fully_shard(m, mesh=mesh)
opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
sch = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.1, total_iters=10)
for _ in range(4):
    m(torch.randn(2, 4)).sum().backward(); opt.step(); opt.zero_grad(); sch.step()
from torch.distributed.tensor import DTensor
assert isinstance(next(iter(opt.state.values()))["exp_avg"], DTensor)
state = {{"model": m.state_dict(), "optimizer": opt.state_dict(),
          "scheduler": sch.state_dict(), "step": 4}}
torch.save(state, {str(d / "ckpt.pt")!r})
dcp.save(state, checkpoint_id={str(d / "dcp")!r})
dist.destroy_process_group()
"""
    d.mkdir()
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_fsdp2_dtensor_records_are_read_not_called_corrupt(tmp_path):
    """The DTensor record reader was written for torch.save pickles; generality: the same
    FSDP2 state saved by torch.distributed.checkpoint (a DCP folder, another layout) reads
    the same verdict."""
    from lrdoctor.read.bytes import safeload

    _fsdp2_checkpoint(tmp_path / "f")
    obj = safeload.load(tmp_path / "f" / "ckpt.pt")
    moment = obj["optimizer"]["state"][0]["exp_avg"]
    assert isinstance(moment, safeload.TensorRef) and moment.shape == (4, 4)
    assert moment.storage_key  # the local shard's bytes, not metadata alone
    for target in ("ckpt.pt", "dcp"):
        (rep,) = inspect_path(tmp_path / "f" / target)
        st = rep.state
        assert st["scheduler_progress"]["value"] == 4
        assert {c["name"]: c["value"] for c in st["counters"]}["optimizer.step"] == 4
        assert st["nominal_progress"]["name"] == "optimizer.step"
        assert not [f for f in rep.findings if f.severity >= Severity.WARNING], rep.findings
        assert "corrupt" not in " ".join(st["notes"])


def test_fractional_epoch_warm_restarts_as_torch_docs_show_is_silent(tmp_path):
    """torch's CosineAnnealingWarmRestarts docs: ``scheduler.step(epoch + i / iters)``."""
    import torch

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=10, T_mult=2)
    iters = 20
    for epoch in range(3):
        for i in range(iters):
            opt.step()
            sched.step(epoch + i / iters)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "epoch": 3, "step": 3 * iters},
               tmp_path / "ckpt.pt")
    (rep,) = inspect_path(tmp_path / "ckpt.pt")
    assert not [f for f in rep.findings if f.severity >= Severity.WARNING], rep.findings
    st = rep.state
    assert st["scheduler_progress"]["value"] == pytest.approx(2.95)
    assert st["scheduler_progress"]["unit"] == "epochs"
    assert st["nominal_progress"]["name"] == "loop.epoch"
    # The LR was compared (not skipped): the schedule rebuilt at 2.95 epochs is the saved LR.
    from lrdoctor.core.state import ScheduleSpec, Unit

    s = st["schedule"]
    spec = ScheduleSpec(s["family"], s["kind"], s["max_lr"], Unit.EPOCHS, min_lr=s["min_lr"],
                        params=s["params"])
    assert math.isclose(lr_at(spec, 2.95), opt.param_groups[0]["lr"], rel_tol=1e-12)


def test_fractional_epoch_warm_restarts_run_is_one_schedule(tmp_path):
    """torch (a hand-written loop, CosineAnnealingWarmRestarts(T_0=2, T_mult=2) stepped with
    ``step(epoch + i / iters)``), one checkpoint per epoch: ``T_cur`` and ``T_i`` move with
    the position (a restart every 2, 4 epochs), so consecutive checkpoints hold the same
    schedule. The run is silent (it was LRD114 "schedule parameter T_cur changed")."""
    import torch

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=2, T_mult=2,
                                                                 eta_min=1e-5)
    iters = 11
    for epoch in range(5):
        for i in range(iters):
            opt.step()
            sched.step(epoch + i / iters)
        torch.save({"epoch": epoch + 1, "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict()}, tmp_path / f"checkpoint_epoch{epoch + 1}.pth")
    reports = inspect_path(tmp_path, all=True)
    assert len(reports) == 5
    for rep in reports:
        assert not [f for f in rep.findings if f.severity >= Severity.WARNING], rep.findings
    assert "T_cur" not in reports[-1].state["schedule"]["params"]


def _sequential_loop(path: Path, warm: int, t_max: int, steps: int) -> float:
    """torch: SequentialLR([LambdaLR linear warmup, CosineAnnealingLR], milestones=[warm])
    stepped once per AdamW step for ``steps`` steps, saved with the loop's config."""
    import warnings

    import torch
    from torch.optim.lr_scheduler import CosineAnnealingLR, LambdaLR, SequentialLR

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = SequentialLR(opt, [LambdaLR(opt, lambda s: (s + 1) / warm),
                                   CosineAnnealingLR(opt, T_max=t_max)], milestones=[warm])
        for _ in range(steps):
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            sched.step()
    path.mkdir(parents=True)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "epoch": 10,
                "config": {"epochs": 10, "warmup_steps": warm, "max_steps": steps}},
               path / "ckpt.pt")
    return float(opt.param_groups[0]["lr"])


def test_sequential_lambda_warmup_then_cosine_healthy_is_silent(tmp_path):
    """Issue 27: SequentialLR([LambdaLR warmup 2, CosineAnnealingLR T_max 17], milestones=[2])
    at optimizer step 19 = 2 + 17 is healthy. The cosine child's own T_max (17, counted from
    its milestone) is not the schedule's horizon (19); no factor 17 is invented."""
    _sequential_loop(tmp_path / "run", 2, 17, 19)
    (rep,) = inspect_path(tmp_path / "run")
    assert not [f for f in rep.findings if f.severity >= Severity.WARNING], rep.findings
    assert rep.state["schedule"]["horizon"] == 19


def test_warmup_longer_than_the_run_is_named(tmp_path):
    """Issue 27: T_max = 20 - 100 = -80 (warmup 100 in a 20-step run). The error names the
    warmup 100 and the 20 steps, not "the saved LR is 0" (the LR is 2e-4, warming up)."""
    lr = _sequential_loop(tmp_path / "run", 100, 20 - 100, 20)
    assert lr > 0
    (rep,) = inspect_path(tmp_path / "run")
    codes = {f.code for f in rep.findings if f.severity >= Severity.WARNING}
    assert codes == {"LRD106"}, rep.findings
    (f,) = [f for f in rep.findings if f.code == "LRD106"]
    assert "milestone 100" in f.message and "sized for 20 steps" in f.message
    assert "saved LR is 0" not in f.message


def test_fractional_epoch_bug_twin_is_not_hidden(tmp_path):
    """The same scheduler stepped with the *update* count as its epoch (step(global_step))
    runs 20x too fast: the epoch comparison must not excuse it."""
    import torch

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(opt, T_0=10, T_mult=2)
    step = 0
    for _epoch in range(3):
        for i in range(20):
            opt.step()
            step += 1
            sched.step(step + i / 1000)
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "epoch": 3},
               tmp_path / "ckpt.pt")
    (rep,) = inspect_path(tmp_path / "ckpt.pt")
    assert [f for f in rep.findings if f.severity >= Severity.WARNING], rep.findings


@pytest.mark.parametrize("t_mult", [1, 2, 3])
def test_warm_restarts_matches_torch_per_call_and_per_epoch(t_mult):
    import torch

    from lrdoctor.core.state import ScheduleSpec, Unit

    def make():
        opt = torch.optim.SGD(torch.nn.Linear(2, 1).parameters(), lr=0.3)
        return opt, torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(
            opt, T_0=4, T_mult=t_mult, eta_min=0.01)

    opt, sched = make()
    spec = ScheduleSpec("torch", "CosineAnnealingWarmRestarts", 0.3, Unit.UPDATES, min_lr=0.01,
                        params={"T_0": 4, "T_mult": t_mult, "eta_min": 0.01})
    for k in range(1, 60):
        sched.step()
        assert math.isclose(lr_at(spec, k), opt.param_groups[0]["lr"], rel_tol=1e-12), k
    opt, sched = make()
    for e in [0.25, 3.5, 4.0, 7.75, 12.1, 27.3, 40.0]:
        sched.step(e)
        assert math.isclose(lr_at(spec, e), opt.param_groups[0]["lr"], rel_tol=1e-12), e
