"""LRD215 `loss-divisor-lr-scale`: the loss divisor changes the effective LR of updates.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD215",
    name="loss-divisor-lr-scale",
    severity=Severity.WARNING,
    title="The loss divisor changes the effective LR of updates",
    explanation=("Under gradient accumulation and data parallelism the loss must be divided by "
                 "the tokens of the whole update (every micro-batch, every rank). Dividing each "
                 "micro-batch by its own tokens (then by k), or each rank by its own window, "
                 "makes a short window train at a fraction of the LR and weighs tokens "
                 "unequally: transformers PR 34191 (`num_items_in_batch`) and issue 37766. "
                 "`replay` reports the effective LR scale per update the configured divisor "
                 "implies."),
    example=("per_micro_batch_tokens, k 4: the last window of each epoch holds 1 micro-batch and"
             " trains at 0.25x; tokens weigh 0.4..2.6x inside one update."),
    fix=("Divide by the update's global token count (all-reduce it across ranks, multiply the "
         "loss by dp to undo DDP's mean), as `num_items_in_batch` does."),
)
