"""The torch.save layout's single-file repair writes through the reader's refs (issue 18
item 2): two (optimizer, scheduler) pairs at the same progress in one file under keys no
code names ("gen", "disc"); the reader names the first pair, the fix edits exactly its
fields (the pickles' differing key paths) and leaves the other pair as it was (a
by-shape repair would set its LR from the first pair's schedule). Resumed with torch's
own ``AdamW`` / ``CosineAnnealingLR`` (``load_state_dict``) on the healthy run's curve.
Generality: the repair code was written for no such layout (read by content).
"""

from __future__ import annotations

import torch

from lrdoctor.repair import plan_fix, write_fix
from lrdoctor.repair.engine import read_state
from tests.formats.test_formats_dcp_layouts import _train
from tests.helpers.fix_support import assert_resumes_on_healthy_curve, diff, load


def _cosine(o):
    return torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=50, eta_min=1e-5)


def _step(o):
    return torch.optim.lr_scheduler.StepLR(o, step_size=7, gamma=0.5)


def test_two_pairs_in_one_file_the_fix_edits_the_refd_pair(tmp_path):
    m, o1, s1 = _train(10, 3, _cosine)
    _, o2, s2 = _train(10, 3, _step)
    src = tmp_path / "ck.pt"
    torch.save({"net": m.state_dict(), "gen": {"opt": o1.state_dict(), "lr": s1.state_dict()},
                "disc": {"opt": o2.state_dict(), "lr": s2.state_dict()}}, src)
    _, st, _ = read_state(src)
    ref = st.scheduler_progress.ref
    lr_keys = {r.key for r in st.optimizer_lr_refs}
    assert ref.key[0] == "gen" and lr_keys and all(k[0] == "gen" for k in lr_keys)

    plan = plan_fix(src)
    write_fix(plan, tmp_path / "out.pt")
    before, after = load(src), load(tmp_path / "out.pt")
    assert set(diff(before, after)) == {("gen", "lr", "last_epoch"), ("gen", "lr", "_step_count"),
                                        ("gen", "lr", "_last_lr", 0)} | lr_keys
    assert diff(before["disc"], after["disc"]) == []  # the other pair, as it was

    _, hopt, hsched = _train(10, 1, _cosine)
    _, fopt, fsched = _train(0, 1, _cosine)
    fopt.load_state_dict(after["gen"]["opt"])
    fsched.load_state_dict(after["gen"]["lr"])
    assert_resumes_on_healthy_curve(fopt, fsched, hopt, hsched, 20)
