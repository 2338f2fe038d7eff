"""What every command shares: option types, exit codes, error handling.

Printing the reports is :func:`lrdoctor.render.emit`'s, for every command."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from enum import Enum
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from lrdoctor import render
from lrdoctor.core.errors import UnusableInput
from lrdoctor.render import on_github_actions


class FailOn(str, Enum):
    info = "info"
    warning = "warning"
    error = "error"
    never = "never"


#: ``--output-format``'s choices: ``text`` (each command's terminal view, ``render.text.TEXT``)
#: and every machine format the renderers have. ``render.FORMATS`` is the one list, so a
#: new renderer is a new choice with no second edit (importing ``render`` is light).
OutputFormat = Enum(  # type: ignore[misc]
    "OutputFormat", [(name, name) for name in ("text", *render.FORMATS)],
    type=str, module=__name__)


def output_format_help(default: str = "text; on GitHub Actions text, then annotations"
                       ) -> str:
    """--output-format's help: every choice (from :data:`OutputFormat`), then the default."""
    names = [m.value for m in OutputFormat]
    return f"{', '.join(names[:-1])} or {names[-1]} (default: {default})."


FailOnOpt = Annotated[FailOn | None, typer.Option(
    "--fail-on", help="Lowest severity that makes the exit code 1 (default: "
    "[tool.lrdoctor] fail-on, else error for inspect, warning for replay).")]
ConfigFileOpt = Annotated[Path | None, typer.Option(
    "--config", "-c", metavar="FILE", help="[tool.lrdoctor] settings (fail-on, ignores, "
    "per-path options) from FILE (pyproject.toml or lrdoctor.toml; default: the nearest "
    "one, searched upward).")]
OutFileOpt = Annotated[Path | None, typer.Option(
    "--out", "-o", metavar="FILE", help="Write the output (any --output-format) to FILE "
    "instead of stdout.")]
JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON document (same as --output-format json).")]
QuietOpt = Annotated[bool, typer.Option(
    "--quiet", "-q", help="Text: only the one-line verdict per target.")]
ExecutorOpt = Annotated[str, typer.Option(
    "--executor", help="Where --jobs run: process (a local process pool, default) or ray "
    "(pip install 'lrdoctor[ray]'; RAY_ADDRESS for a cluster).")]


def jobs_option(what: str) -> Any:
    """``--jobs/-j`` (at least 1), its help naming what runs side by side."""
    return typer.Option("--jobs", "-j", min=1, help=f"{what} at once (see --executor).")


AllowUnsafeOpt = Annotated[list[str] | None, typer.Option(
    "--allow-unsafe-global", metavar="NAME",
    help="Read a pickle global that can run code (e.g. torch.storage._load_from_bytes) as "
         "an inert value instead of refusing the file; only for a file you trust. "
         "Repeatable; fix records it in its manifest (docs/security.md).")]


def allow_unsafe(names: list[str] | None) -> None:
    """``--allow-unsafe-global``: the names reach every reader, here and in the processes
    ``check`` starts (:func:`lrdoctor.unsafe_globals.allow`)."""
    if names:
        from lrdoctor.read.bytes import unsafe_globals

        unsafe_globals.allow(names)


VerboseOpt = Annotated[bool, typer.Option(
    "--verbose", "-v", help="Text: every value read, not only the ones compared.")]


def _format_help() -> str:
    """--format's help, from the one registry of readers (lrdoctor.read.layouts)."""
    from lrdoctor.read import layouts

    aliases = ", ".join(f"{a} = {m}" for a, m in layouts.ALIASES.items())
    return (f"Force a checkpoint format: {layouts.forceable()} ({aliases}). "
            f"{', '.join(layouts.by_content())} checkpoints are recognised by content "
            "within torchsave.")


FormatOpt = Annotated[str | None, typer.Option("--format", help=_format_help())]
OutputFormatOpt = Annotated[OutputFormat | None, typer.Option(
    "--output-format", help=output_format_help())]


def resolve_format(json_flag: bool, output_format: OutputFormat | None) -> OutputFormat:
    """--json or --output-format, else text. On GitHub Actions text stays text: the
    annotations come in addition (:func:`lrdoctor.render.emit`), never instead."""
    if json_flag:
        return OutputFormat["json"]
    if output_format is not None:
        return output_format
    return OutputFormat["text"]


def emit_to(out: Path | None, reports, fmt, fail_on, **kw) -> int:
    """:func:`lrdoctor.render.emit` to stdout, or with ``-o FILE`` into FILE (atomically);
    its exit code either way."""
    if out is None:
        return render.emit(reports, fmt, fail_on, **kw)
    import contextlib
    import io

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        code = render.emit(reports, fmt, fail_on, annotate=False, **kw)
    guarded(lambda: write_output(out, buf.getvalue()))
    if fmt is OutputFormat["text"] and on_github_actions():
        print(render.github_annotations(list(reports) if isinstance(reports, list) else [reports]))
    return code


