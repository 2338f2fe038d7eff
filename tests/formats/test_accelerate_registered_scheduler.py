"""accelerate: a scheduler not passed to ``prepare`` but registered with
``Accelerator.register_for_checkpointing`` (issue 27). ``save_state`` writes it as
``custom_checkpoint_0.pkl``; it is the scheduler, read by its content, so there is no false
"saves no scheduler state". Written by accelerate's own ``Accelerator`` (in process, CPU),
with transformers' ``get_linear_schedule_with_warmup`` as the scheduler."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.inspect_api import inspect_path
from tests.helpers.verdicts import the

pytestmark = pytest.mark.frameworks


def _run(tmp_path: Path, per_micro: bool) -> tuple[Path, int, int]:
    """The loop of the accelerate docs with accumulation 4; the scheduler is registered, not
    prepared, and stepped either under ``if accelerator.sync_gradients`` (healthy) or on
    every micro-batch (an unprepared scheduler does not skip non-sync steps: the bug)."""
    import torch
    from accelerate import Accelerator
    from torch.utils.data import DataLoader, TensorDataset
    from transformers import get_linear_schedule_with_warmup

    torch.manual_seed(0)
    acc = Accelerator(gradient_accumulation_steps=4, cpu=True)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=2)
    total = math.ceil(len(data) / 4)  # one epoch: 4 updates
    sched = get_linear_schedule_with_warmup(opt, num_warmup_steps=1, num_training_steps=total)
    model, opt, data = acc.prepare(model, opt, data)
    acc.register_for_checkpointing(sched)
    for x, y in data:
        with acc.accumulate(model):
            acc.backward(torch.nn.functional.mse_loss(model(x), y))
            opt.step()
            opt.zero_grad()
            if per_micro or acc.sync_gradients:
                sched.step()
    out = tmp_path / ("micro" if per_micro else "update") / "step_4"
    acc.save_state(str(out))
    steps = max(int(float(s["step"])) for s in opt.optimizer.state.values())
    return out, steps, sched.last_epoch


def test_registered_scheduler_stepped_per_micro_batch_is_k_times_fast(tmp_path):
    out, steps, last_epoch = _run(tmp_path, per_micro=True)
    assert (out / "custom_checkpoint_0.pkl").is_file() and not (out / "scheduler.bin").exists()
    (rep,) = inspect_path(out)
    f = the(rep, "LRD103")
    assert f.severity is Severity.ERROR
    assert (last_epoch, steps) == (16, 4)
    assert f.evidence["k"] == 4
    assert rep.state["scheduler_progress"]["value"] == 16
    assert rep.state["scheduler_progress"]["source"].endswith("custom_checkpoint_0.pkl:last_epoch")
    assert not [x for x in rep.findings if x.code == "LRD115"]  # not "saves no scheduler state"


def test_registered_scheduler_stepped_per_update_twin_has_no_error(tmp_path):
    """The twin: no error. Its lambda is code and accelerate saves no budget, so the one
    warning is LRD111 saying the horizon could not be checked (never "healthy")."""
    out, steps, last_epoch = _run(tmp_path, per_micro=False)
    (rep,) = inspect_path(out)
    assert [(f.code, f.severity) for f in rep.findings if f.severity >= Severity.WARNING] == \
        [("LRD111", Severity.WARNING)]
    assert "whether the decay ends where training ends could not be checked" in \
        the(rep, "LRD111").message
    assert last_epoch == steps == rep.state["scheduler_progress"]["value"] == 4
    assert any("register_for_checkpointing" in n for n in rep.state["notes"])


def test_fix_rewrites_the_registered_scheduler_file(tmp_path):
    """``lrdoctor fix`` repairs the registered scheduler where it lies
    (custom_checkpoint_0.pkl), and the copy is read back on schedule."""
    import torch

    from lrdoctor import plan_fix, write_fix

    out, steps, _ = _run(tmp_path, per_micro=True)
    plan = plan_fix(out)
    write_fix(plan, tmp_path / "fixed")
    sd = torch.load(tmp_path / "fixed" / "custom_checkpoint_0.pkl", weights_only=False)
    assert sd["last_epoch"] == steps == 4
    assert any("register_for_checkpointing" in n for n in plan.notes)
    (rep,) = inspect_path(tmp_path / "fixed")
    assert not [f for f in rep.findings if f.severity is Severity.ERROR]
