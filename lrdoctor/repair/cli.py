"""What ``lrdoctor fix`` prints: the before/after table, the JSON document, progress."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from lrdoctor.errors import UnusableInput
from lrdoctor.repair.engine import FixPlan, FixResult, plan_fix, write_fix
from lrdoctor.repair.writer import MANIFEST


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.6g}"
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return str(v)


def report(plan: FixPlan, *, dry_run: bool, out: Path | None,
           result: FixResult | None = None):
    from lrdoctor.report import Report

    extra: dict[str, Any] = plan.to_dict()
    extra.update({"dry_run": dry_run, "output": str(out) if out and result and result.written
                  else None})
    if result is not None and result.written is not None:
        extra["manifest"] = str(result.written.manifest)
        extra["changed_files"] = [{"file": f, "sha256": h}
                                  for f, h in result.written.changed.items()]
        extra["findings_after"] = [f.to_dict() for f in result.after_findings]
    return Report(command="fix", target=str(plan.path), format=plan.format,
                  state=plan.state.to_dict(), findings=plan.findings, extra=extra)


def render(plan: FixPlan, *, dry_run: bool, out: Path | None,
           result: FixResult | None = None) -> None:
    from rich.table import Table

    from lrdoctor.render import console

    con = console()
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
        table.add_row("  " + c.key_str, _fmt(c.before), f"[bold]{_fmt(c.after)}[/bold]")
    con.print(table)
    unit = t.unit.value if t.unit else ""
    con.print(f"scheduler progress {_fmt(t.progress_before)} -> {_fmt(t.progress)} {unit}")
    if t.horizon is not None:
        con.print(f"decay horizon {_fmt(t.horizon_before)} -> {_fmt(t.horizon)} {unit}")
    if t.lr_before is not None or t.lr is not None:
        con.print(f"learning rate {_fmt(t.lr_before)} -> {_fmt(t.lr)}")
    for n in plan.notes:
        con.print(f"[dim]note:[/dim] {n}")
    con.print(choice_line(t), highlight=False)
    if dry_run:
        con.print("[yellow]dry run: nothing written[/yellow]")
    elif result is not None and result.written is not None:
        w = result.written
        con.print(f"[green]wrote {w.out}[/green] ({len(w.changed)} file(s) rewritten, "
                  f"{w.copied} copied as is); verified by inspecting it again; "
                  f"manifest {w.manifest.name}")


def choice_line(t) -> str:
    """What fix chose and the alternative: a default repair must say it was a choice."""
    flags = f"--policy {t.policy}" + (f" --k {_fmt(t.k)}" if t.policy == "rescale" and t.k
                                      else "")
    if t.chosen_by != "findings":
        return f"policy: {flags} (as given)"
    line = f"chose {flags} from the findings"
    if t.why:
        line += f" ({t.why})"
    if t.alternative:
        line += f"; the alternative: {t.alternative}"
    return line


def run_fix(path: Path, *, out: Path | None, policy: str | None, k: float | None,
            progress: float | None, replay: Path | None, dry_run: bool, force: bool,
            format: str | None, json_out: bool = False, output_format: str = "text",
            fail_on: str = "never") -> int:
    """Plan, write and print a fix; the exit code is 1 when a finding at or above
    ``fail_on`` remains (after the write, or as it is now with --dry-run / nothing to fix)."""
    fmt = "json" if json_out else output_format
    if out is None and not dry_run:
        raise UnusableInput("give --out NEW (or --dry-run): fix never modifies its input")
    plan = plan_fix(path, policy=policy, k=k, progress=progress, replay=replay, format=format)
    if plan.noop and _has_manifest(path) and plan.target is None:
        plan.notes.insert(0, f"already repaired by lrdoctor ({MANIFEST} present)")
    result = None
    if not dry_run and not plan.noop:
        assert out is not None
        bar = _progress(fmt != "text")
        try:
            result = write_fix(plan, out, force=force, progress=bar)
        finally:
            if bar is not None:
                bar.stop()
    rep = report(plan, dry_run=dry_run, out=out, result=result)
    if fmt == "json":
        print(rep.to_json())
    elif fmt == "text":
        render(plan, dry_run=dry_run, out=out, result=result)
    else:
        from lrdoctor import output

        print(output.render([rep], fmt, fail_on=fail_on))
    from lrdoctor.findings import exit_code

    remaining = (result.after_findings if result is not None and result.written is not None
                 else plan.findings)
    return exit_code(remaining, fail_on)


def _has_manifest(path: Path) -> bool:
    p = Path(path)
    return (p / MANIFEST).is_file() if p.is_dir() else \
        p.with_name(p.name + "." + MANIFEST).is_file()


class _Bar:
    """A rich progress bar on stderr for big copies; silent when not a terminal."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TransferSpeedColumn,
        )

        self.p = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                          TransferSpeedColumn(), console=Console(stderr=True), transient=True)

    def add_task(self, *a, **kw):
        self.p.start()
        return self.p.add_task(*a, **kw)

    def update(self, *a, **kw):
        self.p.update(*a, **kw)

    def stop(self):
        self.p.stop()


def _progress(quiet: bool):
    if quiet or not sys.stderr.isatty():
        return None
    return _Bar()
