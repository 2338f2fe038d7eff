"""Reading a ``--json`` document (one schema for every command, docs/json-schema.json)."""

from __future__ import annotations

from typing import Any


def reports(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The reports of one document: its ``reports``, each run's (``runs``), or itself."""
    assert isinstance(doc, dict), f"a --json document is one object, not {type(doc).__name__}"
    if "reports" in doc:
        return doc["reports"]
    if "runs" in doc:
        return [r for run in doc["runs"] for r in run["reports"]]
    return [doc]
