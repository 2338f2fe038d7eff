"""What the config promises: nominal accumulation, updates and scheduler advance, the
budget and horizon the framework handed its scheduler, and the schedule built from them.

Why apart from the replay: these are the loop's intentions, arithmetic on the config
alone (the sample count per step aside); the replay (:mod:`.engine`, :mod:`.torch_exec`)
measures what the loop actually does against them, and the summary, the plots and the
loss-divisor scale (:mod:`.loss_scale`) read them too.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.state import ScheduleSpec, Unit

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lrdoctor.replay.config import RunConfig
    from lrdoctor.replay.planning import StepInfo


def samples_per_step(cfg: RunConfig, infos: Sequence[StepInfo] | None = None) -> float:
    if cfg.train.samples_per_step is not None:
        return float(cfg.train.samples_per_step)
    if infos:
        from lrdoctor.rules.replay_context import step_runs as runs_of

        runs = runs_of(infos)
        return float(sum(c * i.samples for _, c, i in runs) / sum(c for _, c, _ in runs))
    raise UnusableInput("train.samples_per_step is not set and there is no batch log")


def nominal_k(cfg: RunConfig, dp: int) -> int:
    """Micro-batches per optimizer update the loop is configured for at this dp size."""
    t = cfg.train
    if t.mini_batch_size is not None and cfg.batching.strategy == "static":
        # RLinf / SkyRL: the accumulation count is recomputed from the global batch.
        return max(1, math.ceil(t.mini_batch_size / (t.micro_batch_size * dp)))
    return t.gradient_accumulation


def nominal_samples_per_update(cfg: RunConfig, dp: int | None = None) -> float:
    t = cfg.train
    if t.mini_batch_size is not None:
        return float(t.mini_batch_size)
    return float(t.micro_batch_size * t.gradient_accumulation * (dp or cfg.dp.size))


def nominal_updates(cfg: RunConfig, sps: float) -> float:
    """Optimizer updates the configuration promises with nominal (static) batches."""
    t = cfg.train
    if t.mini_batch_size is None and (
            t.drop_last or cfg.accumulation.short_window == "drop"
            or (not cfg.accumulation.flush_at_step_end and cfg.batching.strategy == "static")):
        # An epoch loop over a DataLoader: whole batches, the short one counted unless
        # dropped (lrdoctor.epochs: one home for the floor / ceil / carry arithmetic).
        from lrdoctor import epochs

        per_rank = sps / cfg.dp.size  # the micro-batches of one step, as a DataLoader counts
        batches = (int(per_rank) // t.micro_batch_size if t.drop_last
                   else math.ceil(per_rank / t.micro_batch_size))
        policy = ("carry" if not cfg.accumulation.flush_at_step_end else
                  "drop" if cfg.accumulation.short_window == "drop" else "flush")
        return float(epochs.updates(batches, t.steps * t.epochs_per_step,
                                    t.gradient_accumulation, policy))
    if t.mini_batch_size is not None:
        per = math.ceil(sps / t.mini_batch_size)
    elif not cfg.accumulation.flush_at_step_end:
        # One counter for the run: windows span train steps, no per-step rounding up.
        return float(int(t.steps * t.epochs_per_step * sps)
                     // (cfg.dp.size * t.micro_batch_size * t.gradient_accumulation))
    else:
        per = math.ceil(sps / cfg.dp.size / t.micro_batch_size / t.gradient_accumulation)
    return float(t.steps * t.epochs_per_step * per)


def nominal_advance_per_update(cfg: RunConfig, sps: float) -> float:
    """Scheduler progress one nominal optimizer update is meant to bring, in its unit."""
    sc, t = cfg.scheduler, cfg.train
    inc = sc.increment
    if sc.step_on == "update":
        per = (nominal_samples_per_update(cfg) if inc == "samples" else
               float(nominal_k(cfg, cfg.dp.size)) if inc == "micro_batches" else float(inc))
    elif sc.step_on == "micro_step":
        per_mb = (float(t.micro_batch_size * cfg.dp.size) if inc == "samples" else
                  1.0 if inc == "micro_batches" else float(inc))
        per = per_mb * nominal_k(cfg, cfg.dp.size)
    else:  # rollout_step: one step's advance spread over its nominal updates
        per_step = (sps if inc == "samples" else
                    float(math.ceil(sps / cfg.dp.size / t.micro_batch_size))
                    if inc == "micro_batches" else float(inc))
        ups = nominal_updates(cfg, sps) / (t.steps or 1)
        per = per_step / ups if ups else per_step
    return per * sc.multiplier


def replayed_budget_updates(cfg: RunConfig, sps: float) -> float:
    """The budget in optimizer updates (an explicit total is in scheduler units; a
    generation-steps total counts generation batches as if each were one train step)."""
    if cfg.budget.formula in ("explicit", "generation_steps"):
        per = nominal_advance_per_update(cfg, sps)
        return cfg.budget.given_total / per if per else cfg.budget.given_total
    return budget_updates(cfg, sps)


def budget_updates(cfg: RunConfig, sps: float) -> float:
    """The update count the framework handed its scheduler (``budget.formula``)."""
    t = cfg.train
    if cfg.budget.formula == "roll":
        return float(int(t.steps * sps * t.epochs_per_step)
                     // (t.micro_batch_size * t.gradient_accumulation) // cfg.dp.size)
    return nominal_updates(cfg, sps)


def horizon(cfg: RunConfig, sps: float) -> float:
    """The scheduler's horizon in its own unit (``schedule.horizon`` or derived)."""
    if cfg.schedule.horizon != "auto":
        return float(cfg.schedule.horizon)
    if cfg.budget.formula in ("explicit", "generation_steps"):
        return cfg.budget.given_total
    inc = cfg.scheduler.increment
    if cfg.scheduler.step_on == "rollout_step":
        if inc == "samples":
            per = sps
        elif inc == "micro_batches":
            per = math.ceil(sps / cfg.dp.size / cfg.train.micro_batch_size)
        else:
            per = float(inc)
        return float(cfg.train.steps * per)
    if inc == "samples":
        per = nominal_samples_per_update(cfg)
    elif inc == "micro_batches":
        per = float(nominal_k(cfg, cfg.dp.size))
    else:
        per = float(inc)
    return budget_updates(cfg, sps) * per


def schedule_unit(cfg: RunConfig) -> Unit:
    if cfg.scheduler.increment == "samples":
        return Unit.SAMPLES
    if cfg.scheduler.increment == "micro_batches":
        return Unit.MICRO_STEPS
    return {"update": Unit.UPDATES, "micro_step": Unit.MICRO_STEPS,
            "rollout_step": Unit.ROLLOUT_STEPS}[cfg.scheduler.step_on]


def schedule_spec(cfg: RunConfig, sps: float) -> ScheduleSpec:
    s = cfg.schedule
    spec = ScheduleSpec(family=s.family, kind=s.kind, max_lr=s.max_lr, unit=schedule_unit(cfg),
                        min_lr=s.min_lr, init_lr=s.init_lr, warmup=s.warmup,
                        horizon=horizon(cfg, sps), params=dict(s.params), source="run config")
    check_spec(spec)
    return spec


def check_spec(spec: ScheduleSpec) -> None:
    """A schedule the family cannot build is unusable input, not a traceback."""
    from lrdoctor import schedules

    probs = schedules.problems(spec)
    if probs:
        raise UnusableInput(f"schedule: {probs[0]}")
    try:
        schedules.lr_at(spec, 0.0)
    except (ValueError, KeyError, TypeError) as exc:
        raise UnusableInput(f"schedule: {exc}") from None
