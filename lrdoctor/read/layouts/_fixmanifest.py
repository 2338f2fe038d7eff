"""A checkpoint ``lrdoctor fix`` wrote records its nominal progress beside it.

Why: ROLL saves no budget, so a repaired ROLL checkpoint read on its own has nothing to
compare the scheduler with, and inspect printed "the scheduler and the trainer agree"
over a note saying the nominal progress was not computed. The fix knew that progress
(it set the scheduler to it) and wrote it in ``lrdoctor-fix.json``; the reader uses it
when the checkpoint's own counters give none.

The record is used only while it still describes the checkpoint: the policy set the
scheduler to the nominal progress (``nominal``, or ``rescale``: divided by k), the unit
matches, and the scheduler's counter still holds the value the fix wrote (a run that
resumed and saved again has moved on, and its record no longer applies).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.state import Counter, RunState

# The record's file name: beside a checkpoint folder's files, or ``<file>.lrdoctor-fix.json``.
# ``lrdoctor fix`` writes it (lrdoctor.repair.writer), this module reads it.
MANIFEST = "lrdoctor-fix.json"
_POLICIES_AT_NOMINAL = ("nominal", "rescale")


def manifest_path(ckpt: Any) -> Path | None:
    """Where ``lrdoctor fix`` puts the record of ``ckpt`` (local checkpoints only)."""
    if not isinstance(ckpt, Path):
        return None
    return ckpt / MANIFEST if ckpt.is_dir() else ckpt.with_name(ckpt.name + "." + MANIFEST)


def apply(state: RunState, ckpt: Any) -> None:
    """Fill ``state.nominal_progress`` from the fix record beside ``ckpt``, when the
    checkpoint's own counters gave none and the record still applies (see module doc)."""
    prog = state.scheduler_progress
    if state.nominal_progress is not None or prog is None:
        return
    path = manifest_path(ckpt)
    if path is None or not path.is_file():
        return
    from lrdoctor.read.bytes import safetext

    try:
        doc = safetext.read_json(path, "fix record")
    except UnusableInput as exc:
        state.notes.append(f"{path.name}: not used ({exc})")
        return
    target = doc.get("target") if isinstance(doc, dict) else None
    if not isinstance(target, dict):
        return
    value, unit, policy = target.get("progress"), target.get("unit"), target.get("policy")
    if policy not in _POLICIES_AT_NOMINAL or not isinstance(value, (int, float)) \
            or isinstance(value, bool) or not math.isfinite(value):
        return
    if unit != prog.unit.value:
        state.notes.append(f"{path.name}: not used (it records {unit}, the scheduler counts "
                           f"{prog.unit.value})")
        return
    if not math.isclose(prog.value, value, rel_tol=1e-9, abs_tol=1e-9):
        state.notes.append(f"{path.name}: not used (the scheduler is at {prog.value:g}, the fix "
                           f"set {value:g}: the checkpoint changed since)")
        return
    state.nominal_progress = Counter(f"{path.name}: target.progress", float(value), prog.unit,
                                     f"{path.name} (fix --policy {policy})")
    state.files.append(str(path))
    state.notes.append(f"nominal progress from {path.name}: lrdoctor fix set the scheduler to "
                       "it, and the checkpoint still holds that value")
