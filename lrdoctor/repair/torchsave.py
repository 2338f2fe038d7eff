"""Writer for a plain ``torch.save`` checkpoint (one file holding scheduler + optimizer)."""

from __future__ import annotations

from pathlib import Path

from lrdoctor.model import RunState
from lrdoctor.repair.policies import Refusal, Target
from lrdoctor.repair.torchstate import plan_torch_state
from lrdoctor.repair.writer import load_pickle


def plan(path: Path, state: RunState, target: Target):
    from lrdoctor.repair.engine import FormatPlan

    file = Path(state.path) if state.path and Path(state.path).is_file() else path
    if not file.is_file():
        raise Refusal("expected one torch.save file", str(path))
    # A directory in gives a directory out, holding the repaired file under its name.
    root = path if path.is_dir() else file
    rel = str(file.relative_to(root)) if root.is_dir() else file.name
    changes, notes = plan_torch_state(rel, load_pickle(file), target)
    return FormatPlan(root=root, files=[rel], changes=changes, notes=notes)
