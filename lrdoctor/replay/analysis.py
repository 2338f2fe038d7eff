"""What a replay means: the summary (nominal vs actual progress), its findings, sweeps.

The rules (LRD201-LRD212, LRD215, LRD216) live one per file in :mod:`lrdoctor.rules`,
with the :class:`~lrdoctor.rules.replay_context.ReplayContext` they read; this module
builds that context and runs them. Framework-blind: it
reads only the trace and the plans' notes, so the fast and the torch path are judged
by the same rules.
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from lrdoctor.core.findings import Finding
from lrdoctor.rules.common import ReplayBudget
from lrdoctor.rules.replay_context import REL_TOL, ReplayContext, has_boundaries, per_step, short

if TYPE_CHECKING:
    from lrdoctor.replay.engine import Replay

def summarize(rep: Replay) -> dict[str, Any]:
    """Nominal vs actual updates, where the LR reaches its floor, the corrected budget."""
    from lrdoctor.replay.nominal import nominal_k
    from lrdoctor.schedules import floor_progress, lr_at

    cfg, spec, t = rep.cfg, rep.spec, rep.trace
    steps = cfg.train.steps
    ps = per_step(rep)
    n_up = int(t["is_update"].sum())
    n_failed = int(t["failed"].sum())
    end = float(t["scheduler_progress"][-1]) if len(t["lr"]) else 0.0
    hz = float(spec.horizon) if spec.horizon else math.nan
    ratio = end / hz if hz else math.nan
    fp = floor_progress(spec)
    floor_step = None
    if fp is not None:
        reached = np.flatnonzero(ps["progress_end"] >= fp - 1e-9 * max(1.0, abs(fp)))
        floor_step = int(reached[0]) + 1 if len(reached) else None
    lr_end = lr_at(spec, end)
    up = ps["updates"]
    closes = t["is_update"]
    wsizes = t["window_size"][closes]
    k0 = nominal_k(cfg, cfg.dp.size)
    ruled = ~has_boundaries(rep)
    # Short against the k of that update's dp size (RLinf recomputes k when dp changes).
    dps_u, dps_inv = np.unique(t["dp"][closes], return_inverse=True)
    k_at = np.array([nominal_k(cfg, int(d)) for d in dps_u], dtype=np.int64)[dps_inv]
    short = int(((wsizes < k_at) & ruled[closes]).sum()) if len(wsizes) else 0
    corrected_inc = (hz / end) if end > 0 else None
    inc = cfg.scheduler.increment
    s: dict[str, Any] = {
        "engine": rep.engine,
        "device": rep.device,
        "train_steps": steps,
        "micro_batches": int(len(t["lr"])),
        "scheduler_unit": spec.unit.value,
        "horizon": hz,
        "budget_updates": rep.budget_updates,
        "nominal_updates": rep.nominal_updates,
        "nominal_updates_per_step": rep.nominal_updates / steps,
        "actual_updates": n_up,
        "failed_updates": n_failed,
        "unapplied_micro_batches": int((~t["applied"]).sum()),
        "updates_per_step": {"min": float(up.min()), "mean": float(up.mean()),
                             "max": float(up.max())},
        "update_ratio": n_up / rep.nominal_updates if rep.nominal_updates else None,
        "scheduler_progress_end": end,
        "progress_ratio": ratio,
        "floor_progress": fp,
        "floor_step": floor_step,
        "floor_fraction": floor_step / steps if floor_step is not None else None,
        "lr_end": lr_end,
        "min_lr": spec.min_lr,
        "max_lr": spec.max_lr,
        "window_sizes": {"first": int(wsizes[0]) if len(wsizes) else None,
                         "min": int(wsizes.min()) if len(wsizes) else None,
                         "max": int(wsizes.max()) if len(wsizes) else None,
                         "nominal": k0, "short": short},
        # Who closes windows: the accumulation rule (k) or the strategy (mini-batch /
        # prompt-unit / document-target boundaries, where k is not the window size).
        "windows_by": ("strategy" if len(ruled) and not ruled.any() else
                       "accumulation" if ruled.all() else "both"),
        "lr_changes_inside_windows": _lr_changes_inside(t),
        "max_rank_tokens": int(t["max_rank_tokens"].max()) if len(t["lr"]) else 0,
        "corrected": {
            # ROLL issue 442's direction: nominal/actual per update, or budget = actual.
            "progress_scale": corrected_inc,
            "per_update_increment": (float(inc) * corrected_inc
                                     if corrected_inc and not isinstance(inc, str) else None),
            "budget_updates": float(n_up - n_failed * (not cfg.scheduler.step_on_failed_update)),
            "horizon": end,
        },
    }
    if not np.all(np.isnan(t["peak_mem_bytes"])):
        s["peak_memory_bytes"] = int(np.nanmax(t["peak_mem_bytes"]))
    if cfg.batching.loss_normalization is not None:
        # The effective LR scale per update the configured loss divisor implies.
        from lrdoctor.replay import loss_scale

        s["loss_scale"] = loss_scale.scale(rep, cfg.batching.loss_normalization)
    for key in ("scheduler_class", "micro_batches_per_second", "torch_seconds", "cycled",
                "logged_steps", "torch_warnings"):
        if key in rep.notes:
            s[key] = rep.notes[key]
    return s


def _lr_changes_inside(t: dict[str, np.ndarray]) -> int:
    if len(t["lr"]) < 2:
        return 0
    same_window = t["window"][1:] == t["window"][:-1]
    lr = t["lr"]
    changed = np.abs(lr[1:] - lr[:-1]) > 1e-12 * np.maximum(np.abs(lr[1:]), 1e-300)
    return int((same_window & changed).sum())


def _context(rep: Replay, s: dict[str, Any], knob: dict[str, Any] | None) -> ReplayContext:
    cfg, spec = rep.cfg, rep.spec
    unit = spec.unit.value
    end = s["scheduler_progress_end"]
    scale = s["corrected"]["progress_scale"]
    inc = cfg.scheduler.increment
    # ROLL issue 442's direction; the text is read by users of every framework, so it
    # says what to do, not whose issue it comes from.
    fix_tail = (f"Scale every scheduler advance by nominal/actual = {short(scale)}"
                + (f", i.e. step(increment={short(s['corrected']['per_update_increment'])}) "
                   f"instead of {short(float(inc))}"
                   if s["corrected"]["per_update_increment"] is not None else "")
                + f", or set the scheduler's horizon to the replayed {short(end)} {unit}"
                + ("." if spec.unit.value == "optimizer updates" else
                   f" (about {short(s['corrected']['budget_updates'])} optimizer updates).")) \
        if scale else ""
    if cfg.dp.changes and inc == "micro_batches" and fix_tail:
        # A constant scale cannot undo a dp-dependent advance: fix the increment first.
        fix_tail = ("Increment the scheduler by samples (the global batch) or once per update, "
                    "so an update moves it the same at every dp size (LRD210); a single "
                    "scale or horizon only fits this dp history. " + fix_tail)
    ev_core = ReplayBudget(
        horizon=s["horizon"], scheduler_progress_end=end, ratio=s["progress_ratio"],
        nominal_updates=s["nominal_updates"], budget_updates=s["budget_updates"],
        actual_updates=s["actual_updates"], updates_per_step=s["updates_per_step"],
        floor_step=s["floor_step"], train_steps=cfg.train.steps,
        corrected_progress_scale=scale,
        corrected_increment=s["corrected"]["per_update_increment"], corrected_horizon=end)
    if cfg.budget.formula == "generation_steps":
        # verl issue 991: the budget counts generation batches, the scheduler train steps.
        gen = float(cfg.budget.total)
        ev_core = replace(ev_core, generation_batches=gen,
                          generation_batches_per_train_step=gen / cfg.train.steps)
        fix_tail = (f"The budget counts {short(gen)} generation batches but the scheduler is "
                    f"stepped per train step, {short(gen / cfg.train.steps)} generation batches "
                    "each (dynamic sampling / filtered groups): size the horizon in train "
                    f"steps ({cfg.train.steps}), or step the scheduler per generation batch. "
                    + fix_tail)
    strategy = cfg.batching.loss_normalization
    lr_scale = None
    if strategy is not None:
        # LRD215 judges it; computing it needs the configured accumulation (replay's).
        from lrdoctor.replay import loss_scale

        lr_scale = loss_scale.scale(rep, strategy)
    return ReplayContext(rep, s, knob, fix_tail, ev_core, lr_scale,
                         progress_fixed_by_config=_knob_cannot_move(rep))


def unmodelled_keys(items: list[dict[str, Any]]) -> list[Finding]:
    """LRD213: keys of a framework's own config that change step accounting, not replayed;
    LRD217: keys its schema does not have, near one it does (the translator gives those a
    ``nearest``)."""
    from lrdoctor.rules import lrd213_config_key_not_modelled as lrd213
    from lrdoctor.rules import lrd217_unknown_config_key as lrd217

    return lrd213.findings([it for it in items if "nearest" not in it]) + \
        lrd217.findings([it for it in items if "nearest" in it])


def findings(rep: Replay, summary: dict[str, Any] | None = None,
             knob: dict[str, Any] | None = None) -> list[Finding]:
    """LRD201-LRD212 and LRD215 from one replay (``knob``: a memory-knob comparison, for
    LRD203): every rule of :data:`lrdoctor.rules.REPLAY`, in its order."""
    from lrdoctor.rules import REPLAY
    from lrdoctor.rules.replay_context import with_provenance

    ctx = _context(rep, summary or summarize(rep), knob)
    # Severity follows provenance, in one place for every rule.
    return [f for rule in REPLAY for f in with_provenance(rule, ctx, rule.check(ctx))]


# ---------------------------------------------------------------- sweeps and the knob check


def sweep(cfg, samples, key: str, values: list[Any], planner=None,
          progress=None, *, jobs: int = 1, executor: str = "process") -> list[tuple[Any, Replay]]:
    """Replay (fast path) once per value of ``key``.

    ``jobs``/``executor``: the values run on a local process pool or on Ray
    (:func:`lrdoctor.parallel.run_map`), in value order whatever finishes first;
    ``jobs=1`` with the process executor runs here, with ``progress``.
    """
    from lrdoctor.replay import engine
    from lrdoctor.replay.config import with_key

    configs = [with_key(cfg, key, v, "--sweep") for v in values]
    if jobs == 1 and executor == "process":
        return [(v, engine.replay_fast(c, samples, planner, progress))
                for v, c in zip(values, configs, strict=True)]
    from lrdoctor.parallel import run_map

    reps = run_map(_sweep_task, [(c, samples, planner) for c in configs], jobs=jobs,
                   executor=executor, preload=["lrdoctor.replay.table", "lrdoctor.replay.engine",
                                               "lrdoctor.replay.packing",
                                               "lrdoctor.replay.config"])
    return list(zip(values, reps, strict=True))


def _sweep_task(args) -> Replay:
    """One sweep value in a worker process (module level: it must pickle)."""
    from lrdoctor.replay import engine

    cfg, samples, planner = args
    return engine.replay_fast(cfg, samples, planner)


def sweep_table(results: list[tuple[Any, Replay]], key: str) -> list[dict[str, Any]]:
    rows = []
    for v, rep in results:
        s = summarize(rep)
        rows.append({key: v, "actual_updates": s["actual_updates"],
                     "updates_per_step_min": s["updates_per_step"]["min"],
                     "updates_per_step_mean": s["updates_per_step"]["mean"],
                     "updates_per_step_max": s["updates_per_step"]["max"],
                     "scheduler_progress_end": s["scheduler_progress_end"],
                     "progress_ratio": s["progress_ratio"], "floor_step": s["floor_step"],
                     "lr_end": s["lr_end"], "max_rank_tokens": s["max_rank_tokens"],
                     # What this value alone would report (no knob check inside a sweep).
                     "findings": [f.code for f in findings(rep, s)]})
    return rows


def knob_comparison(results: list[tuple[Any, Replay]], key: str, source: str) -> dict[str, Any]:
    rows = []
    for v, rep in results:
        t = rep.trace
        end = float(t["scheduler_progress"][-1]) if len(t["lr"]) else 0.0
        rows.append((v, int(t["is_update"].sum()), end))
    ends = [r[2] for r in rows]
    differs = max(ends) - min(ends) > REL_TOL * max(1.0, max(abs(e) for e in ends))
    return {"key": key, "source": source, "rows": rows, "differs": differs}


def memory_knob_check(rep: Replay, samples, planner=None) -> dict[str, Any] | None:
    """Automatic 2x check of max_tokens_per_microbatch for token-based batching."""
    from lrdoctor.replay import engine
    from lrdoctor.replay.config import TOKEN_STRATEGIES, with_key

    cfg = rep.cfg
    cap = cfg.batching.max_tokens_per_microbatch
    if cfg.batching.strategy not in TOKEN_STRATEGIES or not cap:
        return None
    key = "batching.max_tokens_per_microbatch"
    if _knob_cannot_move(rep):
        # Replanning (Karmarkar-Karp: most of a replay's time) cannot change the answer:
        # the first replay's counts stand for 2x too.
        return knob_comparison([(cap, rep), (cap * 2, rep)], key,
                               "at twice the cap the counts are the same without a second "
                               "replay: the scheduler counts train steps and each update is "
                               "a mini-batch, neither depends on the cap")
    other = engine.replay_fast(with_key(cfg, key, cap * 2), samples, planner)
    return knob_comparison([(cap, rep), (cap * 2, other)], key,
                           "replayed again at twice the cap")


def _knob_cannot_move(rep: Replay) -> bool:
    """True when neither the updates nor the scheduler's progress can depend on the token
    cap, nor on the sample lengths: the scheduler steps a fixed amount once per train step,
    and the packer closes one update per mini-batch (a count set by the mini-batch size,
    not by packing). The replay rules read it too (``progress_fixed_by_config``)."""
    from lrdoctor.replay.packing.registry import PACKERS

    cfg = rep.cfg
    sch = cfg.scheduler
    if sch.step_on != "rollout_step" or isinstance(sch.increment, str):
        return False
    packer = PACKERS.get(cfg.batching.strategy)
    from lrdoctor.rules.replay_context import step_runs as runs_of

    return bool(packer is not None and packer.mini_batch_windows and len(rep.infos)
                and cfg.accumulation.flush_at_step_end
                and all(i.plan.boundaries is not None for _, _, i in runs_of(rep.infos)))
