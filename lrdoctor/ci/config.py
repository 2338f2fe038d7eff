"""The ``[tool.lrdoctor]`` configuration that ``lrdoctor check`` gates CI with.

Read from ``--config FILE``, else the nearest ``lrdoctor.toml`` or
``pyproject.toml`` holding ``[tool.lrdoctor]`` (searched upward from the working
directory). Keys are kebab-case (``fail-on``); snake_case is accepted too.
The table is validated by pydantic models (:class:`LrdoctorIn` and the
models of its entries), as the replay run config is. Anything wrong (an unknown
key, a missing ``reason`` on an ignore, an unknown code) is one
:class:`ConfigError` line naming the file and the key: exit 2.

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
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError

from lrdoctor.ci.find import find_config
from lrdoctor.core.errors import BadKey, NotFound, UnusableInput, reason
from lrdoctor.core.findings import FAIL_ON
from lrdoctor.findings import RULES
from lrdoctor.read.bytes import safetext

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib


class ConfigError(BadKey):
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
    fail_on_set: bool = False     # fail-on written in the file (not the default)
    max_progress_ratio: float | None = None
    ignores: list[Ignore] = field(default_factory=list)
    targets: list[Target] = field(default_factory=list)
    report: str | None = None

    @property
    def label(self) -> str:
        return str(self.source) if self.source else "command line"

    def inputs(self) -> list[str]:
        """The checkpoints and runs the inspect targets read (resolved; globs as written):
        what an output about them must never be written into."""
        return [self.resolve(t.path) for t in self.targets if t.kind == "inspect"]

    def resolve(self, p: str) -> str:
        """``p`` relative to the config's directory, kept relative to cwd when possible.

        A trailing slash is kept: in a glob it means directories only
        ('ckpt/*/' must not match ckpt/README.md), and relpath would drop it.
        """
        from lrdoctor.read.bytes.storage import is_url

        if os.path.isabs(p) or is_url(p):  # URLs (s3://...) are absolute too
            return p  # as the user wrote it: '/data/ckpt', never '../../data/ckpt'
        full = os.path.join(self.root, p)
        slash = os.sep if p.endswith(("/", os.sep)) else ""
        try:
            return os.path.relpath(full) + slash
        except ValueError:  # pragma: no cover - different drive on Windows
            return full


# ---------------------------------------------------------------- discovery
# find_config lives in lrdoctor.ci.find (light: no pydantic), for every command.

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
        raise NotFound("no such configuration file", str(p))
    try:
        text = safetext.read_text(p, "config_bytes", "a TOML config")
        data = safetext.toml_loads(text, str(p))
    except tomllib.TOMLDecodeError as exc:
        raise UnusableInput(f"not valid TOML ({exc})", str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UnusableInput(f"cannot read ({reason(exc)})", str(p)) from None
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
# The table's shape is pydantic's (unknown keys, required keys, types), as for the
# replay run config; the checks below keep the one-line messages the CLI prints.


def _nonempty(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"must be a non-empty string, got {value!r}")
    return value


def _fail_on(value: Any) -> str:
    if value not in FAIL_ON:
        raise ValueError(f"must be one of {', '.join(FAIL_ON)}, got {value!r}")
    return value


def _ratio(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise ValueError(f"must be a positive number, got {value!r}")
    return float(value)


def _flag(value: Any) -> bool:
    if not isinstance(value, bool):
        raise ValueError(f"must be true or false, got {value!r}")
    return value


def _code(value: Any) -> str:
    code = _nonempty(value).upper()
    if code not in RULES:
        raise ValueError(f"unknown finding code {value!r}")
    return code


def _table(value: Any) -> dict:
    if not isinstance(value, dict):
        raise ValueError("must be a table")
    return value


def _tables(value: Any) -> list:
    """``[[tool.lrdoctor.inspect]]`` is a list; a single ``[tool.lrdoctor.inspect]`` too."""
    if isinstance(value, dict):
        return [value]
    if not isinstance(value, list):
        raise ValueError("must be an array of tables ([[...]])")
    return value


def _ignore_list(value: Any) -> list:
    if not isinstance(value, list):
        raise ValueError("must be an array of {code, reason} tables")
    return value


NonEmpty = Annotated[str, BeforeValidator(_nonempty)]
FailOn = Annotated[str, BeforeValidator(_fail_on)]
Ratio = Annotated[float, BeforeValidator(_ratio)]


class _Table(BaseModel):
    """Keys are kebab-case (``fail-on``); snake_case is accepted too."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True,
                              alias_generator=lambda name: name.replace("_", "-"))


class TargetIgnoreIn(_Table):
    code: Annotated[str, BeforeValidator(_code)]
    reason: Any = None  # required, with its own message (see _ignores)


class IgnoreIn(TargetIgnoreIn):
    path: NonEmpty | None = None  # a glob on the checked path: top-level ignores only


_Ignores = Annotated[list[TargetIgnoreIn], BeforeValidator(_ignore_list)]


class InspectIn(_Table):
    path: NonEmpty
    format: NonEmpty | None = None
    all: Annotated[bool, BeforeValidator(_flag)] = False
    fail_on: FailOn | None = None
    max_progress_ratio: Ratio | None = None
    ignore: _Ignores = Field(default_factory=list)
    name: Any = None


class ReplayIn(_Table):
    config: NonEmpty
    batch_log: NonEmpty | None = None
    synthetic: NonEmpty | None = None
    options: Annotated[dict[str, Any], BeforeValidator(_table)] = Field(default_factory=dict)
    fail_on: FailOn | None = None
    max_progress_ratio: Ratio | None = None
    ignore: _Ignores = Field(default_factory=list)
    name: Any = None


