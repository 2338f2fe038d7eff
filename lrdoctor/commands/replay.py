"""``lrdoctor replay``: replay a run's step accounting before it burns GPU-days."""

# No `from __future__ import annotations` here: typer reads the options from the
# signature, and string annotations were evaluated again for every command on every
# start (half of `lrdoctor --help`'s own time; docs/cli.md "Start-up").
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from lrdoctor.commands._common import (
    ExecutorOpt,
    FailOnOpt,
    JsonOpt,
    OutFileOpt,
    OutputFormat,
    OutputFormatOpt,
    QuietOpt,
    VerboseOpt,
    emit_to,
    guarded,
    jobs_option,
    paths_first,
    png_path,
    print_unusable,
    resolve_format,
    settings,
)

HELP = """Replay a training loop's step accounting: how many optimizer updates each
train step really takes, how that compares with the scheduler's budget, where the
LR reaches its floor, which accumulation windows are short, and how all of it
moves with a memory knob.

The config is an lrdoctor run config (see docs/replay.md), a framework's own config
(verl, SkyRL, NeMo-RL, ROLL, Fast-LLM YAML with its defaults: followed; OpenRLHF
arguments) or the shell launch script that runs the trainer (read, never run).
Sample lengths come from a batch log (JSONL/CSV/Parquet: step, tokens[, prompt_id,
docs, rank]) or a synthetic distribution.
By default on a CPU the fast numpy path replays the whole run in seconds, without
importing torch, and the output says the real-loop cross-check did not run.
--cross-check adds a real torch optimizer and scheduler on a probe model over a sample
of the run (the first train steps and a segment at each dp change or failed update),
compared micro-batch by micro-batch with the fast trace; --torch (or a CUDA device)
runs the whole run through the real loop; --fast never uses torch, even on CUDA.

Examples:

\b
  lrdoctor replay --config run.yaml --batch-log batches.jsonl
  lrdoctor replay --config roll.yaml \\
      --synthetic lognormal:mean=2048,sigma=0.6,max=16384
  lrdoctor replay --config run.yaml --synthetic fixed:5000 \\
      --plot lr.png --trace trace.parquet
  lrdoctor replay --config run.yaml --synthetic uniform:512:8192 \\
      --sweep batching.max_tokens_per_microbatch=4096,8192,16384 --plot sweep.png
  lrdoctor replay --config run.yaml --synthetic fixed:5000 \\
      --sweep train.mini_batch_size=8,16,32,64 --jobs 4 --executor ray
  lrdoctor replay --config run.yaml --torch --device cuda \\
      --model mypkg.models:tiny

Exit codes: 0 clean, 1 findings at/above --fail-on, 2 unusable input.
"""


class Device(str, Enum):
    auto = "auto"
    cpu = "cpu"
    cuda = "cuda"


class Optim(str, Enum):
    sgd = "sgd"
    adamw = "adamw"


