"""LRD104 `megatron-samples-mismatch`: megatron scheduler `num_steps` differs from consumed minus skipped samples.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD104",
    name="megatron-samples-mismatch",
    severity=Severity.ERROR,
    title="Megatron scheduler `num_steps` differs from consumed minus skipped samples",
    explanation=("Megatron increments `num_steps` by the global batch size per iteration, so it "
                 "must equal `consumed_train_samples - skipped_train_samples`."),
    example="`num_steps` 96000 but `consumed_train_samples` 48000, `skipped` 0.",
    fix=("Resume with `--override-opt_param-scheduler` after fixing the counter, or run "
         "`lrdoctor fix --policy nominal`."),
)
