"""``inspect`` as a library call: read -> normalize -> diagnose -> Report."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from lrdoctor.core.errors import NotRecognised, UnusableInput
from lrdoctor.core.report import Report
from lrdoctor.core.state import RunState
from lrdoctor.diagnose import diagnose
from lrdoctor.read import layouts
from lrdoctor.read.bytes.storage import as_path
from lrdoctor.read.layouts import Layout
from lrdoctor.rules.common import planned_end_in_schedule_units, progress_ratio
from lrdoctor.schedules import lr_or_none


def read_state(path: str | Path, format: str | None = None) -> RunState:
    """Normalize one checkpoint (the latest one when ``path`` is a run directory)."""
    mod, ckpts = _checkpoints(path, format)
    return layouts.read(mod, ckpts[-1])


def read_run(path: str | Path, format: str | None = None) -> list[RunState]:
    """Every readable checkpoint of ``path``, oldest first (the latest must be readable)."""
    mod, ckpts = _checkpoints(path, format)
    states = []
    for c in ckpts:
        try:
            states.append(layouts.read(mod, c))
        except UnusableInput:
            if c == ckpts[-1]:
                raise
    return states


def inspect_path(path: str | Path, format: str | None = None,
                 all: bool = False) -> list[Report]:
    """One report per inspected checkpoint: each run's latest, or each with ``all``.

    ``path`` may be one checkpoint, one run, or any folder above runs: every checkpoint
    under it is found at any depth and grouped into runs by its own evidence
    (:func:`lrdoctor.read.layouts._runs.find_runs`). One run (one folder above it
    included) gives that run's reports. Several runs are judged apart, worst first, each
    report naming its run (``Report.run``): run-level findings compare checkpoints of one
    run only. A folder under ``path`` that holds no run is named there, never judged; a
    run that cannot be read is an LRD303 report of its own; nothing readable at all is
    the first run's refusal.
    """
    where = cast(Path, as_path(path))
    roots, only, cut, units = _run_roots(where, format)
    if len(roots) == 1:
        reports = _inspect_run(roots[0], format, all, units=(roots, units))
        if cut:  # never silent: a bound stopped the search for other runs
            for r in reports:
                r.state.setdefault("notes", []).append(f"{where}: the search for runs {cut}")
        return reports
    from lrdoctor.core.report import RunRef
    from lrdoctor.rules.lrd303_check_input_unusable import advice, unusable_report

    runs: list[tuple[str, list[Report]]] = []
    not_runs: list[tuple[str, str]] = []
    first: UnusableInput | None = None
    for root in roots:
        try:
            # Local runs, read one after another: their reading is CPU-bound (the
            # pickle machine), a thread pool per run would cost more than it hides.
            runs.append((str(root), _inspect_run(root, format, all, workers=1,
                                                 only=only.get(root), units=(roots, units))))
        except NotRecognised as exc:  # no training state there: not a run, said, not judged
            first = first or exc
            not_runs.append((str(root), exc.message))
        except UnusableInput as exc:  # a run's checkpoint that cannot be read: its error
            first = first or exc
            runs.append((str(root), [unusable_report("inspect", str(root), str(exc),
                                                     exc.detail, format=format,
                                                     fix=advice(exc))]))
    if not runs and first is not None:
        raise first
    if cut:
        not_runs.append((str(where), f"the search for runs {cut}"))
    runs.sort(key=lambda run: -max((f.severity for r in run[1] for f in r.findings),
                                   default=0))  # worst first; stable: found order
    reports = []
    for name, reps in runs:
        for r in reps:
            r.run = RunRef(str(where), name, tuple(not_runs))
            reports.append(r)
    return reports


def _run_roots(where: Path, format: str | None
               ) -> tuple[list[Path], dict[Path, list[Path]], str | None, list[Any]]:
    """The folders to read as runs under ``where`` (itself when it is a file, a URL: its
    listing is remote, read as given, or one run), for a folder that also holds other
    runs the checkpoints that are its own, and the bound that cut the search (if one did)."""
    from lrdoctor.read.bytes.storage import is_url

    if is_url(where) or not where.is_dir():
        return [where], {}, None, []
    from lrdoctor.read.layouts._runs import find_runs

    runs = find_runs(where, format)
    return runs.roots, runs.only, runs.cut, runs.units


def _inspect_run(path: Path, format: str | None, all: bool, workers: int | None = None,
                 only: list[Path] | None = None,
                 units: tuple[list[Path], list[Any]] | None = None) -> list[Report]:
    """The reports of one run (see :func:`inspect_path`); ``only``: the checkpoints of
    ``path`` that are this run's where other runs' folders lie inside it; ``units``: all
    runs' folders and every checkpoint the walk found, so what this run's reader leaves
    unread in its folder is named in its notes."""
    from lrdoctor.parallel import threads

    mod, ckpts = _checkpoints(path, format)
    if only is not None:
        from lrdoctor.read.layouts._runs import holds

        ckpts = [c for c in ckpts if holds(c, only)]
        if not ckpts:
            raise NotRecognised(f"no {mod.NAME} checkpoint of its own beside the other runs "
                                f"in it", str(path))
    states: list[RunState] = []
    targets: list[str] = []
    skipped: list[str] = []

    def read_one(c: Any) -> RunState | UnusableInput:
        try:
            return layouts.read(mod, c)
        except UnusableInput as exc:
            return exc

    # The checkpoints of a run are read side by side (bounded threads: I/O, remote reads
    # wait on the network), then judged in order.
    for c, st in zip(ckpts, threads(read_one, ckpts, workers), strict=True):
        if isinstance(st, UnusableInput):
            if all or c == ckpts[-1]:
                raise st
            skipped.append(str(st))
            continue
        states.append(st)
        targets.append(str(c))
    reports = ([report_for(s, c) for s, c in zip(states, targets, strict=True)] if all
               else [report_for(states[-1], targets[-1])])
    add_run(reports[-1], states, targets, skipped)
    if units is not None and units[1]:
        from lrdoctor.read.layouts._runs import unread

        for note in unread(path, units[0], units[1], list(ckpts)):
            for r in reports:  # never silent: a checkpoint found here and not read
                r.state.setdefault("notes", []).append(note)
    return reports


def add_run(report: Report, states: list[RunState], targets: list[str] | None = None,
            skipped: list[str] | None = None) -> None:
    """Attach the run-level findings and history of ``states`` (oldest first) to ``report``;
    ``targets`` names each checkpoint as its own report does."""
    from lrdoctor.diagnose_run import diagnose_run, history

    found = diagnose_run(states)
    report.findings.extend(found)
    if len(states) > 1 or skipped:
        rows = history(states, found)
        names: list[str | None] = list(targets) if targets else [None] * len(states)
        for row, st, t in zip(rows, states, names, strict=True):
            if t is not None:
                row["target"] = t
            # Each checkpoint's own findings too, so the trend row is not "ok" for a
            # checkpoint that was only read, not shown.
            own = diagnose(st)
            row["checkpoint_codes"] = sorted({f.code for f in own})
            sev = [f.severity for f in own] + [f.severity for f in found
                                               if f.location == row["path"]]
            row["worst"] = str(max(sev)) if sev else None
        report.extra["run"] = {"checkpoints": rows, "skipped": list(skipped or [])}


def _checkpoints(path: str | Path, format: str | None) -> tuple[Layout, Sequence[Any]]:
    """The reader for ``path`` and its checkpoints, oldest first; none is bad input."""
    # A local Path, or a RemotePath for a URL (s3://, gs://, ...): the layouts take it as
    # a Path (it has the part of pathlib readers use; read.bytes.storage).
    where = cast(Path, as_path(path))
    mod = layouts.detect(where, format)
    try:
        ckpts = mod.find_checkpoints(where)
    except NotRecognised as exc:
        raise _forced_hint(exc, where, format) from None
    if not ckpts:
        from lrdoctor.read.scan.refusal import nothing_found

        raise nothing_found(f"no {mod.NAME} checkpoint found", where)
    return mod, ckpts


def _forced_hint(exc: NotRecognised, where: Path, format: str | None) -> NotRecognised:
    """A forced format that found none of its checkpoints in ``where``: the refusal, and
    where below its files are (the folder to point at), when they are somewhere."""
    from lrdoctor.read.bytes.storage import is_url

    if not format or is_url(where) or not where.is_dir():
        return exc
    from lrdoctor.read.layouts._runs import forced_elsewhere

    found = forced_elsewhere(where, format)
    if found is None:
        return exc
    return NotRecognised(f"{exc.message}; --format {format} reads the checkpoints in "
                         f"{found}: point lrdoctor at that folder", exc.path, detail=exc.detail)


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
    from lrdoctor.rules.evidence_checks import compared

    # The two independent counters compared ("agree" is said only after one; None: none).
    cmp = compared(state)
    derived["compared"] = cmp.to_dict() if cmp is not None else None
    if spec is not None:  # what the schedule's numbers count (its horizon, the x of a plot)
        derived["horizon_unit"] = state.horizon_counts()
        derived["progress_unit"] = state.progress_counts() or spec.unit.value
    doc["evidence"] = [e.to_dict() | {"ref": _ref_dict(e.ref)} for e in state.evidence]
    doc["derived"] = derived
    return doc


def _ref_dict(ref: Any) -> dict[str, Any]:
    return {"file": ref.file, "key": list(ref.key), "item": ref.item}
