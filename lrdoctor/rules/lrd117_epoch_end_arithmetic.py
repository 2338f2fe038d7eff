"""LRD117 `epoch-end-arithmetic`: The horizon differs from the updates an epoch-based loop really takes

## Explanation
The horizon was computed from len(dataloader) and the accumulation with floor or ceil, while
the loop steps (or skips) the short window at the end of each epoch, or carries windows
across epochs: the schedule ends before or after training does. transformers issues 37777
and 31677, Lightning 19684, OpenRLHF PR 1351 (21 scheduled vs 23 real updates, the cosine
rising again at the end). When neither the config nor the checkpoint's counters tell which
the loop does, the finding is info and names what each would take.

## Example
`max_train_steps` 21 = 3 x floor(30 / 4) but windows carried across epochs give floor(3 x 30
/ 4) = 22 updates.

## Fix
Compute the horizon the way the loop steps: epochs x ceil(L / GA) when the short window of
each epoch is stepped, floor(epochs x L / GA) when windows run across epochs; or count the
real updates once (a dry pass over the dataloader).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from lrdoctor.core.facts import EpochPlan
from lrdoctor.core.findings import Evidence, Finding, Rule, Severity, optional
from lrdoctor.core.state import RunState

RULE = Rule.from_module(__name__, Severity.ERROR)


class EpochEndArithmetic(Evidence):
    """The plan, the horizon and what each window policy takes; with ``policy`` when the
    config or the counters tell which the loop does (``difference``: per policy when
    none is the horizon)."""

    plan: EpochPlan
    horizon: int
    updates_by_policy: dict[str, int]
    floor_per_epoch: int
    ceil_per_epoch: int
    policy: str | None = optional()
    real_updates: int | None = optional()
    difference: int | dict[str, int] | None = optional()
    horizon_formula: str | None = optional()


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """LRD117 when the horizon differs from the updates the loop really takes.

    The loop's window policy comes from the config, or from the checkpoint's own counters
    when it was saved at an epoch boundary; when neither tells, and the policies disagree,
    an info finding names what each would take.
    """
    from lrdoctor.epochs import POLICIES, POLICY_TEXT, observed_policy, updates

    plan = state.facts.epoch_plan
    if plan is None:
        return []
    horizon = plan.horizon
    if horizon is None and state.schedule is not None and state.schedule.horizon:
        horizon = int(state.schedule.horizon)
    if horizon is None:
        return []
    L, E, k = plan.batches_per_epoch, plan.epochs, plan.ga
    real = {p: updates(L, E, k, p) for p in POLICIES}
    base = EpochEndArithmetic(plan=plan, horizon=horizon, updates_by_policy=real,
                              floor_per_epoch=L // k, ceil_per_epoch=math.ceil(L / k))
    how = f"len(dataloader) {L} per epoch x {E} epochs with gradient accumulation {k}"
    if plan.dataset_len is not None and plan.batch_size is not None:
        how = (f"{plan.dataset_len} samples / batch {plan.batch_size}"
               + (f" / world size {plan.world_size}" if plan.world_size > 1 else "")
               + f" ({'drop_last' if plan.drop_last else 'no drop_last'}) = {L} batches per "
               f"epoch x {E} epochs, gradient accumulation {k}")
    where = plan.source or state.path
    policy, why = plan.window, "the config says"
    if policy is None:
        prog = state.trainer_progress or state.nominal_progress
        ep = state.counter("loop.epoch") or state.counter("trainer.epoch") or next(
            (c for c in state.counters if c.unit.value == "epochs"), None)
        if prog is not None and ep is not None:
            fits = observed_policy(plan, prog.value, ep.value)
            if len({real[p] for p in fits}) == 1 and fits:
                policy = fits[0]
                why = (f"{prog.name} {prog.value:g} after {ep.name} {ep.value:g} whole epochs "
                       f"fits it")
    if policy is not None:
        if real[policy] == horizon:
            return []
        more = real[policy] > horizon
        tail = ("the last updates run past the horizon (a cosine rises again or the LR "
                "sits at its floor)" if more else "the schedule never finishes its decay")
        formula = next((f for f, v in (("epochs x floor(L/GA)", E * (L // k)),
                                       ("epochs x ceil(L/GA)", E * math.ceil(L / k)),
                                       ("floor(epochs x L/GA)", (E * L) // k)) if v == horizon),
                       "its own formula")
        ev = base.replaced(policy=policy, real_updates=real[policy],
                           difference=real[policy] - horizon, horizon_formula=formula)
        return [RULE.finding(
            f"The horizon is {horizon} updates ({formula}) but the loop takes {real[policy]} "
            f"({policy}: {POLICY_TEXT[policy]}; {why}): {how}. {abs(real[policy] - horizon)} "
            f"update(s) {'more' if more else 'fewer'} than scheduled: {tail}.",
            ev, location=where)]
    if len(set(real.values())) == 1 or horizon in real.values() and len(
            {v for v in real.values() if v != horizon}) == 0:
        return []
    if horizon in real.values():
        others = {p: v for p, v in real.items() if v != horizon}
        return [RULE.finding(
            f"The horizon is {horizon} updates; {how}. A loop that "
            + " or ".join(f"{POLICY_TEXT[p]} takes {v}" for p, v in others.items())
            + ": lrdoctor cannot tell from the checkpoint which this loop does (save it at an "
            "epoch end, or give the window policy).", base, severity=Severity.INFO,
            location=where)]
    return [RULE.finding(
        f"The horizon is {horizon} updates but {how} gives "
        + ", ".join(f"{v} ({p})" for p, v in real.items())
        + ": none is the horizon.",
        base.replaced(difference={p: v - horizon for p, v in real.items()}), location=where)]
