"""What the commands print on a terminal (rich text): one renderer per command.

:data:`TEXT` (at the end) says which of these each command uses; a renderer
takes one report (plus the command's context keywords) and prints it.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, cast

from lrdoctor.core.findings import Severity
from lrdoctor.core.numbers import number

if TYPE_CHECKING:  # rich is imported where text is drawn: --quiet's verdict lines need none
    from rich.console import Console
    from rich.table import Table

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


class _NoPadding:
    """A stdout that drops the spaces rich pads each line with to the console width:
    piped output (CI logs, ``| grep``) must not carry 120 columns of trailing blanks."""

    def __init__(self, out) -> None:
        self.out = out
        self.buf = ""

    def write(self, s: str) -> int:
        self.buf += s
        if "\n" in self.buf:
            *lines, self.buf = self.buf.split("\n")
            self.out.write("".join(ln.rstrip(" ") + "\n" for ln in lines))
        return len(s)

    def flush(self) -> None:
        if self.buf:
            self.out.write(self.buf)
            self.buf = ""
        self.out.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.out.fileno()


def console() -> Console:
    """Rich console; off a terminal (CI logs, pipes) use a wide fixed width, not 80,
    with no trailing padding."""
    import os
    import sys

    from rich.console import Console

    if sys.stdout.isatty():
        return Console(highlight=False)
    width = int(os.environ.get("COLUMNS", "120"))
    # rich types ``file`` as IO[str] but calls only write/flush/isatty/fileno, which
    # _NoPadding has: a cast at rich's boundary, not a second stream class.
    return Console(highlight=False, width=width, file=cast("IO[str]", _NoPadding(sys.stdout)))


def _short(source: str, target: str) -> str:
    """Sources relative to the inspected checkpoint keep the table readable."""
    from pathlib import Path

    base = str(Path(target).parent if Path(target).is_file() else Path(target))
    return source[len(base) + 1:] if source.startswith(base + "/") else source


def _six_digits(x) -> str:
    return number(x, digits=6)


def not_compared(report) -> str | None:
    """Why nothing was compared for ``report``, or None when a comparison happened: the
    scheduler's progress against the trainer's (inspect), or the replayed loop against the
    scheduler's budget (replay). "Agree" is only ever said after a comparison."""
    st = report.state if isinstance(report.state, dict) else {}
    if report.command == "replay" or isinstance(report.extra.get("summary"), dict):
        s = report.extra.get("summary") or {}
        return None if s.get("progress_ratio") is not None else \
            "the replay computed no progress ratio"
    if report.command == "fix":
        return None
    if st.get("scheduler_progress") is None:
        return "no scheduler progress was read"
    if st.get("nominal_progress") is not None:
        return None
    if (st.get("derived") or {}).get("planned_end_in_schedule_units") is not None:
        return None  # the planned end against the schedule's horizon
    return "nothing the trainer saved to compare the scheduler's progress with"


def no_findings_line(report) -> str:
    """The clean verdict in words: "agree" only after a real comparison."""
    why = not_compared(report)
    st = report.state if isinstance(report.state, dict) else {}
    cmp = (st.get("derived") or {}).get("compared")
    if why is None and isinstance(cmp, dict):  # the two counters compared (rules.hypotheses)
        return (f"[green]No findings: the scheduler and the trainer agree "
                f"({cmp['scheduler']} = {_six_digits(cmp['scheduler_value'])}, "
                f"{cmp['other']} = {_six_digits(cmp['other_value'])}).[/green]")
    if why is None:
        return "[green]No findings: the scheduler and the trainer agree.[/green]"
    return f"[yellow]No findings, but not judged: {why}.[/yellow]"


def render_findings(report, con: Console | None = None) -> None:
    from rich.padding import Padding
    from rich.table import Table
    from rich.text import Text
    con = con or console()
    if not report.findings:
        con.print(no_findings_line(report))
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


