"""``lrdoctor replay``: replay a training loop's step accounting before it burns GPU-days.

Modules: :mod:`.config` (the run config), :mod:`.batchlog` (batch logs and
synthetic lengths), :mod:`.samples` (which of them a replay reads),
:mod:`.planning` (each step micro-batched through :mod:`.packing`, the frameworks'
packers), :mod:`.nominal` (what the config promises: updates, budget, horizon,
schedule), :mod:`.translate` (the frameworks' own configs), :mod:`.engine` (fast numpy path),
:mod:`.torch_exec` (real optimizer/scheduler path), :mod:`.analysis`
(summary, findings, sweeps) and :mod:`.plots`.

Nothing here is imported on the ``lrdoctor --help`` path.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from lrdoctor.core.report import Report
    from lrdoctor.replay.engine import Replay

# --torch runs the whole run through the real loop; the default on a CPU is the fast
# path alone (torch is not even imported: the import is most of a default replay's
# time), and says that the real-loop cross-check did not run; --cross-check adds a
# torch run of a sample (lrdoctor.replay.crosscheck). On CUDA the default is the whole
# run in torch. The torch path runs a few hundred micro-batches a second on one CPU
# core (benchmarks/bench_replay.py).
TORCH_EXTRA = "pip install 'lrdoctor[torch]'"  # lrdoctor.extras.install_hint("torch")


@dataclass(frozen=True)
class ReplayOptions:
    """How to replay, besides the config and the sample lengths: the CLI's flags, a CI
    target's ``options`` (:meth:`from_mapping`), the API's keyword.

    ``engine``: ``auto`` (fast path; the whole run in torch on CUDA), ``fast`` or
    ``torch``. ``cross_check``: also run the real torch loop over a sample of a fast
    replay and compare (opt-in: importing torch alone costs seconds). ``sweep``: ``KEY=v1,v2``. ``knob_check``:
    also replay with 2x the memory knob (LRD203). ``jobs``/``executor``: where the
    sweep values run (the results do not depend on it). ``sets``: ``key=value``
    settings for what a launch script leaves unresolved (``--set``).
    """

    engine: str = "auto"
    cross_check: bool = False
    device: str = "auto"
    model: str | None = None
    optimizer: str = "sgd"
    sweep: str | None = None
    knob_check: bool = True
    seed: int | None = None
    jobs: int = 1
    executor: str = "process"
    sets: tuple[str, ...] = ()
    config_root: str | None = None  # the folder ``defaults:`` may read from

    @classmethod
    def from_mapping(cls, data: dict[str, Any], source: str | None = None) -> ReplayOptions:
        """Options from a mapping (a CI config); an unknown name or a wrong type is one line."""
        from dataclasses import fields

        from lrdoctor.core.errors import UnusableInput

        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise UnusableInput(f"replay options: unknown {', '.join(unknown)} (allowed: "
                                f"{', '.join(known)})", source)
        out: dict[str, Any] = {}
        for key, val in data.items():
            default = known[key].default
            if key == "sets":
                val = tuple(str(v) for v in (val if isinstance(val, (list, tuple)) else [val]))
            elif isinstance(default, bool) and not isinstance(val, bool):
                raise UnusableInput(f"replay options: {key} is {val!r}; expected true or false",
                                    source)
            elif isinstance(default, int) and not isinstance(default, bool) and (
                    isinstance(val, bool) or not isinstance(val, int)):
                raise UnusableInput(f"replay options: {key} is {val!r}; expected an integer",
                                    source)
            out[key] = val
        return cls(**out)


@dataclass
class ReplayResult:
    report: Report
    replay: Replay
    sweep: list[tuple[Any, Replay]] = field(default_factory=list)
    sweep_key: str | None = None


def parse_sweep(text: str) -> tuple[str, list[Any]]:
    """``KEY=v1,v2,...`` -> (key, values)."""
    from lrdoctor.core.errors import UnusableInput
    from lrdoctor.replay.config import parse_value

    key, sep, vals = text.partition("=")
    values = [parse_value(v.strip()) for v in vals.split(",") if v.strip()]
    if not sep or not key.strip() or not values:
        raise UnusableInput(f"--sweep {text!r}: expected KEY=v1,v2,... "
                            "(e.g. batching.max_tokens_per_microbatch=4096,8192)")
    return key.strip(), values


def replay_full(config: str, batch_log: str | None = None, synthetic: str | None = None,
                options: ReplayOptions | None = None, *,
                progress: Callable[[str, int, int], None] | None = None,
                planner: Any = None) -> ReplayResult:
    """Load, plan, replay (fast or torch), analyse; everything the CLI shows.

    ``planner``: a replacement for the packer registry's planning (tests compare a
    framework's own function this way).
    """
    opts = options or ReplayOptions()
    engine, device, model, optimizer = opts.engine, opts.device, opts.model, opts.optimizer
    sweep, knob_check, seed = opts.sweep, opts.knob_check, opts.seed
    jobs, executor = opts.jobs, opts.executor
    from lrdoctor.core.errors import UnusableInput
    from lrdoctor.core.report import Report
    from lrdoctor.replay import analysis
    from lrdoctor.replay import engine as eng
    from lrdoctor.replay.config import load_config, with_key
    from lrdoctor.replay.nominal import schedule_spec
    from lrdoctor.replay.planning import plan_steps
    from lrdoctor.replay.samples import lengths_source, load_samples

    cfg = load_config(config, opts.sets, opts.config_root)
    try:
        samples = load_samples(cfg, batch_log, synthetic, seed)
    except UnusableInput as exc:  # a config key the samples need: name the config
        if exc.path is None:  # same type: LRD303's advice follows it
            raise exc.inside(str(config)) from None
        raise
    # Read by the replay rules: a finding resting on lengths no file holds is a warning.
    cfg._lengths = cfg.lengths_origin(batch_log, synthetic, seed)
    from lrdoctor.replay.sources import run_length_from_log

    cfg = run_length_from_log(cfg, samples, cfg._lengths["kind"] == "batch_log")
    if engine not in ("auto", "fast", "torch"):
        raise UnusableInput(f"engine {engine!r}: allowed: auto, fast, torch")
    steps = cfg.train.steps

    def tick(stage: str):
        return (lambda s: progress(stage, s + 1, steps)) if progress else None

    # An impossible schedule is a config error: say so before the long part.
    import numpy as np

    sps = cfg.train.samples_per_step or len(samples) / max(1, len(np.unique(samples["step"])))
    try:
        schedule_spec(cfg, float(sps))
    except UnusableInput as exc:
        if exc.path is None:  # same type: LRD303's advice follows it
            raise exc.inside(str(config)) from None
        raise
    notes: dict = dict(cfg._source)
    infos = plan_steps(cfg, samples, planner, tick("planning"), notes)
    from lrdoctor.replay.planning import micro_batches

    n_mb = micro_batches(infos) * cfg.train.epochs_per_step
    use_torch, why, torch_ok = _pick_engine(engine, model, device, opts.cross_check)
    cross = None
    if use_torch:
        from lrdoctor.replay import torch_exec

        factory = torch_exec.load_model_factory(model) if model else None
        rep = torch_exec.replay_torch(cfg, infos, device=device, model_factory=factory,
                                      optimizer=optimizer, progress=tick("torch replay"),
                                      notes=notes)
    else:
        rep = eng.simulate(cfg, infos, notes=notes)
        if opts.cross_check and torch_ok:
            from lrdoctor.replay.crosscheck import cross_check

            cross = cross_check(cfg, infos, rep, device="cpu")
        else:  # never silent: the output says the real loop did not check this run
            from lrdoctor.extras import have

            cross = {"ran": False, "why": NOT_ASKED if have("torch") else
                     f"{NOT_ASKED[:-1]}; both need torch, which is not installed: "
                     f"{TORCH_EXTRA})"}
    summary = analysis.summarize(rep)
    summary["engine_reason"] = f"{why} ({n_mb} micro-batches)"
    summary["lengths"] = lengths_source(cfg, batch_log, synthetic)
    if cfg._source:
        summary["config_source"] = dict(cfg._source)
    if cross is not None:
        summary["cross_check"] = cross
        if cross.get("torch_warnings"):  # the sampled real loop's, from the run's start
            summary.setdefault("torch_warnings", cross.pop("torch_warnings"))
        cross.pop("torch_warnings", None)
    sweep_results: list = []
    key = None
    knob = None
    extra: dict[str, Any] = {}
    if sweep:
        key, values = parse_sweep(sweep)
        with_key(cfg, key, values[0], "--sweep")  # validate the key before the long part
        sweep_results = analysis.sweep(cfg, samples, key, values, planner, jobs=jobs,
                                       executor=executor)
        extra["sweep"] = {"key": key, "rows": analysis.sweep_table(sweep_results, key)}
        from lrdoctor.replay.config import MEMORY_KNOBS

        if key in MEMORY_KNOBS:  # a strategy or scheduler sweep is meant to move progress
            knob = analysis.knob_comparison(sweep_results, key, "--sweep")
    elif knob_check:
        knob = analysis.memory_knob_check(rep, samples, planner)
    if knob is not None:
        summary["memory_knob"] = {"key": knob["key"], "source": knob["source"],
                                  "differs": knob["differs"],
                                  "rows": [{"value": v, "updates": u, "progress_end": p}
                                           for v, u, p in knob["rows"]]}
    found = analysis.findings(rep, summary, knob)
    if cfg._keys_used is not None:
        summary["config_keys_used"] = cfg._keys_used
        found.extend(analysis.unmodelled_keys(cfg._unmodelled))
    if cross is not None and cross.get("ran") and not cross["agree"]:
        from lrdoctor.rules import lrd214_replay_engines_disagree as lrd214

        found.append(lrd214.RULE.finding(
            f"The real torch loop disagrees with the fast replay on "
            f"{len(cross['mismatches'])} column(s) of the {cross['micro_batches']} "
            f"micro-batches it ran: {'; '.join(cross['mismatches'])}.",
            lrd214.EnginesDisagree(cross_check=cross)))
    for f in found:
        if f.location and not f.location.startswith(str(config)):
            f.location = f"{config}:{f.location}"
    fmt = cfg._format
    report = Report(command="replay", target=str(config), format=fmt,
                    state={"config": cfg.model_dump(mode="json"),
                           "samples": int(getattr(samples, "total", len(samples))),
                           "notes": notes},
                    findings=found, extra={"summary": summary, **extra})
    return ReplayResult(report, rep, sweep_results, key)


NOT_ASKED = ("not asked for (--cross-check runs a real torch optimizer and scheduler over "
             "a sample of the run and compares every micro-batch; --torch runs the whole run)")


def _pick_engine(engine: str, model: str | None, device: str,
                 cross_check: bool = False) -> tuple[bool, str, bool]:
    """(whole run in torch?, why, can torch run here?) for --fast / --torch / default.

    torch is imported only when it will run: the whole run, the cross-check, or the
    question whether CUDA is there (asked only where a GPU driver's device exists).
    """
    from lrdoctor.extras import MissingExtra, have, need

    fast_why = "--fast" if engine == "fast" else "fast path on CPU"
    if engine == "fast" and model is None and not cross_check:
        return False, "--fast", False
    if not have("torch"):
        if engine == "torch" or model is not None or device == "cuda" or cross_check:
            what = "--model" if model else "--device cuda" if device == "cuda" else \
                "--torch" if engine == "torch" else "--cross-check"
            raise MissingExtra("torch", f"replay {what}")
        return False, "fast path (torch is not installed)", False
    if engine == "torch":
        return True, "--torch", True
    if model is not None:
        return True, "--model runs the real loop", True
    if engine == "auto" and (device == "cuda" or (device == "auto" and _gpu_present()
                                                  and need("torch", "CUDA").cuda.is_available())):
        return True, "CUDA: the whole run in torch", True
    if cross_check:
        return False, f"{fast_why}, cross-checked by torch on a sample", True
    return False, f"{fast_why} (no torch cross-check: --cross-check runs one)", True


def _gpu_present() -> bool:
    """Whether a GPU driver's device node exists (NVIDIA, or ROCm's /dev/kfd): checked
    before importing torch (seconds) to ask ``torch.cuda``. Where there is no /dev
    (Windows), torch is asked."""
    import glob
    import os

    if not os.path.isdir("/dev"):
        return True
    return bool(glob.glob("/dev/nvidia[0-9]*")) or os.path.exists("/dev/kfd")


def run(config: str, batch_log: str | None = None, synthetic: str | None = None,
        options: ReplayOptions | None = None) -> Report:
    """The replay as a :class:`~lrdoctor.core.report.Report`."""
    return replay_full(config, batch_log, synthetic, options).report
