"""Rich text rendering shared by all commands."""

from __future__ import annotations

from rich.console import Console

from lrdoctor.findings import Severity

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def console() -> Console:
    return Console(highlight=False)


def render_findings(report, con: Console | None = None) -> None:
    con = con or console()
    if not report.findings:
        con.print("[green]No findings.[/green]")
        return
    for f in sorted(report.findings, key=lambda f: -f.severity):
        con.print(f"[{_STYLE[f.severity]}]{f.code} {f.severity}[/]: [bold]{f.title}[/bold]")
        con.print(f"  {f.message}")
        if f.fix:
            con.print(f"  [dim]fix:[/dim] {f.fix}")
