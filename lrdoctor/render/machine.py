"""Machine formats for CI: SARIF 2.1.0, JUnit XML and GitHub Actions workflow commands.

:func:`lrdoctor.render.emit` reaches these through :data:`lrdoctor.render.FORMATS`. Locations point at a real
file (a checkpoint file, or the config file and the line of the key a finding
is about) relative to the repository root, so code scanning and annotations
land on something a reviewer can open.

A report may carry its own threshold in ``report.extra["fail_on"]`` (``check``
targets override the global one); it decides which findings count as JUnit
failures.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING
from xml.etree import ElementTree as ET

from lrdoctor import __version__
from lrdoctor.core.findings import FAIL_ON, Finding, Severity
from lrdoctor.findings import RULES

if TYPE_CHECKING:
    from lrdoctor.core.report import Report

INFORMATION_URI = "https://pypi.org/project/lrdoctor/"
SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
_SARIF_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_GH_LEVEL = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "notice"}


# ---------------------------------------------------------------- locations

class Location:
    """A file (relative to the repo root when it is inside it) and a 1-based line.

    ``file`` is the same file as this process opens it (relative to the working
    directory): ``path`` is for the reader of the annotation, and differs from it when
    the project is a subfolder of the repository."""

    def __init__(self, path: str, line: int = 1, file: str | None = None):
        self.path = path
        self.line = line
        self.file = path if file is None else file

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Location({self.path!r}, {self.line})"


def repo_root(start: str | os.PathLike | None = None) -> Path | None:
    """The nearest directory holding ``.git`` above ``start`` (cwd by default).

    ``GITHUB_WORKSPACE`` wins when set: that is what code scanning resolves against.
    """
    ws = os.environ.get("GITHUB_WORKSPACE")
    if ws and Path(ws).is_dir():
        return Path(ws).resolve()
    here = Path(start or os.getcwd()).resolve()
    for d in (here, *here.parents):
        if (d / ".git").exists():
            return d
    return None


def _relative(path: str) -> str:
    """``path`` relative to the repo root (POSIX), or absolute when outside it; a URL as is."""
    from lrdoctor.read.bytes.storage import is_url

    if is_url(path):
        return path
    p = Path(path)
    absolute = p.resolve() if p.exists() or p.is_absolute() else (Path.cwd() / p).resolve()
    root = repo_root()
    if root is not None:
        try:
            return absolute.relative_to(root).as_posix()
        except ValueError:
            pass
    try:
        return absolute.relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return absolute.as_posix()


_LINE_SUFFIX = re.compile(r"^(?P<path>.+?):(?P<line>\d+)$")


def key_line(path: str, key: str) -> int:
    """1-based line where ``key`` (dotted, e.g. ``scheduler.step_on``) is set in a text config.

    Follows the nesting by indentation (YAML); falls back to the first line that
    sets the last part (TOML ``key =``, JSON ``"key":``). 1 when not found.
    """
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return 1
    parts = [p for p in key.split(".") if p]
    if not parts:
        return 1
    return _nested_line(lines, parts) or _nested_line(lines, parts[-1:]) or 1


def _key_pattern(part: str) -> re.Pattern:
    return re.compile(r"^\s*(?:-\s*)?[\"']?" + re.escape(part) + r"[\"']?\s*[:=]")


def _nested_line(lines: list[str], parts: list[str]) -> int | None:
    start, parent, found = 0, -1, None
    for part in parts:
        pat = _key_pattern(part)
        hit = None
        for i in range(start, len(lines)):
            text = lines[i]
            body = text.lstrip()
            if not body or body.startswith("#"):
                continue
            indent = len(text) - len(body)
            if parent >= 0 and indent <= parent:
                break  # left the parent's block
            if pat.match(text):
                hit = (i, indent)
                break
        if hit is None:
            return None
        start, parent, found = hit[0] + 1, hit[1], hit[0] + 1
    return found


def _representative_file(target: str, report: Report | None) -> str:
    """A file to annotate for ``target``: itself, or the first checkpoint file read from it."""
    if not os.path.isdir(target):
        return target
    files = []
    if report is not None:
        files = list(report.state.get("files") or []) if isinstance(report.state, dict) else []
    for f in files:
        cand = f if os.path.isabs(f) else os.path.join(target, f)
        if os.path.isfile(cand):
            return cand
        if os.path.isfile(f):
            return f
    # The first file in name order, descending lazily (a run directory can be huge).
    here = target
    for _ in range(8):
        try:
            entries = sorted(os.scandir(here), key=lambda e: (not e.is_file(), e.name))
        except OSError:
            break
        if not entries:
            break
        if entries[0].is_file():
            return entries[0].path
        here = entries[0].path
    return target


def locate(f: Finding, report: Report | None = None) -> Location:
    """Where ``f`` points: ``finding.location`` (``path``, ``path:LINE``, ``path:dotted.key``
    or ``path#dotted.key``) or else the report's target."""
    raw = f.location or (report.target if report is not None else "") or "."
    if "#" in raw:
        path, key = raw.split("#", 1)
        return Location(_relative(path), key_line(path, key), path)
    m = _LINE_SUFFIX.match(raw)
    if m and not os.path.exists(raw):
        return Location(_relative(m["path"]), int(m["line"]), m["path"])
    path, sep, key = raw.rpartition(":")
    if sep and key and not os.path.exists(raw) and os.path.isfile(path):
        # ``config.yaml:section.key``
        return Location(_relative(path), key_line(path, key), path)
    file = _representative_file(raw, report)
    return Location(_relative(file), 1, file)


# -------------------------------------------------------------------- SARIF

def _sarif_rule(code: str) -> dict:
    r = RULES[code]
    return {
        "id": r.code,
        "name": r.name,
        "shortDescription": {"text": r.title},
        "fullDescription": {"text": r.explanation},
        "help": {
            "text": f"{r.explanation}\n\nExample: {r.example}\n\nFix: {r.fix}",
            "markdown": f"**{r.title}**\n\n{r.explanation}\n\n*Example:* {r.example}"
                        f"\n\n*Fix:* {r.fix}",
        },
        "defaultConfiguration": {"level": _SARIF_LEVEL[r.severity]},
        "properties": {"tags": ["lr-schedule", r.name]},
    }


def sarif(reports: list[Report]) -> dict:
    """One SARIF 2.1.0 log, one run, every rule of the catalog in ``tool.driver.rules``."""
    codes = list(RULES)
    index = {c: i for i, c in enumerate(codes)}
    results = []
    for rep in reports:
        for f in rep.findings:
            loc = locate(f, rep)
            text = f.message if not f.fix else f"{f.message} Fix: {f.fix}"
            result = {
                "ruleId": f.code,
                "ruleIndex": index[f.code],
                "level": _SARIF_LEVEL[f.severity],
                "message": {"text": f"{f.title}: {text}"},
                "locations": [{
                    "physicalLocation": {
                        "artifactLocation": _artifact(loc.path),
                        "region": {"startLine": loc.line},
                    },
                }],
                # Stable across runs so code scanning tracks one alert, not a new one each time.
                "partialFingerprints": {"lrdoctorTarget/v1": f"{f.code}:{rep.command}:{loc.path}"},
            }
            if f.evidence:
                result["properties"] = {"evidence": f.evidence.to_dict(), "command": rep.command,
                                        "target": rep.target}
            results.append(result)
    run: dict = {
        "tool": {"driver": {
            "name": "lrdoctor",
            "version": __version__,
            "semanticVersion": __version__,
            "informationUri": INFORMATION_URI,
            "rules": [_sarif_rule(c) for c in codes],
        }},
        "results": results,
        "columnKind": "unicodeCodePoints",
    }
    root = repo_root()
    if root is not None:
        run["originalUriBaseIds"] = {"%SRCROOT%": {"uri": root.as_uri() + "/"}}
    return {"$schema": SARIF_SCHEMA, "version": "2.1.0", "runs": [run]}


def _artifact(path: str) -> dict:
    from lrdoctor.read.bytes.storage import is_url

    if is_url(path):  # s3://bucket/run/...: already an absolute URI
        return {"uri": path}
    if path.startswith("/"):
        return {"uri": Path(path).as_uri()}
    from urllib.parse import quote

    return {"uri": quote(path), "uriBaseId": "%SRCROOT%"}


# -------------------------------------------------------------------- JUnit

def _threshold(report: Report, fail_on: str) -> Severity | None:
    return FAIL_ON[report.extra.get("fail_on", fail_on) if isinstance(report.extra, dict)
                   else fail_on]


def junit(reports: list[Report], fail_on: str = "warning") -> str:
    """JUnit XML: one testcase per checked target; it fails when a finding reaches the
    threshold, and is an error when the input could not be used (LRD303)."""
    suites: dict[str, list] = {}
    for rep in reports:
        suites.setdefault(rep.command, []).append(rep)
    top = ET.Element("testsuites", name="lrdoctor")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    total_time = 0.0
    for command, reps in suites.items():
        suite = ET.SubElement(top, "testsuite", name=f"lrdoctor {command}")
        counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        suite_time = 0.0
        for rep in reps:
            counts["tests"] += 1
            seconds = float(rep.seconds or 0.0)
            suite_time += seconds
            case = ET.SubElement(suite, "testcase", classname=f"lrdoctor.{command}",
                                 name=rep.target, time=f"{seconds:.3f}")
            threshold = _threshold(rep, fail_on)
            unusable = [f for f in rep.findings if f.code == "LRD303"]
            failing = [f for f in rep.findings if f.code != "LRD303"
                       and threshold is not None and f.severity >= threshold]
            if unusable:
                counts["errors"] += 1
                err = ET.SubElement(case, "error", type="LRD303",
                                    message=unusable[0].message)
                err.text = "\n".join(_finding_line(f, rep) for f in unusable)
            elif failing:
                counts["failures"] += 1
                first = max(failing, key=lambda f: f.severity)
                fail = ET.SubElement(
                    case, "failure", type=first.code,
                    message=f"{len(failing)} finding(s) at or above "
                            f"{rep.extra.get('fail_on', fail_on)}: "
                            + ", ".join(f.code for f in failing))
                fail.text = "\n".join(_finding_line(f, rep) for f in failing)
            shown = {id(f) for f in failing + unusable}
            below = [f for f in rep.findings if id(f) not in shown]
            if below:
                out = ET.SubElement(case, "system-out")
                out.text = "\n".join(_finding_line(f, rep) for f in below)
        for k, v in counts.items():
            suite.set(k, str(v))
        suite.set("time", f"{suite_time:.3f}")
        total_time += suite_time
        for k in totals:
            totals[k] += counts[k]
    for k, v in totals.items():
        top.set(k, str(v))
    top.set("time", f"{total_time:.3f}")
    ET.indent(top)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(top, encoding="unicode")


def _finding_line(f: Finding, rep: Report) -> str:
    loc = locate(f, rep)
    line = f"{f.code} {f.severity} {loc.path}:{loc.line}: {f.title}: {f.message}"
    return f"{line}\n  fix: {f.fix}" if f.fix else line


# ------------------------------------------------------------ GitHub Actions

def escape_data(s: str) -> str:
    """Workflow-command message escaping (``%``, CR, LF), as the Actions toolkit does."""
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(s: str) -> str:
    """Property escaping: the message escapes plus ``:`` and ``,``."""
    return escape_data(s).replace(":", "%3A").replace(",", "%2C")


def is_text_file(path: str) -> bool:
    """A file GitHub can show a line of: it exists and its first bytes are text (a
    checkpoint's ``.pt``/``.safetensors`` is not, and an annotation there never shows)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start <= len(head) - 4:  # not a character cut at the 4 KiB edge
            return False
        text = head[:exc.start].decode("utf-8")
    # Control characters (a zip's PK\x03\x04, a pickle's opcodes) mean binary.
    return not any((ord(c) < 32 and c not in "\t\n\r\f\v") or c == "\x7f" for c in text)


def annotation_location(f: Finding, rep: Report | None = None) -> Location | None:
    """Where an annotation for ``f`` lands: the config/YAML line that caused it (a replay's
    run config key, a check target's line in [tool.lrdoctor]), else None (a run-level
    annotation whose message names the target): never a binary checkpoint file."""
    loc = locate(f, rep)
    if is_text_file(loc.file):
        return loc
    config = _config_source(rep)
    if config is not None:
        return config
    declared = rep.extra.get("config_location") if rep is not None else None
    if isinstance(declared, str):
        m = _LINE_SUFFIX.match(declared)
        if m and is_text_file(m["path"]):
            return Location(_relative(m["path"]), int(m["line"]))
    return None


def _config_source(rep: Report | None) -> Location | None:
    """The text config line a checkpoint's budget was read from (the planned end, else the
    nominal progress: ``rlvr_config.yaml:max_steps``, ``trainer_state.json:max_steps``),
    when the checkpoint itself is binary: the line a reviewer can open and change."""
    st = rep.state if rep is not None and isinstance(rep.state, dict) else {}
    for key in ("planned_end", "nominal_progress"):
        src = (st.get(key) or {}).get("source") if isinstance(st.get(key), dict) else None
        if not isinstance(src, str) or ":" not in src:
            continue
        path, _, dotted = src.rpartition(":")
        if path and dotted and is_text_file(path):
            return Location(_relative(path), key_line(path, dotted))
    return None


def github_line(f: Finding, rep: Report | None = None) -> str:
    """``::error file=PATH,line=N,title=CODE TITLE::message`` for one finding; without
    ``file=`` (a summary annotation naming the target) when no text line caused it."""
    loc = annotation_location(f, rep)
    title = f"title={escape_property(f'{f.code} {f.title}')}"
    props = (f"file={escape_property(loc.path)},line={loc.line},{title}" if loc is not None
             else title)
    message = f.message if not f.fix else f"{f.message}\nFix: {f.fix}"
    if rep is not None and rep.target and (loc is None or loc.path != locate(f, rep).path):
        message = f"{rep.target}: {message}"  # not at the target's own file: name it
    return f"::{_GH_LEVEL[f.severity]} {props}::{escape_data(message)}"


#: GitHub shows at most this many annotations of one level per step; the rest are cut
#: silently, so lrdoctor says how many it left out.
GITHUB_LIMIT = 10


def github(reports: list[Report]) -> str:
    """One workflow command per finding (at most :data:`GITHUB_LIMIT` per level, worst
    first, then a notice counting the rest); a plain log line for a clean target."""
    lines, shown, left = [], {s: 0 for s in Severity}, {s: 0 for s in Severity}
    ordered = sorted(((f, rep) for rep in reports for f in rep.findings),
                     key=lambda fr: -fr[0].severity)
    for rep in reports:
        if not rep.findings:
            lines.append(f"lrdoctor {rep.command} {rep.target}: no findings")
    for f, rep in ordered:
        if shown[f.severity] < GITHUB_LIMIT:
            shown[f.severity] += 1
            lines.append(github_line(f, rep))
        else:
            left[f.severity] += 1
    cut = ", ".join(f"{n} {s}" for s, n in sorted(left.items(), reverse=True) if n)
    if cut:
        lines.append(f"::notice title=lrdoctor::{escape_data(cut)} finding(s) not annotated "
                     f"(GitHub shows {GITHUB_LIMIT} per level): see the log or the job summary")
    return "\n".join(lines)
