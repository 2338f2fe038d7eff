"""The ``lrdoctor`` command: a thin typer layer over the library.

Only typer is imported at start-up; each command imports what it needs when it
runs, so ``lrdoctor --help`` and ``inspect`` stay fast (no torch/pandas/matplotlib).
"""

from __future__ import annotations

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
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
