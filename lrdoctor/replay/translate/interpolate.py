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
from lrdoctor.core.tree import dig

_REF = re.compile(r"\$\{([^${}]+)\}")
MISSING = object()
_MISSING = MISSING


def lookup(root: dict, dotted: str) -> Any:
    """The value at a dotted key (spaces around it ignored), or :data:`MISSING`."""
    return dig(root, dotted.strip(), _MISSING)


def _absolute(expr: str, where: tuple[str, ...]) -> str:
    """``${.x}`` / ``${..x}``: relative to the node holding the string (OmegaConf's rule:
    one dot is that node's parent mapping, each further dot one level up)."""
    dots = len(expr) - len(expr.lstrip("."))
    if not dots:
        return expr
    base = where[:max(0, len(where) - dots)]
    rest = expr[dots:]
    return ".".join((*base, rest)) if rest else ".".join(base)


def _resolve_ref(root: dict, expr: str, stack: tuple[str, ...],
                 where: tuple[str, ...] = ()) -> Any:
    expr = expr.strip()
    if expr.startswith("oc.env:"):
        name, _, default = expr[len("oc.env:") :].partition(",")
        val = os.environ.get(name.strip())
        if val is not None:
            return val
        return default.strip().strip("'\"") if default else _MISSING
    if expr.startswith("oc.select:"):  # Hydra's "key, else default" (verl's generated configs)
        key, _, default = expr[len("oc.select:") :].partition(",")
        key = _absolute(key.strip(), where)
        got = lookup(root, key)
        if got is not _MISSING and got is not None:
            return _resolve(root, got, (*stack, expr), tuple(key.split(".")))
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
        # a product of saved values may be inf/nan (".inf" in a config): left a float, for
        # the translator's checks to name (int() of it would raise)
        return int(prod) if math.isfinite(prod) and prod == int(prod) else prod
    if ":" in expr:  # another resolver: not ours to run
        return _MISSING
    expr = _absolute(expr, where)
    if expr in stack:
        raise UnusableInput(f"interpolation cycle: {' -> '.join((*stack, expr))}")
    val = lookup(root, expr)
    if val is _MISSING:
        return _MISSING
    return _resolve(root, val, (*stack, expr), tuple(expr.split(".")))


def _resolve(root: dict, value: Any, stack: tuple[str, ...] = (),
             where: tuple[str, ...] = ()) -> Any:
    """Resolve ``${...}`` references in ``value`` (at key path ``where``); unresolvable
    ones stay as text."""
    if isinstance(value, dict):
        return {k: _resolve(root, v, stack, (*where, str(k))) for k, v in value.items()}
    if isinstance(value, list):
        return [_resolve(root, v, stack, (*where, str(i))) for i, v in enumerate(value)]
    if not isinstance(value, str) or "${" not in value:
        return value
    whole = _REF.fullmatch(value.strip())
    if whole:
        got = _resolve_ref(root, whole.group(1), stack, where)
        return value if got is _MISSING else got

    def sub(m: re.Match) -> str:
        got = _resolve_ref(root, m.group(1), stack, where)
        return m.group(0) if got is _MISSING else str(got)

    out = _REF.sub(sub, value)
    if out != value and "${" in out:  # nested: ${mul:${a}, ${b}} resolves inside out
        return _resolve(root, out, stack, where)
    return out


def resolve(data: dict) -> dict:
    """The YAML mapping with every resolvable interpolation replaced."""
    return _resolve(data, data)
