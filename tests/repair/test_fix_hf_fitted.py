"""The exact LR from a schedule fitted to log_history under the k the finding found
(issue 20), resumed with the real transformers Trainer.

An accelerate-style HF checkpoint whose scheduler is stepped 4x per update (three extra
calls in the optimizer-step hook, then the Trainer's own), with no training_args.bin: the
Trainer logs the LR between them, so log_history holds lambda(4 x step - 1). The fit
must try that position; the fixed copy is then resumed with ``trainer.train(
resume_from_checkpoint=...)`` and every update after it uses the healthy run's LR.
"""

from __future__ import annotations

import math

import pytest

from lrdoctor.repair import plan_fix, write_fix

pytestmark = pytest.mark.filterwarnings("ignore")


def _callbacks():
    from transformers import TrainerCallback

    class ThreeMoreFirst(TrainerCallback):
        """What a 4-process AcceleratedScheduler does, three of them before the log."""

        def on_optimizer_step(self, args, state, control, lr_scheduler=None, **kw):
            for _ in range(3):
                lr_scheduler.step()

    class UsedLR(TrainerCallback):
        def __init__(self):
            self.lrs: dict[int, float] = {}

        def on_optimizer_step(self, args, state, control, optimizer=None, **kw):
            self.lrs[state.global_step + 1] = optimizer.param_groups[0]["lr"]

    return ThreeMoreFirst, UsedLR


def test_fitted_log_at_k_step_minus_one_gives_the_exact_lr_on_a_real_resume(tmp_path):
    from tests.helpers.factories import hf_run

    three, used = _callbacks()
    healthy_lrs = used()
    kw = dict(max_steps=24, save_steps=8, scheduler="linear", warmup_steps=2)
    hf_run(tmp_path / "ok", save_state=False, callbacks=[healthy_lrs], **kw)
    bad = hf_run(tmp_path / "bad", save_state=False, callbacks=[three(), used()], **kw)
    ck = bad.root / "checkpoint-8"
    (ck / "training_args.bin").unlink()  # an accelerate script saves none

    plan = plan_fix(ck)
    spec = plan.state.schedule
    assert spec is not None
    assert "lambda(4 x step - 1)" in spec.source, spec.source
    assert plan.target.policy == "rescale" and plan.target.k == 4
    from lrdoctor.core.fieldref import FieldRef  # the field the repair edits, named by the reader

    assert plan.state.scheduler_progress.ref == FieldRef(str(ck / "scheduler.pt"), ("last_epoch",))
    assert ("last_epoch",) in {c.key for c in plan.changes if c.file == "scheduler.pt"}
    assert math.isclose(plan.target.lr, healthy_lrs.lrs[9], rel_tol=1e-9)
    out = tmp_path / "fixed"
    res = write_fix(plan, out)
    assert res.verified

    resumed = used()
    hf_run(tmp_path / "resumed", save_state=False, callbacks=[resumed],
           resume_from=str(out), **kw)
    assert sorted(resumed.lrs) == list(range(9, 25))
    for step, lr in resumed.lrs.items():
        assert math.isclose(lr, healthy_lrs.lrs[step], rel_tol=1e-9, abs_tol=1e-15), step
