"""LRD120 `horizon-unset`: The schedule's horizon is unset or negative

The rule and its check live here: the horizon as evidence, confirmed by the saved LR.

## Explanation
A horizon saved as 0 or -1 (a config's `total_training_steps: -1` that was meant to be
computed, verl issue 6683) makes a linear or cosine decay return LR 0 from its first step.
lrdoctor reports it when the saved LR confirms it: 0 while the peak (`initial_lr`,
`base_lrs`) is not; a horizon in the scheduler's own state is LRD106's.

## Example
`total_training_steps` -1 in the config, optimizer lr 0.0 at step 5, initial_lr 1e-6.

## Fix
Compute the horizon before building the scheduler (verl: set `total_training_steps` from the
dataloader length x epochs) and resume from a checkpoint saved with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lrdoctor.core.evidence import Quantity as Q
from lrdoctor.core.evidence import Role as R
from lrdoctor.core.findings import Evidence, Finding, Rule, Severity, optional
from lrdoctor.core.numbers import number
from lrdoctor.rules.hypotheses import evidence

if TYPE_CHECKING:
    from lrdoctor.core.state import RunState

class HorizonUnset(Evidence):
    """The horizon saved as 0 or below, and the LR of 0 against the peak that confirms it."""

    horizon: float
    horizon_from: str
    lr: float
    lr_from: str
    peak_lr: float
    peak_from: str
    scheduler_progress: float | None = optional()

    def headline(self) -> str | None:
        return f"horizon {self.horizon:g}: LR 0"


RULE = Rule.from_module(__name__, Severity.ERROR, evidence=(HorizonUnset,))


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """A horizon of 0 or below (unset, -1) with the LR at 0 while the peak is not."""
    spec = state.schedule
    if spec is not None and spec.horizon is not None:
        return []  # the scheduler's own horizon is judged by LRD106 (impossible config)
    items = evidence(state)
    bad = next((e for e in items if e.role is R.HORIZON and e.value <= 0), None)
    if bad is None:
        return []
    lrs = [e for e in items if e.role is R.LR and e.quantity is Q.LR and not e.logged]
    now = [e for e in lrs if e.name in ("lr", "last_lr") or e.where.endswith("]")
           and "last_lr" in e.where]
    peak = [e for e in lrs if e.name in ("initial_lr", "base_lrs") or "base_lrs" in e.where]
    zero = next((e for e in now if e.value == 0), None)
    top = next((e for e in peak if e.value > 0), None)
    if zero is None or top is None:
        return []
    prog = state.scheduler_progress
    at = f" at {prog.name} = {number(prog.value)}" if prog is not None else ""

    return [RULE.finding(
        f"The schedule's horizon {bad.name} = {number(bad.value)} ({bad.where}) is unset or "
        f"negative: a decay built on it gives LR 0 from its first step. The saved LR is 0 "
        f"({zero.where}){at} while the peak is {top.value:g} ({top.where}). Ruled out: a "
        "decay that finished (its horizon would be a positive number of steps) and a "
        "warmup (it would start at the peak's fraction, not stay at 0).",
        HorizonUnset(horizon=bad.value, horizon_from=bad.where, lr=0.0, lr_from=zero.where,
                     peak_lr=top.value, peak_from=top.where,
                     scheduler_progress=prog.value if prog is not None else None),
        location=bad.where)]
