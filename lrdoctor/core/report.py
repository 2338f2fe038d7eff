"""The machine-readable document every command prints with ``--json``.

One schema for every command (docs/cli.md "JSON", docs/json-schema.json): one JSON
object whose envelope is ``{"schema": SCHEMA, "lrdoctor": VERSION, "command", "target"}``
(``target`` always the path the command was given, a string). A document of one target
is its report: the envelope, ``"format", "state", "findings": [{"code", "severity",
"title", "message", "evidence", "fix", "location"}]`` and the command's own keys
(``summary`` for replay, ``repair``/``changes`` for fix, ``run`` for a run). A document
of several is the envelope and ``reports``, a list of such reports. Commands may add
keys but never rename these; :data:`SCHEMA` is bumped when a key changes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from lrdoctor import __version__
from lrdoctor.core.findings import Finding, exit_code, jsonable

#: The version of the ``--json`` schema (the ``schema`` key of every document).
SCHEMA = 1


@dataclass(frozen=True)
class RunRef:
    """The run a report belongs to when one inspected folder held several runs: the folder
    inspected, this run's folder, and the folders found to hold no run (each with why).
    Not in a report's own document: :func:`runs_document` groups the reports by it."""

    input: str
    root: str
    not_runs: tuple[tuple[str, str], ...] = ()


@dataclass
class Report:
    command: str
    target: str
    format: str | None
    state: dict[str, Any] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    # Wall time spent on this target (``check``): JUnit's time attribute; not in the JSON,
    # whose documents stay byte-identical from run to run.
    seconds: float | None = field(default=None, compare=False)
    # The run of a folder of runs this report is part of (``inspect``); None for one run.
    run: RunRef | None = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        doc = {
            "lrdoctor": __version__,
            "command": self.command,
            "target": self.target,
            "format": self.format,
            "state": jsonable(self.state),
            "findings": [f.to_dict() for f in self.findings],
        }
        doc.update(jsonable(self.extra))
        return doc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def exit_code(self, fail_on: str) -> int:
        return exit_code(self.findings, fail_on)


def runs_document(reports: list[Report]) -> dict[str, Any]:
    """``inspect --json`` of a folder holding several runs: one document, its ``runs`` in
    the reports' order (worst first), each with its folder, the reader's format, its worst
    severity and its reports (each the document one run alone prints), and ``not_runs``:
    the folders found to hold checkpoint-looking files but no run, with why."""
    first = next(r.run for r in reports if r.run is not None)
    groups: dict[str, list[Report]] = {}
    for r in reports:
        groups.setdefault(r.run.root if r.run is not None else r.target, []).append(r)
    runs = []
    for root, reps in groups.items():
        worst = max((f.severity for r in reps for f in r.findings), default=None)
        runs.append({"root": root, "format": reps[-1].format,
                     "worst": str(worst) if worst is not None else None,
                     "reports": [r.to_dict() for r in reps]})
    return {"schema": SCHEMA, "lrdoctor": __version__, "command": reports[0].command,
            "target": first.input,
            "runs": runs, "not_runs": [{"path": p, "why": why} for p, why in first.not_runs]}


def json_document(reports: list[Report], command: str | None = None,
                  target: str | None = None, many: bool = False) -> dict[str, Any]:
    """The one ``--json`` document of a command: one report's own document, or (several
    reports, or ``many``: a command whose document is always a list of targets) the
    envelope with ``reports``, or a folder of runs' :func:`runs_document`. ``target``: the path the command was given; by default the
    one report's target, else the folder the reports' targets share."""
    # A folder of runs given to inspect: its `runs` (check's targets stay its `reports`).
    if not many and any(r.run is not None for r in reports):
        return runs_document(reports)
    if len(reports) == 1 and not many:
        return {"schema": SCHEMA, **reports[0].to_dict()}
    if target is None:
        target = _common_target([r.target for r in reports])
    return {"schema": SCHEMA, "lrdoctor": __version__,
            "command": command or (reports[0].command if reports else "check"),
            "target": target, "reports": [r.to_dict() for r in reports]}


def _common_target(targets: list[str]) -> str:
    """The folder the targets share (``.`` when none, or when one is a URL)."""
    import os

    if len(targets) == 1:
        return targets[0]
    if not targets or any("://" in t for t in targets):
        return "."
    try:
        return os.path.commonpath([os.path.abspath(t) for t in targets]) \
            if any(os.path.isabs(t) for t in targets) else \
            (os.path.commonpath(targets) or ".")
    except ValueError:
        return "."
