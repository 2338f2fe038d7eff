"""``lrdoctor check``: the CI gate over the targets named in ``[tool.lrdoctor]``."""

# No `from __future__ import annotations` here: typer reads the options from the
# signature, and string annotations were evaluated again for every command on every
# start (half of `lrdoctor --help`'s own time; docs/cli.md "Start-up").
from pathlib import Path
from typing import Annotated

import typer

from lrdoctor.commands._common import (
    AllowUnsafeOpt,
    ConfigFileOpt,
    ExecutorOpt,
    FailOn,
    JsonOpt,
    OutputFormat,
    OutputFormatOpt,
    QuietOpt,
    VerboseOpt,
    allow_unsafe,
    emit_to,
    guarded,
    jobs_option,
    nothing_to_do,
    on_github_actions,
    paths_first,
    print_unusable,
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

  lrdoctor check --inspect 's3://bucket/runs/*/checkpoints' --jobs 8
                                                   # a fleet: one result per run

Exit codes: 0 clean, 1 findings at/above the threshold, 2 unusable input or config.
"""


def check_cmd(
    config: ConfigFileOpt = None,
    inspect: Annotated[list[str] | None, typer.Option(
        "--inspect", metavar="PATH", help="Checkpoint path or glob to inspect (repeatable).")] = None,
    replay: Annotated[list[str] | None, typer.Option(
        "--replay", metavar="CONFIG", help="Run config to replay (repeatable).")] = None,
    batch_log: Annotated[list[str] | None, typer.Option(
        "--batch-log", metavar="[CONFIG=]LOG", help="Batch log of a --replay config: "
        "CONFIG=LOG (repeatable), or LOG when one config is replayed.")] = None,
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
        "--out", "-o", "--output", metavar="FILE",
        help="Write the output (any --output-format) to FILE instead of stdout.")] = None,
    jobs: Annotated[int, jobs_option("Inspect this many fleet members")] = 1,
    executor: ExecutorOpt = "process",
    json_: JsonOpt = False,
    output_format: OutputFormatOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    allow_unsafe_global: AllowUnsafeOpt = None,
) -> None:
    import sys

    from lrdoctor.ci import check as ci_check
    from lrdoctor.ci import config as ci_config
    from lrdoctor.parallel import check_executor

    fmt = resolve_format(json_, output_format)
    allow_unsafe(allow_unsafe_global)
    guarded(lambda: check_executor(executor))
    cfg = guarded(lambda: ci_config.load(config, required=config is not None),
                  lambda exc: print_unusable("check", exc.path or str(config or "pyproject.toml"),
                                             exc, fmt))
    cfg = guarded(lambda: ci_check.config_from_flags(
        cfg, inspect or [], replay or [], batch_log, synthetic, max_progress_ratio))
    if not cfg.targets:
        nothing_to_do(cfg.source, "check", "add [[tool.lrdoctor.inspect]] or "
                      "[[tool.lrdoctor.replay]], or pass --inspect/--replay")
    report_dir = report if report is not None else (cfg.resolve(cfg.report) if cfg.report else None)
    # A missing target is each target's own LRD303 (a fleet goes on): only the outputs first.
    paths_first([], [output, Path(report_dir) / "index.html" if report_dir is not None else None])
    threshold = fail_on.value if fail_on is not None else None
    replays: dict = {}

    def run(progress=None):
        return ci_check.run_check(cfg, fail_on=threshold, replays=replays, jobs=jobs,
                                  executor=executor, progress=progress)

    if fmt is OutputFormat["text"] and sys.stderr.isatty():  # a bar over a fleet's runs
        from lrdoctor.render.progress import stage_bar

        with stage_bar() as bar:
            reports = guarded(lambda: run(lambda done, total: bar("check", done, total)))
    else:
        reports = guarded(run)
    if report_dir is not None:
        from lrdoctor.render.html import write_report

        index = guarded(lambda: write_report(reports, Path(report_dir), title="lrdoctor check",
                                             replays=replays, inputs=cfg.inputs()))
        if fmt is OutputFormat["text"]:
            print(f"report written to {index}")
    default = FailOn(threshold or cfg.fail_on)
    emit_to(output, reports, fmt, default, command="check", quiet=quiet, verbose=verbose,
            target=str(cfg.source) if cfg.source else ".")
    if fmt is OutputFormat["github"] or on_github_actions():
        _step_summary(reports, default.value)
    warn_unusable(reports)
    raise typer.Exit(ci_check.check_exit_code(reports))


def _step_summary(reports, fail_on: str) -> None:
    """On GitHub Actions, a table of targets and findings on the run's summary page."""
    import os

    path = os.environ.get("GITHUB_STEP_SUMMARY")
    if not path:
        return
    from lrdoctor.render.markdown import markdown

    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(markdown(reports, fail_on))
    except OSError as exc:
        import sys

        print(f"lrdoctor: warning: GITHUB_STEP_SUMMARY {path}: {exc.strerror}", file=sys.stderr)


def register(app: typer.Typer) -> None:
    app.command("check", help=HELP)(check_cmd)
