"""LRD303 `check-input-unusable`: a checked input could not be used.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from lrdoctor.core.findings import Rule, Severity

RULE = Rule(
    code="LRD303",
    name="check-input-unusable",
    severity=Severity.ERROR,
    title="A checked input could not be used",
    explanation=("A checkpoint or config named in the check configuration (or given to `inspect`"
                 " with a machine output format) could not be read; the message is the one line "
                 "printed on stderr, the evidence says what was scanned."),
    example="ckpt/missing: no such file.",
    fix="Correct the path.",
)
