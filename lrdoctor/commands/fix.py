"""``lrdoctor fix``: a thin CLI over :mod:`lrdoctor.repair`.

The repair package plans and writes; this layer checks the options, draws the copy's
progress bar, and hands the report (and the plan, for the text table) to
:func:`lrdoctor.render.emit`."""

# No `from __future__ import annotations` here: typer reads the options from the
# signature, and string annotations were evaluated again for every command on every
# start (half of `lrdoctor --help`'s own time; docs/cli.md "Start-up").
import sys
from enum import Enum
from pathlib import Path
from typing import Annotated

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
    die,
    guarded,
    output_format_help,
    paths_first,
    print_unusable,
    resolve_format,
    settings,
)

HELP = """Write a repaired copy of a checkpoint a run can resume from (the input is never touched).

Without --policy, fix does what the findings recommend and prints it with the alternative
(LRD103 whole k -> rescale; LRD103 non-whole ratio, LRD104, LRD109 -> nominal;
LRD101 alone -> extend-horizon). Policies:

\b
  nominal         scheduler progress := the trainer's own count
                  (or --progress / --from-replay)
  rescale         scheduler counters ran k times too fast: divide them by k (--k)
  extend-horizon  keep progress, move the decay horizon so the schedule ends
                  at the planned end

The optimizer's param-group lr is set to what the schedule gives at the new progress:
the schedule the checkpoint saves or was fitted from its logs, or the one given with
--schedule (a LambdaLR saves no lambda). Without one, the counters are written and one
warning line names the LR left and the option that sets it.
The output is written to a temporary sibling, verified by inspecting it again, and renamed
into place; lrdoctor-fix.json in it records every changed field.

Examples:

\b
  lrdoctor fix ckpt/ --out ckpt-fixed/ --dry-run
  lrdoctor fix ckpt/ --out ckpt-fixed/ --policy extend-horizon
  lrdoctor fix run/checkpoint-800 --out run/checkpoint-800-fixed \\
      --policy rescale --k 4
  lrdoctor fix ckpt.pt --out ckpt-fixed.pt --from-replay replay.json
  lrdoctor fix ckpt.pt --out ckpt-fixed.pt --policy rescale \\
      --schedule '{family: hf, kind: cosine, max_lr: 1e-3, warmup: 100, horizon: 3000}'
  lrdoctor fix ckpt/ --out ckpt-fixed/ --json

Exit codes: 0 written and verified (or nothing to fix), 1 the written copy still shows an
error, a finding the fix was asked to repair or a new warning its policy caused (then it
is not called verified, and what clears it is named), or a finding at/above --fail-on is still there after the fix (with
--dry-run: is there now; default never), 2 unusable input or
ambiguous intent (an existing --out without --force, no --out, conflicting options).
"""


class Policy(str, Enum):
    nominal = "nominal"
    rescale = "rescale"
    extend_horizon = "extend-horizon"


def register(app: typer.Typer) -> None:
    @app.command("fix", help=HELP)
    def fix(
        path: Annotated[str, typer.Argument(
            metavar="PATH", help="Checkpoint (file, checkpoint dir or run dir), or its URL.")],
        out: Annotated[str | None, typer.Option("--out", "-o", help="Where to write the repaired copy (a path or a URL).")] = None,
        policy: Annotated[Policy | None, typer.Option("--policy", help="nominal, rescale or extend-horizon (default: what the findings recommend).")] = None,
        k: Annotated[float | None, typer.Option("--k", help="rescale: how many times too fast the scheduler ran.")] = None,
        progress: Annotated[float | None, typer.Option("--progress", help="nominal: the scheduler progress to set, in the schedule's unit.")] = None,
        from_replay: Annotated[Path | None, typer.Option("--from-replay", help="Use nominal/actual progress (and, where the checkpoint has none, the schedule) from `lrdoctor replay --json` output.")] = None,
        schedule: Annotated[str | None, typer.Option("--schedule", help="The schedule the LR is set from, in the replay config's schedule vocabulary: inline '{family: hf, kind: cosine, max_lr: 1e-3, warmup: 100, horizon: 3000}' or a YAML file (a LambdaLR saves no lambda).")] = None,
        dry_run: Annotated[bool, typer.Option("--dry-run", help="Show what would change; write nothing.")] = False,
        force: Annotated[bool, typer.Option("--force", help="Replace an existing --out.")] = False,
        format: FormatOpt = None,
        json_out: JsonOpt = False,
        output_format: Annotated[OutputFormat | None, typer.Option(
            "--output-format", help=output_format_help("text, also on GitHub Actions"))] = None,
        fail_on: Annotated[FailOn | None, typer.Option(
            "--fail-on", help="Lowest severity still found after the fix (with --dry-run: "
            "found now) that makes the exit code 1 (default: [tool.lrdoctor] fail-on, "
            "else never).")] = None,
        config: ConfigFileOpt = None,
        quiet: QuietOpt = False,
        verbose: VerboseOpt = False,
        allow_unsafe_global: AllowUnsafeOpt = None,
    ) -> None:
        allow_unsafe(allow_unsafe_global)
        fmt = resolve_format(json_out, output_format or OutputFormat["text"])
        if k is not None and not k > 0:
            die(f"--k {k:g}: must be greater than 0 (how many times too fast the scheduler ran)")
        conf = settings(config, "inspect", str(path), "fix", fmt)
        paths_first([path], [None if dry_run else out],
                    lambda exc: print_unusable("fix", str(path), exc, fmt, format),
                    inside_inputs=True)

        def run() -> int:
            return run_fix(path, out=out, policy=policy.value if policy else None, k=k,
                           progress=progress, replay=from_replay, schedule=schedule,
                           dry_run=dry_run, force=force, format=format or conf.format,
                           output_format=fmt.value, fail_on=conf.threshold(fail_on, "never"),
                           quiet=quiet, verbose=verbose, ignores=conf.ignores)

        raise typer.Exit(guarded(run, lambda exc: print_unusable("fix", str(path), exc, fmt,
                                                               format)))


