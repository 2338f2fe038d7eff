"""LRD120 `horizon-unset`: The schedule's horizon is unset or negative

The rule lives here; its check is :func:`lrdoctor.rules.evidence_checks.horizon_unset` (the
horizon as evidence, confirmed by the saved LR).

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

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity, optional

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
    from lrdoctor.rules.evidence_checks import horizon_unset

    return horizon_unset(state)
