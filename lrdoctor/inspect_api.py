"""``inspect`` as a library call: read -> normalize -> diagnose -> Report."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

from lrdoctor import formats
from lrdoctor.diagnose import diagnose, planned_end_in_schedule_units, progress_ratio
from lrdoctor.errors import UnusableInput
from lrdoctor.model import RunState
from lrdoctor.report import Report
from lrdoctor.schedules import lr_or_none


def read_state(path: str | Path, format: str | None = None) -> RunState:
    """Normalize one checkpoint (the latest one when ``path`` is a run directory)."""
    mod, ckpts = _checkpoints(path, format)
    return formats.read(mod, ckpts[-1])


def inspect_path(path: str | Path, format: str | None = None,
                 all: bool = False) -> list[Report]:
    """One report per inspected checkpoint: the latest, or each with ``all``."""
    mod, ckpts = _checkpoints(path, format)
    return [report_for(formats.read(mod, c), c) for c in (ckpts if all else ckpts[-1:])]


def _checkpoints(path: str | Path, format: str | None) -> tuple[ModuleType, list[Path]]:
    """The reader for ``path`` and its checkpoints, oldest first; none is bad input."""
    path = Path(path)
    mod = formats.detect(path, format)
    ckpts = mod.find_checkpoints(path)
    if not ckpts:
        raise UnusableInput(f"no {mod.NAME} checkpoint found", str(path))
    return mod, ckpts


def report_for(state: RunState, target: Path | str) -> Report:
    return Report(command="inspect", target=str(target), format=state.format,
                  state=summarize(state), findings=diagnose(state))


def summarize(state: RunState) -> dict[str, Any]:
    """The RunState plus what a reader of the report wants computed."""
    doc = state.to_dict()
    spec, prog = state.schedule, state.scheduler_progress
    derived: dict[str, Any] = {"progress_ratio": progress_ratio(state),
                               "planned_end_in_schedule_units":
                                   planned_end_in_schedule_units(state)}
    if spec is not None and prog is not None:
        lr = lr_or_none(spec, prog.value)
        if lr is not None:
            derived["lr_at_scheduler_progress"] = lr
        if spec.horizon:
            derived["horizon_fraction"] = prog.value / spec.horizon
    if spec is not None and state.nominal_progress is not None:
        lr = lr_or_none(spec, state.nominal_progress.value)
        if lr is not None:
            derived["lr_at_nominal_progress"] = lr
    doc["derived"] = derived
    return doc
