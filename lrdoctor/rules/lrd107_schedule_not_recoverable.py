"""LRD107 `schedule-not-recoverable`: the intended schedule could not be recovered fully.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD107",
    name="schedule-not-recoverable",
    severity=Severity.INFO,
    title="The intended schedule could not be recovered fully",
    explanation=("The checkpoint does not save everything needed to rebuild the schedule "
                 "(LambdaLR saves no lambdas; HF keeps warmup in training_args.bin). lrdoctor "
                 "says where what it used came from."),
    example="LambdaLR in a plain torch checkpoint with no budget saved.",
    fix=("Give the schedule to `lrdoctor fix --schedule` (the replay config's schedule "
         "section, inline or a YAML file) or `--from-replay` when repairing."),
)
