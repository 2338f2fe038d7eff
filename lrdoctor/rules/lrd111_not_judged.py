"""LRD111 `not-judged`: scheduler progress or the optimizer's LR could not be judged.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD111",
    name="not-judged",
    severity=Severity.WARNING,
    title="Scheduler progress or the optimizer's LR could not be judged",
    explanation=("lrdoctor found no LR scheduler state in the files it scanned, or found one "
                 "with nothing to compare it with (no optimizer step, loop counter or budget), "
                 "or the checkpoint shows that the optimizer's param-group LRs were saved "
                 "(Megatron's distributed optimizer) but they could not be read, so the LR check"
                 " (LRD105) was not done, or a metrics log beside a LambdaLR checkpoint "
                 "(Lightning's `metrics.csv` or a TensorBoard event file) was unreadable or held"
                 " no logged LR, so the schedule was not fitted from it. Rather than stay silent"
                 " it names what it scanned, at a severity a CI gate sees."),
    example="`model.pt` and `optimizer.pt` only: no scheduler state among 2 files.",
    fix=("Save the scheduler's `state_dict()` (and the optimizer's) in the checkpoint, or point "
         "lrdoctor at the file or folder that holds it."),
)
