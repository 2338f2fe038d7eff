"""Walking decoded nested data (YAML/JSON configs, a DCP checkpoint's re-nested state)
by a dotted path: the one rule for what ``a.b.0.c`` means, so a config key and a
checkpoint key are found the same way."""

from __future__ import annotations

from typing import Any


def dig(node: Any, dotted: str, default: Any = None) -> Any:
    """The value at ``dotted`` inside nested dicts and lists (a whole-number part indexes
    a list), or ``default`` where a part is missing: no exception, as untrusted data is
    missing keys as often as not."""
    for part in dotted.split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return default
    return node
