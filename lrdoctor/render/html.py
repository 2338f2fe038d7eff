"""A self-contained HTML report: one page, figures embedded as base64 PNGs and also
written alongside it, so it can be attached to a CI run or opened from a laptop.

Figures come from the commands' own plot functions (:mod:`lrdoctor.render.plots`)
so the page shows exactly what ``--plot`` shows. matplotlib is imported only by
those functions. A replayed target's figures need the replay itself, which the
JSON document does not hold: the caller passes it in ``replays``.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path, PurePath
from typing import Any

from lrdoctor import __version__
from lrdoctor.atomic import refuse_checkpoint, refuse_inside_inputs, write_text
from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.findings import Severity, exit_code
from lrdoctor.core.numbers import number
from lrdoctor.core.report import Report

_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;
max-width:1100px;padding:0 1rem;color:#1b1f24}
h1{font-size:1.5rem;margin-bottom:.2rem} h2{font-size:1.15rem;margin-top:2.2rem;
border-bottom:1px solid #d0d7de;padding-bottom:.3rem} .meta{color:#57606a}
table{border-collapse:collapse;width:100%;margin:.6rem 0} th,td{text-align:left;
padding:.35rem .5rem;border-bottom:1px solid #eaeef2;vertical-align:top}
th{background:#f6f8fa} code{font:12px ui-monospace,SFMono-Regular,Menlo,monospace}
.error{color:#cf222e;font-weight:600} .warning{color:#9a6700;font-weight:600}
.info{color:#0969da} .fail{background:#ffebe9;color:#cf222e;font-weight:600;padding:0 .4rem;
border-radius:4px} .ok{background:#dafbe1;color:#1a7f37;font-weight:600;padding:0 .4rem;
border-radius:4px} figure{margin:1rem 0} figure img{max-width:100%;border:1px solid #d0d7de}
figcaption{color:#57606a;font-size:.9rem} details pre{background:#f6f8fa;padding:.5rem;
overflow:auto;max-height:20rem} td code{overflow-wrap:anywhere}
details.summary{margin:.8rem 0} details.summary>summary{cursor:pointer;color:#57606a}
tr.failing td:first-child{border-left:3px solid #cf222e}
td.code{white-space:nowrap}
@media (max-width:700px){body{margin:1rem auto;font-size:13px} th,td{padding:.25rem .3rem}
.opt{display:none}}
@media (min-width:701px){.fix-inline{display:none}}
"""

_NUMBERS = (  # (label, getter on report.state) shown for inspect reports
    ("scheduler progress", lambda s: _counter(s.get("scheduler_progress"))),
    ("nominal progress (trainer's counters)", lambda s: _counter(s.get("nominal_progress"))),
    ("progress ratio (actual / nominal)", lambda s: (s.get("derived") or {}).get("progress_ratio")),
    ("decay horizon", lambda s: _counter({"value": s["schedule"]["horizon"],
                                          "unit": s["schedule"].get("unit")})
     if (s.get("schedule") or {}).get("horizon") is not None else None),
    ("LR at scheduler progress", lambda s: (s.get("derived") or {}).get("lr_at_scheduler_progress")),
    ("LR at nominal progress", lambda s: (s.get("derived") or {}).get("lr_at_nominal_progress")),
    ("optimizer param-group LRs", lambda s: s.get("optimizer_lrs") or None),
)


def _counter(c: Any) -> Any:
    if isinstance(c, dict) and "value" in c:
        unit = c.get("unit") or ""
        return f"{_html_number(c['value'])} {unit}".strip()
    return None


def _html_number(x: Any) -> str:
    return number(x, whole_below=1e15, none="None")


