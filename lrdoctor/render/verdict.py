"""One line per target, first: its worst finding's code, severity and the one number
that matters, like a linter's summary line. The details follow (unless ``--quiet``).

Why: a run's verdict used to come after twenty lines of counters; in a CI log or a
fleet of targets the reader wants "which target, how bad, by how much" at a glance.
"""

from __future__ import annotations

from lrdoctor.core.findings import Finding


def headline(f: Finding) -> str:
    """The finding's one number in words (its evidence's :meth:`headline`, written in the
    rule's file), or its title when it has none."""
    try:
        text = f.evidence.headline()
    except (KeyError, TypeError, ValueError):
        text = None
    return text or f.title[:1].lower() + f.title[1:]


def worst(findings: list[Finding]) -> Finding | None:
    return max(findings, key=lambda f: f.severity, default=None)


def verdict_line(report) -> tuple[str, str, str]:
    """``target:``, the verdict (``LRD103 error`` or ``ok``) and the rest, for one report."""
    w = worst(report.findings)
    if w is None:
        return f"{report.target}:", "ok", ""
    more = len(report.findings) - 1
    return (f"{report.target}:", f"{w.code} {w.severity}",
            headline(w) + (f" (+{more} more)" if more else ""))


_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan", "ok": "green"}


def _colour() -> bool:
    """Whether rich would style the output: stdout is a terminal, or the environment asks
    for colour (FORCE_COLOR, TTY_COMPATIBLE, TTY_INTERACTIVE, as rich reads them)."""
    import os
    import sys

    if any(os.environ.get(k) for k in ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")):
        return True
    try:
        return sys.stdout.isatty()
    except (AttributeError, ValueError):
        return False


def print_verdicts(reports, con=None) -> None:
    """The verdict lines of every report, before any detail:
    ``ckpt/checkpoint-299: LRD103 error 3.51x the nominal progress (+1 more)``."""
    if con is None and not _colour():
        # Off a terminal rich would print these very characters: no import of it (a
        # tenth of `inspect -q`'s start-up).
        for r in reports:
            target, verdict, rest = verdict_line(r)
            print(f"{target} {verdict}" + (f" {rest}" if rest else ""))
        return
    from rich.text import Text

    from lrdoctor.render.text import console

    con = con or console()
    for r in reports:
        target, verdict, rest = verdict_line(r)
        style = _STYLE.get(verdict.split()[-1], "")
        # One line per target whatever the path's length: logs are grepped by it.
        con.print(Text.assemble(target, " ", (verdict, style), (" " + rest) if rest else ""),
                  soft_wrap=True)
