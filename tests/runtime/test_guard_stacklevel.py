"""StepGuard's warnings point at the user's line, not at lrdoctor's guard.py (they come
through torch's scheduler and optimizer step hooks, whose depth a fixed stacklevel
got wrong). A plain torch loop with torch's own CosineAnnealingLR."""

from __future__ import annotations

import inspect
import warnings

import torch

from lrdoctor.runtime.guard import LRDoctorWarning, StepGuard


def test_guard_warning_points_at_the_users_scheduler_step():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with StepGuard(opt, sched, action="warn"):
            for _ in range(3):
                model(torch.randn(4, 2)).sum().backward()
                opt.step()
                opt.zero_grad()
                sched.step()
                line = inspect.currentframe().f_lineno + 1
                sched.step()  # the bug: a second scheduler step per update
    ours = [w for w in caught if issubclass(w.category, LRDoctorWarning)]
    assert ours, [str(w.message) for w in caught]
    assert all(w.filename == __file__ for w in ours), [(w.filename, w.lineno) for w in ours]
    assert any(w.lineno in (line, line - 2) for w in ours), [w.lineno for w in ours]
