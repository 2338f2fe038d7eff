"""``${...}`` interpolation in the frameworks' Hydra/OmegaConf YAML, without running it.

Plain references (``${a.b}``, ``${x}`` inside strings, relative ``${..x}``),
``${oc.env:VAR,default}``, ``${oc.select:key,default}`` and NeMo-RL's
``${mul:a,b}`` are resolved as OmegaConf resolves them; any other resolver is
left as text (the translator names the key that needs it). No code runs.
"""

from __future__ import annotations

import math
import os
import re
from typing import Any

from lrdoctor.core.errors import UnusableInput

_REF = re.compile(r"\$\{([^${}]+)\}")
MISSING = object()
_MISSING = MISSING


def lookup(root: dict, dotted: str) -> Any:
    node: Any = root
    for part in dotted.strip().split("."):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return _MISSING
    return node


def _resolve_ref(root: dict, expr: str, stack: tuple[str, ...]) -> Any:
    expr = expr.strip()
    if expr.startswith("oc.env:"):
        name, _, default = expr[len("oc.env:") :].partition(",")
        val = os.environ.get(name.strip())
        if val is not None:
            return val
        return default.strip().strip("'\"") if default else _MISSING
    if expr.startswith("oc.select:"):  # Hydra's "key, else default" (verl's generated configs)
        key, _, default = expr[len("oc.select:") :].partition(",")
        got = lookup(root, key.strip())
        if got is not _MISSING and got is not None:
            return _resolve(root, got, (*stack, expr))
        default = default.strip()
        if not default or default == "null":
            return None
        try:
            return int(default)
        except ValueError:
            try:
                return float(default)
            except ValueError:
                return default.strip("'\"")
    if expr.startswith("mul:"):  # NeMo-RL's ${mul:a, b} (after the inner refs resolved)
        try:
            vals = [float(x) for x in expr[len("mul:") :].split(",")]
        except ValueError:
            return _MISSING
        prod = math.prod(vals)
        return int(prod) if prod == int(prod) else prod
    if ":" in expr:  # another resolver: not ours to run
        return _MISSING
    if expr in stack:
        raise UnusableInput(f"interpolation cycle: {' -> '.join((*stack, expr))}")
    val = lookup(root, expr)
    if val is _MISSING:
        return _MISSING
    return _resolve(root, val, (*stack, expr))


def _resolve(root: dict, value: Any, stack: tuple[str, ...] = ()) -> Any:
    """Resolve ``${...}`` references in ``value``; unresolvable ones stay as text."""
    if isinstance(value, dict):
        return {k: _resolve(root, v, stack) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(root, v, stack) for v in value]
    if not isinstance(value, str) or "${" not in value:
        return value
    whole = _REF.fullmatch(value.strip())
    if whole:
        got = _resolve_ref(root, whole.group(1), stack)
        return value if got is _MISSING else got

    def sub(m: re.Match) -> str:
        got = _resolve_ref(root, m.group(1), stack)
        return m.group(0) if got is _MISSING else str(got)

    out = _REF.sub(sub, value)
    if out != value and "${" in out:  # nested: ${mul:${a}, ${b}} resolves inside out
        return _resolve(root, out, stack)
    return out


def resolve(data: dict) -> dict:
    """The YAML mapping with every resolvable interpolation replaced."""
    return _resolve(data, data)
