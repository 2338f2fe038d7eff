"""LRD119 `horizon-in-another-unit`: The decay horizon is the planned end counted in another unit

The rule and its check live here; the check tests every hypothesis of
:mod:`lrdoctor.rules.hypotheses` against the checkpoint's evidence.

## Explanation
lrdoctor tests every explanation of the saved horizon against all the evidence the
checkpoint and the configs beside it hold (the optimizer's step, the loop's counters, the
epochs, the accumulation, the process count, the batch sizes, the warmup): the planned end
itself (healthy), the planned end counted in micro-batches, per process, in batches
(dataloader length x epochs), in epochs or in samples, or the planned end minus the warmup
(AReaL PR 1289, Megatron-LM issue 2258: the floor arrives a warmup early). In RL trainers
(verl, SkyRL, OpenRLHF, NeMo-RL, ROLL) the plan counts rollout steps while the optimizer
steps once per PPO mini-batch: the horizon may be the planned rollout steps while the
scheduler steps per optimizer update (SkyRL issue 872: `train_batch_size` 128 /
`ppo_mini_batch_size` 64 x `ppo_epochs` 1 = 2 updates per rollout step, the floor at
rollout step 10 of 20), the planned updates while it steps per rollout step, or counted in
prompts instead of responses (`n_samples_per_prompt`, `rollout.n`; open-instruct issue
537). When a rollout-step counter was compared, the plan and the floor are given in rollout
steps (`step_unit`). When one predicts
the saved horizon exactly, the schedule's end is certain from the first checkpoint: the
finding gives the update where the floor comes, or the share of the decay left at the
planned end, and names every other hypothesis with the number it would have predicted (ruled
out). A plan in epochs is converted with the updates per epoch: saved, or the dataloader's
length (`epoch_length`, `loader_len`) over the accumulation, which when no file saves it is
the whole ratio of a loop counter of iterations to the optimizer's step (PyTorch-Ignite's
`trainer.iteration` 36 / `optimizer.state[0].step` 9 = 4); the message names the numbers.
A horizon no hypothesis explains stays LRD102 (a configured tail) or LRD118.

Without a planned end, a saved counter can name the horizon's unit: the horizon equals a
counter of the loop (DeepSpeed's client-state micro-batch `step`, LitGPT/Fabric's
`iter_num`, Composer's `timestamp.batch`) while the scheduler's counter equals another
one (`global_steps`, `step_count`, `timestamp.epoch`) a saved factor fewer (the
accumulation, or the batches of an epoch). Every number is then read from a file: where
that counter reached the horizon, the scheduler is at a fraction of its decay.

## Example
`T_max` 400 = 100 planned updates x `accum_iter` 4 (the same number as `loader_len` 200 x
`epochs` 2) while the scheduler is stepped per update (`last_epoch` 30 = optimizer step 30):
at the planned end only 25% of the horizon is done; ruled out: the planned end would give
100, the planned end in epochs 2.

## Fix
Compute the horizon in the unit the scheduler is stepped in: optimizer updates (`max_steps`,
epochs x ceil(len(dataloader) / accumulation)) for a scheduler stepped per update, warmup
included; `lrdoctor fix --policy extend-horizon` rewrites a checkpoint's horizon.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity, optional
from lrdoctor.core.numbers import number
from lrdoctor.rules.horizon_hypotheses import counter_horizon, horizon_tests
from lrdoctor.rules.hypotheses import REL_TOL

if TYPE_CHECKING:
    from lrdoctor.core.state import RunState

class HorizonInAnotherUnit(Evidence):
    """The saved horizon, the planned end, the rate, the hypothesis that predicts the
    horizon and every other one with its number (ruled out)."""

    horizon: float
    horizon_from: str
    planned_end_updates: float
    planned_end_from: str
    scheduler_calls_per_update: float
    rate_from: str
    hypothesis: Mapping[str, Any]
    also_fits: tuple[Mapping[str, Any], ...]
    ruled_out: tuple[Mapping[str, Any], ...]
    floor_at_update: float
    decay_done_at_planned_end: float | None = optional()
    lr_at_planned_end: float | None = optional()
    step_unit: str | None = optional()  # "rollout step": the plan and the rate count those

    def headline(self) -> str | None:
        h = self.hypothesis
        return f"horizon = {h.get('hypothesis') if isinstance(h, Mapping) else h}"


class HorizonIsACounter(Evidence):
    """The saved horizon equals a saved counter of another unit than the one the scheduler
    follows: the four fields, the factor between the units and where it was read."""

    horizon: float
    horizon_from: str
    counter: str
    counter_value: float
    counter_from: str
    scheduler_value: float
    scheduler_from: str
    follows: str
    follows_from: str
    k: float
    k_from: str
    decay_done: float
    lr_now: float | None = optional()
    lr_peak: float | None = optional()

    def headline(self) -> str | None:
        return f"horizon = {self.counter} {number(self.counter_value)}"


RULE = Rule.from_module(__name__, Severity.ERROR,
                        evidence=(HorizonInAnotherUnit, HorizonIsACounter))


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """The saved horizon equals the planned end counted in another unit, or a saved counter
    of another unit than the scheduler's."""
    v = horizon_tests(state)
    if v is None or v.fit is None or not v.fit.harmful or v.horizon.value <= 0:
        return _named_by_counter(state)
    from lrdoctor.schedules import lr_or_none

    spec = state.schedule
    H, E = v.horizon.value, v.planned_updates
    per_update = v.rate * v.scale  # scheduler units per update
    floor_at = H / per_update
    extra: dict[str, Any] = {}
    if floor_at < E * (1 - REL_TOL):
        harm = (f"the LR reaches its floor at {v.step} {number(round(floor_at, 1))} of "
                f"{number(E)} planned: the last {1 - floor_at / E:.0%} of training runs "
                "at the floor")
    else:
        lr_end = lr_or_none(spec, per_update * E) if spec is not None else None
        done = per_update * E / H
        extra["decay_done_at_planned_end"] = round(done, 6)
        harm = (f"at the planned end ({v.step} {number(E)}) only {done:.0%} of the horizon "
                "is done")
        if lr_end is not None and spec is not None:
            extra["lr_at_planned_end"] = lr_end
            harm += f" and the LR is still {lr_end:.6g} (min_lr {spec.min_lr:g})"
    if " x ceil(" in v.planned_from:  # a computed plan: say from which saved numbers
        harm += f" (planned end {number(E)} {v.step}s = {v.planned_from})"
    others = "; ".join(f"{t.hypothesis} would give {number(round(t.predicted, 3))}"
                       for t in v.ruled_out[:6])
    unconfirmed = (f" Not confirmed: {v.fit.missing} would confirm it, and no file holds one."
                   if v.fit.missing else "")

    ev = HorizonInAnotherUnit(
        horizon=H, horizon_from=v.horizon.where, planned_end_updates=E,
        planned_end_from=v.planned_from, scheduler_calls_per_update=round(v.rate, 6),
        rate_from=v.rate_from, hypothesis=v.fit.to_dict(),
        also_fits=tuple(t.to_dict() for t in v.also),
        ruled_out=tuple(t.to_dict() for t in v.ruled_out),
        floor_at_update=round(floor_at, 3),
        step_unit=v.step if v.step != "update" else None, **extra)
    found_ = RULE.finding(
        f"The decay horizon {v.horizon.name} = {number(H)} ({v.horizon.where}) is "
        f"{v.fit.hypothesis}: {v.fit.arithmetic} = {number(round(v.fit.predicted, 3))}"
        + "".join(f" (the same number as {t.hypothesis}: {t.arithmetic})" for t in v.also)
        + ". "
        f"The scheduler is called {number(round(v.rate, 4))} time(s) per {v.step} "
        f"({v.rate_from}), so {harm}. " + (f"Ruled out: {others}." if others else "")
        + unconfirmed, ev, location=v.horizon.where)
    if v.fit.missing:
        found_.severity = Severity.WARNING  # an explanation that needs a number no file holds
    return [found_]