def _slug(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", text.strip("/")).strip("-.")
    return (s[-60:] or "target").lstrip("-.")


def _figures_inspect(rep: Report, out: Path, stem: str,
                     replay: Any = None) -> list[tuple[str, Path]]:
    if not (isinstance(rep.state, dict) and rep.state.get("schedule")):
        return []
    from lrdoctor.render.plots import plot_inspect

    png = plot_inspect([rep], out / f"{stem}-lr.png")
    return [("Intended LR schedule, where the trainer's counters say training is and where "
             "the scheduler actually is", png)]


def _figures_replay(rep: Report, out: Path, stem: str,
                    replay: Any = None) -> list[tuple[str, Path]]:
    """The replay's own plots, from the :class:`~lrdoctor.replay.ReplayResult` behind
    ``rep`` (none when the caller has only the report)."""
    result = replay
    if result is None:
        return []
    from lrdoctor.render.replay_plots import plot_replay, updates_per_step_plot

    figs = []
    lr_png = out / f"{stem}-lr.png"
    plot_replay([(None, result.replay)], lr_png)
    figs.append(("Intended vs replayed LR over train steps (floor min_lr and the step where "
                 "the scheduler reaches it marked), and micro-batches per optimizer update "
                 "(window sizes)", lr_png))
    figs.append(("Optimizer updates per train step: replayed vs nominal",
                 updates_per_step_plot(result.replay, out / f"{stem}-updates.png")))
    if result.sweep:
        sweep_png = out / f"{stem}-sweep.png"
        plot_replay(result.sweep, sweep_png, key=result.sweep_key)
        figs.append((f"Sweep over {result.sweep_key}: LR and updates per train step for each "
                     "value", sweep_png))
    return figs


#: Per command: ``fn(report, out_dir, stem, replay) -> [(caption, png)]``.
FIGURES: dict[str, Callable[[Report, Path, str, Any], list[tuple[str, Path]]]] = {
    "inspect": _figures_inspect,
    "replay": _figures_replay,
}


def figures_for(rep: Report, out: Path, stem: str,
                replay: Any = None) -> tuple[list[tuple[str, Path]], str | None]:
    """The report's figures, and a one-line note when they could not be drawn."""
    fn = FIGURES.get(rep.command)
    if fn is None:
        return [], None
    try:
        return fn(rep, out, stem, replay), None
    except UnusableInput as exc:
        return [], str(exc)
    except (ValueError, KeyError, TypeError, ZeroDivisionError, OverflowError) as exc:
        return [], f"figure not drawn: {type(exc).__name__}: {exc}"


def _esc(x: Any) -> str:
    return html.escape(str(x), quote=True)


_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def _prose(x: Any) -> str:
    """A finding's title, message or fix: escaped, its Markdown code spans (`--policy
    nominal`, `lr_decay_steps`) as <code>, never shown as raw backticks."""
    return _CODE_SPAN.sub(r"<code>\1</code>", _esc(x))


def render_html(reports: list[Report], figures: dict[int, list[tuple[str, Path]]],
                notes: dict[int, str], title: str = "lrdoctor report") -> str:
    """The page; ``figures[i]`` are (caption, png) for ``reports[i]``, embedded inline."""
    now = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    failing = [exit_code(r.findings, r.extra.get("fail_on", "warning")) for r in reports]
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_esc(title)}</h1>",
        f'<p class="meta">lrdoctor {_esc(__version__)} &middot; {now} &middot; '
        f"{header_counts(reports, failing)}</p>",
        "<table class=\"targets\"><thead><tr><th>target</th><th class=\"opt\">command</th>"
        "<th class=\"opt\">format</th><th class=\"opt\">threshold</th>"
        "<th>findings</th><th>verdict</th></tr></thead><tbody>",
    ]
    order = page_order(reports, failing)
    for i in order:
        rep, bad = reports[i], failing[i]
        counts = {s: sum(1 for f in rep.findings if f.severity == s) for s in Severity}
        summary = ", ".join(f'<span class="{s}">{n} {s}</span>'
                            for s, n in sorted(counts.items(), reverse=True) if n) or "none"
        parts.append(
            f'<tr class="{"failing" if bad else "passing"}">'
            f'<td><a href="#t{i}"><code>{_esc(rep.target)}</code></a></td>'
            f'<td class="opt">{_esc(rep.command)}</td>'
            f'<td class="opt">{_esc(rep.format or "")}</td>'
            f'<td class="opt">{_esc(rep.extra.get("fail_on", "warning"))}</td>'
            f"<td>{summary}</td><td>{gate_verdict(rep, bad)}</td></tr>")
    parts.append("</tbody></table>")
    for i in order:
        parts += _section(i, reports[i], figures.get(i, []), notes.get(i))
    parts.append("</body></html>")
    return "\n".join(parts)