def replay_cmd(
    config: Annotated[Path, typer.Option(
        "--config", "-c", help="Run config: lrdoctor YAML, the framework's own (ROLL, "
        "verl, SkyRL, NeMo-RL, Fast-LLM YAML; OpenRLHF arguments) or its launch script "
        "(.sh), translated.")],
    batch_log: Annotated[str | None, typer.Option(
        "--batch-log", help="Batch log: JSONL, CSV or Parquet, one row per sample.")] = None,
    synthetic: Annotated[str | None, typer.Option(
        "--synthetic", help="Synthetic lengths, e.g. fixed:4096, uniform:512:8192, "
        "lognormal:mean=2048,sigma=0.6,max=16384.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed for --synthetic.")] = None,
    fast: Annotated[bool | None, typer.Option(
        "--fast/--torch", help="Fast numpy path only, or the whole run in the real torch "
        "loop (default: fast; on CUDA, torch).")] = None,
    cross_check: Annotated[bool, typer.Option(
        "--cross-check", help="Also run the real torch loop over a sample of the fast "
        "replay and compare every micro-batch (imports torch: seconds).")] = False,
    device: Annotated[Device, typer.Option("--device", help="Device of the torch path.")] =
        Device.auto,
    model: Annotated[str | None, typer.Option(
        "--model", help="module:factory returning your torch model (instead of the probe); "
        "implies --torch.")] = None,
    optimizer: Annotated[Optim, typer.Option("--optimizer", help="Optimizer of the torch path.")] =
        Optim.sgd,
    trace: Annotated[Path | None, typer.Option(
        "--trace", help="Write the per-micro-batch trace (.parquet or .csv).")] = None,
    plot: Annotated[Path | None, typer.Option(
        "--plot", help="Write a PNG: intended vs replayed LR, window sizes.")] = None,
    sweep: Annotated[str | None, typer.Option(
        "--sweep", help="KEY=v1,v2,...: compare values of one config key "
        "(e.g. batching.max_tokens_per_microbatch=4096,8192,16384).")] = None,
    jobs: Annotated[int, jobs_option("Replay this many --sweep values")] = 1,
    executor: ExecutorOpt = "process",
    sets: Annotated[list[str] | None, typer.Option(
        "--set", help="KEY=VALUE for what a launch script leaves unresolved (a variable set "
        "outside it, a $(...)); repeatable.")] = None,
    config_root: Annotated[Path | None, typer.Option(
        "--config-root", help="Folder that `defaults:` inheritance may read from (default: "
        "the config's own folder tree).")] = None,
    knob_check: Annotated[bool, typer.Option(
        "--knob-check/--no-knob-check", help="Also replay with 2x max_tokens_per_microbatch "
        "to test whether progress depends on it (LRD203).")] = True,
    out: OutFileOpt = None,
    fail_on: FailOnOpt = None,
    json_: JsonOpt = False,
    output_format: OutputFormatOpt = None,
    quiet: QuietOpt = False,
    verbose: VerboseOpt = False,
) -> None:
    import sys

    from lrdoctor.commands import _settings
    from lrdoctor.parallel import check_executor
    from lrdoctor.replay import ReplayOptions, replay_full

    fmt = resolve_format(json_, output_format)
    # -c names the run config here; [tool.lrdoctor] is the nearest one (searched upward).
    conf = settings(None, "replay", str(config), "replay", fmt)
    guarded(lambda: check_executor(executor))
    png_path(plot)
    paths_first([config, batch_log], [trace, plot, out],
                lambda exc: print_unusable("replay", str(config), exc, fmt))
    engine = "auto" if fast is None else ("fast" if fast else "torch")
    show_bar = fmt is OutputFormat["text"] and sys.stderr.isatty()

    def go():
        opts = ReplayOptions(engine=engine, cross_check=cross_check, device=device.value, model=model,
                             optimizer=optimizer.value, sweep=sweep, knob_check=knob_check,
                             seed=seed, jobs=jobs, executor=executor, sets=tuple(sets or ()),
                             config_root=str(config_root) if config_root else None)
        if not show_bar:
            return replay_full(str(config), batch_log, synthetic, opts)
        from lrdoctor.render.progress import stage_bar

        with stage_bar() as progress:
            return replay_full(str(config), batch_log, synthetic, opts, progress=progress)

    result = guarded(go, lambda exc: print_unusable("replay", str(config), exc, fmt))
    if trace is not None:
        guarded(lambda: _write_trace(result.replay, trace))
    if plot is not None:
        from lrdoctor.render.replay_plots import plot_replay

        runs = result.sweep if result.sweep else [(None, result.replay)]
        guarded(lambda: plot_replay(runs, plot, result.sweep_key))
    _settings.apply([result.report], conf)
    code = emit_to(out, [result.report], fmt, conf.threshold(fail_on, "warning"),
                   command="replay", quiet=quiet, verbose=verbose, trace=trace, plot=plot)
    raise typer.Exit(code)


def _write_trace(rep, path: Path) -> None:
    from lrdoctor.atomic import replacing
    from lrdoctor.core.errors import UnusableInput

    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv"):
        raise UnusableInput(f"--trace {path}: use a .parquet or .csv name")
    try:
        with replacing(path, suffix=suffix) as tmp:
            rep.write_trace(str(tmp), suffix)
    except OSError as exc:
        raise UnusableInput(f"cannot write: {exc.strerror or exc}", str(path)) from None


def register(app: typer.Typer) -> None:
    app.command("replay", help=HELP)(replay_cmd)
