"""Rich text rendering shared by all commands."""

from __future__ import annotations

from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

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
        head = Table.grid(padding=(0, 1))
        head.add_column(no_wrap=True)
        head.add_column()
        head.add_row(f"[{_STYLE[f.severity]}]{f.code} {f.severity}:[/]", f"[bold]{f.title}[/bold]")
        con.print(head)
        # Hanging indent: a wrapped message stays under its finding, not at column 0.
        con.print(Padding(Text(f.message), (0, 0, 0, 2)))
        if f.fix:
            fix = Text.assemble(("fix: ", "dim"), f.fix)
            con.print(Padding(fix, (0, 0, 0, 2)))


def render_inspect(report, con: Console | None = None) -> None:
    con = con or console()
    st = report.state
    con.rule(f"[bold]{report.target}[/bold]  ({report.format})")
    rows = []
    # The three that diagnosis compares first, then every raw counter read.
    if st.get("scheduler_progress"):
        rows.append(("[bold]scheduler[/bold]", st["scheduler_progress"]))
    if st.get("nominal_progress"):
        rows.append(("[bold]nominal[/bold]", st["nominal_progress"]))
    if st.get("planned_end"):
        rows.append(("[bold]planned end[/bold]", st["planned_end"]))
    compared = len(rows)
    rows += [("[dim]read[/dim]", c) for c in st.get("counters", [])]
    con.print(_counter_table(rows, compared, report.target, con.width))
    # Label | text, so a wrapped line stays under its text instead of under the label.
    info = Table.grid(padding=(0, 1))
    info.add_column(no_wrap=True)
    info.add_column()
    spec, d = st.get("schedule"), st.get("derived", {})
    if spec:
        unit = spec["unit"]
        horizon = f"{_num(spec['horizon'])} {unit}" if spec.get("horizon") else "none"
        source = _short(spec.get("source") or "checkpoint", report.target)
        info.add_row(
            "schedule:", f"[bold]{spec['family']} {spec['kind']}[/bold] max_lr {spec['max_lr']:g}, "
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
            info.add_row("position:", "; ".join(parts))
    if st.get("optimizer_lrs"):
        info.add_row("optimizer lr:", "param groups " + ", ".join(
            f"{x:.6g}" for x in st["optimizer_lrs"]))
    for note in st.get("notes", []):
        info.add_row("[dim]note:[/dim]", f"[dim]{note}[/dim]")
    if info.row_count:
        con.print(info)
    render_findings(report, con)


def _counter_table(rows, compared: int, target: str, width: int) -> Table:
    """A five-column table when it fits; on a narrow terminal one line per counter, wrapped
    under itself (the table split names like scheduler.num_steps mid-word at 80 columns)."""
    if width >= 110:
        table = Table(title="Progress counters", title_justify="left", show_edge=False)
        for col in ("role", "counter", "value", "unit", "source"):
            table.add_column(col, overflow="fold", justify="right" if col == "value" else "left")
        for i, (role, c) in enumerate(rows):
            if i == compared and i:
                table.add_section()
            table.add_row(role, c["name"], _num(c["value"]), c["unit"],
                          _short(c.get("source", ""), target))
        return table
    grid = Table.grid(padding=(0, 2))
    grid.title, grid.title_justify = "Progress counters", "left"
    grid.add_column(no_wrap=True)
    grid.add_column()
    for role, c in rows:
        line = Text.assemble((c["name"], "bold"), f" = {_num(c['value'])} {c['unit']}")
        src = _short(c.get("source", ""), target)
        if src:
            line.append(f"  ({src})", "dim")
        grid.add_row(role, line)
    return grid


def render_trend(reports, con: Console | None = None) -> None:
    con = con or console()
    import os

    units = {(r.state.get("scheduler_progress") or {}).get("unit") for r in reports} - {None}
    unit = f" ({units.pop()})" if len(units) == 1 else ""
    table = Table(title="Trend over checkpoints", title_justify="left", show_edge=False)
    # The checkpoints' own names, not a long shared prefix that the table would cut.
    base = os.path.commonpath([r.target for r in reports]) if len(reports) > 1 else ""
    names = [os.path.relpath(r.target, base) if base and r.target != base else r.target
             for r in reports]
    for col in ("checkpoint", f"scheduler{unit}", f"nominal{unit}", "ratio", "horizon %", "LR",
                "worst"):
        # Names are never cut: at 80 columns every row read 'checkpoint-…'.
        table.add_column(col, justify="left" if col in ("checkpoint", "worst") else "right",
                         no_wrap=col == "checkpoint",
                         min_width=min(max(map(len, names)), 40) if col == "checkpoint" else None)
    for r in reports:
        st, d = r.state, r.state.get("derived", {})
        sp, nom = st.get("scheduler_progress"), st.get("nominal_progress")
        worst = max((f.severity for f in r.findings), default=None)
        ratio = d.get("progress_ratio")
        table.add_row(
            names[reports.index(r)], _num(sp["value"]) if sp else "-", _num(nom["value"]) if nom else "-",
            f"{ratio:.4g}x" if ratio is not None else "-",
            f"{d['horizon_fraction']:.1%}" if d.get("horizon_fraction") is not None else "-",
            _num(d.get("lr_at_scheduler_progress")),
            f"[{_STYLE[worst]}]{worst}[/]" if worst else "[green]ok[/green]")
    con.print(table)
