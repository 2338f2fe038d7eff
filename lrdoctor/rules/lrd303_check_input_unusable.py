"""LRD303 `check-input-unusable`: A checked input could not be used

## Explanation
A checkpoint or config named in the check configuration (or given to `inspect` with a
machine output format) could not be read; the message is the one line printed on stderr, the
evidence says what was scanned.

## Example
ckpt/missing: no such file.

## Fix
Correct the path.
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from lrdoctor.core.findings import Evidence, Rule, Severity
from lrdoctor.core.report import Report

RULE = Rule.from_module(__name__, Severity.ERROR)


class InputUnusable(Evidence):
    """The target, and the refusal's structured record verbatim (what was scanned: the
    keys are :class:`~lrdoctor.core.errors.UnusableInput`'s ``detail``)."""

    target: str
    detail: dict[str, Any] = field(default_factory=dict)

    def raw(self) -> dict[str, Any]:
        return {"target": self.target, **self.detail}


def unusable_report(command: str, target: str, message: str,
                    detail: dict[str, Any] | None = None, *,
                    format: str | None = None, location: str | None = None,
                    **evidence: Any) -> Report:
    """The report of an input that could not be used: one LRD303 finding whose message is
    the one line printed on stderr, with evidence ``{"target", **evidence, **detail}``
    (``detail``: :class:`~lrdoctor.core.errors.UnusableInput`'s structured record, e.g. what was
    scanned). ``check`` (a target of its config) and ``inspect`` (a refused PATH, in a
    machine format) both print it, so that a refusal is never an empty stdout."""
    f = RULE.finding(message, InputUnusable(target, {**evidence, **(detail or {})}),
                     location=location)
    return Report(command=command, target=target, format=format, findings=[f])
