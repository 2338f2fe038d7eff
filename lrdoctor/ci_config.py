"""The ``[tool.lrdoctor]`` configuration that ``lrdoctor check`` gates CI with.

Read from ``--config FILE``, else the nearest ``lrdoctor.toml`` or
``pyproject.toml`` holding ``[tool.lrdoctor]`` (searched upward from the working
directory). Keys are kebab-case (``fail-on``); snake_case is accepted too.
Anything wrong (an unknown key, a missing ``reason`` on an ignore, an unknown
code) is one :class:`ConfigError` line naming the file and the key: exit 2.

Schema::

    [tool.lrdoctor]
    fail-on = "warning"            # info | warning | error | never
    max-progress-ratio = 1.05      # largest tolerated actual/nominal scheduler progress
    ignore = [{code = "LRD110", reason = "...", path = "ckpt/*"}]   # optional, all targets

    [[tool.lrdoctor.inspect]]
    path = "checkpoints/run-*/"    # a path or a glob, relative to the config file
    format = "hf"                  # optional
    fail-on = "error"              # optional override
    max-progress-ratio = 1.1       # optional override
    ignore = [{code = "LRD105", reason = "LR set by hand on resume"}]

    [[tool.lrdoctor.replay]]
    config = "configs/run.yaml"
    batch-log = "logs/batches.parquet"   # or synthetic = "lognormal:..."
"""

from __future__ import annotations

import fnmatch
import os
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lrdoctor import safetext
from lrdoctor.errors import UnusableInput
from lrdoctor.findings import FAIL_ON, RULES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class ConfigError(UnusableInput):
    """The lrdoctor configuration itself is wrong; the message names the key."""

    def __init__(self, path: str | os.PathLike, key: str, problem: str):
        self.key = key
        super().__init__(f"{key}: {problem}", str(path))


@dataclass
class Ignore:
    code: str
    reason: str
    key: str                      # e.g. tool.lrdoctor.inspect[0].ignore[1]
    path: str | None = None       # glob on the checked path (top-level ignores)
    line: int = 1
    used: int = 0

    def matches(self, code: str, target: str) -> bool:
        if code != self.code:
            return False
        if self.path is None:
            return True
        t = target.rstrip("/")
        pat = self.path.rstrip("/")
        return fnmatch.fnmatch(t, pat) or fnmatch.fnmatch(os.path.basename(t), pat)


@dataclass
class Target:
    kind: str                     # "inspect" or "replay"
    key: str                      # tool.lrdoctor.inspect[0]
    line: int
    path: str                     # inspect: path/glob; replay: the run config
    format: str | None = None
    all: bool = False
    batch_log: str | None = None
    synthetic: str | None = None
    options: dict[str, Any] = field(default_factory=dict)
    fail_on: str | None = None
    max_progress_ratio: float | None = None
    ignores: list[Ignore] = field(default_factory=list)


@dataclass
class CheckConfig:
    source: Path | None           # the file read (None: flags only)
    root: Path                    # relative paths resolve against this
    fail_on: str = "warning"
    max_progress_ratio: float | None = None
    ignores: list[Ignore] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    report: str | None = None

    @property
    def label(self) -> str:
        return str(self.source) if self.source else "command line"

    def resolve(self, p: str) -> str:
        """``p`` relative to the config's directory, kept relative to cwd when possible.

        A trailing slash is kept: in a glob it means directories only
        ('ckpt/*/' must not match ckpt/README.md), and relpath would drop it.
        """
        if os.path.isabs(p):
            return p  # as the user wrote it: '/data/ckpt', never '../../data/ckpt'
        full = os.path.join(self.root, p)
        slash = os.sep if p.endswith(("/", os.sep)) else ""
        try:
            return os.path.relpath(full) + slash
        except ValueError:  # pragma: no cover - different drive on Windows
            return full


# ---------------------------------------------------------------- discovery

def find_config(start: str | os.PathLike | None = None) -> Path | None:
    """Nearest ``lrdoctor.toml``, or ``pyproject.toml`` with ``[tool.lrdoctor]``, upward."""
    here = Path(start or os.getcwd()).resolve()
    for d in (here, *here.parents):
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
        if (d / ".git").exists():
            break
    return None


