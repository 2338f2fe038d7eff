"""Repair a checkpoint's scheduler state (``lrdoctor fix``) without touching the input.

Public API::

    plan = plan_fix(path, policy=None, k=None, progress=None, replay=None, format=None)
    result = write_fix(plan, out, force=False)   # atomic; verified by re-inspecting

Policies live in :mod:`lrdoctor.repair.policies` (framework-blind), the atomic
writer and manifest in :mod:`lrdoctor.repair.writer`, the scheduler-state arithmetic
in :mod:`lrdoctor.repair.torchstate`, the DCP writer in :mod:`lrdoctor.repair.dcp` and
the torch-free torch.save rewriter in :mod:`lrdoctor.repair.torchzip`. What a framework
keeps where is not here: each layout's module (``lrdoctor.read.layouts.<framework>``)
turns a policy's Target into field edits with its ``repair`` function, reached
through the layout registry (:func:`lrdoctor.read.layouts.repairs`).
"""

from lrdoctor.repair.engine import FixFailed, FixPlan, FixResult, plan_fix, write_fix
from lrdoctor.repair.policies import POLICIES, Refusal, Target, make_target
from lrdoctor.repair.writer import MANIFEST, Change

__all__ = ["MANIFEST", "POLICIES", "Change", "FixFailed", "FixPlan", "FixResult", "Refusal",
           "Target", "make_target", "plan_fix", "write_fix"]
