"""LRD208 `short-padding`: padding to dp size comes up short.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD208",
    name="short-padding",
    severity=Severity.ERROR,
    title="Padding to dp size comes up short",
    explanation=("`tensor[:pad_size]` returns fewer rows than `pad_size` when `pad_size > "
                 "mb_size`, so the mini-batch is still not divisible by dp."),
    example="mb_size 2, dp 8: pad_size 6 but only 2 rows added.",
    fix="Repeat rows until the pad is full (or pad with whole prompts).",
)
