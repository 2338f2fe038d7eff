"""LRD208 `short-padding`: Padding to dp size comes up short

## Explanation
`tensor[:pad_size]` returns fewer rows than `pad_size` when `pad_size > mb_size`, so the
mini-batch is still not divisible by dp.

## Example
mb_size 2, dp 8: pad_size 6 but only 2 rows added.

## Fix
Repeat rows until the pad is full (or pad with whole prompts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity

if TYPE_CHECKING:
    from lrdoctor.rules.replay_context import ReplayContext

RULE = Rule.from_module(__name__, Severity.ERROR)


class ShortPadding(Evidence):
    steps: int
    #: The first short pad as the packer noted it (mb_size, pad_size, dp, rows, needed).
    example: dict[str, Any]


def check(c: ReplayContext) -> list[Finding]:
    """Padding a mini-batch to a multiple of dp yields fewer rows than it needs."""
    from lrdoctor.rules.replay_context import notes

    short = notes(c.rep, "short_padding")
    if not short:
        return []
    first = short[0][1][0] if isinstance(short[0][1], list) else short[0][1]
    n_minis = sum(len(v) if isinstance(v, list) else 1 for _, v in short)
    return [RULE.finding(
        f"Padding to dp comes up short in {n_minis} "
        f"mini-batch(es) over {len(short)} train step(s); e.g. step {short[0][0]}: "
        f"mb_size {first.get('mb_size')}, pad_size {first.get('pad_size')}, dp "
        f"{first.get('dp')}: {first.get('rows_after_padding')} rows instead of "
        f"{first.get('needed')}.",
        ShortPadding(steps=len(short), example=first), location="batching.pad_mode")]