def load(path: str | os.PathLike | None = None, *, required: bool = False) -> CheckConfig:
    """Read and validate the configuration; an empty one when none is found."""
    if path is None:
        found = find_config()
        if found is None:
            return CheckConfig(source=None, root=Path.cwd())
        rel = os.path.relpath(found)
        path = Path(rel) if not rel.startswith("..") else found
    p = Path(path)
    if not p.is_file():
        raise UnusableInput("no such configuration file", str(p))
    try:
        text = safetext.read_text(p, "config_bytes", "a TOML config")
        data = safetext.toml_loads(text, str(p))
    except tomllib.TOMLDecodeError as exc:
        raise UnusableInput(f"not valid TOML ({exc})", str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UnusableInput(f"cannot read ({exc})", str(p)) from None
    if isinstance(data.get("tool"), dict) and "lrdoctor" in data["tool"]:
        table, prefix = data["tool"]["lrdoctor"], "tool.lrdoctor"
    elif p.name == "pyproject.toml":
        if required:
            raise ConfigError(p, "tool.lrdoctor", "table not found")
        return CheckConfig(source=p, root=p.parent.resolve())
    else:
        table, prefix = data, ""
    return parse(table, p, text, prefix)


# ------------------------------------------------------------------ parsing

_TOP = {"fail-on", "max-progress-ratio", "ignore", "inspect", "replay", "report"}
_INSPECT = {"path", "format", "all", "fail-on", "max-progress-ratio", "ignore", "name"}
_REPLAY = {"config", "batch-log", "synthetic", "fail-on", "max-progress-ratio", "ignore",
           "name", "options"}
_IGNORE = {"code", "reason", "path"}


def _k(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _norm(table: dict, allowed: set[str], where: str, src: Path) -> dict:
    out = {}
    for key, value in table.items():
        k = key.replace("_", "-")
        if k not in allowed:
            raise ConfigError(src, _k(where, key),
                              f"unknown key (expected one of {', '.join(sorted(allowed))})")
        out[k] = value
    return out


def _str(value: Any, src: Path, key: str, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str) or (not allow_empty and not value.strip()):
        raise ConfigError(src, key, f"must be a non-empty string, got {value!r}")
    return value


def _fail_on(value: Any, src: Path, key: str) -> str:
    if value not in FAIL_ON:
        raise ConfigError(src, key, f"must be one of {', '.join(FAIL_ON)}, got {value!r}")
    return value


def _ratio(value: Any, src: Path, key: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ConfigError(src, key, f"must be a positive number, got {value!r}")
    return float(value)


def parse(table: dict, src: Path, text: str = "", prefix: str = "tool.lrdoctor") -> CheckConfig:
    """Validate an already-parsed ``[tool.lrdoctor]`` table (``text`` is for line numbers)."""
    lines = _Lines(text, prefix)
    t = _norm(table, _TOP, prefix, src)
    cfg = CheckConfig(source=src, root=src.parent.resolve())
    if "fail-on" in t:
        cfg.fail_on = _fail_on(t["fail-on"], src, _k(prefix, "fail-on"))
    if "max-progress-ratio" in t:
        cfg.max_progress_ratio = _ratio(t["max-progress-ratio"], src,
                                        _k(prefix, "max-progress-ratio"))
    if "report" in t:
        cfg.report = _str(t["report"], src, _k(prefix, "report"))
    cfg.ignores = _ignores(t.get("ignore", []), src, _k(prefix, "ignore"), lines, None, True)
    for kind in ("inspect", "replay"):
        entries = t.get(kind, [])
        if isinstance(entries, dict):
            entries = [entries]
        if not isinstance(entries, list):
            raise ConfigError(src, _k(prefix, kind), "must be an array of tables ([[...]])")
        for i, entry in enumerate(entries):
            key = f"{_k(prefix, kind)}[{i}]"
            if not isinstance(entry, dict):
                raise ConfigError(src, key, "must be a table")
            cfg.targets.append(_target(kind, entry, src, key, lines, i))
    return cfg


def _target(kind: str, entry: dict, src: Path, key: str, lines: _Lines, i: int) -> Target:
    e = _norm(entry, _INSPECT if kind == "inspect" else _REPLAY, key, src)
    main = "path" if kind == "inspect" else "config"
    if main not in e:
        raise ConfigError(src, f"{key}.{main}", "required")
    header = lines.header(kind, i)
    t = Target(kind=kind, key=key, line=lines.key_after(header, main),
               path=_str(e[main], src, f"{key}.{main}"))
    if "format" in e:
        t.format = _str(e["format"], src, f"{key}.format")
    if "all" in e:
        if not isinstance(e["all"], bool):
            raise ConfigError(src, f"{key}.all", f"must be true or false, got {e['all']!r}")
        t.all = e["all"]
    if "batch-log" in e and "synthetic" in e:
        raise ConfigError(src, f"{key}.synthetic", "give batch-log or synthetic, not both")
    if "batch-log" in e:
        t.batch_log = _str(e["batch-log"], src, f"{key}.batch-log")
    if "synthetic" in e:
        t.synthetic = _str(e["synthetic"], src, f"{key}.synthetic")
    if "options" in e:
        if not isinstance(e["options"], dict):
            raise ConfigError(src, f"{key}.options", "must be a table")
        t.options = {k.replace("-", "_"): v for k, v in e["options"].items()}
    if "fail-on" in e:
        t.fail_on = _fail_on(e["fail-on"], src, f"{key}.fail-on")
    if "max-progress-ratio" in e:
        t.max_progress_ratio = _ratio(e["max-progress-ratio"], src, f"{key}.max-progress-ratio")
    t.ignores = _ignores(e.get("ignore", []), src, f"{key}.ignore", lines, header, False)
    return t


def _ignores(value: Any, src: Path, key: str, lines: _Lines, header: int | None,
             top: bool) -> list[Ignore]:
    if not isinstance(value, list):
        raise ConfigError(src, key, "must be an array of {code, reason} tables")
    out = []
    for j, item in enumerate(value):
        k = f"{key}[{j}]"
        if not isinstance(item, dict):
            raise ConfigError(src, k, 'must be a table like {code = "LRD105", reason = "..."}')
        it = _norm(item, _IGNORE if top else _IGNORE - {"path"}, k, src)
        if "code" not in it:
            raise ConfigError(src, f"{k}.code", "required")
        code = _str(it["code"], src, f"{k}.code").upper()
        if code not in RULES:
            raise ConfigError(src, f"{k}.code", f"unknown finding code {it['code']!r}")
        if "reason" not in it or not isinstance(it["reason"], str) or not it["reason"].strip():
            raise ConfigError(src, f"{k}.reason",
                              f"required: say why {code} is ignored (an ignore without a "
                              "reason is not accepted)")
        path = _str(it["path"], src, f"{k}.path") if "path" in it else None
        nth = sum(1 for o in out if o.code == code)
        out.append(Ignore(code=code, reason=it["reason"].strip(), key=k, path=path,
                          line=lines.code_after(header, code, nth)))
    return out


_HEADER = re.compile(r"^\[\[?\s*[A-Za-z0-9_.-]+\s*\]\]?\s*(#.*)?$")
_IGNORE_HEADER = re.compile(r"^\[\[\s*[A-Za-z0-9_.-]*ignore\s*\]\]")


class _Lines:
    """Finds 1-based lines of tables and keys in the TOML text, for annotations."""

    def __init__(self, text: str, prefix: str):
        self.lines = text.splitlines()
        self.prefix = prefix

    def header(self, kind: str, index: int) -> int | None:
        name = _k(self.prefix, kind)
        pat = re.compile(r"^\s*\[\[\s*" + re.escape(name) + r"\s*\]\]")
        n = -1
        for i, line in enumerate(self.lines):
            if pat.match(line):
                n += 1
                if n == index:
                    return i + 1
        return None

    def _section(self, header: int | None) -> range:
        if header is None:  # the [tool.lrdoctor] table itself (or the whole file)
            start = 0
            if self.prefix:
                pat = re.compile(r"^\s*\[\s*" + re.escape(self.prefix) + r"\s*\]")
                start = next((i + 1 for i, s in enumerate(self.lines) if pat.match(s)), 0)
        else:
            start = header
        end = len(self.lines)
        for i in range(start, len(self.lines)):
            s = self.lines[i].strip()
            if _HEADER.match(s):
                if _IGNORE_HEADER.match(s):  # [[...ignore]] entries belong to this table
                    continue
                end = i
                break
        return range(start, end)

    def key_after(self, header: int | None, key: str) -> int:
        pat = re.compile(r"^\s*[\"']?" + re.escape(key) + r"[\"']?\s*=")
        for i in self._section(header):
            if pat.match(self.lines[i]):
                return i + 1
        return header or 1

    def code_after(self, header: int | None, code: str, nth: int = 0) -> int:
        """Line of the ``nth`` ignore of ``code`` in the table at ``header`` (None: the
        top-level table, including ``[[tool.lrdoctor.ignore]]`` entries anywhere)."""
        pat = re.compile(r"[\"']" + re.escape(code) + r"[\"']", re.IGNORECASE)
        rows = list(self._section(header))
        if header is None:
            own = re.compile(r"^\[\[\s*" + re.escape(_k(self.prefix, "ignore")) + r"\s*\]\]")
            for i, line in enumerate(self.lines):
                if own.match(line.strip()):
                    rows += [j for j in self._section(i + 1) if j not in rows]
        hits = [i + 1 for i in rows if pat.search(self.lines[i])]
        if hits:
            return hits[min(nth, len(hits) - 1)]
        return header or 1
