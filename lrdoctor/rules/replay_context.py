"""What the replay rules (:data:`lrdoctor.rules.REPLAY`) read: :class:`ReplayContext`,
and the views of a replay's trace they share.

Why it lives with the rules: the rules judge, :mod:`lrdoctor.replay` replays and builds
this context (:func:`lrdoctor.replay.analysis.findings`). The dependency runs one way,
replay -> rules, as read -> rules does for a checkpoint's
:class:`~lrdoctor.core.state.RunState`; the replay's own types are named for the type
checker only. Whatever a rule needs that only the replay machinery can compute (the loss
divisor's LR scale needs the configured accumulation) the replay computes and hands over
in the context.

numpy is imported inside the functions: :mod:`lrdoctor.rules` is on ``inspect``'s path,
which stays light.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lrdoctor.core.findings import Evidence, Finding, Severity
from lrdoctor.core.numbers import number
from lrdoctor.rules.common import ReplayBudget

if TYPE_CHECKING:
    from numpy.typing import NDArray

    from lrdoctor.core.state import ScheduleSpec
    from lrdoctor.replay.config import RunConfig
    from lrdoctor.replay.engine import Replay

    Array = NDArray[Any]

#: A replay's numbers are exact arithmetic: this is float noise, not a tolerance of
#: judgement (a checkpoint's saved values get :data:`lrdoctor.rules.common.REL_TOL`).
REL_TOL = 1e-6
#: How far an update's effective LR scale may sit from 1 before LRD215 counts it off
#: (:func:`lrdoctor.replay.loss_scale.scale` counts with it).
LOSS_SCALE_TOL = 0.02


def short(x: float | None) -> str:
    """Short human number: 1024, 0.5, 1e-06."""
    return number(x, grouping=False, whole_below=1e15, none="n/a")


def updates_vs_budget(s: dict[str, Any], way: str) -> str:
    """The replayed optimizer updates against the budget, in words that agree with a title
    saying the scheduler ran past (``way`` "more") or short (``way`` "less") of its horizon:
    "200 optimizer updates vs 200 budgeted" under "stops short" read as a contradiction
    when every budgeted update ran and each moved the scheduler less (a dp change)."""
    done, budget = s["actual_updates"], s["budget_updates"]
    if budget is not None and abs(done - budget) <= REL_TOL * max(abs(budget), 1):
        return (f"all {short(budget)} budgeted optimizer updates ran, but they advanced the "
                f"scheduler {way} than the horizon assumes")
    return f"{short(done)} optimizer updates vs {short(budget)} budgeted"


@dataclass
class ReplayContext:
    """What every replay rule reads: the replay, its summary, the memory-knob comparison,
    the shared fix text and budget evidence, and the loss divisor's LR scale
    (:func:`lrdoctor.replay.loss_scale.scale`; None without a configured divisor)."""

    rep: Replay
    s: dict[str, Any]
    knob: dict[str, Any] | None
    fix_tail: str
    ev_core: ReplayBudget
    loss_scale: dict[str, Any] | None = None
    #: The updates and the scheduler's progress are set by the config alone (the packer
    #: closes one update per mini-batch, the scheduler moves a fixed amount per train step):
    #: a rule declaring ``LENGTHS = "progress"`` then holds for any lengths.
    progress_fixed_by_config: bool = False

    @property
    def cfg(self) -> RunConfig:
        cfg: RunConfig = self.rep.cfg
        return cfg

    @property
    def spec(self) -> ScheduleSpec:
        return self.rep.spec

    @property
    def t(self) -> dict[str, Array]:
        return self.rep.trace


def per_step(rep: Replay) -> dict[str, Array]:
    """One row per train step: updates, scheduler advance, LR at its start (computed once
    per replay: the summary and several rules ask, and a run may have millions of steps)."""
    cache = getattr(rep, "cache", None)
    cached = cache.get("per_step") if isinstance(cache, dict) else None
    if cached is not None and cached[0] is rep.trace:
        hit: dict[str, Array] = cached[1]
        return hit
    out = _per_step(rep)
    if isinstance(cache, dict):
        cache["per_step"] = (rep.trace, out)
    return out


def _per_step(rep: Replay) -> dict[str, Array]:
    import numpy as np

    t = rep.trace
    steps = rep.cfg.train.steps
    ts = t["train_step"]
    updates = np.bincount(ts, weights=t["is_update"].astype(float), minlength=steps)
    mbs = np.bincount(ts, minlength=steps)
    end = np.full(steps, np.nan)
    first_lr = np.full(steps, np.nan)
    if len(ts):
        last_idx = np.flatnonzero(np.r_[ts[1:] != ts[:-1], True])
        first_idx = np.r_[0, last_idx[:-1] + 1]
        end[ts[last_idx]] = t["scheduler_progress"][last_idx]
        first_lr[ts[first_idx]] = t["lr"][first_idx]
    end = _ffill(end)
    start = np.r_[0.0, end[:-1]]
    dp = dp_by_step(rep.cfg, steps)
    return {"train_step": np.arange(steps), "updates": updates, "micro_batches": mbs,
            "progress_end": end, "advance": end - start, "lr": first_lr, "dp": dp}


def _ffill(a: Array) -> Array:
    """NaN replaced by the last value before it (0 before any), in numpy."""
    import numpy as np

    ok = ~np.isnan(a)
    idx = np.where(ok, np.arange(len(a)), -1)
    np.maximum.accumulate(idx, out=idx)
    return np.where(idx >= 0, a[np.maximum(idx, 0)], 0.0)


def dp_by_step(cfg: RunConfig, steps: int) -> Array:
    """The dp size of every train step (``dp.changes`` applied), in numpy."""
    import numpy as np

    out = np.full(steps, cfg.dp.size, dtype=np.int64)
    for ch in sorted(cfg.dp.changes, key=lambda c: c.at_step):
        out[ch.at_step:] = ch.size
    return out


def step_runs(infos: Any) -> list[tuple[int, int, Any]]:
    """A replay's planned steps as ``(first step, count, StepInfo)`` runs: the runs of a
    :class:`~lrdoctor.replay.planning.StepRuns` (a static run's identical steps), else one
    run per step. Whole-run readers loop over these, never over millions of steps."""
    runs = getattr(infos, "runs", None)
    if runs is not None:
        return list(runs)
    return [(i.step, 1, i) for i in infos]


def has_boundaries(rep: Replay) -> Array:
    """Per trace row: did its step's plan close windows itself (mini-batch, prompt-unit or
    document-target boundaries) rather than the accumulation rule?"""
    import numpy as np

    epochs = rep.cfg.train.epochs_per_step
    flags = [np.full(c * len(i.plan.micro_batches) * epochs, i.plan.boundaries is not None)
             for _, c, i in step_runs(rep.infos)]
    return np.concatenate(flags) if flags else np.zeros(0, dtype=bool)


def scheduler_calls_per_update(t: dict[str, Array]) -> float:
    """Mean number of scheduler advances per applied optimizer update."""
    import numpy as np

    prog = t["scheduler_progress"]
    moved = np.diff(np.r_[0.0, prog]) > 0
    ups = int(t["is_update"].sum())
    return float(moved.sum()) / ups if ups else 0.0


def notes(rep: Replay, key: str) -> list[tuple[int, Any]]:
    """The steps whose plan noted ``key`` (a packer's remark), with the note."""
    return [(a + j, i.plan.notes[key]) for a, c, i in step_runs(rep.infos)
            if key in (i.plan.notes or {}) for j in range(c)]


def budget_cause(c: ReplayContext) -> str:
    """What the budget counted, when it is not the scheduler's unit."""
    g, gen = c.ev_core.generation_batches_per_train_step, c.ev_core.generation_batches
    if c.cfg.budget.formula != "generation_steps" or g is None or gen is None:
        return ""
    return (f"; the budget counts generation batches ({short(gen)}), "
            f"the scheduler train steps ({c.cfg.train.steps}): {short(g)} generation batches "
            "per train step")


def divisibility(rep: Replay) -> tuple[str, int, Any] | None:
    """A step's samples that do not divide into the configured mini-batches or dp ranks
    (LRD212): the message, the steps affected and one example."""
    cfg = rep.cfg
    keys: tuple[str, ...] = ("fixed_size_not_divisible", "prompts_not_divisible",
                             "mini_batch_not_divisible_by_dp", "not_divisible_by_dp")
    if cfg.batching.strategy == "prompt_unit":
        # There the note says what fixed-size mini-batches *would* do: not a problem.
        keys = tuple(k for k in keys if k != "fixed_size_not_divisible")
    hits = [(k, st, v) for k in keys for st, v in notes(rep, k)]
    mini = cfg.train.mini_batch_size
    extra: list[tuple[int, int, int, int]] = []
    if mini and cfg.batching.strategy == "static":
        ps = per_step(rep)
        nominal = math.ceil((cfg.train.samples_per_step or mini) / mini) * cfg.train.epochs_per_step
        for a, c, info in step_runs(rep.infos):
            if info.samples % mini:
                extra.extend((st, info.samples, int(ps["updates"][st]), nominal)
                             for st in range(a, a + c))
    if not hits and not extra:
        return None
    if extra:
        st, n, got, nom = extra[0]
        msg = (f"Fixed-size mini-batches of {mini} sequences do not divide {len(extra)} train "
               f"step(s); e.g. step {st}: {n} sequences take {got} updates instead of {nom}.")
    else:
        k, st, v = hits[0]
        msg = f"Train step {st}: {k.replace('_', ' ')} ({v}); {len(hits)} step(s) affected."
    return msg, len(extra) or len(hits), extra[0] if extra else hits[0]


def flat_lr(c: ReplayContext) -> float | None:
    """The one LR every update sees past warmup, when the schedule does not move it over
    the replayed run nor up to its horizon (a ``constant`` schedule); None when it moves.

    Why LRD201/LRD202 ask: they say the run ends past or short of its horizon, which harms
    only through the LR. Where the LR after warmup is one value both over the progress the
    replay reached (read from the trace, exactly: every micro-batch's LR) and over the
    schedule up to its horizon (the family's ``lr_at`` on a 1,025-point grid and at the
    horizon itself), no update's LR depends on the drift, and an error would be false.
    The warmup is in the scheduler's unit either way, so it is compared out.
    """
    import numpy as np

    from lrdoctor.schedules import lr_or_none

    t, spec = c.t, c.spec
    lr = t["lr"]
    if not len(lr):
        return None
    prog = t["scheduler_progress"]
    before = np.r_[0.0, prog[:-1]]  # the progress each micro-batch's LR was set at
    past = lr[before > spec.warmup]
    if not len(past):
        return None
    value = float(past[0])
    tol = 1e-12 * max(abs(value), 1e-300)
    if float(np.max(np.abs(past - value))) > tol:
        return None
    hz = float(c.s["horizon"])
    if not math.isfinite(hz) or hz <= spec.warmup:
        return None
    grid = [*np.linspace(spec.warmup, hz, 1025)[1:].tolist(), hz]
    for p in grid:
        got = lr_or_none(spec, p)
        if got is None or abs(got - value) > tol:
            return None
    return value


def flat_lr_note(value: float) -> str:
    """What LRD201/LRD202 add when :func:`flat_lr` found the LR does not move."""
    return (f" The LR does not move past warmup ({short(value)} at every update the replay "
            "reached and up to the horizon, from the schedule's own formula), so no update's "
            "LR depends on this: informational, not an error.")


# ------------------------------------------------------- severity follows provenance

#: What a replay rule's conclusion rests on, declared by its module as ``LENGTHS``:
#: "none": it holds for any sample lengths (its numbers are the config's, e.g. the
#: accumulation rule's first window); "packing" (the default): it rests on the lengths
#: through the packer, so a static loop (fixed rows per micro-batch) does not read them;
#: "progress": it reads only the updates and the scheduler's progress, so it holds for any
#: lengths where the config fixes those (:attr:`ReplayContext.progress_fixed_by_config`);
#: "tokens": it reads the lengths (tokens, documents) themselves, whatever the packer.
LENGTHS_KINDS = ("none", "progress", "packing", "tokens")
#: A rule whose conclusion rests on the run's length (train.steps: where the planned end
#: falls against the schedule's end) declares ``RUN_LENGTH = True``; a translation that
#: had to assume the length (``Translation.provenance``, in ``cfg._source["values"]``:
#: RLinf without its data files) caps it at a warning naming the number and its ``--set``.


def assumed_values(cfg: RunConfig) -> dict[str, dict[str, Any]]:
    """The values a translation assumed (no file holds them), by the key that would."""
    values = cfg._source.get("values") or {}
    return {k: v for k, v in values.items() if v.get("from") == "assumed"}


def assumed_values_text(values: dict[str, dict[str, Any]]) -> str:
    return "".join(f" Assumed, not read: {k} = {v['value']} ({v['why']}); give the real one "
                   f"with {v['set']}." for k, v in values.items())

#: The catalog's paragraph on replay severity (docs/findings.md, :func:`lrdoctor.findings.
#: catalog_markdown`): said here, beside the helper that applies it.
HOW_REPLAY_SEVERITY = """### Replay findings: severity follows provenance

`replay` (LRD2xx) judges numbers of three origins: the config (a key of the run config or
of the framework's own config, named in `config_keys_read`; a framework default marked
`(default)` is the framework's code), the sample lengths from a batch log (`--batch-log`,
`data.batch_log`: the run's own), and synthetic lengths lrdoctor drew (`--synthetic`,
`data.synthetic`, or, for a framework's config or launch script without a batch log,
lengths drawn up to the config's own maximum length). `--set KEY=VALUE` is read as the
user's statement of the real value, like a key of the file.

- A finding entailed by the config alone keeps its rule's severity whatever the lengths:
  the first window of `global_step % k` (LRD204), failed updates that step the scheduler
  (LRD211), torch's step-order warning (LRD216), and the budget and progress findings
  (LRD201, LRD202, LRD206, LRD210) where the config fixes the updates and the scheduler's
  progress (one update per mini-batch, a fixed advance per train step).
- A finding that rests on the lengths (every other replay rule; through the packer, so a
  static loop's counts do not read them; LRD207, LRD209 and LRD215 read tokens or documents
  under any packer) is at most a **warning** when the lengths are synthetic. Its text names
  the synthetic spec and seed and says how to decide it: `--batch-log FILE` with the run's
  recorded lengths (`lrdoctor.runtime.record.BatchLogRecorder`). With a batch log it keeps
  its rule's severity: OpenRLHF's token cap (LRD209) is an error when a logged sequence is
  longer than the cap, a warning when only a drawn one is.
- A finding that rests on the run's length (LRD201, LRD202: where the planned end falls
  against the horizon) is at most a **warning** when the translation had to assume the
  length (RLinf's `runner.max_steps: -1` without its data files, or with prompts filtered
  by length). Its text names the number assumed and the `--set` that gives the real one.

Every replay finding's JSON evidence carries `provenance`: `lengths` (`kind`
batch_log / synthetic / counts, `source`, `given_by`, `seed`), `rests_on_lengths`, the
config format, launch script and `config_keys_read`, `assumed_values` when an assumed
value capped it, and, when it was capped, `severity_with_real_lengths`.
"""


class WithProvenance(Evidence):
    """A replay finding's evidence with where its numbers came from (``provenance`` in the
    JSON): the rule's own evidence fields unchanged, plus one key. Why a wrapper: every
    replay rule gets it from one place (:func:`with_provenance`), none builds it."""

    inner: Evidence
    provenance: Mapping[str, Any]

    def raw(self) -> dict[str, Any]:
        return {**self.inner.raw(), "provenance": dict(self.provenance)}

    def headline(self) -> str | None:
        return self.inner.headline()

    def replaced(self, **changes: Any) -> Evidence:
        return WithProvenance(self.inner.replaced(**changes), self.provenance)


def lengths_of(cfg: RunConfig) -> dict[str, Any]:
    """Where the replay's lengths came from (set by :func:`lrdoctor.replay.replay_full`;
    a replay built another way is judged by its config's ``data`` section)."""
    return cfg._lengths if cfg._lengths is not None else cfg.lengths_origin()


def rests_on_lengths(cfg: RunConfig, lengths: str, progress_fixed: bool = False) -> bool:
    """Could a finding of a rule declaring ``LENGTHS = lengths`` change with the lengths?"""
    if lengths == "none" or (lengths == "progress" and progress_fixed):
        return False
    return lengths == "tokens" or cfg.batching.strategy != "static"


def rests_on_assumed_lengths(cfg: RunConfig, lengths: str, progress_fixed: bool = False) -> bool:
    """Does a rule that declares ``LENGTHS = lengths`` rest on lengths no file holds?"""
    return lengths_of(cfg)["kind"] == "synthetic" and rests_on_lengths(cfg, lengths,
                                                                       progress_fixed)


def assumed_lengths_text(cfg: RunConfig) -> str:
    """The number a finding resting on synthetic lengths assumed, and how to give the real one."""
    o = lengths_of(cfg)
    return (f" Assumed, not read: the sample lengths are synthetic ({o['source']}, seed "
            f"{o.get('seed')}; {o['given_by']}), no file holds them, so this is a hypothesis "
            "and at most a warning. To decide it, replay with the run's own lengths: "
            "--batch-log FILE (written by lrdoctor.runtime.record.BatchLogRecorder, or "
            "JSONL/CSV/Parquet with step and tokens per sample, docs/replay.md).")


def with_provenance(module: Any, c: ReplayContext, found: list[Finding]) -> list[Finding]:
    """Severity follows provenance, for every replay rule (:func:`lrdoctor.replay.analysis.
    findings` calls it on each rule's findings): a finding that rests on synthetic lengths
    (the rule's ``LENGTHS`` says whether it reads them) is at most a warning whose text names
    the assumed lengths and the flag that supplies real ones; a finding entailed by the config
    (and a real batch log) keeps the rule's severity. Every finding's evidence carries
    ``provenance``: where the lengths came from, the config file and the keys the translation
    read, and the severity it would have with real lengths when it was capped.

    Why one place: the CEO's rule (an error only when every number in its explanation was
    read or derived from the files) is the same for every rule; a rule only declares what
    it reads."""
    lengths = getattr(module, "LENGTHS", "packing")
    if lengths not in LENGTHS_KINDS:
        raise ValueError(f"{module.__name__}.LENGTHS {lengths!r}: one of {LENGTHS_KINDS}")
    cfg = c.cfg
    fixed = c.progress_fixed_by_config
    assumed = rests_on_assumed_lengths(cfg, lengths, fixed)
    run_length = assumed_values(cfg) if getattr(module, "RUN_LENGTH", False) else {}
    for f in found:
        prov: dict[str, Any] = {"lengths": dict(lengths_of(cfg)),
                                "rests_on_lengths": rests_on_lengths(cfg, lengths, fixed),
                                "config_format": cfg._format}
        if cfg._source.get("launch_script"):
            prov["launch_script"] = cfg._source["launch_script"]
        if cfg._keys_used is not None:
            prov["config_keys_read"] = sorted(cfg._keys_used)
        if assumed and f.severity > Severity.WARNING:
            prov["severity_with_real_lengths"] = str(f.severity)
            f.severity = Severity.WARNING
        if assumed:
            prov["assumed"] = "sample lengths"
            f.message += assumed_lengths_text(cfg)
        if run_length:
            if f.severity > Severity.WARNING:
                prov.setdefault("severity_with_real_lengths", str(f.severity))
                f.severity = Severity.WARNING
            prov["assumed_values"] = run_length
            f.message += assumed_values_text(run_length)
        f.evidence = WithProvenance(f.evidence, prov)
    return found