def _named_by_counter(state: RunState) -> list[Finding]:
    """The horizon is the value of a saved counter in another unit (Composer's
    ``timestamp.batch`` while the scheduler follows ``timestamp.epoch``; a loop's micro-batch
    step while it follows the optimizer's step): every number is read from a file."""
    c = counter_horizon(state)
    if c is None:
        return []
    from lrdoctor.schedules import lr_or_none

    spec = state.schedule
    done = c.scheduler.value / c.horizon.value
    # DeepSpeed's scheduler counts from -1: the item is last_batch_iteration + 1
    sched_name = c.scheduler.name + (" + 1" if c.scheduler.name == "last_batch_iteration"
                                     else "")
    lr = lr_or_none(spec, c.scheduler.value) if spec is not None else None
    peak = spec.max_lr if spec is not None and spec.max_lr > 0 else None
    lr_txt = ""
    if lr is not None and peak is not None:
        lr_txt = f"; the LR is {lr:.6g}, {lr / peak:.0%} of the peak {peak:g}"
    from lrdoctor.core.evidence import Quantity as Q
    from lrdoctor.core.evidence import Role as R
    from lrdoctor.rules.hypotheses import evidence

    items = evidence(state)
    plan = next((e for e in items if e.role is R.PLANNED_END and e.quantity is Q.EPOCHS
                 and e.value > 0), None)
    now = next((e for e in items if e.role is R.PROGRESS and e.quantity is Q.EPOCHS
                and plan is not None and e.value == plan.value), None)
    end_txt = ""
    if plan is not None and now is not None:
        end_txt = (f" This checkpoint is at the planned end ({now.name} = {number(now.value)} "
                   f"({now.where}) of {plan.name} = {number(plan.value)} ({plan.where})): "
                   f"training ends with {done:.0%} of the decay done.")
    ev = HorizonIsACounter(
        horizon=c.horizon.value, horizon_from=c.horizon.where, counter=c.counter.name,
        counter_value=c.counter.value, counter_from=c.counter.where,
        scheduler_value=c.scheduler.value, scheduler_from=c.scheduler.where,
        follows=c.follows.name, follows_from=c.follows.where, k=round(c.k, 6),
        k_from=c.k_from, decay_done=round(done, 6), lr_now=lr, lr_peak=peak)
    return [RULE.finding(
        f"The decay horizon {c.horizon.name} = {number(c.horizon.value)} "
        f"({c.horizon.where}) is the value of the counter {c.counter.name} = "
        f"{number(c.counter.value)} ({c.counter.where}), counted in {c.counter.quantity.value}, "
        f"while the scheduler's counter {sched_name} = {number(c.scheduler.value)} "
        f"({c.scheduler.where}) equals {c.follows.name} = {number(c.follows.value)} "
        f"({c.follows.where}), {number(round(c.k, 4))} times fewer ({c.k_from}). The horizon "
        f"was sized in {c.counter.name}'s unit while the scheduler is stepped once per "
        f"{c.follows.name}: where {c.counter.name} has reached the horizon the scheduler is "
        f"at {number(c.scheduler.value)} of {number(c.horizon.value)} ({done:.0%} of its "
        f"decay){lr_txt}.{end_txt}", ev, location=c.horizon.where)]
