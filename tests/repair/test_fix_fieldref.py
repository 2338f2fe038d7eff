"""One field index shared by reading and repair (issue 20 / 18): the reader names the field
it read the scheduler's progress from as a FieldRef (file, key path tuple), and the repair
edits exactly that field, never a display string parsed back."""

from __future__ import annotations

from pathlib import Path

import torch

from lrdoctor.core.fieldref import FieldRef
from lrdoctor.repair import plan_fix, write_fix
from lrdoctor.repair.engine import read_state
from tests.formats.test_formats_dcp_layouts import _save, _train
from tests.helpers.fix_support import load


def _cosine(o):
    return torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=50, eta_min=1e-5)


def test_reader_names_the_scheduler_field_and_fix_edits_it(tmp_path):
    """A torch.save loop that keeps its scheduler two levels down under names no reader
    knows: the progress and horizon carry FieldRefs to exactly those keys."""
    model, opt, sched = _train(10, 3, _cosine)
    f = tmp_path / "ck.pt"
    torch.save({"net": model.state_dict(), "run": {"optim": opt.state_dict(),
                                                   "lr": {"cosine": sched.state_dict()}},
                "updates": 10}, f)
    _, st, _ = read_state(f)
    assert st.scheduler_progress.ref == FieldRef(str(f), ("run", "lr", "cosine", "last_epoch"))
    assert st.schedule.refs["horizon"] == FieldRef(str(f), ("run", "lr", "cosine", "T_max"))
    plan = plan_fix(f)
    keys = {c.key for c in plan.changes}
    assert st.scheduler_progress.ref.key in keys
    write_fix(plan, tmp_path / "out.pt")
    assert load(tmp_path / "out.pt")["run"]["lr"]["cosine"]["last_epoch"] == 10


def test_dcp_reader_ref_is_the_item_the_repair_rewrites(tmp_path):
    """The same state through dcp.save (generic DCP folder, read by content): the ref names
    the bytes item that holds the field (its fqn, the key inside it empty for a leaf), the
    item the DCP writer rewrites."""
    model, opt, sched = _train(10, 3, _cosine)
    ck = tmp_path / "c" / "step_10"
    _save({"net": model.state_dict(), "run": {"optim": opt.state_dict(),
                                              "lr": {"cosine": sched.state_dict()}}}, ck)
    _, st, _ = read_state(tmp_path / "c")
    ref = st.scheduler_progress.ref
    assert ref is not None and Path(ref.file).name == ".metadata"
    assert (ref.item, ref.key) == ("run.lr.cosine.last_epoch", ())
    plan = plan_fix(tmp_path / "c")
    assert (ref.item, *ref.key) in {c.key for c in plan.changes}
    assert write_fix(plan, tmp_path / "out").verified
