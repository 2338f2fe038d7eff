"""``lrdoctor inspect``: what a saved checkpoint says about training progress."""

# No `from __future__ import annotations` here: typer reads the options from the
# signature, and string annotations were evaluated again for every command on every
# start (half of `lrdoctor --help`'s own time; docs/cli.md "Start-up").
from pathlib import Path
from typing import Annotated

import typer

from lrdoctor.commands._common import (
    AllowUnsafeOpt,
    ConfigFileOpt,
    FailOnOpt,
    FormatOpt,
    JsonOpt,
    OutFileOpt,
    OutputFormat,
    OutputFormatOpt,
    QuietOpt,
    VerboseOpt,
    allow_unsafe,
    emit_to,
    guarded,
    paths_first,
    png_path,
    print_unusable,
    resolve_format,
    settings,
)

HELP = """Read a checkpoint's optimizer and scheduler state and say whether they agree
on how far training has gone.

PATH is a run directory (judged as a run: every checkpoint is read and compared with
the others, the latest is shown in full; --all shows each), one checkpoint directory,
or one checkpoint file, on disk or at a URL (s3://, gs://, az://, https://; see
docs/remote.md). Only metadata is read: no tensor payloads (byte ranges of remote
files), no code from the pickle.

Examples:

  lrdoctor inspect runs/llama/                 # latest checkpoint of a run

  lrdoctor inspect ckpt/checkpoint-400 --json  # one JSON document

  lrdoctor inspect runs/ --all --fail-on warning --plot lr.png

  lrdoctor inspect s3://bucket/runs/llama/ --json
"""


def inspect_cmd(
    path: Annotated[str, typer.Argument(
        metavar="PATH", help="Run directory, checkpoint directory or file; or a URL "
        "(s3://, gs://, az://, https://, memory://).")],
    format: FormatOpt = None,
    all: Annotated[bool, typer.Option("--all", help="Show every checkpoint of a run in full, not only the latest.")] = False,
    plot: Annotated[Path | None, typer.Option("--plot", help="Write a PNG: a run's progress and LR per checkpoint, or one checkpoint's LR curve and position.")] = None,
    out: OutFileOpt = None,
    config: ConfigFileOpt = None,
    json_: JsonOpt = False,
    output_format: OutputFormatOpt = None,
    fail_on: FailOnOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    allow_unsafe_global: AllowUnsafeOpt = None,
) -> None:
    from lrdoctor.commands import _settings
    from lrdoctor.inspect_api import inspect_path

    allow_unsafe(allow_unsafe_global)
    fmt = resolve_format(json_, output_format)
    png_path(plot)
    conf = settings(config, "inspect", path, "inspect", fmt)
    format = format or conf.format
    paths_first([path], [plot, out],
                lambda exc: print_unusable("inspect", path, exc, fmt, format))
    reports = guarded(lambda: inspect_path(path, format=format, all=all),
                      lambda exc: print_unusable("inspect", path, exc, fmt, format))
    _settings.apply(reports, conf)
    from lrdoctor.render import run_groups

    # A folder of runs: the figure is one run's, the worst (the first), and says which.
    groups = run_groups(reports) if reports and reports[0].run is not None else [reports]
    if plot is not None:
        from lrdoctor.render.plots import plot_inspect

        guarded(lambda: plot_inspect(groups[0], plot))
    code = emit_to(out, reports, fmt, conf.threshold(fail_on, "error"), command="inspect",
                   quiet=quiet, verbose=verbose, target=path)
    if plot is not None and fmt is OutputFormat["text"] and not quiet:
        run = groups[0][0].run if len(groups) > 1 else None
        print(f"plot written to {plot}" + (f" (the worst of {len(groups)} runs: {run.root})"
                                           if run is not None else ""))
    raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    app.command("inspect", help=HELP)(inspect_cmd)
