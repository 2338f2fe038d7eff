"""``fix`` repairs what content-first discovery found (issue 9, item 7), in the format read.

The outputs are loaded back with torch (and megatron-core / torch schedulers) and
re-inspected; the input is never modified.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.diagnose import diagnose
from lrdoctor.inspect_api import read_state
from lrdoctor.repair import Refusal, plan_fix, write_fix
from tests.formats.test_discover import loose_folder, roll_bare
from tests.formats.test_formats_layouts import torchtune_ckpt, verl_run


def digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def loud(st) -> list[str]:
    return [f.code for f in diagnose(st) if f.severity >= Severity.WARNING]


def test_loose_folder_rescaled_in_its_own_files(tmp_path):
    import torch

    src = tmp_path / "ckpt"
    loose_folder(src, k=4)
    before = digest(src)
    plan = plan_fix(src)
    assert plan.target.policy == "rescale" and plan.target.progress == 25
    assert {c.file for c in plan.changes} == {"scheduler.pt"}
    out = tmp_path / "fixed"
    write_fix(plan, out)
    assert digest(src) == before  # the input is untouched
    sd = torch.load(out / "scheduler.pt", weights_only=True)
    assert sd["last_epoch"] == 25 and sd["_step_count"] == 26
    assert (out / "model.pt").is_file() and (out / "trainer.pt").is_file()
    assert loud(read_state(out)) == []


def test_roll_bare_extends_the_horizon_in_scheduler_pt(tmp_path):
    import torch

    from tests.helpers.factories import _quiet_megatron

    src = tmp_path / "actor_train" / "checkpoint-199"
    roll_bare(src, updates=8429)
    # ROLL saves no config: where training should end is unknown, so fix asks for it.
    with pytest.raises(Refusal, match="--progress"):
        plan_fix(src)
    plan = plan_fix(src, policy="nominal", progress=2400)
    out = tmp_path / "fixed"
    write_fix(plan, out)
    sd = torch.load(out / "scheduler.pt", weights_only=True)
    assert sd["num_steps"] == 2400 and sd["lr_decay_steps"] == 2400
    Sched = _quiet_megatron()  # megatron-core loads the repaired state
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=1e-5)
    s = Sched(opt, init_lr=0.0, max_lr=1e-5, min_lr=1e-6, lr_warmup_steps=10,
              lr_decay_steps=2400, lr_decay_style="cosine", start_wd=0.0, end_wd=0.0,
              wd_incr_steps=0, wd_incr_style="constant", use_checkpoint_opt_param_scheduler=True)
    s.load_state_dict(sd)
    assert s.num_steps == 2400


def test_verl_every_rank_file_is_rescaled(tmp_path):
    import torch

    run = verl_run(tmp_path / "ckpts", step=20, sched_per_update=True)
    plan = plan_fix(run)
    assert plan.target.policy == "rescale" and plan.target.progress == 20
    files = {c.file for c in plan.changes}
    assert files == {"actor/extra_state_world_size_2_rank_0.pt",
                     "actor/extra_state_world_size_2_rank_1.pt"}
    out = tmp_path / "fixed" / "global_step_20"  # verl knows a step by its folder name
    out.parent.mkdir()
    write_fix(plan, out)
    for r in range(2):
        extra = torch.load(out / "actor" / f"extra_state_world_size_2_rank_{r}.pt",
                           weights_only=False)
        assert extra["lr_scheduler"]["last_epoch"] == 20
    assert loud(read_state(out)) == []


def test_torchtune_counter_the_scheduler_is_rebuilt_from(tmp_path):

    root = torchtune_ckpt(tmp_path / "tt", updates=100, steps_run=400)
    plan = plan_fix(root)
    assert [(c.file, c.key, c.before, c.after) for c in plan.changes] == [
        ("recipe_state/recipe_state.pt", ("steps_run",), 400, 100)]


def test_hf_stepped_k_times_fits_the_log_on_the_schedulers_counter(tmp_path):
    """An accelerate-style HF run (scheduler stepped 4x per update), training_args.bin
    gone: the LambdaLR is fitted from log_history at 4 x step, so fix sets the lr right."""
    import math

    import torch
    from transformers import TrainerCallback

    from tests.helpers.factories import hf_run

    class ThreeMore(TrainerCallback):  # what AcceleratedScheduler does with 4 processes
        def on_step_end(self, args, state, control, lr_scheduler=None, **kw):
            for _ in range(3):
                lr_scheduler.step()

    bad = hf_run(tmp_path / "bad", max_steps=40, save_steps=8, scheduler="linear",
                 warmup_steps=2, callbacks=[ThreeMore()], save_state=False)
    ok = hf_run(tmp_path / "ok", max_steps=40, save_steps=8, scheduler="linear",
                warmup_steps=2, save_state=False)
    ck = bad.root / "checkpoint-8"
    (ck / "training_args.bin").unlink()
    st = read_state(ck)
    assert st.schedule is not None and "4 x" in st.schedule.source
    assert st.schedule.kind == "linear" and st.schedule.horizon == 40
    plan = plan_fix(ck, policy="rescale", k=4)
    assert plan.target.progress == 8
    want = ok.saves[0].lrs[0]  # the healthy run's LR at step 8
    assert math.isclose(plan.target.lr, want, rel_tol=1e-9)
    out = tmp_path / "fixed"
    write_fix(plan, out)
    o = torch.load(out / "optimizer.pt", weights_only=True)
    assert math.isclose(o["param_groups"][0]["lr"], want, rel_tol=1e-9)
