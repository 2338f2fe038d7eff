"""LRD102 `min-lr-tail`: a min-LR tail is configured.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD102",
    name="min-lr-tail",
    severity=Severity.INFO,
    title="A min-LR tail is configured",
    explanation=("The decay horizon ends before the planned end of training on purpose (Megatron"
                 " `lr_decay_iters` < `train_iters`): the remaining steps run at `min_lr`."),
    example="`lr_decay_iters` 800, `train_iters` 1000: the last 20% runs at `min_lr`.",
    fix="Nothing to do if this is intended.",
)
