"""Repair a checkpoint's scheduler state (``lrdoctor fix``) without touching the input.

Public API::

    plan = plan_fix(path, policy=None, k=None, progress=None, replay=None, format=None)
    result = write_fix(plan, out, force=False)   # atomic; verified by re-inspecting

Policies live in :mod:`lrdoctor.repair.policies` (framework-blind), the atomic
writer and manifest in :mod:`lrdoctor.repair.writer`, and one module per format
(``lrdoctor.repair.<format>``) turns a policy's Target into field edits.
"""

from lrdoctor.repair.engine import FixFailed, FixPlan, FixResult, plan_fix, write_fix
from lrdoctor.repair.policies import POLICIES, Refusal, Target, make_target
from lrdoctor.repair.writer import MANIFEST, Change

__all__ = ["MANIFEST", "POLICIES", "Change", "FixFailed", "FixPlan", "FixResult", "Refusal",
           "Target", "make_target", "plan_fix", "write_fix"]