class LrdoctorIn(_Table):
    """The ``[tool.lrdoctor]`` table (or a whole ``lrdoctor.toml``)."""

    fail_on: FailOn = "warning"
    max_progress_ratio: Ratio | None = None
    ignore: Annotated[list[IgnoreIn], BeforeValidator(_ignore_list)] = Field(
        default_factory=list)
    inspect: Annotated[list[InspectIn], BeforeValidator(_tables)] = Field(default_factory=list)
    replay: Annotated[list[ReplayIn], BeforeValidator(_tables)] = Field(default_factory=list)
    report: NonEmpty | None = None


def _k(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def _key(prefix: str, loc: tuple) -> str:
    out = prefix
    for part in loc:
        out = f"{out}[{part}]" if isinstance(part, int) else _k(out, str(part))
    return out


def _model_at(loc: tuple) -> type[BaseModel] | None:
    """The table model that ``loc`` (a pydantic error location) points into."""
    model: type[BaseModel] | None = LrdoctorIn
    for part in loc:
        if isinstance(part, int) or model is None:
            continue
        field = next((f for n, f in model.model_fields.items()
                      if part in (n, f.alias)), None)
        model = _inner_model(field.annotation) if field is not None else None
    return model


def _inner_model(ann: Any) -> type[BaseModel] | None:
    if isinstance(ann, type) and issubclass(ann, BaseModel):
        return ann
    for arg in get_args(ann):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _config_error(exc: ValidationError, src: Path, prefix: str) -> ConfigError:
    """Every problem in one line, unknown keys first (a typo often explains the rest);
    ``detail["errors"]`` lists them for --json."""
    errs = sorted(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
    seen: dict[tuple, ConfigError] = {}
    for err in errs:
        seen.setdefault(tuple(err["loc"]), _one_error(err, src, prefix))
    first, *rest = seen.values()
    if not rest:
        return first
    problems = [str(e).removeprefix(f"{src}: ") for e in seen.values()]
    out = ConfigError(src, first.key, "; ".join([problems[0].removeprefix(f"{first.key}: "),
                                                 *problems[1:]]))
    out.detail = {"errors": problems}
    return out


def _one_error(err: ErrorDetails, src: Path, prefix: str) -> ConfigError:
    loc = tuple(err["loc"])
    key = _key(prefix, loc)
    kind, msg = err["type"], err.get("msg", "invalid")
    if kind == "extra_forbidden":
        model = _model_at(loc[:-1])
        allowed = sorted(f.alias or n for n, f in model.model_fields.items()) if model else []
        return ConfigError(src, key, f"unknown key (expected one of {', '.join(allowed)})")
    if kind == "missing":
        return ConfigError(src, key, "required")
    if kind in ("model_type", "dict_type"):
        model = _model_at(loc)
        like = (' like {code = "LRD105", reason = "..."}'
                if model is not None and issubclass(model, TargetIgnoreIn) else "")
        return ConfigError(src, key, "must be a table" + like)
    return ConfigError(src, key, msg.removeprefix("Value error, "))


def parse(table: dict, src: Path, text: str = "", prefix: str = "tool.lrdoctor") -> CheckConfig:
    """Validate an already-parsed ``[tool.lrdoctor]`` table (``text`` is for line numbers)."""
    try:
        t = LrdoctorIn.model_validate(table)
    except ValidationError as exc:
        raise _config_error(exc, src, prefix) from None
    lines = _Lines(text, prefix)
    cfg = CheckConfig(source=src, root=src.parent.resolve(), fail_on=t.fail_on,
                      max_progress_ratio=t.max_progress_ratio, report=t.report,
                      fail_on_set="fail_on" in t.model_fields_set)
    cfg.ignores = _ignores(t.ignore, src, _k(prefix, "ignore"), lines, None)
    tables: tuple[tuple[str, Sequence[InspectIn | ReplayIn]], ...] = (
        ("inspect", t.inspect), ("replay", t.replay))
    for kind, entries in tables:
        for i, entry in enumerate(entries):
            cfg.targets.append(_target(kind, entry, src, f"{_k(prefix, kind)}[{i}]", lines, i))
    return cfg


def _target(kind: str, e: InspectIn | ReplayIn, src: Path, key: str, lines: _Lines,
            i: int) -> Target:
    header = lines.header(kind, i)
    if isinstance(e, InspectIn):
        t = Target(kind=kind, key=key, line=lines.key_after(header, "path"), path=e.path,
                   format=e.format, all=e.all)
    else:
        if e.batch_log is not None and e.synthetic is not None:
            raise ConfigError(src, f"{key}.synthetic", "give batch-log or synthetic, not both")
        t = Target(kind=kind, key=key, line=lines.key_after(header, "config"), path=e.config,
                   batch_log=e.batch_log, synthetic=e.synthetic,
                   options={k.replace("-", "_"): v for k, v in e.options.items()})
    t.fail_on, t.max_progress_ratio = e.fail_on, e.max_progress_ratio
    t.ignores = _ignores(e.ignore, src, f"{key}.ignore", lines, header)
    return t


def _ignores(items: Sequence[TargetIgnoreIn], src: Path, key: str, lines: _Lines,
             header: int | None) -> list[Ignore]:
    out: list[Ignore] = []
    for j, it in enumerate(items):
        k = f"{key}[{j}]"
        if not isinstance(it.reason, str) or not it.reason.strip():
            raise ConfigError(src, f"{k}.reason",
                              f"required: say why {it.code} is ignored (an ignore without a "
                              "reason is not accepted)")
        nth = sum(1 for o in out if o.code == it.code)
        out.append(Ignore(code=it.code, reason=it.reason.strip(), key=k,
                          path=getattr(it, "path", None),
                          line=lines.code_after(header, it.code, nth)))
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
