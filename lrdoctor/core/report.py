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
from lrdoctor.findings import Finding, exit_code


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
        from lrdoctor.core.state import _jsonable

        doc = {
            "lrdoctor": __version__,
            "command": self.command,
            "target": self.target,
            "format": self.format,
            "state": _jsonable(self.state),
            "findings": [f.to_dict() for f in self.findings],
        }
        doc.update(_jsonable(self.extra))
        return doc

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, allow_nan=False)

    def exit_code(self, fail_on: str) -> int:
        return exit_code(self.findings, fail_on)


def unusable_report(command: str, target: str, message: str,
                    detail: dict[str, Any] | None = None, *,
                    format: str | None = None, location: str | None = None,
                    **evidence: Any) -> Report:
    """The report of an input that could not be used: one LRD303 finding whose message is
    the one line printed on stderr, with evidence ``{"target", **evidence, **detail}``
    (``detail``: :class:`~lrdoctor.core.errors.UnusableInput`'s structured record, e.g. what was
    scanned). ``check`` (a target of its config) and ``inspect`` (a refused PATH, in a
    machine format) both print it, so that a refusal is never an empty stdout."""
    from lrdoctor.rules import lrd303_check_input_unusable as lrd303

    f = lrd303.RULE.finding(message, lrd303.InputUnusable(target, {**evidence, **(detail or {})}),
                            location=location)
    return Report(command=command, target=target, format=format, findings=[f])
