"""LRD302 `progress-ratio-exceeded`: scheduler progress ratio exceeds the tolerated maximum.

The rule, its check and its evidence live here; :mod:`lrdoctor.rules` registers it.
"""

from __future__ import annotations

from dataclasses import dataclass

from lrdoctor.core.findings import Evidence, Rule, Severity

RULE = Rule(
    code="LRD302",
    name="progress-ratio-exceeded",
    severity=Severity.ERROR,
    title="Scheduler progress ratio exceeds the tolerated maximum",
    explanation="actual/nominal scheduler progress is above `max-progress-ratio`.",
    example="ratio 3.51 > 1.05.",
    fix="Fix the step accounting, or raise the tolerance with a reason.",
)


@dataclass(frozen=True)
class ProgressRatioExceeded(Evidence):
    progress_ratio: float
    max_progress_ratio: float
    config_key: str | None

    def headline(self) -> str | None:
        return (f"{self.progress_ratio:.3g}x nominal, over the limit "
                f"{self.max_progress_ratio}")
