"""LRD104 `megatron-samples-mismatch`: Megatron scheduler `num_steps` differs from consumed minus skipped samples

## Explanation
Megatron increments `num_steps` by the global batch size per iteration, so it must equal
`consumed_train_samples - skipped_train_samples`.

## Example
`num_steps` 96000 but `consumed_train_samples` 48000, `skipped` 0.

## Fix
Resume with `--override-opt_param-scheduler` after fixing the counter, or run `lrdoctor fix
--policy nominal`.
"""

from __future__ import annotations

from collections.abc import Sequence

from lrdoctor.core.facts import Invariant
from lrdoctor.core.findings import Finding, Rule, Severity
from lrdoctor.core.state import RunState
from lrdoctor.rules.common import ProgressEvidence, law_broken

RULE = Rule.from_module(__name__, Severity.ERROR)


class MegatronSamplesMismatch(ProgressEvidence):
    against = "consumed - skipped samples"


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    """Megatron's law ``num_steps == consumed - skipped samples`` does not hold."""
    broken = law_broken(state, Invariant.MEGATRON_SAMPLES)
    if broken is None:
        return []
    ratio = broken.ratio
    micro = state.facts.micro_batches_per_update
    why, k = "", None
    if micro and micro > 1 and abs(ratio - micro) <= 1e-9 * micro:
        k = micro
        why = (f": one scheduler step per micro-batch ({micro} micro-batches per iteration) "
               "instead of one per iteration")
    return [RULE.finding(f"{broken.head()}{why}.",
                         MegatronSamplesMismatch(**{**broken.evidence.raw(), "k": k}))]
