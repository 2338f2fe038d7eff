"""LRD118 `decay-unfinished-at-planned-end`: the decay horizon lies past the planned end of training.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD118",
    name="decay-unfinished-at-planned-end",
    severity=Severity.WARNING,
    title="The decay horizon lies past the planned end of training",
    explanation=("Training ends before the schedule finishes its decay, so the last updates run "
                 "at a higher LR than planned. Megatron with `--rampup-batch-size` and "
                 "iteration-based training sizes the horizon as `lr_decay_iters x "
                 "global_batch_size` (the final batch) while the ramp's early iterations consume"
                 " fewer samples (Megatron-Bridge issue 2609); lrdoctor computes the samples "
                 "along the ramp as megatron-core's ramp-up calculator does."),
    example=("train_iters 40, global batch 16, ramp-up 4 -> 16 over 96 samples: 544 samples "
             "consumed, horizon 640: training ends at 34% of the decay left."),
    fix=("Size the horizon from the real progress at the planned end (Megatron: train by samples"
         " with `--train-samples`/`--lr-decay-samples` under a ramp-up); `lrdoctor fix --policy "
         "extend-horizon` rewrites a checkpoint's horizon."),
)
