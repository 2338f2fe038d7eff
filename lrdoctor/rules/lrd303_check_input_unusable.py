"""LRD303 `check-input-unusable`: a checked input could not be used.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from lrdoctor.core.findings import Evidence, Rule, Severity

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


@dataclass(frozen=True)
class InputUnusable(Evidence):
    """The target, and the refusal's structured record verbatim (what was scanned: the
    keys are :class:`~lrdoctor.core.errors.UnusableInput`'s ``detail``)."""

    target: str
    detail: dict[str, Any] = field(default_factory=dict)

    def raw(self) -> dict[str, Any]:
        return {"target": self.target, **self.detail}
