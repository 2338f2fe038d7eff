"""LRD117 `epoch-end-arithmetic`: the horizon differs from the updates an epoch-based loop really takes.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD117",
    name="epoch-end-arithmetic",
    severity=Severity.ERROR,
    title="The horizon differs from the updates an epoch-based loop really takes",
    explanation=("The horizon was computed from len(dataloader) and the accumulation with floor "
                 "or ceil, while the loop steps (or skips) the short window at the end of each "
                 "epoch, or carries windows across epochs: the schedule ends before or after "
                 "training does. transformers issues 37777 and 31677, Lightning 19684, OpenRLHF "
                 "PR 1351 (21 scheduled vs 23 real updates, the cosine rising again at the end)."
                 " When neither the config nor the checkpoint's counters tell which the loop "
                 "does, the finding is info and names what each would take."),
    example=("`max_train_steps` 21 = 3 x floor(30 / 4) but windows carried across epochs give "
             "floor(3 x 30 / 4) = 22 updates."),
    fix=("Compute the horizon the way the loop steps: epochs x ceil(L / GA) when the short "
         "window of each epoch is stepped, floor(epochs x L / GA) when windows run across "
         "epochs; or count the real updates once (a dry pass over the dataloader)."),
)
