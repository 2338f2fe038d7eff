"""Run level (issue 27): a resume that changed the run's plan while the restored scheduler
kept its old horizon. torch's ``CosineAnnealingLR.load_state_dict`` brings back ``T_max``,
so a loop that raises ``max_steps`` on resume and restores the scheduler keeps decaying to
the old end; past ``T_max`` the cosine climbs back. Written by torch's own scheduler and
optimizer in a hand-written loop that saves its config in the checkpoint."""

from __future__ import annotations

from pathlib import Path

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.inspect_api import inspect_path
from tests.helpers.verdicts import silent, the


def _run(d: Path, *, max_steps_after: int, first: int = 10, then: int = 15,
         max_steps: int = 20) -> None:
    import torch

    d.mkdir(parents=True)
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max_steps)
    step = 0

    def train(n: int, plan: int) -> None:
        nonlocal step
        for _ in range(n):
            model(torch.randn(2, 4)).pow(2).mean().backward()
            opt.step()
            opt.zero_grad()
            sched.step()
            step += 1
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                    "scheduler": sched.state_dict(), "step": step,
                    "config": {"max_steps": plan}}, d / f"ckpt_{step}.pt")

    train(first, max_steps)
    # the resume: a scheduler built for the new plan, then its state restored (T_max too)
    saved = sched.state_dict()
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max_steps_after)
    sched.load_state_dict(saved)
    train(then, max_steps_after)


def test_max_steps_raised_on_resume_with_the_old_horizon_restored(tmp_path):
    _run(tmp_path / "bug", max_steps_after=40)
    (rep,) = inspect_path(tmp_path / "bug")
    f = the(rep, "LRD114")
    assert f.severity is Severity.ERROR
    ev = f.evidence
    assert (ev["restored_horizon"], ev["planned_end_now"]) == (20, 40)
    assert ev["lr_at_planned_end"] == pytest.approx(1e-3)  # the cosine is back at its peak
    assert "kept its horizon 20 (" in f.message and "scheduler.T_max" in f.message
    assert "its decay ends at 20 of the 40 now planned" in f.message
    assert "climbs back" in f.message and "100% of the peak" in f.message


def test_resume_with_the_same_plan_is_silent(tmp_path):
    _run(tmp_path / "ok", max_steps_after=20, then=10)
    for rep in inspect_path(tmp_path / "ok", all=True):
        silent(rep)