def page_order(reports: list[Report], failing: list[int]) -> list[int]:
    """Indexes in the page's order: failing targets first, then by worst finding, then as
    given (a fleet's one failing run must not sit below twenty clean ones)."""
    return sorted(range(len(reports)), key=lambda i: (
        -failing[i], -max((f.severity for f in reports[i].findings), default=0), i))


def gate_verdict(rep: Report, failing: int) -> str:
    """The verdict cell, honest about the gate: FAIL at the threshold; findings that the
    threshold does not gate are named with their severity ("2 errors, not gated"), never
    "ok" or a bare "not gated" beside them; "not judged" when nothing was compared."""
    threshold = rep.extra.get("fail_on", "warning")
    if failing:
        return f'<span class="fail">FAIL</span> (fail-on {_esc(threshold)})'
    worst = max((f.severity for f in rep.findings), default=None)
    if worst is not None and worst >= Severity.WARNING:
        n = sum(1 for f in rep.findings if f.severity == worst)
        why = "not gated: --fail-on never" if threshold == "never" else \
            f"below fail-on {threshold}"
        return (f'<span class="{worst}">{n} {worst}{"s" if n > 1 else ""}</span> '
                f"({_esc(why)})")
    from lrdoctor.render.text import not_compared

    if not rep.findings and rep.command in ("inspect", "replay") and not_compared(rep):
        return '<span class="warning">not judged</span>'
    return '<span class="ok">ok</span>'


def header_counts(reports: list[Report], failing: list[int]) -> str:
    """What the rows below show, counted: targets by their worst finding, then how many
    fail their threshold (a '0 failing' above rows of errors read as 'all clear')."""
    worst = {"error": 0, "warning": 0, "info": 0, "clean": 0}
    for r in reports:
        w = max((f.severity for f in r.findings), default=None)
        worst[str(w) if w is not None else "clean"] += 1
    words = {"error": "with errors", "warning": "with warnings", "info": "with info only",
             "clean": "clean"}
    shown = ", ".join(f"{n} {words[k]}" for k, n in worst.items() if n) or "nothing"
    gated = [r for r in reports if r.extra.get("fail_on", "warning") != "never"]
    if not gated:
        gate = "not gated (--fail-on never)"
    else:
        gate = f"{sum(failing)} failing their --fail-on threshold"
    return f"{len(reports)} target(s): {shown}; {gate}"


def _named_parts(target: str) -> tuple[str, ...]:
    """The parts of ``target`` that name it: below the working directory when it lies
    there, else its own name. The folders above (a clone's folder, a home directory) are
    where the user stands, not a name for the figure (``01-inspect-fresh-lrd-...`` named
    a PNG after the clone's folder)."""
    from lrdoctor.read.bytes.storage import is_url

    if is_url(target):
        return PurePath(target).parts
    try:
        return Path(target).resolve().relative_to(Path.cwd().resolve()).parts
    except (ValueError, OSError):
        return (PurePath(target).name,)