def write_output(path: Path, text: str) -> None:
    from lrdoctor.atomic import write_text

    try:
        write_text(path, text, parents=True)
    except OSError as exc:
        raise UnusableInput(f"cannot write ({exc.strerror})", str(path)) from None


def settings(config: Path | None, kind: str, target: str, command: str | None = None,
             fmt: OutputFormat | None = None):
    """This command's [tool.lrdoctor] settings for ``target`` (:mod:`._settings`); a
    broken file is one line (every problem in it), and in a machine format its LRD303
    record on stdout too."""
    from lrdoctor.commands import _settings

    def record(exc: UnusableInput) -> None:
        if fmt is not None:
            print_unusable(command or kind, exc.path or str(config or "pyproject.toml"),
                           exc, fmt)

    return guarded(lambda: _settings.load(config, kind, target), record)


def die(message: str, code: int = 2) -> None:
    """One line on stderr, then exit: never a traceback for bad input."""
    print(f"lrdoctor: error: {message}", file=sys.stderr)
    raise typer.Exit(code)


def nothing_to_do(source: Path | None, what: str, how: str) -> None:
    """No target given or configured: one line naming the config file read, or, with none,
    where none was found (never a file that is not there); exit 2."""
    if source is not None:
        die(f"{source}: nothing to {what}: {how}")
    from lrdoctor.ci.find import not_found

    die(f"nothing to {what}: {not_found()}; {how}")


def warn_unusable(reports) -> bool:
    """One stderr line per checked input that could not be used (LRD303), so the reason
    is seen even when stdout goes to a file or a report page; True when there was one."""
    lines = [f.message for r in reports for f in r.findings if f.code == "LRD303"]
    for line in lines:
        print(f"lrdoctor: error: {line}", file=sys.stderr)
    return bool(lines)


def print_unusable(command: str, target: str, exc: UnusableInput, fmt: OutputFormat,
                   format: str | None = None) -> None:
    """In a machine format, a refused input's report (one LRD303 finding: the stderr line,
    and what was scanned) on stdout, so that a CI job reading stdout is never handed an
    empty document; text output is the stderr line alone."""
    if fmt is OutputFormat["text"]:
        return
    from lrdoctor.rules.lrd303_check_input_unusable import advice, unusable_report

    rep = unusable_report(command, target, str(exc), exc.detail, format=format,
                          fix=advice(exc))
    render.emit([rep], fmt.value, "error", command=command)


def png_path(path):
    """--plot writes PNG bytes: refuse a name that says otherwise before any work is done."""
    if path is not None and path.suffix.lower() != ".png":
        die(f"{path}: --plot writes a PNG image: use a .png name")
    return path


def paths_first(inputs: Iterable[str | Path | None], outputs: Iterable[str | Path | None],
                record: Callable[[UnusableInput], None] | None = None,
                inside_inputs: bool = False) -> None:
    """Before any work, in the order a user fixes them: a local input that does not exist,
    then every output location through the writers' own guard
    (:func:`lrdoctor.atomic.refuse_checkpoint`, which costs one listing per ancestor), so
    a refusal never comes after minutes of work or hides a missing input. URLs and globs
    are left to the readers and writers. ``inside_inputs``: an output inside an input
    folder is refused first, as that (``fix``'s copy never goes inside its input)."""
    from lrdoctor.atomic import refuse_checkpoint, refuse_inside_inputs
    from lrdoctor.core.errors import NotFound

    def local(p: str | Path | None) -> bool:
        return p is not None and "://" not in str(p) and not any(c in str(p) for c in "*?[")

    ins = list(inputs)

    def check() -> None:
        for given in ins:
            if local(given) and not os.path.lexists(str(given)):
                raise NotFound("no such file or directory", str(given))
        outs = [str(o) for o in outputs if local(o)]
        if inside_inputs:
            for out in outs:
                refuse_inside_inputs(out, [str(i) for i in ins if local(i)])
        for out in outs:
            refuse_checkpoint(out)

    guarded(check, record)


T = TypeVar("T")


def guarded(fn: Callable[[], T], record: Callable[[UnusableInput], None] | None = None) -> T:
    """Run ``fn``; unusable input becomes one line and exit code 2 (``record``, if given,
    prints the refusal's structured record on stdout first)."""
    try:
        return fn()
    except UnusableInput as exc:
        if record is not None:
            record(exc)
        die(str(exc))
    except KeyboardInterrupt:
        die("interrupted", 130)
    raise AssertionError("unreachable")