def render_inspect(report, con: Console | None = None, verbose: bool = False) -> None:
    """The counters compared (every counter read with ``verbose``), schedule, findings."""
    from rich.table import Table
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
    read = st.get("counters", [])
    if verbose or not compared:
        rows += [("[dim]read[/dim]", c) for c in read]
    con.print(_counter_table(rows, compared, report.target, con.width))
    if read and not (verbose or not compared):
        con.print(f"[dim]{len(read)} more counter(s) read: --verbose shows them[/dim]")
    # Label | text, so a wrapped line stays under its text instead of under the label.
    info = Table.grid(padding=(0, 1))
    info.add_column(no_wrap=True)
    info.add_column()
    spec, d = st.get("schedule"), st.get("derived", {})
    if spec:
        unit = spec["unit"]
        # What the saved horizon counts (T_max: calls); its warmup is on the same count.
        hunit = d.get("horizon_unit") or unit
        horizon = f"{_six_digits(spec['horizon'])} {hunit}" if spec.get("horizon") else "none"
        source = _short(spec.get("source") or "checkpoint", report.target)
        info.add_row(
            "schedule:", f"[bold]{spec['family']} {spec['kind']}[/bold] max_lr {spec['max_lr']:g}, "
            f"min_lr {spec['min_lr']:g}, warmup {_six_digits(spec['warmup'])} {hunit}, decay horizon "
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
    logged = [e for e in st.get("evidence") or [] if e.get("role") == "lr" and "step" in e]
    if verbose and logged:  # the log's summary: first, last, floor, peak, each with its field
        info.add_row("logged lr:", "; ".join(
            f"{e['value']:.6g} at step {_six_digits(e['step'])} ({_short(e['where'], report.target)})"
            for e in logged))
    if len(st.get("files") or []) > 1:  # several files: name every one read
        info.add_row("files read:", ", ".join(_short(f, report.target) for f in st["files"]))
    for note in st.get("notes", []):
        info.add_row("[dim]note:[/dim]", f"[dim]{note}[/dim]")
    if info.row_count:
        con.print(info)
    render_findings(report, con)


def _counter_table(rows, compared: int, target: str, width: int) -> Table:
    """A five-column table when it fits; on a narrow terminal one line per counter, wrapped
    under itself (the table split names like scheduler.num_steps mid-word at 80 columns)."""
    from rich.table import Table
    from rich.text import Text
    if width >= 110:
        table = Table(title="Progress counters", title_justify="left", show_edge=False)
        for col in ("role", "counter", "value", "unit", "source"):
            table.add_column(col, overflow="fold", justify="right" if col == "value" else "left")
        for i, (role, c) in enumerate(rows):
            if i == compared and i:
                table.add_section()
            table.add_row(role, c["name"], _six_digits(c["value"]), c["unit"],
                          _short(c.get("source", ""), target))
        return table
    grid = Table.grid(padding=(0, 2))
    grid.title, grid.title_justify = "Progress counters", "left"
    grid.add_column(no_wrap=True)
    grid.add_column()
    for role, c in rows:
        line = Text.assemble((c["name"], "bold"), f" = {_six_digits(c['value'])} {c['unit']}")
        src = _short(c.get("source", ""), target)
        if src:
            line.append(f"  ({src})", "dim")
        grid.add_row(role, line)
    return grid


def render_trend_of_many(reports, con: Console | None = None) -> None:
    """``inspect`` of a run (with or without --all): the trend table first."""
    if reports and (reports[-1].extra or {}).get("run"):
        render_trend(reports, con)


def render_trend(reports, con: Console | None = None) -> None:
    """The run's history, one row per checkpoint: nominal and scheduler progress with their
    deltas from the previous checkpoint, the interval's ratio, horizon, optimizer LR, and
    the codes found there (the run's codes at the checkpoint where their interval ends)."""
    from rich.table import Table
    con = con or console()
    run = (reports[-1].extra or {}).get("run") if reports else None
    if not run or not run.get("checkpoints"):
        return
    rows = run["checkpoints"]

    # Each column labelled by what its numbers count (the rows' units: RunState.unit_of),
    # never by the model's unit: a scheduler stepped per micro-batch counts calls.
    def counted(key: str) -> str:
        got = sorted({u for row in rows if (u := (row.get(key) or {}).get("unit")
                                            if key != "horizon" else row.get("horizon_unit"))})
        return " / ".join(got)

    labels = {col: counted(key) for col, key in
              (("nominal", "updates"), ("scheduler", "scheduler"), ("horizon", "horizon"))}
    if len({u for u in labels.values() if u}) <= 1:
        units_line = f"progress and horizon in {next((u for u in labels.values() if u), 'unknown units')}"
    else:
        units_line = "; ".join(f"{col} in {u}" for col, u in labels.items() if u)

    table = Table(title="Trend over checkpoints", title_justify="left", show_edge=False)
    names = [row["checkpoint"] for row in rows]
    cols = ("checkpoint", "nominal", "scheduler", "ratio", "horizon", "optimizer LR",
            "found")
    for col in cols:
        # Names are never cut: at 80 columns every row read 'checkpoint-…'.
        table.add_column(col, justify="left" if col in ("checkpoint", "found") else "right",
                         no_wrap=col == "checkpoint",
                         min_width=min(max(map(len, names)), 40) if col == "checkpoint" else None)
    for row in rows:
        up, sp = row.get("updates"), row.get("scheduler")
        du, ds = row.get("updates_delta"), row.get("scheduler_delta")
        ratio = (f"{ds / du:.4g}" if du and ds is not None else "-")
        codes = sorted(set(row.get("codes") or []) | set(row.get("checkpoint_codes") or []))
        worst = Severity(["info", "warning", "error"].index(row["worst"]) + 1) \
            if row.get("worst") else None
        found = (f"[{_STYLE[worst]}]{', '.join(codes)}[/]" if codes and worst
                 else ", ".join(codes) or "[green]ok[/green]")
        table.add_row(
            row["checkpoint"],
            _six_digits(up["value"]) + (f" {_delta(du)}" if du is not None else "") if up else "-",
            _six_digits(sp["value"]) + (f" {_delta(ds)}" if ds is not None else "") if sp else
            "[bold]none[/bold]",
            ratio, _six_digits(row.get("horizon")),
            f"{row['optimizer_lr']:.3g}" if row.get("optimizer_lr") is not None else "-", found)
    con.print(table)
    # Units and the columns' meaning under the table: in the headers they were cut at 80.
    con.print(f"[dim]{units_line}; "
              "(+n): change since the previous checkpoint; ratio: scheduler change / nominal "
              "change[/dim]")
    for why in run.get("skipped") or []:
        con.print(f"[yellow]not read:[/yellow] {why}")


def _delta(x) -> str:
    return f"({'+' if x >= 0 else ''}{_six_digits(x)})"


# ------------------------------------------------------------------- check

def render_check_target(rep, con: Console | None = None, verbose: bool = False) -> None:
    """One checked target: its verdict against its own threshold, findings, ignores
    (``verbose``: an inspected checkpoint's counters too)."""
    from lrdoctor.core.findings import exit_code

    con = con or console()
    failing = exit_code(rep.findings, rep.extra.get("fail_on", "warning"))
    verdict = "[bold red]FAIL[/]" if failing else "[green]ok[/]"
    con.print(f"{verdict} {rep.command} [bold]{rep.target}[/] "
              f"[dim](fail-on {rep.extra.get('fail_on', 'warning')})[/]")
    if verbose and rep.command == "inspect" and rep.state:
        render_inspect(rep, con, verbose=True)
    else:
        render_findings(rep, con)
    for ig in rep.extra.get("ignored", []):
        con.print(f"  [dim]ignored {ig['code']}: {ig['reason']} ({ig['config_key']})[/]")


def render_check_summary(reports) -> None:
    """With more than one target (a fleet's runs), a table of them; then the count."""
    from lrdoctor.core.findings import exit_code

    if len(reports) > 1:
        _check_table(reports)
    failing = sum(exit_code(r.findings, r.extra.get("fail_on", "warning")) for r in reports)
    print(f"lrdoctor check: {len(reports)} target(s), {failing} failing")


def _check_table(reports) -> None:
    """One row per checked target: verdict, format, progress ratio, finding codes."""
    from rich.table import Table

    from lrdoctor.ci.check import progress_ratio
    from lrdoctor.core.findings import exit_code

    t = Table(title="summary", show_header=True, header_style="bold")
    t.add_column("")
    t.add_column("target", overflow="fold")
    t.add_column("format")
    t.add_column("progress", justify="right")
    t.add_column("findings")
    for r in reports:
        failing = exit_code(r.findings, r.extra.get("fail_on", "warning"))
        ratio = progress_ratio(r)
        t.add_row("[bold red]FAIL[/]" if failing else "[green]ok[/]", r.target,
                  r.format or "-", "-" if ratio is None else f"{ratio:.3g}x",
                  ", ".join(sorted({f.code for f in r.findings})) or "-")
    console().print(t)




# --------------------------------------------------------------------- fix

def _fix_cell(v) -> str:
    """A fix table cell: floats to 6 significant digits, lists in brackets."""
    cell = number(v, digits=6, grouping=False, whole_below=0, none="None")
    return "[" + cell + "]" if isinstance(v, list) else cell


def render_fix(report, *, plan, dry_run: bool, result=None, con: Console | None = None,
               **_: object) -> None:
    """The before/after table of a repair plan, then what was (or would be) written."""
    from rich.table import Table
    con = con or console()
    t = plan.target
    if plan.noop:
        msg = "; ".join(plan.notes) or "nothing to fix"
        con.print(f"[green]{msg}[/green] — no output written.")
        return
    assert t is not None
    table = Table(title=f"lrdoctor fix --policy {t.policy}"
                  + (f" (for {', '.join(t.motivated_by)})" if t.motivated_by else ""))
    table.add_column("field", no_wrap=True)
    table.add_column("before", no_wrap=True)
    table.add_column("after", no_wrap=True)
    current = None
    for c in plan.changes:
        if c.file != current:
            current = c.file
            table.add_row(f"[dim]{c.file}[/dim]", "", "")
        table.add_row("  " + c.key_str, _fix_cell(c.before), f"[bold]{_fix_cell(c.after)}[/bold]")
    con.print(table)
    # Each number labelled by what it counts: extend-horizon's 400 are scheduler calls
    # (T_max), not optimizer updates.
    st = plan.state
    unit = st.progress_counts() or (t.unit.value if t.unit else "")
    con.print(f"scheduler progress {_fix_cell(t.progress_before)} -> {_fix_cell(t.progress)} {unit}")
    if t.horizon is not None:
        hunit = st.horizon_counts() or unit
        con.print(f"decay horizon {_fix_cell(t.horizon_before)} -> {_fix_cell(t.horizon)} {hunit}")
    if t.lr_before is not None or t.lr is not None:
        con.print(f"learning rate {_fix_cell(t.lr_before)} -> {_fix_cell(t.lr)}")
    for n in plan.notes:
        con.print(f"[dim]note:[/dim] {n}")
    for w in getattr(plan, "warnings", []):
        con.print(f"[yellow]warning:[/yellow] {w}", highlight=False)
    con.print(choice_line(t), highlight=False)
    if dry_run:
        con.print("[yellow]dry run: nothing written[/yellow]")
    elif result is not None and result.written is not None:
        w = result.written
        if result.unresolved:
            con.print(f"[red]wrote {w.out}[/red] ({len(w.changed)} file(s) rewritten, "
                      f"{w.copied} copied as is"
                      f"{f', {w.linked} hard-linked' if w.linked else ''}), but inspecting it again still shows "
                      f"{', '.join(sorted({f.code for f in result.unresolved}))}: NOT a "
                      f"repaired checkpoint; manifest {w.manifest.name}", highlight=False)
            for f in result.unresolved:
                con.print(f"  [red]{f.code} {f.severity}[/red]: {f.message}", highlight=False)
            from lrdoctor.repair.engine import clearing_step, left_in_run

            con.print(f"  to clear it: {clearing_step(plan, result.unresolved)}",
                      highlight=False)
            run = left_in_run(plan, w.out)
            if run is not None:
                con.print(f"[yellow]warning:[/yellow] the unverified copy stays at {w.out}, "
                          f"inside {run}, the folder of the checkpoint it was made from; "
                          f"its {w.manifest.name} says verified: false. Resume from it only "
                          f"knowingly; remove it with `rm -r {shlex.quote(str(w.out))}`",
                          highlight=False)
        else:
            con.print(f"[green]wrote {w.out}[/green] ({len(w.changed)} file(s) rewritten, "
                      f"{w.copied} copied as is"
                      f"{f', {w.linked} hard-linked' if w.linked else ''}); verified by inspecting it again; "
                      f"manifest {w.manifest.name}")


def fix_line(report, *, plan, dry_run: bool, result=None, **_: object) -> None:
    """``fix --quiet``: one line, what was (or would be) done."""
    if plan.noop:
        print("; ".join(plan.notes) or "nothing to fix")
    elif dry_run:
        print(f"dry run: {len(plan.changes)} field(s) would change (--policy "
              f"{plan.target.policy}); nothing written")
    elif result is not None and result.written is not None:
        checked = "NOT verified: findings remain" if getattr(result, "unresolved", None) \
            else "verified"
        print(f"wrote {result.written.out} ({len(plan.changes)} field(s) changed, "
              f"--policy {plan.target.policy}; {checked})")


def choice_line(t) -> str:
    """What fix chose and the alternative: a default repair must say it was a choice."""
    flags = f"--policy {t.policy}" + (f" --k {_fix_cell(t.k)}" if t.policy == "rescale" and t.k
                                      else "")
    if t.chosen_by != "findings":
        return f"policy: {flags} (as given)"
    line = f"chose {flags} from the findings"
    if t.why:
        line += f" ({t.why})"
    if t.alternative:
        line += f"; the alternative: {t.alternative}"
    return line


def _replay(report, **kw) -> None:
    """replay's view, :func:`lrdoctor.render.replay_text.render_replay` (that module draws
    with this one's console, so it is imported when a replay is printed)."""
    from lrdoctor.render.replay_text import render_replay

    render_replay(report, **kw)


@dataclass(frozen=True)
class TextView:
    """How one command's reports read as text: ``each`` per report (given the
    command's context keywords), and optionally ``before``/``after`` over all of them."""

    each: Callable[..., None]
    before: Callable[..., None] | None = None
    after: Callable[..., None] | None = None
    verdicts: bool = True  # one verdict line per target before the details
    verbose: bool = False  # ``each`` takes ``verbose=True`` (every counter read)
    quiet: Callable[..., None] | None = None  # --quiet without verdict lines: one line each


#: Per command: its text view. ``emit(..., command=NAME)`` picks one; the default is
#: the command of the first report.
TEXT: dict[str, TextView] = {
    "inspect": TextView(each=render_inspect, before=render_trend_of_many, verbose=True),
    "replay": TextView(each=_replay, verbose=True),
    "fix": TextView(each=render_fix, verdicts=False, quiet=fix_line),
    "check": TextView(each=render_check_target, after=render_check_summary, verbose=True),
    "report": TextView(each=render_findings),
}
