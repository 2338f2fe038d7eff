"""The machine-readable document every command prints with ``--json``.

Shape (stable): ``{"lrdoctor": VERSION, "command", "target", "format", "state",
"findings": [{"code", "severity", "title", "message", "evidence", "fix"}]}``.
Commands may add keys (``summary`` for replay, ``changes`` for fix) but never
rename these.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from lrdoctor import __version__
from lrdoctor.core.findings import Finding, exit_code, jsonable


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
    return {"lrdoctor": __version__, "command": reports[0].command, "target": first.input,
            "runs": runs, "not_runs": [{"path": p, "why": why} for p, why in first.not_runs]}
