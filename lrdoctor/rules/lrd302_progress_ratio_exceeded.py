"""LRD302 `progress-ratio-exceeded`: Scheduler progress ratio exceeds the tolerated maximum

## Explanation
actual/nominal scheduler progress is above `max-progress-ratio`.

## Example
ratio 3.51 > 1.05.

## Fix
Fix the step accounting, or raise the tolerance with a reason.
"""

from __future__ import annotations

from lrdoctor.core.findings import Evidence, Rule, Severity

RULE = Rule.from_module(__name__, Severity.ERROR)


class ProgressRatioExceeded(Evidence):
    progress_ratio: float
    max_progress_ratio: float
    config_key: str | None

    def headline(self) -> str | None:
        return (f"{self.progress_ratio:.3g}x nominal, over the limit "
                f"{self.max_progress_ratio}")