def run_fix(path: Path | str, *, out: Path | str | None, policy: str | None, k: float | None,
            progress: float | None, replay: Path | None, dry_run: bool, force: bool,
            schedule: str | None = None,
            format: str | None, output_format: str = "text", fail_on: str = "never",
            quiet: bool = False, verbose: bool = False, ignores: list | None = None) -> int:
    """Plan, write and print a fix; the exit code is 1 when a finding at or above
    ``fail_on`` remains (after the write, or as it is now with --dry-run / nothing to fix)."""
    from lrdoctor.core.errors import UnusableInput

    if out is None and not dry_run:
        raise UnusableInput("give --out NEW (or --dry-run): fix never modifies its input")
    from lrdoctor.read.bytes.storage import Staging

    with Staging(path, out) as stage:  # URLs: a local copy in, a local folder to publish out
        try:
            return _run_fix(stage, policy=policy, k=k, progress=progress, replay=replay,
                            schedule=schedule, dry_run=dry_run, force=force, format=format,
                            output_format=output_format, fail_on=fail_on, quiet=quiet,
                            verbose=verbose, ignores=ignores or [])
        except UnusableInput as exc:  # named as the user named it, not the staging folder
            raise UnusableInput(stage.rename(str(exc)), detail=exc.detail) from None


def _run_fix(stage, *, policy, k, progress, replay, schedule, dry_run, force, format,
             output_format, fail_on, quiet=False, verbose=False, ignores=()) -> int:
    import contextlib
    import io

    from lrdoctor.core.findings import exit_code
    from lrdoctor.render import emit
    from lrdoctor.render.progress import copy_bar
    from lrdoctor.repair.engine import fix_report, plan_fix, write_fix
    from lrdoctor.repair.writer import MANIFEST

    path = stage.local_input()
    out = None if dry_run else stage.local_output(force)
    plan = plan_fix(path, policy=policy, k=k, progress=progress, replay=replay, format=format,
                    schedule=schedule)
    if plan.noop and _has_manifest(path, MANIFEST) and plan.target is None:
        plan.notes.insert(0, f"already repaired by lrdoctor ({MANIFEST} present)")
    result = None
    if not dry_run and not plan.noop:
        assert out is not None
        bar = copy_bar(output_format != "text")
        try:
            result = write_fix(plan, out, force=force, progress=bar)
        finally:
            if bar is not None:
                bar.stop()
        if stage.remote_out and result.written is not None:
            stage.publish(out, force)
    if result is not None and result.written is not None and result.written.cleaned:
        names = ", ".join(x.name for x in result.written.cleaned)
        print(f"note: removed what an interrupted earlier fix left beside the output: {names}",
              file=sys.stderr)
    rep = fix_report(plan, dry_run=dry_run, out=out, result=result)
    from lrdoctor.ci.check import _apply_ignores

    _apply_ignores(rep, list(ignores))  # [tool.lrdoctor] ignores, as check applies them
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        # No annotations on Actions: the findings are what the fix repairs, its table
        # says more.
        emit(rep, output_format, fail_on, command="fix", plan=plan, dry_run=dry_run,
             result=result, quiet=quiet, annotate=False)
    print(stage.rename(buf.getvalue()), end="")  # URLs, not the local staging folders
    codes = {i.code for i in ignores}
    if result is not None and result.written is not None:
        if result.unresolved:  # never "verified": whatever --fail-on says
            return 1
        return exit_code([f for f in result.after_findings if f.code not in codes], fail_on)
    return exit_code([f for f in plan.findings if f.code not in codes], fail_on)


def _has_manifest(path: Path, manifest: str) -> bool:
    p = Path(path)
    return (p / manifest).is_file() if p.is_dir() else \
        p.with_name(p.name + "." + manifest).is_file()
