"""``lrdoctor replay``: replay a run's step accounting before it burns GPU-days."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from lrdoctor.commands._common import (
    FailOn,
    FailOnOpt,
    JsonOpt,
    OutputFormat,
    OutputFormatOpt,
    emit,
    guarded,
    png_path,
    resolve_format,
)

HELP = """Replay a training loop's step accounting: how many optimizer updates each
train step really takes, how that compares with the scheduler's budget, where the
LR reaches its floor, which accumulation windows are short, and how all of it
moves with a memory knob.

The config is an lrdoctor run config (see docs/replay.md) or ROLL's own YAML.
Sample lengths come from a batch log (JSONL/CSV/Parquet: step, tokens[, prompt_id,
docs, rank]) or a synthetic distribution. Small replays run a real torch optimizer
and scheduler on a probe model (--torch, on --device); long ones use the
equivalent fast numpy path (--fast).

Examples:

\b
  lrdoctor replay --config run.yaml --batch-log batches.jsonl
  lrdoctor replay --config roll.yaml \\
      --synthetic lognormal:mean=2048,sigma=0.6,max=16384
  lrdoctor replay --config run.yaml --synthetic fixed:5000 \\
      --plot lr.png --trace trace.parquet
  lrdoctor replay --config run.yaml --synthetic uniform:512:8192 \\
      --sweep batching.max_tokens_per_microbatch=4096,8192,16384 --plot sweep.png
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
        "--config", "-c", help="Run config (lrdoctor YAML or ROLL's YAML).")],
    batch_log: Annotated[str | None, typer.Option(
        "--batch-log", help="Batch log: JSONL, CSV or Parquet, one row per sample.")] = None,
    synthetic: Annotated[str | None, typer.Option(
        "--synthetic", help="Synthetic lengths, e.g. fixed:4096, uniform:512:8192, "
        "lognormal:mean=2048,sigma=0.6,max=16384.")] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed for --synthetic.")] = None,
    fast: Annotated[bool | None, typer.Option(
        "--fast/--torch", help="Fast numpy path or real torch optimizer+scheduler "
        "(default: torch up to 20,000 micro-batches, fast above).")] = None,
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
    knob_check: Annotated[bool, typer.Option(
        "--knob-check/--no-knob-check", help="Also replay with 2x max_tokens_per_microbatch "
        "to test whether progress depends on it (LRD203).")] = True,
    fail_on: FailOnOpt = FailOn.warning,
    json_: JsonOpt = False,
    output_format: OutputFormatOpt = None,
) -> None:
    import sys

    from lrdoctor.replay import replay_full

    fmt = resolve_format(json_, output_format)
    png_path(plot)
    engine = "auto" if fast is None else ("fast" if fast else "torch")
    show_bar = fmt is OutputFormat.text and sys.stderr.isatty()

    def go():
        if not show_bar:
            return replay_full(str(config), batch_log, synthetic, engine=engine,
                               device=device.value, model=model, optimizer=optimizer.value,
                               sweep=sweep, knob_check=knob_check, seed=seed)
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeRemainingColumn,
        )

        with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                      TimeRemainingColumn(), console=Console(stderr=True),
                      transient=True) as bar:
            tasks: dict[str, int] = {}

            def progress(stage: str, done: int, total: int) -> None:
                if stage not in tasks:
                    tasks[stage] = bar.add_task(stage, total=total)
                if done % 16 == 0 or done == total:
                    bar.update(tasks[stage], completed=done)

            return replay_full(str(config), batch_log, synthetic, engine=engine,
                               device=device.value, model=model, optimizer=optimizer.value,
                               sweep=sweep, knob_check=knob_check, seed=seed,
                               progress=progress)

    result = guarded(go)
    if trace is not None:
        guarded(lambda: _write_trace(result.replay, trace))
    if plot is not None:
        from lrdoctor.replay import plots

        runs = result.sweep if result.sweep else [(None, result.replay)]
        guarded(lambda: plots.plot(runs, plot, result.sweep_key))

    def render(report) -> None:
        _render(report, trace, plot)

    code = emit(result.report, fmt, fail_on, render_text=render)
    raise typer.Exit(code)


