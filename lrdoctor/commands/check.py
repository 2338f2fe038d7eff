"""``lrdoctor check``: the CI gate over the targets named in ``[tool.lrdoctor]``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lrdoctor.commands._common import (
    FailOn,
    JsonOpt,
    OutputFormat,
    OutputFormatOpt,
    die,
    emit,
    guarded,
    resolve_format,
    warn_unusable,
)

HELP = """Run every inspect and replay named in [tool.lrdoctor] (pyproject.toml or
lrdoctor.toml, searched upward; or --config FILE) and gate on the findings.

Thresholds come from the config (fail-on, max-progress-ratio, per target);
ignores need a reason, and an ignore that matched nothing is reported (LRD301).
--inspect/--replay on the command line replace the config's targets.

Examples:

  lrdoctor check                                   # uses [tool.lrdoctor]

  lrdoctor check --output-format sarif -o lrdoctor.sarif

  lrdoctor check --inspect 'ckpt/run-*/' --max-progress-ratio 1.05

  lrdoctor check --report lrdoctor-report/    # and write the HTML report

Exit codes: 0 clean, 1 findings at/above the threshold, 2 unusable input or config.
"""


def check_cmd(
    config: Annotated[Path | None, typer.Option(
        "--config", help="Configuration file (pyproject.toml or lrdoctor.toml).")] = None,
    inspect: Annotated[list[str] | None, typer.Option(
        "--inspect", metavar="PATH", help="Checkpoint path or glob to inspect (repeatable).")] = None,
    replay: Annotated[list[str] | None, typer.Option(
        "--replay", metavar="CONFIG", help="Run config to replay (repeatable).")] = None,
    batch_log: Annotated[str | None, typer.Option(
        "--batch-log", help="Batch log for the --replay configs.")] = None,
    synthetic: Annotated[str | None, typer.Option(
        "--synthetic", help="Synthetic lengths for the --replay configs.")] = None,
    max_progress_ratio: Annotated[float | None, typer.Option(
        "--max-progress-ratio", min=0.0,
        help="Largest tolerated actual/nominal scheduler progress (LRD302 above it).")] = None,
    fail_on: Annotated[FailOn | None, typer.Option(
        "--fail-on", help="Lowest severity that makes the exit code 1 "
        "(overrides the config; default from it, else warning).")] = None,
    report: Annotated[Path | None, typer.Option(
        "--report", help="Also write the HTML report and its PNGs to this directory.")] = None,
    output: Annotated[Path | None, typer.Option(
        "--output", "-o", help="Write the output to this file instead of stdout.")] = None,
    json_: JsonOpt = False,
    output_format: OutputFormatOpt = None,
) -> None:
    from lrdoctor import ci_check, ci_config

    fmt = resolve_format(json_, output_format)
    cfg = guarded(lambda: ci_config.load(config, required=config is not None))
    cfg = ci_check.config_from_flags(cfg, inspect or [], replay or [], batch_log, synthetic,
                                     max_progress_ratio)
    if not cfg.targets:
        where = cfg.source or "pyproject.toml"
        die(f"{where}: nothing to check: add [[tool.lrdoctor.inspect]] or "
            "[[tool.lrdoctor.replay]], or pass --inspect/--replay")
    threshold = fail_on.value if fail_on is not None else None
    reports = guarded(lambda: ci_check.run_check(cfg, fail_on=threshold))
    report_dir = report if report is not None else (cfg.resolve(cfg.report) if cfg.report else None)
    if report_dir is not None:
        from lrdoctor.htmlreport import write_report

        index = guarded(lambda: write_report(reports, Path(report_dir), title="lrdoctor check"))
        if fmt is OutputFormat.text:
            print(f"report written to {index}")
    default = FailOn(threshold or cfg.fail_on)
    if output is None:
        _print(reports, fmt, default)
    else:
        import contextlib
        import io

        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            _print(reports, fmt, default)
        guarded(lambda: _write_atomic(output, buf.getvalue()))
    if fmt is OutputFormat.github:
        _step_summary(reports, default.value)
    warn_unusable(reports)
    raise typer.Exit(ci_check.check_exit_code(reports))


def _print(reports, fmt: OutputFormat, default: FailOn) -> None:
    if fmt is OutputFormat.json:
        import json

        # Always an array (one document per checked target), whatever the target count.
        print(json.dumps([r.to_dict() for r in reports], indent=2, allow_nan=False))
        return
    emit(reports, fmt, default, render_text=_render_target)
    if fmt is OutputFormat.text:
        _summary(reports)


def _step_summary(reports, fail_on: str) -> None:
    """On GitHub Actions, a table of targets and findings on the run's summary page."""
    import os

    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    from lrdoctor.output import markdown_summary

    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown_summary(reports, fail_on))
    except OSError as exc:
        import sys

        print(f"lrdoctor: warning: GITHUB_STEP_SUMMARY {path}: {exc.strerror}", file=sys.stderr)


def _render_target(rep) -> None:
    from lrdoctor.findings import exit_code
    from lrdoctor.render import console, render_findings

    con = console()
    failing = exit_code(rep.findings, rep.extra.get("fail_on", "warning"))
    verdict = "[bold red]FAIL[/]" if failing else "[green]ok[/]"
    con.print(f"{verdict} {rep.command} [bold]{rep.target}[/] "
              f"[dim](fail-on {rep.extra.get('fail_on', 'warning')})[/]")
    render_findings(rep, con)
    for ig in rep.extra.get("ignored", []):
        con.print(f"  [dim]ignored {ig['code']}: {ig['reason']} ({ig['config_key']})[/]")


def _summary(reports) -> None:
    from lrdoctor.findings import exit_code

    failing = sum(exit_code(r.findings, r.extra.get("fail_on", "warning")) for r in reports)
    print(f"lrdoctor check: {len(reports)} target(s), {failing} failing")


def _write_atomic(path: Path, text: str) -> None:
    import os
    import tempfile

    from lrdoctor.errors import UnusableInput

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except OSError as exc:
        raise UnusableInput(f"cannot write ({exc.strerror})", str(path)) from None


def register(app: typer.Typer) -> None:
    app.command("check", help=HELP)(check_cmd)
