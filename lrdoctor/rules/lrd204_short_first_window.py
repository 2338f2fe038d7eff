"""LRD204 `short-first-window`: the first accumulation window is short (off-by-one).

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD204",
    name="short-first-window",
    severity=Severity.ERROR,
    title="The first accumulation window is short (off-by-one)",
    explanation=("`global_step % k != 0` with `global_step` from 0 closes the first window after"
                 " one micro-batch and shifts every later window."),
    example="k=4: window sizes 1, 4, 4, ...",
    fix="Use `(global_step + 1) % k == 0` as the optimizer-step condition.",
)
