"""A folder of runs as text: one section per run, worst first (``inspect`` of ``runs/``).

:func:`lrdoctor.render.emit` groups the reports by their run (``Report.run``) and calls
:func:`render_run_header` before each run's section (its trend table and checkpoints, as
one run alone prints them), then :func:`render_not_runs` once.
"""

from __future__ import annotations

from rich.console import Console

from lrdoctor.render.text import _STYLE, console


def render_run_header(group, groups, con: Console | None = None) -> None:
    """The title of one run's section in a folder of runs: which run of how many, its
    folder, its reader and how many checkpoints it holds, and its worst finding."""
    con = con or console()
    run = group[0].run
    worst = max((f.severity for r in group for f in r.findings), default=None)
    rows = ((group[-1].extra or {}).get("run") or {}).get("checkpoints") or []
    n = max(len(rows), len(group))
    verdict = f"[{_STYLE[worst]}]{worst}[/]" if worst is not None else "[green]ok[/green]"
    con.rule(f"run {groups.index(group) + 1} of {len(groups)}: [bold]{run.root if run else ''}"
             f"[/bold] ({group[-1].format or '-'}, {n} checkpoint{'s' if n != 1 else ''}): "
             f"{verdict}", style="bold")


def render_not_runs(reports, con: Console | None = None) -> None:
    """The folders of a folder of runs that held checkpoint-looking files but no run."""
    run = next((r.run for r in reports if r.run is not None), None)
    for path, why in run.not_runs if run is not None else ():
        (con or console()).print(f"[yellow]not a run:[/yellow] {path}: {why}", soft_wrap=True)
