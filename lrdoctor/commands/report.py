"""``lrdoctor report``: an HTML page with figures for checkpoints and replays."""

# No `from __future__ import annotations` here: typer reads the options from the
# signature, and string annotations were evaluated again for every command on every
# start (half of `lrdoctor --help`'s own time; docs/cli.md "Start-up").
from pathlib import Path
from typing import Annotated, Any

import typer

from lrdoctor.commands._common import (
    AllowUnsafeOpt,
    ConfigFileOpt,
    FailOn,
    FormatOpt,
    JsonOpt,
    OutputFormat,
    QuietOpt,
    VerboseOpt,
    allow_unsafe,
    guarded,
    output_format_help,
    paths_first,
    print_unusable,
    resolve_format,
    warn_unusable,
)

HELP = """Write a self-contained HTML report (index.html, figures embedded, PNGs alongside).

TARGETS are checkpoint paths (inspected) and run configs: YAML, or a launch script as
`lrdoctor replay -c` reads it (replayed with --batch-log, --synthetic or their own data). With no TARGETS, the targets of
[tool.lrdoctor] are used (as `lrdoctor check` would run them, ignores applied).

Examples:

\b
  lrdoctor report runs/llama/ --out lrdoctor-report/
  lrdoctor report configs/run.yaml --synthetic lognormal:mean=2000 \\
      --sweep batching.max_tokens_per_microbatch=4096,8192 --out report/
  lrdoctor report --out report/          # everything [tool.lrdoctor] names
  lrdoctor report runs/llama/ --output-format markdown >> "$GITHUB_STEP_SUMMARY"

The page goes to --out whatever the --output-format; the format is what stdout gets:
text says where the page is, a machine format (json, sarif, junit, github, markdown)
is the targets' findings as `lrdoctor check` prints them, markdown linking the figures.

Exit codes: 0 written (1 with --fail-on when findings reach it); 2 unusable input:
when a target cannot be used the page still shows the others, and the reason is
printed on stderr.
"""

_REPLAY_SUFFIXES = (".yaml", ".yml")


def _is_run_config(target: str) -> bool:
    """A TARGET to replay: a YAML run config, or a launch script as ``replay -c`` and
    ``check --replay`` take it (``looks_like_script``: its name or its first line), not a
    checkpoint ("not a checkpoint" was said of examples/fast-llm-train.sh)."""
    if target.lower().endswith(_REPLAY_SUFFIXES):
        return True
    p = Path(target)
    if not p.is_file():
        return False
    from lrdoctor.replay.launch import looks_like_script

    try:
        with open(p, "rb") as fh:
            head = fh.read(512).decode("utf-8", errors="replace")
    except OSError:
        return False
    return looks_like_script(p, head)


