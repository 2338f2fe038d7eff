"""What every framework translator shares: a key reader that remembers what it read.

A translator turns a framework's own config into an lrdoctor run config. The
user must be able to see which of their keys decided the replay
(``config_keys_used`` in ``--json``) and which keys would change the step
accounting but are not modelled (a warning finding, LRD213), so every read goes
through :class:`Reader`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, overload

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.translate.interpolate import MISSING as _MISSING
from lrdoctor.replay.translate.interpolate import lookup as _lookup
from lrdoctor.replay.translate.interpolate import resolve


@dataclass(frozen=True)
class Translator:
    """One framework's config translator: a module under ``replay/translate/`` defines
    ``TRANSLATOR`` and :data:`lrdoctor.replay.translate.TRANSLATORS` lists it.

    ``looks_like`` says from the parsed config (a mapping, or the text of an argument
    list) whether it is this framework's; ``translate`` turns it into a
    :class:`Translation`. ``reads`` is what the config is: ``"yaml"`` (a parsed
    mapping) or ``"args"`` (the text of a command line or argument file).
    """

    name: str  # "verl", "skyrl", ... (also the report's "<name>-config" format)
    title: str  # how the docs and messages name it
    reads: str  # "yaml" | "args"
    looks_like: Callable[[Any], bool]
    translate: Callable[[Any, Path | None], Translation]
    format: str | None = None  # the report's format name (default "<name>-config")

    @property
    def format_name(self) -> str:
        return self.format or f"{self.name}-config"


@dataclass
class Translation:
    """A framework config translated: the lrdoctor config dict and the audit trail."""

    framework: str  # "verl", "skyrl", ...
    config: dict[str, Any]
    keys_used: dict[str, Any] = field(default_factory=dict)
    unmodelled: list[dict[str, Any]] = field(default_factory=list)
    # Values the translation had to derive or assume because no config key holds them,
    # keyed by the key that would: {"value", "from": "derived" | "assumed", "why", "set"}.
    # An "assumed" one caps the findings resting on it at a warning
    # (rules.replay_context.with_provenance, for the rules declaring RUN_LENGTH).
    provenance: dict[str, dict[str, Any]] = field(default_factory=dict)


def near_misses(section: Any, known: frozenset[str], prefix: str, schema: str,
                cutoff: float = 0.85) -> list[dict[str, Any]]:
    """The keys of ``section`` (one mapping of a framework's config) that ``known`` (its
    schema's fields) lacks but nearly has: a misspelling, reported with the nearest known
    key (LRD217). A key far from every known one is left alone: it may be a newer
    version's field, and a false warning costs more than a miss."""
    import difflib

    if not isinstance(section, dict):
        return []
    out = []
    for k, v in section.items():
        if not isinstance(k, str) or k in known:
            continue
        near = difflib.get_close_matches(k, sorted(known), n=1, cutoff=cutoff)
        if near:
            out.append({"key": f"{prefix}.{k}", "value": v, "nearest": f"{prefix}.{near[0]}",
                        "schema": schema})
    return out


def absent_near_misses(data: dict, asked: Any, schema: str,
                       cutoff: float = 0.9) -> list[dict[str, Any]]:
    """LRD217 from the keys a translator asks for (its own table of the framework's keys,
    ``KEYS_READ`` or every :meth:`Reader.get`): a key it asked for is absent (the default
    applied) while its section holds a key one or two letters from it (``max_step`` where
    ``max_steps`` is read), a misspelling that left the setting at its default. Only a key
    near one that was asked for and is missing is named: the translator's table is not the
    whole schema, so a key near none of them, or near one that is set, is left alone."""
    import difflib

    keys = list(dict.fromkeys(asked))
    read = set(keys)
    out: dict[str, dict[str, Any]] = {}
    for key in keys:
        val = _lookup(data, key)
        if val is not _MISSING and val is not None:
            continue
        parent, _, leaf = key.rpartition(".")
        section = _lookup(data, parent) if parent else data
        if not isinstance(section, dict):
            continue
        for k, v in section.items():
            full = f"{parent}.{k}" if parent else str(k)
            if not isinstance(k, str) or k == leaf or full in read or full in out:
                continue
            if difflib.SequenceMatcher(None, k, leaf).ratio() >= cutoff:
                out[full] = {"key": full, "value": v, "nearest": key, "schema": schema}
    return list(out.values())


class Reader:
    """Dotted-key access to one resolved config, recording each key read.

    ``keys_used`` maps a key to the value the replay took, ``"(default) X"`` when
    the key was absent and the framework's default applied.
    """

    def __init__(self, data: dict, resolve_refs: bool = True):
        self.data = resolve(data) if resolve_refs else data
        self.used: dict[str, Any] = {}
        self.unmodelled: list[dict[str, Any]] = []
        self.asked: list[str] = []  # every key looked up, for LRD217's near misses

    def has(self, key: str) -> bool:
        val = _lookup(self.data, key)
        return val is not _MISSING and val is not None

    def raw(self, key: str) -> Any:
        val = _lookup(self.data, key)
        return None if val is _MISSING else val

    def get(self, key: str, default: Any = _MISSING, kind: type | None = None) -> Any:
        val = _lookup(self.data, key)
        self.asked.append(key)
        if val is _MISSING or val is None:
            if default is _MISSING:
                return None
            self.used[key] = f"(default) {default}"
            return default
        if isinstance(val, str) and "@@unresolved:" in val:
            import re

            names = re.findall(r"@@unresolved:([^@]*)@@", val)
            # a dotted key is settable as such; a plain option (--key) through its variable
            hint = key if "." in key or not re.fullmatch(r"[A-Za-z_]\w*", names[0]) \
                else names[0]
            raise UnusableInput(f"{key} comes from {', '.join(names)}, which the launch script "
                                f"does not determine: give --set {hint}=VALUE")
        if isinstance(val, str) and "${" in val:
            raise UnusableInput(f"{key} is {val!r}: the interpolation does not resolve in this file")
        if kind in (int, float):
            val = checked_number(val, key, kind)
        elif kind is bool:
            val = _bool(val, key)
        elif kind is str:
            val = str(val)
        self.used[key] = val
        return val

    @overload
    def count(self, key: str) -> int | None: ...
    @overload
    def count(self, key: str, default: int) -> int: ...

    def count(self, key: str, default: Any = _MISSING) -> int | None:
        """An integer that sizes something (a batch, a GPU count): must be >= 1. None
        only when the key is absent and there is no default (the overloads say so)."""
        val = self.get(key, default, int)
        if val is not None and val < 1:
            raise UnusableInput(f"{key} is {val}; expected a positive integer")
        return val

    def need(self, key: str, why: str, kind: type = int) -> Any:
        val = self.get(key, kind=kind)
        if val is None:
            raise UnusableInput(f"{key} is missing: {why}")
        if kind is int and val < 1:
            raise UnusableInput(f"{key} is {val}; expected a positive integer")
        return val

    def unmodelled_if(self, key: str, active: Any, why: str) -> None:
        """Record ``key`` as set but not modelled when ``active(value)`` is true."""
        val = _lookup(self.data, key)
        if val is _MISSING or val is None:
            return
        try:
            hit = active(val)
        except (TypeError, ValueError):
            hit = True
        if hit:
            self.used[key] = val
            self.unmodelled.append({"key": key, "value": val, "why": why})

    def done(self, framework: str, config: dict,
             provenance: dict[str, dict[str, Any]] | None = None) -> Translation:
        near = absent_near_misses(self.data, self.asked,
                                  f"{framework}'s config as the replay reads it")
        return Translation(framework, config, dict(sorted(self.used.items())),
                           self.unmodelled + near, dict(provenance or {}))


def checked_number(value: Any, key: str, kind: type = int) -> Any:
    if isinstance(value, bool):
        raise UnusableInput(f"{key} is {value!r}; expected a number")
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise UnusableInput(f"{key} is {value!r}; expected a number") from None
    if not isinstance(value, (int, float)):
        raise UnusableInput(f"{key} is {value!r}; expected a number")
    if isinstance(value, float) and value != value or abs(value) > 1e15:  # NaN, ±inf, 10**400
        raise UnusableInput(f"{key} is {value!r}; expected a finite number below 1e15")
    if kind is int:
        if value != int(value):
            raise UnusableInput(f"{key} is {value!r}; expected an integer")
        return int(value)
    return float(value)


def _bool(val: Any, key: str) -> bool:
    if isinstance(val, bool):
        return val
    if isinstance(val, str) and val.strip().lower() in ("true", "false"):
        return val.strip().lower() == "true"
    raise UnusableInput(f"{key} is {val!r}; expected true or false")


def positive(val: Any) -> bool:
    return float(val) > 0


def truthy(val: Any) -> bool:
    return bool(val) and str(val).lower() not in ("false", "0", "none", "null")


def synthetic_up_to(max_len: int | None) -> str | None:
    """Synthetic lengths when the user gives no batch log: uniform up to the config's max."""
    if not max_len or max_len < 2:
        return None
    return f"uniform:{max(1, max_len // 16)}:{max_len}"

