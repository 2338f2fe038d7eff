"""Bugs the strict type check (mypy) found in the layout readers: one test each.

Checkpoint values are untrusted: a key or value of a type the reader did not expect must
never become a field a repair writes through, nor a traceback.
"""

from __future__ import annotations

import pytest

from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.state import Unit
from lrdoctor.read.layouts._torchstate import torch_scheduler

torch = pytest.importorskip("torch")


def _step_lr_state() -> dict:
    """torch's own StepLR state_dict: a class with no horizon field."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5)
    opt.step()
    sched.step()
    return sched.state_dict()


def test_no_horizon_ref_from_a_none_key() -> None:
    """StepLR has no horizon field (``HORIZON_FIELD.get`` is None): a state that holds a
    ``None`` key (an unpickled dict can) must not give a horizon ref ``(None,)``."""
    sd = _step_lr_state()
    spec, progress, _ = torch_scheduler(sd, unit=Unit.UPDATES, source="s.pt", ref=FieldRef("s.pt"))
    assert spec is not None and spec.kind == "StepLR" and "horizon" not in spec.refs
    sd[None] = 1
    spec, progress, _ = torch_scheduler(sd, unit=Unit.UPDATES, source="s.pt", ref=FieldRef("s.pt"))
    assert spec is not None and spec.kind == "StepLR"
    assert "horizon" not in spec.refs
    assert progress is not None and progress.value == 1
