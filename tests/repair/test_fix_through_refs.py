"""Repair writes through the refs the read filled, and is reached through the layout registry.

Generality: the checkpoints here are torch.save dicts under keys that no layout, reader or
repair names (a list of optimizers under "bundle", the scheduler under "cfg" -> "the lr"),
written by torch's own classes; the repair is the generic by-content one of the torch.save
layout (``lrdoctor.read.layouts.torchsave.repair``), never written for them. The repaired
copy is resumed with torch's own ``AdamW`` / ``LinearLR`` (``load_state_dict``) and must
continue on the healthy run's curve.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lrdoctor.core.repair import Change, Refusal
from lrdoctor.read import layouts
from lrdoctor.repair import plan_fix, write_fix
from lrdoctor.repair.engine import read_state
from tests.helpers.fix_support import assert_resumes_on_healthy_curve

UPDATES = 8


def _train(updates: int, sched_per_update: int):
    """AdamW with two param groups (different LRs) and a chainable LinearLR (each LR is
    computed from the previous one, so a wrong param-group LR shows in every later step)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
    opt = torch.optim.AdamW([{"params": model[0].parameters(), "lr": 1e-3},
                             {"params": model[1].parameters(), "lr": 4e-4}])
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.05,
                                              total_iters=40)
    for _ in range(updates):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        for _ in range(sched_per_update):
            sched.step()
    return model, opt, sched


def _save_unnamed(path: Path, model, opt, sched) -> None:
    torch.save({"weights": model.state_dict(),
                "bundle": [opt.state_dict()],
                "cfg": {"the lr": sched.state_dict(), "seen": UPDATES}}, path)


def test_every_edit_is_a_field_the_read_named_and_torch_resumes_on_the_healthy_curve(tmp_path):
    _, opt, sched = _train(UPDATES, 3)  # the scheduler ran 3x per optimizer update
    src = tmp_path / "ck.pt"
    _save_unnamed(src, _train(0, 1)[0], opt, sched)
    before = src.read_bytes()

    _, state, _ = read_state(src)
    prog = state.scheduler_progress.ref
    assert prog is not None and prog.key == ("cfg", "the lr", "last_epoch")
    lr_refs = {r.key for r in state.optimizer_lr_refs}
    assert lr_refs == {("bundle", 0, "param_groups", 0, "lr"),
                       ("bundle", 0, "param_groups", 1, "lr")}

    plan = plan_fix(src)
    assert plan.target.policy == "rescale" and plan.target.k == 3
    by_key = {c.key: c for c in plan.changes}
    # The fields the read named are the ones written: progress, and every param-group LR.
    assert prog.key in by_key and lr_refs <= set(by_key)
    assert by_key[prog.key].before == 3 * UPDATES and by_key[prog.key].after == UPDATES
    # Nothing else but the scheduler's own bookkeeping beside its progress field.
    sched_at = prog.key[:-1]
    others = set(by_key) - {prog.key} - lr_refs
    assert others == {sched_at + ("_step_count",), sched_at + ("_last_lr",)}
    assert all(isinstance(c, Change) and c.ref.key == c.key for c in plan.changes)

    out = tmp_path / "fixed.pt"
    res = write_fix(plan, out)
    assert res.verified
    assert src.read_bytes() == before  # the input is only read

    # Resume with torch's own classes; compare with a healthy run stepped once per update.
    _, hopt, hsched = _train(UPDATES, 1)
    model, fopt, fsched = _train(0, 1)
    saved = torch.load(out, weights_only=True)
    fopt.load_state_dict(saved["bundle"][0])
    fsched.load_state_dict(saved["cfg"]["the lr"])
    assert fsched.last_epoch == UPDATES
    assert_resumes_on_healthy_curve(fopt, fsched, hopt, hsched, 30)


def test_the_repair_side_is_the_layout_module_through_the_registry():
    """Each layout that ``fix`` writes is its own repair side (``repair`` in the module that
    reads it), found through the registry; the report name ``torch`` is the torchsave
    layout; a layout without one has none (fix refuses it in one line)."""
    from lrdoctor.read.layouts import hf, torchsave

    assert layouts.repairs("hf") is hf
    assert layouts.repairs("torch") is torchsave is layouts.repairs("torchsave")
    assert layouts.repairs("nemo_rl") is None  # DCP storage: the DCP writer repairs it
    repairable = {e.name for e in layouts.LAYOUTS if e.repairs() is not None}
    assert repairable == {"megatron", "roll", "deepspeed", "hf", "lightning", "accelerate",
                          "torchsave"}


def test_a_layout_refusal_passes_through_with_the_input_named(tmp_path, monkeypatch):
    """A refusal raised in the layout's repair (the layout's own knowledge) reaches the
    user as one line naming the input."""
    from lrdoctor.read.layouts import torchsave

    _, opt, sched = _train(UPDATES, 3)
    src = tmp_path / "ck.pt"
    _save_unnamed(src, _train(0, 1)[0], opt, sched)

    def refuse(path, state, target, tools):
        raise Refusal("ck.pt: this layout says no")

    monkeypatch.setattr(torchsave, "repair", refuse)
    with pytest.raises(Refusal) as e:
        plan_fix(src)
    assert str(e.value) == f"{src}: ck.pt: this layout says no"


def test_a_layout_registered_repairable_without_a_repair_is_said_loudly():
    """Never a silent skip: an entry that says ``repairs=True`` over a module with no
    ``repair`` is a registry error, not a layout ``fix`` quietly cannot write."""
    import types

    from lrdoctor.read.scan.listing import Hint

    bare = types.ModuleType("lrdoctor.read.layouts.bare")
    entry = layouts.Entry("bare", Hint(), 10, lambda: bare,
                          repairable=True)
    with pytest.raises(TypeError, match="bare is registered with repairs=True"):
        entry.repairs()
    assert layouts.Entry("bare", Hint(), 10,
                         lambda: bare).repairs() is None