def figure_stem(i: int, rep: Report, reports: list[Report]) -> str:
    """A readable PNG name: the index, then the target's run and checkpoint names, the
    leading folders every target of its command shares dropped
    (``01-inspect-roll-overshoot-checkpoint-299``; a run config: its name,
    ``03-replay-fastllm-docs``)."""
    if rep.command == "replay":
        return f"{i:02d}-replay-{_slug(PurePath(rep.target).stem)[-48:] or 'config'}"
    paths = [_named_parts(r.target) for r in reports if r.command == rep.command]
    common = 0
    if len(paths) > 1:
        for level in zip(*paths, strict=False):
            if len(set(level)) != 1:
                break
            common += 1
    parts = [p for p in _named_parts(rep.target)[common:] if p not in ("/", "..", ".")]
    if len(paths) == 1:
        parts = parts[-2:]
    parts = parts or [PurePath(rep.target).name or "target"]
    last = PurePath(parts[-1]).stem if "." in parts[-1] else parts[-1]
    name = last if len(parts) == 1 else f"{parts[0]}-{last}"
    return f"{i:02d}-{rep.command}-{_slug(name)[-48:].lstrip('-.') or 'target'}"


def _section(i: int, rep: Report, figs: list[tuple[str, Path]], note: str | None) -> list[str]:
    import json

    out = [f'<h2 id="t{i}">{_esc(rep.command)} <code>{_esc(rep.target)}</code></h2>']
    st = rep.state if isinstance(rep.state, dict) else {}
    rows = []
    if rep.command == "inspect":
        for label, get in _NUMBERS:
            try:
                v = get(st)
            except (AttributeError, TypeError):
                v = None
            if v is not None:
                rows.append((label, v if isinstance(v, str) else _html_number(v)))
    summary = rep.extra.get("summary")
    if isinstance(summary, dict):
        for k, v in summary.items():
            label = k.replace("_", " ")
            if isinstance(v, (int, float, str)) and not isinstance(v, bool):
                rows.append((label, _html_number(v)))
            elif isinstance(v, dict) and v and all(
                    isinstance(x, (int, float, str, type(None))) for x in v.values()):
                rows.append((label, ", ".join(f"{a.replace('_', ' ')} {_html_number(x)}"
                                              for a, x in v.items() if x is not None)))
    if rep.findings:
        out.append('<table class="findings"><thead><tr><th>code</th><th>finding</th>'
                   '<th class="opt">fix</th></tr></thead><tbody>')
        for f in sorted(rep.findings, key=lambda f: -f.severity):
            ev = ""
            if f.evidence:
                ev = ("<details><summary>evidence</summary><pre>"
                      + _esc(json.dumps(f.evidence.to_dict(), indent=2)) + "</pre></details>")
            # On a narrow screen the fix follows the finding in its own cell (the
            # four columns were cut at 420 px).
            inline = (f'<p class="fix-inline"><b>fix:</b> {_prose(f.fix)}</p>' if f.fix else "")
            out.append(
                f'<tr><td class="code"><code>{_esc(f.code)}</code><br>'
                f'<span class="{f.severity}">{f.severity}</span></td>'
                f"<td><b>{_prose(f.title)}</b><br>{_prose(f.message)}{inline}{ev}</td>"
                f'<td class="opt fix">{_prose(f.fix)}</td></tr>')
        out.append("</tbody></table>")
    else:
        from lrdoctor.render.text import not_compared

        why = not_compared(rep) if rep.command in ("inspect", "replay") else None
        out.append('<p><span class="ok">No findings.</span></p>' if why is None else
                   f'<p><span class="warning">No findings, but not judged: {_esc(why)}.'
                   "</span></p>")
    for ig in rep.extra.get("ignored", []) or []:
        out.append(f'<p class="meta">ignored <code>{_esc(ig.get("code"))}</code>: '
                   f'{_esc(ig.get("reason"))} ({_esc(ig.get("config_key"))})</p>')
    for caption, png in figs:
        data = base64.b64encode(Path(png).read_bytes()).decode("ascii")
        out.append(f'<figure><img alt="{_esc(caption)}" src="data:image/png;base64,{data}">'
                   f"<figcaption>{_esc(caption)} (<code>{_esc(Path(png).name)}</code>)"
                   "</figcaption></figure>")
    if note:
        out.append(f'<p class="meta">{_esc(note)}</p>')
    if rows:  # the raw numbers last, folded: the findings and figures say what matters
        out.append(f'<details class="summary"><summary>{len(rows)} numbers read and '
                   "computed</summary><table><tbody>" + "".join(
                       f"<tr><th>{_esc(k)}</th><td>{_esc(v)}</td></tr>" for k, v in rows)
                   + "</tbody></table></details>")
    return out


