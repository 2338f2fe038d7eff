"""LRD303 `check-input-unusable`: A checked input could not be used

## Explanation
A checkpoint or config named in the check configuration (or given to `inspect` with a
machine output format) could not be read; the message is the one line printed on stderr, the
evidence says what was scanned.

## Example
ckpt/missing: no such file.

## Fix
Follows the cause, read from the refusal's type: a missing path (correct it), not a
checkpoint lrdoctor recognises (point at one, or force --format), a pickle global
refused (--allow-unsafe-global NAME, only for a file you trust), a read limit (raise
its variable for a file you trust), a truncated or corrupt file (copy it again from its
source), a missing optional extra (its pip install), a configuration error (the key).
"""

from __future__ import annotations

from dataclasses import field
from typing import Any

from lrdoctor.core import errors
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


#: The advice when the reader itself failed on a value it did not expect (a crash caught
#: per target by ``check``): the input may be fine, so no advice about the input.
CRASH_FIX = ("lrdoctor's reader failed on a value it did not expect: report it with the "
             "line (the file and the error); the other targets' results stand.")

#: A glob or path that matched nothing (``check``'s own refusal, no exception behind it).
NOT_FOUND_FIX = "Correct the path: nothing exists there (a glob must match at least one path)."

GENERIC_FIX = "Correct the file or option the line names (before the first colon)."


def advice(exc: errors.UnusableInput) -> str:
    """The fix for a refusal, from its type (never its message text): each cause of
    an unusable input has its own remedy, and "correct the path" is right for one."""
    from lrdoctor.core.repair import Refusal
    from lrdoctor.extras import MissingExtra, install_hint

    if isinstance(exc, errors.NotFound):
        return NOT_FOUND_FIX
    if isinstance(exc, errors.NotRecognised):
        return ("Point at a checkpoint file or folder (the line lists what was scanned "
                "there), or force a reader with --format NAME if it is one.")
    from lrdoctor.read.bytes.unsafe_globals import HostileRecord

    if isinstance(exc, HostileRecord):  # no name to allow: a record built as a gadget
        return ("Do not load this file with torch.load(weights_only=False): it holds a record "
                "torch never writes, made so that loader calls or reads something else. "
                "Get the checkpoint again from a source you trust.")
    if isinstance(exc, errors.UnsafePickle):
        return (f"Only if you trust the file and its source: rerun with "
                f"--allow-unsafe-global {exc.global_name} (read as an inert value; nothing "
                "is executed either way). Otherwise do not load it.")
    if isinstance(exc, errors.LimitExceeded):
        what = f"the environment variable {exc.env}" if exc.env else "the limit the line names"
        return (f"For a file you trust, raise {what}; otherwise the file is too big "
                "to be checkpoint metadata.")
    if isinstance(exc, errors.Corrupt):
        return ("The file is truncated or corrupt: copy it again from its source (or let "
                "the writer finish); a half-written file cannot be read.")
    if isinstance(exc, MissingExtra):
        return f"Install the optional dependency: {install_hint(exc.extra)}."
    if isinstance(exc, errors.BadKey):
        return f"Correct {exc.key} in {exc.path} (every problem of the file is in the line)."
    if isinstance(exc, errors.NotParsed):
        return f"Fix the {exc.language} syntax at the place the line names."
    if isinstance(exc, errors.NotText):
        return "Give a text file here: this one holds binary content."
    if isinstance(exc, Refusal):
        return "Give the option the line names: the request is ambiguous without it."
    return GENERIC_FIX


def unusable_report(command: str, target: str, message: str,
                    detail: dict[str, Any] | None = None, *,
                    format: str | None = None, location: str | None = None,
                    fix: str | None = None, **evidence: Any) -> Report:
    """The report of an input that could not be used: one LRD303 finding whose message is
    the one line printed on stderr, with evidence ``{"target", **evidence, **detail}``
    (``detail``: :class:`~lrdoctor.core.errors.UnusableInput`'s structured record, e.g. what was
    scanned). ``check`` (a target of its config) and ``inspect`` (a refused PATH, in a
    machine format) both print it, so that a refusal is never an empty stdout. ``fix``:
    :func:`advice` for the refusal (else the generic line)."""
    f = RULE.finding(message, InputUnusable(target, {**evidence, **(detail or {})}),
                     fix=fix or GENERIC_FIX, location=location)
    return Report(command=command, target=target, format=format, findings=[f])
