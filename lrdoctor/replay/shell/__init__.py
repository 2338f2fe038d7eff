"""A bash script read as bash reads it, without running anything.

Users' only config is often the ``.sh`` they launch with, and the frameworks' own
scripts use much of bash: arrays spread into the command (OpenRLHF, slime:
``ARGS=(...)`` then ``"${ARGS[@]}"``), multi-line quoted strings (slime's runtime-env
JSON), quotes nested in ``$(...)`` (OneVision-Encoder's ``"$(basename "$0" .sh)"``),
``if``/``for`` blocks that set variables, and ``source`` of a model's argument file.
Splitting lines with :mod:`shlex` dropped or misread all of these, so this module
follows bash's own stages:

1. **lexing** (:func:`_lex`): words with their quoting kept whole (single, double,
   ``$'...'``, ``$(...)``, ``${...}``, ``$((...))``, backquotes, nested to any depth and
   across lines), operators, comments, line continuations, here-documents and
   ``NAME=(...)`` array assignments;
2. **parsing** (:class:`_Parser`): simple commands, pipelines, ``&&``/``||`` lists,
   ``if``/``for``/``while``/``until``/``case``, ``{ }``, subshells, functions,
   ``[[ ]]`` and ``(( ))``;
3. **interpreting** (:class:`Shell`): assignments, arrays and associative arrays,
   parameter expansion (defaults, lengths, ``#``/``%`` trimming, substitution,
   slices, indirection), arithmetic, word splitting of unquoted expansions,
   ``"${A[@]}"`` as one word per element, tests whose operands are known, ``for``
   loops over known lists, functions, ``source`` of a file that exists, and the pure
   commands of ``$(...)`` (``basename``, ``dirname``, ``echo``, ``cd DIR && pwd``).

What the script does not determine is never guessed: a variable the environment
sets, a command's output (``$(nvidia-smi ...)``) or a variable set differently by
the branches of a condition the script cannot decide becomes an *unresolved*
marker (:data:`UNRESOLVED_RE`) that names it, and the key using it is named to the
user. A construct the reader cannot read (an unclosed quote, a syntax error) is a
refusal naming the file and line. Nothing is executed, no command is run, and the
only files read are the ones ``source`` names.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.shell.expand import arithmetic
from lrdoctor.replay.shell.interp import Shell
from lrdoctor.replay.shell.parse import parse
from lrdoctor.replay.shell.words import (
    UNRESOLVED_RE,
    Seen,
    Value,
    _lex,
    _Refuse,
    unresolved,
)

__all__ = ["UNRESOLVED_RE", "Script", "Seen", "Shell", "Value", "arithmetic", "expand_words",
           "parse", "run_script", "unresolved"]


@dataclass
class Script:
    """What reading a script found: its commands, notes, and why a variable is unresolved."""

    commands: list[Seen]
    notes: list[str]
    why: dict[str, str]
    positional_used: bool


def run_script(text: str, path: str, env: dict[str, Value] | None = None,
               given: set[str] | None = None,
               wanted: Callable[[list[str]], bool] | None = None) -> Script:
    """Read ``text`` (the script at ``path``) as bash would run it and return the simple
    commands it runs (those ``wanted`` accepts, all when None). A construct bash would
    not read is an :class:`UnusableInput` naming the file and line."""
    seen: list[Seen] = []

    def on(cmd: Seen) -> None:
        if wanted is None or wanted(cmd.words):
            seen.append(cmd)

    sh = Shell(path, env, given, on)
    try:
        sh.run_text(text, path)
    except _Refuse as exc:
        raise UnusableInput(f"line {exc.line}: {exc.what}", path) from None
    except RecursionError:
        raise UnusableInput(f"line {sh.line}: nested too deep to read", path) from None
    return Script(seen, sh.notes, sh.why, sh.positional_used)


def expand_words(text: str, env: dict[str, str] | None = None) -> list[str]:
    """The words one line of shell becomes after bash's expansions (tests and messages)."""
    sh = Shell("<text>", dict(env or {}))
    out: list[str] = []
    try:
        for tok in _lex(text):
            if tok.kind == "word":
                out.extend(sh.expand(tok.text, tok.line))
    except _Refuse as exc:
        raise UnusableInput(f"line {exc.line}: {exc.what}") from None
    return out
