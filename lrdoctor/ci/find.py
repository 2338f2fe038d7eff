"""Where ``[tool.lrdoctor]`` is: the nearest ``lrdoctor.toml``, or ``pyproject.toml`` with
a ``[tool.lrdoctor]`` table, searched upward to the repository root.

Its own light module (no pydantic): every command looks for the file, and ``inspect``
must stay fast when there is none (:mod:`lrdoctor.ci.config` validates what is found).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from lrdoctor.core.errors import UnusableInput
from lrdoctor.read.bytes import safetext

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


def _searched(start: str | os.PathLike | None = None) -> list[Path]:
    """The folders searched for the config, nearest first: ``start`` (the working
    directory) and its parents up to the repository root (the folder holding ``.git``)."""
    here = Path(start or os.getcwd()).resolve()
    out = []
    for d in (here, *here.parents):
        out.append(d)
        if (d / ".git").exists():
            break
    return out


def not_found(start: str | os.PathLike | None = None) -> str:
    """Where no config was found, in words, for a message that must not name a file that
    is not there ("pyproject.toml: nothing to check" named one)."""
    dirs = _searched(start)
    where = (f"in {dirs[0]}" if len(dirs) == 1 else
             f"in {dirs[0]} or above it up to {dirs[-1]}")
    return f"no lrdoctor.toml, nor a pyproject.toml with [tool.lrdoctor], {where}"


def find_config(start: str | os.PathLike | None = None) -> Path | None:
    """Nearest ``lrdoctor.toml``, or ``pyproject.toml`` with ``[tool.lrdoctor]``, upward."""
    for d in _searched(start):
        cand = d / "lrdoctor.toml"
        if cand.is_file():
            return cand
        cand = d / "pyproject.toml"
        if cand.is_file():
            try:
                data = safetext.toml_loads(cand.read_text(encoding="utf-8"), str(cand))
            except (tomllib.TOMLDecodeError, OSError, UnicodeDecodeError, UnusableInput):
                data = {}
            if isinstance(data.get("tool"), dict) and "lrdoctor" in data["tool"]:
                return cand
    return None