def _write_trace(rep, path: Path) -> None:
    import os
    import tempfile

    from lrdoctor.errors import UnusableInput

    df = rep.frame()
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".csv"):
        raise UnusableInput(f"--trace {path}: use a .parquet or .csv name")
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix,
                                   dir=str(path.parent) or ".")
        os.close(fd)
        if suffix == ".parquet":
            df.to_parquet(tmp, index=False)
        else:
            df.to_csv(tmp, index=False)
        from lrdoctor.replay.plots import _umask_mode

        _umask_mode(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise UnusableInput(f"cannot write: {exc.strerror or exc}", str(path)) from None
    finally:
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)


def _num(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float) and x.is_integer():
        return str(int(x))
    return f"{x:.4g}" if isinstance(x, float) else str(x)


def _render(report, trace: Path | None, plot: Path | None) -> None:
    from rich.table import Table

    from lrdoctor.render import console, render_findings

    con = console()
    s = report.extra["summary"]
    t = Table(title=f"replay of {report.target} ({s['engine']} path on {s['device']})",
              show_header=True, header_style="bold")
    t.add_column("")
    t.add_column("nominal", justify="right")
    t.add_column("replayed", justify="right")
    ups = s["updates_per_step"]
    t.add_row("optimizer updates per train step", _num(s["nominal_updates_per_step"]),
              _num(ups["mean"]) + ("" if ups["min"] == ups["max"]
                                   else f" ({_num(ups['min'])}..{_num(ups['max'])})"))
    t.add_row("optimizer updates in total", _num(s["budget_updates"]),
              _num(s["actual_updates"]))
    t.add_row(f"scheduler progress ({s['scheduler_unit']})", _num(s["horizon"]),
              _num(s["scheduler_progress_end"]) + f"  ({s['progress_ratio']:.3g}x)")
    floor = (f"after step {s['floor_step']} of {s['train_steps']}" if s["floor_step"]
             else "never")
    # A schedule that never reached its floor even at >= the planned progress (constant)
    # does not reach it on plan either: 'at step N' beside 'never' read as a finding.
    never = not s["floor_step"] and (s.get("progress_ratio") or 0) >= 1
    t.add_row("LR reaches its floor",
              "never" if never else f"at step {s['train_steps']}", floor)
    ws = s["window_sizes"]
    by_strategy = s.get("windows_by") == "strategy"
    t.add_row("micro-batches per update",
              "set by the strategy" if by_strategy else _num(ws["nominal"]),
              f"{ws['min']}..{ws['max']} (first {ws['first']}, {ws['short']} short)")
    if "peak_memory_bytes" in s:
        t.add_row("peak memory per micro-batch", "", f"{s['peak_memory_bytes'] / 2**20:.1f} MiB")
    con.print(t)
    sw = report.extra.get("sweep")
    if sw:
        st = Table(title=f"sweep over {sw['key']}", header_style="bold")
        # Short headers that fit 80 columns (a dotted key was cut to '…'); units in the caption.
        st.caption = (f"updates: optimizer updates; progress: scheduler's, in {s['scheduler_unit']};"
                      " floor: train step where the LR reaches min_lr; max tokens: most real "
                      "tokens in one micro-batch")
        st.caption_justify = "left"
        cols = ["value", "updates", "per step", "progress", "ratio", "floor", "max tokens",
                "findings"]
        for c in cols:
            st.add_column(c, justify="left" if c == "findings" else "right")
        for r in sw["rows"]:
            lo, hi = r["updates_per_step_min"], r["updates_per_step_max"]
            st.add_row(str(r[sw["key"]]), _num(r["actual_updates"]),
                       _num(lo) if lo == hi else f"{_num(lo)}..{_num(hi)}",
                       _num(r["scheduler_progress_end"]), f"{r['progress_ratio']:.3g}x",
                       _num(r["floor_step"]), _num(r["max_rank_tokens"]),
                       ", ".join(r.get("findings", [])) or "none")
        con.print(st)
    render_findings(report, con)
    for label, p in (("trace", trace), ("plot", plot)):
        if p is not None:
            con.print(f"[dim]{label} written to {p}[/dim]")


def register(app: typer.Typer) -> None:
    app.command("replay", help=HELP)(replay_cmd)
