"""The findings catalog: every rule by its code, and the page ``docs/findings.md``.

The rules live one per file in :mod:`lrdoctor.rules`; this module is the view of
them by code (:data:`RULES`) and the generator of the catalog page
(``python -m lrdoctor.findings > docs/findings.md``; a test keeps the two in sync).
Codes never change meaning once released.

LRD1xx: checkpoint state (``inspect``); LRD2xx: replayed loop (``replay``);
LRD3xx: configuration of lrdoctor itself (``check``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lrdoctor.core.findings import Evidence, Finding, FreeEvidence, Rule, Severity
from lrdoctor.rules import BY_CODE

#: code -> rule, in code order.
RULES: Mapping[str, Rule] = BY_CODE


def finding(code: str, message: str, evidence: Evidence | Mapping[str, Any] | None = None, *,
            fix: str | None = None, severity: Severity | None = None,
            location: str | None = None) -> Finding:
    """A finding by its code (the rule's own :meth:`Rule.finding` is the typed way)."""
    ev = evidence if isinstance(evidence, Evidence) else FreeEvidence(dict(evidence or {}))
    return BY_CODE[code].finding(message, ev, fix=fix, severity=severity, location=location)

__all__ = ["RULES", "catalog_markdown", "finding"]


def catalog_markdown() -> str:
    """The findings catalog page (docs/findings.md)."""
    out = ["# Findings catalog", "",
           "Every finding lrdoctor reports has a stable code. Severity is the default; "
           "`--fail-on` picks the threshold for exit code 1. In the fix texts below, "
           "`PATH` stands for the checkpoint; `inspect` prints the same command on its "
           "real path.", ""]
    from lrdoctor.diagnose import fix_command_placeholder as runnable
    from lrdoctor.rules.hypotheses import how_findings_are_reached
    from lrdoctor.rules.replay_context import HOW_REPLAY_SEVERITY

    out += [how_findings_are_reached(), HOW_REPLAY_SEVERITY]
    for r in RULES.values():
        out += [f"## {r.code} `{r.name}` ({r.severity})", "", f"**{r.title}**", "",
                runnable(r.explanation), "", f"*Example:* {r.example}", "",
                f"*Fix:* {runnable(r.fix)}", ""]
    return "\n".join(out)


if __name__ == "__main__":  # pragma: no cover
    print(catalog_markdown())
