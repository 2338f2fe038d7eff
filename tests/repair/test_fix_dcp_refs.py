"""The DCP writer edits the fields the reader's refs name (issue 18 item 2), not every
scheduler it finds by shape.

Generality: a plain ``torch.distributed.checkpoint.save`` folder holding TWO (optimizer,
scheduler) pairs at the same progress under keys no layout or repair code names ("alpha",
"beta"), as a GAN-like loop keeps them; read by the generic DCP layout, repaired by the DCP
writer (:mod:`lrdoctor.repair.dcp`), which was written for Megatron/torchtitan/NeMo-RL
items. The reader names the "alpha" pair (item = its fqn, key inside it); the fix must
edit exactly that pair, leave "beta" equal by value, and resume with torch's own
``AdamW`` / ``CosineAnnealingLR`` on the healthy run's curve.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from lrdoctor.repair import plan_fix, write_fix
from lrdoctor.repair.engine import read_state
from tests.formats.test_formats_dcp_layouts import _save, _train
from tests.helpers.fix_support import assert_resumes_on_healthy_curve

pytestmark = pytest.mark.filterwarnings("ignore")


def _cosine(o):
    return torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=50, eta_min=1e-5)


def _linear(o):
    return torch.optim.lr_scheduler.LinearLR(o, start_factor=1.0, end_factor=0.1,
                                             total_iters=60)


def _as_torch_save(folder: Path, out: Path) -> dict[str, Any]:
    """The whole DCP folder through torch's own converter, loaded back."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp_to_torch_save(str(folder), str(out))
    return torch.load(out, weights_only=False)


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    return bool(a == b)


def test_two_schedulers_at_one_progress_the_fix_edits_only_the_one_read(tmp_path):
    m1, o1, s1 = _train(10, 3, _cosine)  # stepped 3x per update: the bug fix repairs
    _, o2, s2 = _train(10, 3, _linear)   # the same progress, another schedule
    ck = tmp_path / "c" / "step_10"
    _save({"net": m1.state_dict(), "alpha": {"o": o1.state_dict(), "s": s1.state_dict()},
           "beta": {"o": o2.state_dict(), "s": s2.state_dict()}}, ck)

    _, st, _ = read_state(tmp_path / "c")
    ref = st.scheduler_progress.ref
    assert ref is not None and ref.item.startswith("alpha.s")  # the reader names alpha
    assert st.optimizer_lr_refs and all(r.item.startswith("alpha.o")
                                        for r in st.optimizer_lr_refs)

    plan = plan_fix(tmp_path / "c")
    edited = {str(c.key[0]) for c in plan.changes}
    assert (ref.item, *ref.key) in {c.key for c in plan.changes}
    assert {(r.item, *r.key) for r in st.optimizer_lr_refs} <= {c.key for c in plan.changes}
    assert edited and all(k.startswith("alpha.") for k in edited), edited
    assert write_fix(plan, tmp_path / "out").verified

    before = _as_torch_save(ck, tmp_path / "before.pt")
    after = _as_torch_save(tmp_path / "out" / ck.name, tmp_path / "after.pt")
    assert _same(after["beta"], before["beta"])  # the other pair untouched, by value
    assert _same(after["net"], before["net"])
    assert not _same(after["alpha"]["s"], before["alpha"]["s"])

    # Resume alpha with torch's own classes; the healthy run stepped once per update.
    _, hopt, hsched = _train(10, 1, _cosine)
    _, fopt, fsched = _train(0, 1, _cosine)
    fopt.load_state_dict(after["alpha"]["o"])
    fsched.load_state_dict(after["alpha"]["s"])
    assert fsched.last_epoch == 10
    assert_resumes_on_healthy_curve(fopt, fsched, hopt, hsched, 20)


def test_a_ref_the_folder_does_not_hold_is_said_not_silently_dropped(tmp_path):
    """Never silent: when the reader's ref names an item the DCP folder's planner paths do
    not hold, the writer falls back to finding schedulers by shape and its plan says so."""
    import dataclasses

    from lrdoctor.repair import dcp
    from lrdoctor.repair.policies import make_target

    m1, o1, s1 = _train(10, 3, _cosine)
    ck = tmp_path / "c" / "step_10"
    _save({"net": m1.state_dict(), "alpha": {"o": o1.state_dict(), "s": s1.state_dict()}}, ck)
    _, st, findings = read_state(tmp_path / "c")
    ref = st.scheduler_progress.ref
    assert ref is not None and ref.item
    target = make_target(st, findings)
    ok = dcp.plan(ck, st, target)
    assert not any("not among this folder's items" in n for n in ok.notes)

    st.scheduler_progress = dataclasses.replace(
        st.scheduler_progress, ref=dataclasses.replace(ref, item="gone.s.last_epoch"))
    moved = dcp.plan(ck, st, target)
    notes = [n for n in moved.notes if "not among this folder's items" in n]
    assert notes and "found by shape" in notes[0], moved.notes
    assert {c.key for c in moved.changes} == {c.key for c in ok.changes}  # same edits, said
