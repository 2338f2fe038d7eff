"""LRD105 `optimizer-lr-mismatch`: optimizer param-group `lr` disagrees with the schedule at the saved progress.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD105",
    name="optimizer-lr-mismatch",
    severity=Severity.WARNING,
    title="Optimizer param-group `lr` disagrees with the schedule at the saved progress",
    explanation=("The learning rate stored in the optimizer's param groups is not the LR the "
                 "schedule gives at the scheduler's saved progress: the schedule was changed, "
                 "the LR was set by hand, or a different scheduler drove the optimizer."),
    example="param group lr 1.0e-4, schedule says 3.0e-5 at `num_steps` 1200.",
    fix="`lrdoctor fix` rewrites the param-group `lr` to the schedule's value.",
)
