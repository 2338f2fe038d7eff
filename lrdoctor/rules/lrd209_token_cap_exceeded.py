"""LRD209 `token-cap-exceeded`: a micro-batch exceeds the token cap.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD209",
    name="token-cap-exceeded",
    severity=Severity.WARNING,
    title="A micro-batch exceeds the token cap",
    explanation=("Balanced partitioning (Karmarkar-Karp) keeps the partition count but can put "
                 "more tokens in one micro-batch than the cap (a warning). A single sequence "
                 "longer than the cap is an error where the framework asserts on it, because the"
                 " real run stops there: ROLL's `dynamic_batching_shard` and NeMo-RL's dynamic "
                 "batching assert, verl's `rearrange_micro_batches` asserts `max_token_len >= "
                 "max_seq_len`, OpenRLHF raises `ValueError`; SkyRL's balanced packer puts it "
                 "alone in a micro-batch (a warning)."),
    example=("max_token_len 8192, micro-batch of 9500 tokens; ROLL: a 9000-token sequence with "
             "`max_tokens_per_microbatch_in_train` 8192."),
    fix="Raise the cap (at least to the longest sequence) or let the partition count grow.",
)
