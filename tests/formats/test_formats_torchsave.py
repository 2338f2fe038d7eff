"""torch.save loop reader against real torch optimizers and LR schedulers."""

from __future__ import annotations

import math

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.state import Unit
from lrdoctor.read.layouts import torchsave
from lrdoctor.schedules import lr_at
from tests.helpers.factories import torch_loop
from tests.helpers.paths import REPO

KINDS = {"linear": "LinearLR", "cosine": "CosineAnnealingLR", "onecycle": "OneCycleLR",
         "sequential": "SequentialLR"}


@pytest.mark.parametrize("sched", list(KINDS))
def test_read_matches_live_scheduler(sched, tmp_path):
    truth = torch_loop(tmp_path / "ckpt.pt", scheduler=sched, updates=10)
    saved = truth.last
    st = torchsave.read(saved.path)
    assert st.schedule.family == "torch" and st.schedule.kind == KINDS[sched]
    assert st.extras["scheduler_class"] == truth.meta["class"] == KINDS[sched]
    assert st.scheduler_progress.value == saved.scheduler["last_epoch"] == 10
    assert st.scheduler_progress.unit is Unit.UPDATES
    assert st.counter("optimizer.step").value == saved.optimizer_step == 10
    assert st.nominal_progress.value == 10
    assert st.counter("loop.step").value == 10
    assert st.optimizer_lrs == saved.lrs
    assert (st.planned_end.name, st.planned_end.value) == ("loop.total_steps", truth.meta["horizon"])
    assert st.trainer_progress.name == "loop.step"
    # The rebuilt schedule gives the LR the live optimizer holds.
    got = lr_at(st.schedule, st.scheduler_progress.value)
    assert math.isclose(got, saved.lrs[0], rel_tol=1e-9), (got, saved.lrs[0])


def test_horizons(tmp_path):
    cos = torchsave.read(torch_loop(tmp_path / "a.pt", scheduler="cosine", updates=6,
                                    total_steps=20).last.path)
    assert cos.schedule.horizon == 20 and cos.schedule.min_lr == 1e-4
    lin = torchsave.read(torch_loop(tmp_path / "b.pt", scheduler="linear", updates=6,
                                    total_steps=30).last.path)
    assert lin.schedule.horizon == 30
    seq = torchsave.read(torch_loop(tmp_path / "c.pt", scheduler="sequential", updates=6,
                                    total_steps=25).last.path)
    assert seq.schedule.horizon == 25
    assert [c["kind"] for c in seq.schedule.params["_schedulers"]] == ["LinearLR",
                                                                        "CosineAnnealingLR"]


def test_scheduler_stepped_per_micro_batch(tmp_path):
    """GA=4 with scheduler.step() on every micro-batch: last_epoch = 4 x optimizer step."""
    truth = torch_loop(tmp_path / "bug.pt", scheduler="cosine", updates=9, ga=4,
                       step_per_micro=True)
    saved = truth.last
    st = torchsave.read(saved.path)
    assert st.scheduler_progress.value == saved.scheduler["last_epoch"] == 36
    assert st.counter("optimizer.step").value == saved.optimizer_step == 9
    assert st.nominal_progress.value == 9
    assert st.scheduler_progress.value / st.nominal_progress.value == 4
    assert st.counter("loop.micro_step") is None  # not saved by this loop


def test_lambda_is_unrecoverable(tmp_path):
    saved = torch_loop(tmp_path / "l.pt", scheduler="lambda", updates=5).last
    st = torchsave.read(saved.path)
    assert st.schedule is None
    assert st.scheduler_progress.value == 5
    assert st.extras["scheduler_class"] == "LambdaLR"
    assert any("LambdaLR" in n for n in st.notes)
    # The schedule is code, but calls vs updates is still compared (issue 9, item 4).
    assert st.nominal_progress.name == "optimizer.step" and st.nominal_progress.value == 5


@pytest.mark.parametrize("layout,step_key", [("nested", "loop.step"), ("names", "loop.global_step")])
def test_layouts(layout, step_key, tmp_path):
    saved = torch_loop(tmp_path / "x.pth", scheduler="cosine", updates=7, layout=layout).last
    st = torchsave.read(saved.path)
    assert st.scheduler_progress.value == 7
    assert st.counter(step_key).value == 7
    assert st.optimizer_lrs == saved.lrs
    assert st.schedule.kind == "CosineAnnealingLR"


def test_detect_and_find(tmp_path):
    for n in (3, 10, 1):
        torch_loop(tmp_path / "run" / f"ckpt_{n}.pt", scheduler="linear", updates=n,
                   save_total=False)
    run = tmp_path / "run"
    assert torchsave.detect(run) and torchsave.detect(run / "ckpt_1.pt")
    assert [p.name for p in torchsave.find_checkpoints(run)] == ["ckpt_1.pt", "ckpt_3.pt",
                                                                 "ckpt_10.pt"]
    st = torchsave.read(run)  # a directory: the newest
    assert st.scheduler_progress.value == 10
    assert st.planned_end is None and st.trainer_progress is None
    assert not torchsave.detect(tmp_path / "nothing.txt")


def test_unusable_inputs(tmp_path):
    import torch

    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(UnusableInput, match="bad.pt"):
        torchsave.read(bad)
    lst = tmp_path / "list.pt"
    torch.save([1, 2, 3], lst)
    with pytest.raises(UnusableInput, match="list.pt"):
        torchsave.read(lst)
    empty = tmp_path / "weights.pt"
    torch.save({"model": {"w": torch.zeros(2)}}, empty)
    # No training state at all: unusable input (exit 2), like an empty folder (issue 19).
    with pytest.raises(UnusableInput, match=r"weights.pt: no training state here .*weights only"):
        torchsave.read(empty)


SAMPLES = REPO / "sample_checkpoints"


def test_sample_torch_microstep_reads_as_documented():
    st = torchsave.read(SAMPLES / "torch-microstep")
    assert st.scheduler_progress.value == 240 and st.counter("optimizer.step").value == 60
    assert st.schedule.kind == "CosineAnnealingLR" and st.schedule.horizon == 100
    assert st.planned_end.value == 100


@pytest.mark.parametrize("module,sample", [("megatron", "megatron-healthy"),
                                           ("roll", "roll-overshoot"),
                                           ("hf", "hf-healthy"),
                                           ("torchsave", "torch-microstep")])
def test_read_path_imports_no_heavy_modules(module, sample):
    """detect/find/read must not import torch (the inspect path stays fast and safe)."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom pathlib import Path\n"
        f"from lrdoctor.read.layouts import {module} as M\n"
        f"p = Path({str(SAMPLES / sample)!r})\n"
        "assert M.detect(p)\nM.find_checkpoints(p)\nst = M.read(p)\n"
        "assert st.scheduler_progress is not None\n"
        "print(sorted(m for m in ('torch', 'pandas', 'matplotlib', 'numpy') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
