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
