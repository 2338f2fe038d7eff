"""Every command's ``--help`` shows examples (docs/cli.md), and every example is a command
line the command accepts: each is parsed with the command's own click parser (options,
choices, types, arguments), never run. Why: help text is copied into CI jobs as it is; an
example naming an option that was renamed is a broken promise nobody sees until then."""

from __future__ import annotations

import shlex

import click
import pytest
import typer

from lrdoctor.cli import app
from tests.commands.test_cli_convention import COMMANDS
from tests.helpers.paths import REPO

SHELL = (">", ">>", "|", "&&", ";", "2>")  # where the lrdoctor command line ends


def examples(help_text: str) -> list[list[str]]:
    """The ``lrdoctor CMD ...`` lines of a help text (continuations with a trailing
    backslash joined, ``# comments`` and shell redirections dropped), split as a shell would."""
    out, pending = [], ""
    for raw in help_text.splitlines():
        line = raw.strip().removeprefix("$ ")
        if pending:
            line, pending = pending + " " + line, ""
        elif not line.startswith("lrdoctor "):
            continue
        if line.endswith("\\"):
            pending = line[:-1].rstrip()
            continue
        words = shlex.split(line, comments=True)
        cut = next((i for i, w in enumerate(words) if w in SHELL), len(words))
        out.append(words[1:cut])
    return out


def _group():
    return typer.main.get_command(app)


@pytest.mark.parametrize("command", COMMANDS)
def test_every_help_example_parses(command):
    group = _group()
    ctx = group.make_context("lrdoctor", [command, "--help"], resilient_parsing=True)
    cmd = group.get_command(ctx, command)
    found = examples(cmd.help or "")
    assert found, f"lrdoctor {command} --help has no example"
    for words in found:
        assert words[0] == command, words
        # Parsing only: the options, their values' types and choices, and the arguments
        # are checked by click exactly as on a real command line; nothing is run.
        sub = cmd.make_context(command, words[1:], parent=ctx)
        assert sub.params is not None


def test_a_broken_example_is_caught():
    group = _group()
    ctx = group.make_context("lrdoctor", ["fix", "--help"], resilient_parsing=True)
    cmd = group.get_command(ctx, "fix")
    (words,) = examples("  lrdoctor fix ckpt/ --out x/ --polcy rescale  # typo\n")
    with pytest.raises(Exception, match="polcy"):
        cmd.make_context("fix", words[1:], parent=ctx)


def test_every_docs_example_parses():
    """The same for the command lines in README.md's and docs/*.md's code blocks."""
    group = _group()
    seen = 0
    for doc in [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]:
        for block in doc.read_text().split("```")[1::2]:
            for words in examples(block):
                if not words or words[0] not in COMMANDS:
                    continue
                ctx = group.make_context("lrdoctor", [words[0], "--help"],
                                         resilient_parsing=True)
                cmd = group.get_command(ctx, words[0])
                try:
                    cmd.make_context(words[0], words[1:], parent=ctx)
                except click.exceptions.Exit:  # an example of -h itself
                    pass
                except click.UsageError as exc:
                    raise AssertionError(f"{doc.name}: lrdoctor {' '.join(words)}: {exc}") \
                        from None
                seen += 1
    assert seen >= 20, seen
