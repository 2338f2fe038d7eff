"""One line per target, first: its worst finding's code, severity and the one number
that matters, like a linter's summary line. The details follow (unless ``--quiet``).

Why: a run's verdict used to come after twenty lines of counters; in a CI log or a
fleet of targets the reader wants "which target, how bad, by how much" at a glance.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lrdoctor.findings import Finding


def _x(v: Any, what: str) -> str | None:
    return f"{v:.3g}x {what}" if isinstance(v, (int, float)) else None


def _pct(v: Any, what: str) -> str | None:
    return f"{what} {v:.0%}" if isinstance(v, (int, float)) else None


def _lr(ev: dict) -> str | None:
    lrs, want = ev.get("optimizer_lrs"), ev.get("schedule_lr")
    if lrs and isinstance(want, (int, float)):
        return f"optimizer lr {lrs[0]:.3g}, schedule {want:.3g}"
    return None


def _first_window(ev: dict) -> str | None:
    """The first window's real size, from the replayed window sizes (never assumed k - 1:
    an off-by-one with ``global_step % k`` closes a window of 1, not k - 1)."""
    head, k = ev.get("window_sizes_head"), ev.get("k")
    if not (head and isinstance(head[0], int) and isinstance(k, int)):
        return None
    return f"first window {head[0]} of {k} micro-batches"


#: code -> the evidence that is the finding's one number, as words.
HEADLINE: dict[str, Callable[[dict], str | None]] = {
    "LRD101": lambda e: _x(e.get("progress_over_horizon"), "the decay horizon"),
    "LRD102": lambda e: _pct(e.get("tail_fraction"), "min-LR tail"),
    "LRD103": lambda e: _x(e.get("ratio"), "the nominal progress"),
    "LRD104": lambda e: _x(e.get("ratio"), "consumed - skipped samples"),
    "LRD105": _lr,
    "LRD108": lambda e: _x(e.get("ratio"), "the nominal progress"),
    "LRD109": lambda e: _x(e.get("ratio"), "global_steps - skipped_steps"),
    "LRD110": lambda e: _x(e.get("progress_over_horizon"), "the decay horizon"),
    "LRD201": lambda e: _x(e.get("ratio"), "the scheduler's budget"),
    "LRD202": lambda e: _x(e.get("ratio"), "the scheduler's budget"),
    "LRD204": lambda e: _first_window(e),
    "LRD205": lambda e: _x(e.get("scheduler_moves_per_update"), "scheduler moves per update"),
    "LRD209": lambda e: (f"{e['max_tokens']:,} tokens, cap {e['cap']:,}"
                         if isinstance(e.get("max_tokens"), int)
                         and isinstance(e.get("cap"), int) else None),
    "LRD211": lambda e: f"{e['failed_updates']} failed update(s)"
    if isinstance(e.get("failed_updates"), int) else None,
    "LRD302": lambda e: _x(e.get("progress_ratio"),
                           f"nominal, over the limit {e.get('max_progress_ratio')}"),
}


def headline(f: Finding) -> str:
    """The finding's one number in words, or its title when it has none."""
    fn = HEADLINE.get(f.code)
    try:
        text = fn(f.evidence or {}) if fn else None
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


def print_verdicts(reports, con=None) -> None:
    """The verdict lines of every report, before any detail:
    ``ckpt/checkpoint-299: LRD103 error 3.51x the nominal progress (+1 more)``."""
    from rich.text import Text

    from lrdoctor.render.text import console

    con = con or console()
    for r in reports:
        target, verdict, rest = verdict_line(r)
        style = _STYLE.get(verdict.split()[-1], "")
        con.print(Text.assemble(target, " ", (verdict, style), (" " + rest) if rest else ""))
