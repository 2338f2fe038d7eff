"""The ``lrdoctor`` command: a thin typer layer over the library.

Only typer is imported at start-up; each command imports what it needs when it
runs, so ``lrdoctor --help`` and ``inspect`` stay fast (no torch/pandas/matplotlib).
"""

from __future__ import annotations

import os
from typing import Any

import typer

from lrdoctor import __version__

app = typer.Typer(
    name="lrdoctor",
    help=(
        "Find, prove and repair learning-rate schedule / gradient-accumulation "
        "step-accounting bugs.\n\n"
        "Examples:\n\n"
        "  lrdoctor inspect ckpt/            # what the saved state says\n\n"
        "  lrdoctor replay --config run.yaml --batch-log batches.jsonl\n\n"
        "  lrdoctor fix ckpt/ --out ckpt-fixed/ --dry-run\n\n"
        "  lrdoctor check                    # CI gate from [tool.lrdoctor]\n\n"
        "  lrdoctor report ckpt/ --out report/   # HTML page with the LR figures\n\n"
        "Exit codes: 0 clean, 1 findings at/above --fail-on, 2 unusable input."
    ),
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion (typer's own)
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        print(f"lrdoctor {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", "-V", callback=_version,
                                       is_eager=True, help="Show the version and exit.")
          ) -> None:
    _hold_logging()  # a command runs: hold what it logs (see main)


#: Set by :func:`main`: the warnings and log records held while a command runs.
_held: list[str] | None = None
_handler: Any = None


def _hold_logging() -> None:
    """Hold log records from here on, when :func:`main` asked for it. Installed as the
    command starts, not in main: ``--help`` and ``--version`` exit before any command runs,
    and importing logging was a tenth of their own time."""
    global _handler
    if _held is None or _handler is not None:
        return
    import logging

    held = _held

    class _Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            held.append(f"{record.levelname.lower()}: {record.getMessage()}")

    _handler = _Hold(logging.WARNING)
    logging.getLogger().addHandler(_handler)  # instead of logging's last-resort stderr writer


def usage_error_line(message: str, command: str | None) -> str:
    """A command-line mistake as lrdoctor's one error line (click's own was three lines,
    "Error:" instead of "lrdoctor: error:", and leaked pydantic's "Value error, ")."""
    message = " ".join(message.replace("Value error, ", "").split()).rstrip(".")
    if message[:1].isupper() and not message[1:2].isupper():
        message = message[0].lower() + message[1:]
    where = f"lrdoctor {command}" if command else "lrdoctor"
    return f"lrdoctor: error: {message} (see '{where} -h')"


def no_such_option(name: str, options: list[str]) -> str:
    """An unknown option: the close ones when there are ("did you mean --json?"), else every
    option the command has. click's "Possible options: --out, --verbose" for --bogus named
    2 of 12 as if they were near it."""
    import difflib

    close = difflib.get_close_matches(name, options, n=3, cutoff=0.75)
    if close:
        return f"no such option: {name} (did you mean {' or '.join(close)}?)"
    return f"no such option: {name}; the options are {', '.join(options)}"


def _option_names(ctx: Any) -> list[str]:
    """The command's option names as --help lists them (long names; -h/--help last)."""
    names: list[str] = []
    for p in ctx.command.get_params(ctx):
        if getattr(p, "param_type_name", "") != "option" or getattr(p, "hidden", False):
            continue
        longs = [o for o in (*p.opts, *p.secondary_opts) if o.startswith("--")]
        names += longs[:1] or list(p.opts[:1])
    return names


def _plain_click() -> None:
    """One error style and a plain usage line, whatever typer's defaults.

    - A usage error (unknown option, bad choice, missing PATH) is one
      ``lrdoctor: error: ...`` line on stderr with exit code 2, like every other error.
    - typer writes a required argument as ``{PATH}`` in the usage line and ``PATH <str>``
      in the argument list; lrdoctor's usage names it ``PATH`` in both, as ruff and
      pytest do.
    """
    import sys

    from typer import core

    # typer 0.29 vendors click as typer._click; older typer uses click itself.
    try:
        from typer import _click as click
    except ImportError:  # pragma: no cover - typer < 0.29
        import click  # type: ignore[no-redef]

    def show(self, file=None) -> None:  # noqa: ANN001 - click's signature
        ctx = getattr(self, "ctx", None)
        command = None
        if ctx is not None and ctx.info_name and ctx.parent is not None:
            command = ctx.info_name
        message = self.format_message()
        if isinstance(self, click.exceptions.NoSuchOption) and ctx is not None:
            message = no_such_option(self.option_name, _option_names(ctx))
        print(usage_error_line(message, command), file=file or sys.stderr)

    click.exceptions.ClickException.show = show  # type: ignore[method-assign]
    click.exceptions.UsageError.show = show  # type: ignore[method-assign]
    arg = getattr(core, "TyperArgument", None)
    if arg is not None and hasattr(arg, "_usage_display_name"):
        def usage_name(self) -> str:  # noqa: ANN001
            name = self.display_name_raw if self.required else f"[{self.display_name_raw}]"
            return name + ("..." if self.nargs != 1 else "")

        arg._usage_display_name = usage_name
        arg.display_type_rich = lambda self, ctx: None


_plain_click()


def _coerce_without_pydantic() -> None:
    """typer (0.29) coerces every parameter through a pydantic ``TypeAdapter`` built on
    first use, and building the first one imports pydantic: about a third of
    ``inspect ckpt -q``'s start-up. An option left at its default (``None``) or a plain
    string argument needs no coercion, so its adapter is built only when a value of
    another type has to be coerced (an enum choice, a number, a path); what typer does
    with those values is unchanged. Without typer's internals (another typer) nothing is
    changed."""
    try:
        from dataclasses import dataclass, field

        from typer import core
        from typer._coercion import RuntimeParam, build_runtime_param
    except ImportError:  # pragma: no cover - another typer
        return
    param_cls = getattr(core, "_TyperParameter", None)
    if param_cls is None or not hasattr(param_cls, "get_runtime_param"):  # pragma: no cover
        return
    plain = (str, str | None)

    @dataclass(frozen=True)
    class _Deferred(RuntimeParam):
        descriptor: Any = None
        built: list[Any] = field(default_factory=list)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            if isinstance(value, str) and self.annotation in plain:
                return value
            if not self.built:
                self.built.append(build_runtime_param(self.descriptor))
            return self.built[0]._coerce_value(value, param=param, ctx=ctx)

    def get_runtime_param(self: Any) -> Any:
        if self._runtime_param is None:
            d = self.type_descriptor
            self._runtime_param = (
                build_runtime_param(d) if d.file_annotation is not None else
                _Deferred(parameter_info=d.parameter_info, annotation=d.annotation,
                          descriptor=d))
        return self._runtime_param

    param_cls.get_runtime_param = get_runtime_param


_coerce_without_pydantic()


def _register() -> None:
    """Each command module adds itself to ``app``; the order here is the order ``--help``
    lists them. Static imports: a missing command module is an error, never skipped."""
    from lrdoctor.commands import check, fix, inspect, replay, report

    for mod in (inspect, replay, fix, check, report):
        mod.register(app)


_register()


def main() -> None:
    """The console script: ``app()`` with stderr kept to exactly one line on exit 2.

    torch, megatron-core and friends warn while they import or load (through
    ``warnings`` and ``logging``). Those are held back while the command runs and
    shown after it only when it did not fail on its input, so an exit-2 run prints
    the one ``lrdoctor: error: <file>: ...`` line and nothing else. A crash no check
    caught is one line too (exit 2, naming the inputs given), never a traceback.
    """
    import sys
    import warnings

    global _held, _handler
    held: list[str] = []
    _held, _handler = held, None

    def _show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        held.append(f"{filename}:{lineno}: {category.__name__}: {message}")

    warnings.showwarning = _show
    code: Any = 0
    try:
        app()
    except SystemExit as exc:
        code = exc.code
        raise
    except KeyboardInterrupt:
        code = 130
        print("lrdoctor: error: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception as exc:  # noqa: BLE001 - the last line of defence: one line, no traceback
        code = 2
        detail = (str(exc).strip().splitlines() or [""])[0][:200]
        inputs = [a for a in sys.argv[1:] if not a.startswith("-") and os.path.exists(a)]
        where = f"{', '.join(inputs)}: " if inputs else ""
        print(f"lrdoctor: error: {where}unexpected {type(exc).__name__} ({detail}); "
              "please report it", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        if _handler is not None:
            import logging

            logging.getLogger().removeHandler(_handler)
        _held, _handler = None, None
        if code not in (2, 130) and held:
            print("\n".join(dict.fromkeys(held)), file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    main()
