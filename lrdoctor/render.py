"""Rich text rendering shared by all commands."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from lrdoctor.findings import Severity

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def console() -> Console:
    """Rich console; off a terminal (CI logs, pipes) use a wide fixed width, not 80."""
    import os
    import sys

    width = None
    if not sys.stdout.isatty():
        width = int(os.environ.get("COLUMNS", "120"))
    return Console(highlight=False, width=width)


def _short(source: str, target: str) -> str:
    """Sources relative to the inspected checkpoint keep the table readable."""
    from pathlib import Path

    base = str(Path(target).parent if Path(target).is_file() else Path(target))
    return source[len(base) + 1:] if source.startswith(base + "/") else source


def _num(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and not x.is_integer():
        return f"{x:.6g}"
    return f"{int(x):,}" if isinstance(x, (int, float)) else str(x)


def render_findings(report, con: Console | None = None) -> None:
    con = con or console()
    if not report.findings:
        con.print("[green]No findings: the scheduler and the trainer agree.[/green]")
        return
    for f in sorted(report.findings, key=lambda f: -f.severity):
        con.print(f"[{_STYLE[f.severity]}]{f.code} {f.severity}[/]: [bold]{f.title}[/bold]")
        con.print(f"  {f.message}")
        if f.fix:
            con.print(f"  [dim]fix:[/dim] {f.fix}")


def render_inspect(report, con: Console | None = None) -> None:
    con = con or console()
    st = report.state
    con.rule(f"[bold]{report.target}[/bold]  ({report.format})")
    table = Table(title="Progress counters", title_justify="left", show_edge=False)
    for col in ("role", "counter", "value", "unit", "source"):
        table.add_column(col, overflow="fold", justify="right" if col == "value" else "left")
    rows = []
    # The three that diagnosis compares first, then every raw counter read.
    if st.get("scheduler_progress"):
        rows.append(("[bold]scheduler[/bold]", st["scheduler_progress"]))
    if st.get("nominal_progress"):
        rows.append(("[bold]nominal[/bold]", st["nominal_progress"]))
    if st.get("planned_end"):
        rows.append(("[bold]planned end[/bold]", st["planned_end"]))
    rows += [("", c) for c in st.get("counters", [])]
    for role, c in rows:
        table.add_row(role, c["name"], _num(c["value"]), c["unit"],
                      _short(c.get("source", ""), report.target))
    con.print(table)
    spec, d = st.get("schedule"), st.get("derived", {})
    if spec:
        unit = spec["unit"]
        horizon = f"{_num(spec['horizon'])} {unit}" if spec.get("horizon") else "none"
        source = _short(spec.get("source") or "checkpoint", report.target)
        con.print(
            f"schedule: [bold]{spec['family']} {spec['kind']}[/bold] max_lr {spec['max_lr']:g}, "
            f"min_lr {spec['min_lr']:g}, warmup {_num(spec['warmup'])} {unit}, decay horizon "
            f"{horizon}  [dim]({source})[/dim]")
        parts = []
        if d.get("horizon_fraction") is not None:
            parts.append(f"scheduler at {d['horizon_fraction']:.1%} of its decay horizon")
        if d.get("progress_ratio") is not None:
            parts.append(f"scheduler/nominal progress {d['progress_ratio']:.4g}x")
        if d.get("lr_at_scheduler_progress") is not None:
            lr = f"schedule LR now {d['lr_at_scheduler_progress']:.6g}"
            if d.get("lr_at_nominal_progress") is not None:
                lr += f" (at the nominal progress: {d['lr_at_nominal_progress']:.6g})"
            parts.append(lr)
        if parts:
            con.print("position: " + "; ".join(parts))
    if st.get("optimizer_lrs"):
        con.print("optimizer param-group lr: " + ", ".join(f"{x:.6g}" for x in st["optimizer_lrs"]))
    for note in st.get("notes", []):
        con.print(f"[dim]note: {note}[/dim]")
    render_findings(report, con)


def render_trend(reports, con: Console | None = None) -> None:
    con = con or console()
    import os

    units = {(r.state.get("scheduler_progress") or {}).get("unit") for r in reports} - {None}
    unit = f" ({units.pop()})" if len(units) == 1 else ""
    table = Table(title="Trend over checkpoints", title_justify="left", show_edge=False)
    for col in ("checkpoint", f"scheduler{unit}", f"nominal{unit}", "ratio", "horizon %",
                "LR", "worst"):
        table.add_column(col, justify="left" if col in ("checkpoint", "worst") else "right")
    # The checkpoints' own names, not a long shared prefix that the table would cut.
    base = os.path.commonpath([r.target for r in reports]) if len(reports) > 1 else ""
    for r in reports:
        st, d = r.state, r.state.get("derived", {})
        sp, nom = st.get("scheduler_progress"), st.get("nominal_progress")
        worst = max((f.severity for f in r.findings), default=None)
        ratio = d.get("progress_ratio")
        name = os.path.relpath(r.target, base) if base and r.target != base else r.target
        table.add_row(
            name, _num(sp["value"]) if sp else "-", _num(nom["value"]) if nom else "-",
            f"{ratio:.4g}x" if ratio is not None else "-",
            f"{d['horizon_fraction']:.1%}" if d.get("horizon_fraction") is not None else "-",
            _num(d.get("lr_at_scheduler_progress")),
            f"[{_STYLE[worst]}]{worst}[/]" if worst else "[green]ok[/green]")
    con.print(table)
