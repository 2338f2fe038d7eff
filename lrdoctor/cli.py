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
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


def _version(value: bool) -> None:
    if value:
        print(f"lrdoctor {__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Show the version and exit.")) -> None:
    pass


def _register() -> None:
    import importlib

    for name in ("inspect", "replay", "fix", "check", "report"):
        try:
            mod = importlib.import_module(f"lrdoctor.commands.{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"lrdoctor.commands.{name}":
                raise
            continue
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
    import logging
    import sys
    import warnings

    held: list[str] = []

    class _Hold(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            held.append(f"{record.levelname.lower()}: {record.getMessage()}")

    def _show(message, category, filename, lineno, file=None, line=None) -> None:  # noqa: ANN001
        held.append(f"{filename}:{lineno}: {category.__name__}: {message}")

    warnings.showwarning = _show
    handler = _Hold(logging.WARNING)
    logging.getLogger().addHandler(handler)  # instead of logging's last-resort stderr writer
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
        logging.getLogger().removeHandler(handler)
        if code not in (2, 130) and held:
            print("\n".join(dict.fromkeys(held)), file=sys.stderr)


if __name__ == "__main__":  # pragma: no cover
    main()