def report_cmd(
    targets: Annotated[list[str] | None, typer.Argument(
        metavar="TARGET", help="Checkpoint paths and/or run configs (.yaml).")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Directory to write into.")] = Path(
        "lrdoctor-report"),
    config: ConfigFileOpt = None,
    format: FormatOpt = None,
    all: Annotated[bool, typer.Option("--all", help="Every checkpoint of a run.")] = False,
    batch_log: Annotated[list[str] | None, typer.Option(
        "--batch-log", metavar="[CONFIG=]LOG", help="Batch log of a replayed config: "
        "CONFIG=LOG (repeatable), or LOG when one config is replayed; a config without "
        "one uses its own data.")] = None,
    synthetic: Annotated[str | None, typer.Option(
        "--synthetic", help="Synthetic lengths for the replayed configs.")] = None,
    sweep: Annotated[str | None, typer.Option(
        "--sweep", help="KEY=v1,v2,...: also replay each value and plot the comparison.")] = None,
    engine: Annotated[str, typer.Option(
        "--engine", help="Replay engine: auto, fast (numpy) or torch.")] = "auto",
    title: Annotated[str, typer.Option("--title", help="Page title.")] = "lrdoctor report",
    fail_on: Annotated[FailOn | None, typer.Option(
        "--fail-on", help="Lowest severity that makes the exit code 1 (default: "
        "[tool.lrdoctor] fail-on, else never: the page is written either way).")] = None,
    json_: JsonOpt = False,
    output_format: Annotated[OutputFormat | None, typer.Option(
        "--output-format", help="What stdout gets: " + output_format_help(
            "text: where the page was written"))] = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
    allow_unsafe_global: AllowUnsafeOpt = None,
) -> None:
    from lrdoctor.ci import check as ci_check
    from lrdoctor.ci import config as ci_config
    from lrdoctor.core.errors import UnusableInput
    from lrdoctor.core.findings import exit_code
    from lrdoctor.render.html import write_report_files

    allow_unsafe(allow_unsafe_global)
    fmt = resolve_format(json_, output_format)
    cfg = guarded(lambda: ci_config.load(config, required=config is not None),
                  lambda exc: print_unusable("report", exc.path or str(config or "pyproject.toml"),
                                             exc, fmt))
    if not cfg.fail_on_set:
        cfg.fail_on = "never"  # a page is written either way: gate only when asked
    if targets:
        repl = [t for t in targets if _is_run_config(t)]
        insp = [t for t in targets if t not in repl]
        declared = list(cfg.targets)
        cfg = guarded(lambda: ci_check.config_from_flags(cfg, insp, repl, batch_log, synthetic,
                                                         None))
        for t in cfg.targets:
            _per_path(t, declared, cfg)
            t.format = (format or t.format) if t.kind == "inspect" else None
            t.all = all or t.all
            if t.kind == "replay":
                t.options = {"engine": engine, **({"sweep": sweep} if sweep else {})}
    elif not cfg.targets:
        from lrdoctor.commands._common import nothing_to_do

        nothing_to_do(cfg.source, "report on", "give TARGETS or add "
                      "[[tool.lrdoctor.inspect]] / [[tool.lrdoctor.replay]]")
    # Where the page would go is checked before any work. When it is refused, nothing is
    # written: a TARGET that is not there is the problem said first (else the page is
    # written for the targets that could be used, the missing one an LRD303 on it).
    def page_place() -> None:
        try:
            refuse_checkpoint_out(Path(out), cfg)
        except UnusableInput:
            paths_first(targets or [], [])  # exits on a missing TARGET
            raise

    guarded(page_place)
    replays: dict = {}
    threshold = fail_on.value if fail_on is not None else None
    reports = guarded(lambda: ci_check.run_check(cfg, fail_on=threshold, replays=replays))
    index, pngs = guarded(lambda: write_report_files(reports, out, title=title,
                                                     replays=replays, inputs=cfg.inputs()))
    if fmt is not OutputFormat["text"]:
        # The document `check` prints (its `reports` in JSON), the figures' paths in
        # each report's extra: a CI job reads stdout, a reviewer opens the page.
        from lrdoctor import render

        given = (targets[0] if targets and len(targets) == 1 else
                 str(cfg.source) if cfg.source and not targets else None)
        render.emit(reports, fmt.value, threshold or cfg.fail_on, command="report",
                    target=given)
    elif not quiet:
        print(f"report written to {index} ({len(reports)} target(s), {len(pngs)} figure(s))")
    if verbose and fmt is OutputFormat["text"]:
        for r in reports:
            print(f"  {r.command} {r.target}: "
                  f"{', '.join(f.code for f in r.findings) or 'no findings'}")
    if warn_unusable(reports):
        raise typer.Exit(2)
    code = max((exit_code(r.findings, r.extra.get("fail_on", "never")) for r in reports),
               default=0)
    raise typer.Exit(code)


def _per_path(t, declared, cfg) -> None:
    """A TARGET named on the command line takes the options [tool.lrdoctor] declares for
    the same path (fail-on, ignores, max-progress-ratio, format, batch log)."""
    from lrdoctor.commands._settings import _matches

    for d in declared:
        if d.kind == t.kind and _matches(cfg.resolve(d.path), cfg.resolve(t.path)):
            t.fail_on, t.max_progress_ratio = d.fail_on, d.max_progress_ratio
            t.ignores, t.format = list(d.ignores), d.format
            if t.kind == "replay" and not (t.batch_log or t.synthetic):
                t.batch_log, t.synthetic = d.batch_log, d.synthetic
            return


def refuse_checkpoint_out(out: Path, cfg: Any) -> None:
    """Fail before the checks run, with the refusals the writer would give at the end
    (:func:`lrdoctor.atomic.refuse_inside_inputs`, :func:`lrdoctor.atomic.refuse_checkpoint`)."""
    from lrdoctor.atomic import refuse_checkpoint, refuse_inside_inputs

    refuse_inside_inputs(out, cfg.inputs())
    refuse_checkpoint(out / "index.html")


def register(app: typer.Typer) -> None:
    app.command("report", help=HELP)(report_cmd)