def write_report(reports: list[Report], out_dir: Path, title: str = "lrdoctor report",
                 replays: Mapping[int, Any] | None = None,
                 inputs: Sequence[str | os.PathLike[str]] = ()) -> Path:
    """Write ``index.html`` and its PNGs into ``out_dir``; returns the page's path
    (:func:`write_report_files` also returns the PNGs it wrote)."""
    return write_report_files(reports, out_dir, title, replays, inputs)[0]


#: The PNG names :func:`figure_stem` makes (``01-inspect-...-lr.png``): only these are
#: ever removed from a report folder, and only when the page there is lrdoctor's.
_OUR_PNG = re.compile(r"^\d{2,}-(inspect|replay|check|fix|report)-.+\.png$")


def _remove_stale(out_dir: Path, keep: set[Path]) -> list[str]:
    """Figures an earlier report left in ``out_dir`` that this page does not show: removed,
    so the folder holds what the page embeds (an old "8 figure(s)" beside a page of 1).
    Only lrdoctor's own names, and only where ``index.html`` is an lrdoctor page."""
    index = out_dir / "index.html"
    try:
        ours = index.is_file() and "lrdoctor" in index.read_text(errors="replace")[:4000]
    except OSError:
        ours = False
    if not ours:
        return []
    removed = []
    for p in out_dir.glob("*.png"):
        if p not in keep and _OUR_PNG.match(p.name) and p.is_file():
            try:
                p.unlink()
                removed.append(p.name)
            except OSError:
                pass
    return removed


def write_report_files(reports: list[Report], out_dir: Path, title: str = "lrdoctor report",
                       replays: Mapping[int, Any] | None = None,
                       inputs: Sequence[str | os.PathLike[str]] = ()
                       ) -> tuple[Path, list[Path]]:
    """Write ``index.html`` and its PNGs into ``out_dir``; the page's path and the PNGs
    this page embeds (stale ones of an earlier report there removed).

    Never inside a checkpoint, nor inside one of ``inputs`` (the runs the reports were
    made from) or the reports' own targets: the writer refuses, whichever command calls.

    ``replays[i]`` is the :class:`~lrdoctor.replay.ReplayResult` behind ``reports[i]``
    when it was replayed (as :func:`lrdoctor.ci.check.run_check` fills it): its figures
    are drawn from it."""
    replays = replays or {}
    out_dir = Path(out_dir)
    try:
        refuse_inside_inputs(out_dir, [*inputs, *(r.target for r in reports)])
        refuse_checkpoint(out_dir / "index.html")  # before the folder is made
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UnusableInput(f"cannot create the report directory ({exc.strerror})",
                            str(out_dir)) from None
    figures: dict[int, list[tuple[str, Path]]] = {}
    notes: dict[int, str] = {}
    for i, rep in enumerate(reports):
        figs, note = figures_for(rep, out_dir, figure_stem(i, rep, reports), replays.get(i))
        figures[i] = figs
        if note:
            notes[i] = note
    page = render_html(reports, figures, notes, title)
    index = out_dir / "index.html"
    pngs = [Path(png) for figs in figures.values() for _, png in figs]
    for i, figs in figures.items():  # linked from --output-format markdown
        if figs:
            reports[i].extra["figures"] = [{"caption": c, "path": Path(p).as_posix()}
                                           for c, p in figs]
    _remove_stale(out_dir, set(pngs))
    write_text(index, page)
    return index, pngs


__all__ = ["write_report", "write_report_files", "render_html", "figures_for", "FIGURES"]
