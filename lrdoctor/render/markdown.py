"""``--output-format markdown``: GitHub-flavoured Markdown for ``$GITHUB_STEP_SUMMARY``
and pull-request comments.

Why: a CI log is read by whoever opens the job; a PR comment or job summary by the
reviewer. It holds the same findings as ``--json`` (every finding of every report,
with its numbers and its fix), in the order a reviewer reads: the verdict table first
(failing targets first), then each target's findings, then its figures as links (the
report page's PNGs, when ``check --report`` or ``report`` drew them).

Pure text: no markdown library is needed to write it; tests parse it as GFM.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lrdoctor.core.findings import exit_code

if TYPE_CHECKING:
    from lrdoctor.core.report import Report


def cell(x: Any) -> str:
    """A table cell: pipes escaped, one line, backslashes kept."""
    return str(x).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ") \
        .replace("\n", " ")


def prose(x: Any) -> str:
    """Running text: ``<`` escaped (``<path>`` is not an HTML tag) and backslashes kept."""
    return str(x).replace("\\", "\\\\").replace("<", "&lt;")


def code(x: Any) -> str:
    """Inline code that survives backticks in the text."""
    s = str(x).replace("\n", " ")
    fence = "``" if "`" in s else "`"
    return f"{fence}{s}{fence}" if fence == "`" else f"{fence} {s} {fence}"


def _threshold(rep: Report, fail_on: str) -> str:
    return str(rep.extra.get("fail_on", fail_on)) if isinstance(rep.extra, dict) else fail_on


def _evidence_rows(ev: Any, prefix: str = "") -> list[tuple[str, str]]:
    """The finding's numbers as (key, value) rows: scalars and short lists; nested
    mappings flattened with dotted keys (the whole record is in --json)."""
    from lrdoctor.core.numbers import number

    rows: list[tuple[str, str]] = []
    if not isinstance(ev, dict):
        return rows
    for k, v in ev.items():
        key = f"{prefix}{k}"
        if isinstance(v, bool) or v is None:
            rows.append((key, str(v).lower() if isinstance(v, bool) else "none"))
        elif isinstance(v, (int, float)):
            rows.append((key, number(v, digits=6)))
        elif isinstance(v, str):
            rows.append((key, v if len(v) <= 160 else v[:157] + "..."))
        elif isinstance(v, (list, tuple)):
            shown = ", ".join(number(x, digits=6) if isinstance(x, (int, float))
                              and not isinstance(x, bool) else str(x) for x in v[:8])
            rows.append((key, f"[{shown}{', ...' if len(v) > 8 else ''}]"))
        elif isinstance(v, dict) and not prefix:
            rows.extend(_evidence_rows(v, f"{key}."))
    return rows


def _headline(rep: Report) -> str:
    from lrdoctor.render.verdict import headline, worst

    w = worst(rep.findings)
    if w is None:
        from lrdoctor.render.text import not_compared

        why = not_compared(rep)
        return "no findings" if why is None else f"no findings, not judged: {why}"
    return f"{code(w.code)} {w.severity}: {headline(w)}"


def markdown(reports: Sequence[Report], fail_on: str = "warning") -> str:
    """The whole document (see the module doc)."""
    reports = list(reports)
    failing = [exit_code(r.findings, _threshold(r, fail_on)) for r in reports]
    order = sorted(range(len(reports)), key=lambda i: (-failing[i],
                   -max((f.severity for f in reports[i].findings), default=0), i))
    n_fail = sum(failing)
    out = [f"## lrdoctor: {len(reports)} target(s), {n_fail} failing", "",
           "| verdict | target | command | threshold | worst finding | findings |",
           "| --- | --- | --- | --- | --- | --- |"]
    for i in order:
        rep = reports[i]
        worst_sev = max((f.severity for f in rep.findings), default=None)
        if failing[i]:
            verdict = "❌ fail"
        elif worst_sev is not None and _threshold(rep, fail_on) == "never":
            verdict = f"⚠️ {worst_sev}, not gated"
        else:
            verdict = "✅ ok"
        codes = ", ".join(code(f.code) for f in rep.findings) or "none"
        out.append(f"| {verdict} | {code(cell(rep.target))} | {rep.command} | "
                   f"{cell(_threshold(rep, fail_on))} | {cell(_headline(rep))} | {codes} |")
    for i in order:
        rep = reports[i]
        figures = rep.extra.get("figures") if isinstance(rep.extra, dict) else None
        if not rep.findings and not figures:
            continue
        out += ["", f"### {code(rep.target)} ({rep.command}"
                f"{', ' + rep.format if rep.format else ''})"]
        for f in sorted(rep.findings, key=lambda f: -f.severity):
            doc = f.to_dict()  # the evidence exactly as --json has it
            out += ["", f"**{f.code} {f.severity}: {prose(f.title)}**", "", prose(f.message)]
            rows = _evidence_rows(doc.get("evidence"))
            if rows:
                out += ["", "| evidence | value |", "| --- | --- |"]
                out += [f"| {code(k)} | {cell(v)} |" for k, v in rows]
            if f.fix:
                out += ["", f"**Fix:** {prose(f.fix)}"]
        for ig in (rep.extra.get("ignored") or []) if isinstance(rep.extra, dict) else []:
            out += ["", f"_ignored {ig.get('code')}: {ig.get('reason')} "
                    f"({ig.get('config_key')})_"]
        if figures:
            out += ["", "Figures: " + " · ".join(
                f"[{cell(fig.get('caption', 'figure')).split(':')[0]}]({fig['path']})"
                for fig in figures if isinstance(fig, dict) and fig.get("path"))]
    return "\n".join(out) + "\n"


__all__ = ["markdown", "cell"]
