"""LRD216 `scheduler-before-optimizer`: The scheduler steps before the first optimizer update

The evidence is the warning torch gave while the replay ran the configured loop for real
(``summary["torch_warnings"]``: the whole run with ``--torch``, the run's first steps in
``--cross-check``): the warning is the user's loop's, so it is reported as a finding about
that loop instead of a stray line pointing at lrdoctor's torch_exec.py.

## Explanation
torch warns "Detected call of `lr_scheduler.step()` before `optimizer.step()`" when a loop
steps its scheduler before the optimizer has stepped once: the schedule's first value is
skipped (warmup starts one step late). The replay ran the configured loop in torch and torch
warned.

## Example
scheduler stepped on every micro-batch with k=4: the first of 4 micro-batches steps the
scheduler before any optimizer update.

## Fix
Call `scheduler.step()` after `optimizer.step()`, inside the optimizer-step branch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity

if TYPE_CHECKING:
    from lrdoctor.rules.replay_context import ReplayContext

RULE = Rule.from_module(__name__, Severity.WARNING)
#: What it rests on (replay_context.with_provenance): torch's warning on the configured loop's step order.
LENGTHS = "none"


def is_step_order_warning(message: str) -> bool:
    """torch's "Detected call of `lr_scheduler.step()` before `optimizer.step()`"."""
    return "lr_scheduler.step() before optimizer.step()" in message.replace("`", "")


class SchedulerBeforeOptimizer(Evidence):
    warning: str
    count: int
    step_on: str

    def headline(self) -> str | None:
        return f"scheduler.step() before the first optimizer.step() (scheduler on {self.step_on})"


def check(c: ReplayContext) -> list[Finding]:
    """torch warned about the step order while the replayed loop ran."""
    hit = next((w for w in c.s.get("torch_warnings") or []
                if is_step_order_warning(w.get("message", ""))), None)
    if hit is None:
        return []
    step_on = c.cfg.scheduler.step_on
    return [RULE.finding(
        f"The replayed loop calls scheduler.step() before the first optimizer.step() "
        f"(scheduler stepped on {step_on.replace('_', ' ')}; accumulation rule "
        f"{c.cfg.accumulation.rule}): torch warned \"{hit['message'][:120]}\" "
        f"({hit['count']}x); the schedule's first LR is skipped.",
        SchedulerBeforeOptimizer(warning=hit["message"], count=int(hit["count"]),
                                 step_on=step_on),
        location="scheduler.step_on")]
