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

import bisect
import copy
import fnmatch
import os
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from lrdoctor.core.errors import UnusableInput

# A value the script does not determine: kept inside the word so the key using it is known.
_MARK = "@@unresolved:{}@@"
UNRESOLVED_RE = re.compile(r"@@unresolved:([^@]*)@@")


def unresolved(what: str) -> str:
    """A marker naming ``what`` that stays one shell word (no spaces or quotes inside)."""
    what = what.replace("@", "*")  # A[@] and A[*]: all of an array's elements
    return _MARK.format(re.sub(r"[^A-Za-z0-9_$(){}\[\]./:=+*-]", "_", what)[:80])


_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class _Assign:
    name: str
    index: str | None  # the subscript's raw text, NAME[index]=...
    plus: bool  # NAME+=...
    end: int  # where the value starts


def _assign(text: str) -> _Assign | None:
    """``NAME=``, ``NAME+=`` or ``NAME[sub]=`` at the start of a raw word (the subscript
    may hold quotes and expansions: ``m["${a[$i]}"]=$i``)."""
    m = _NAME.match(text)
    if not m:
        return None
    j, index = m.end(), None
    if text.startswith("[", j):
        depth, k = 0, j
        while k < len(text):
            c = text[k]
            if c in "'\"" or text.startswith("${", k) or text.startswith("$(", k):
                op = "${" if text.startswith("${", k) else "$(" if text.startswith("$(", k) \
                    else c
                try:
                    k = _scan(text, k, op, lambda _: 0)
                except _Refuse:
                    return None
                continue
            if c == "[":
                depth += 1
            elif c == "]":
                depth -= 1
                if depth == 0:
                    break
            k += 1
        else:
            return None
        index, j = text[j + 1:k], k + 1
    plus = text.startswith("+=", j)
    if plus:
        j += 1
    if not text.startswith("=", j):
        return None
    return _Assign(m.group(0), index, plus, j + 1)
_METACHARS = " \t\n|&;()<>"
_OPS = ("&&", "||", ";;&", ";;", ";&", "|&", "&>>", "&>", ">>", ">&", "<&", "<<<", "<<-",
        "<<", "<>", ">|", "|", "&", ";", "(", ")", "<", ">")
_REDIRECTS = {"<", ">", ">>", ">&", "<&", "&>", "&>>", "<>", ">|", "<<<", "<<", "<<-"}

# Bounds that keep a hostile script a one-line refusal, never a hang or a traceback.
MAX_STEPS = 200_000  # commands run, loop iterations included
MAX_DEPTH = 32  # nested $(...), functions, sources, evals
MAX_VALUE = 1 << 20  # characters in one variable
MAX_SOURCED = 64


class _Refuse(Exception):
    def __init__(self, line: int, what: str):
        super().__init__(what)
        self.line, self.what = line, what


# --------------------------------------------------------------------------- lexing


@dataclass
class Tok:
    kind: str  # "word" | "op" | "nl" | "array" | "arith" | "eof"
    text: str
    line: int
    items: list[Tok] = field(default_factory=list)  # "array": the element words


_OPENERS = {"'": "single quote", '"': "double quote", "$'": "$'...' quote",
            "$(": "$( command substitution", "$((": "$(( arithmetic", "${": "${ expansion",
            "`": "backquote", "(": "parenthesis"}


def _scan(text: str, i: int, opener: str, lines: Callable[[int], int]) -> int:
    """The index just after the construct opened at ``i`` by ``opener`` (a quote,
    ``$(``, ``${``, ``$((`` or a backquote), nested constructs included. Iterative, so
    depth costs no recursion; an unclosed one is a refusal at the line it opened."""
    n = len(text)
    stack: list[tuple[str, int]] = [(opener, i)]
    j = i + len(opener)
    while stack:
        if j >= n:
            what, at = stack[-1]
            raise _Refuse(lines(at), f"unclosed {_OPENERS[what]} (opened here)")
        top = stack[-1][0]
        c = text[j]
        if top == "'":
            if c == "'":
                stack.pop()
            j += 1
            continue
        if top in ("$'", "`"):
            if c == "\\":
                j += 2
            else:
                if c == top[-1]:
                    stack.pop()
                j += 1
            continue
        if c == "\\":
            j += 2
            continue
        if top == '"' and c == '"':
            stack.pop()
            j += 1
            continue
        if text.startswith("$((", j):
            stack.append(("$((", j))
            j += 3
            continue
        if text.startswith("$(", j) or text.startswith("${", j) or text.startswith("$'", j) \
                and top != '"':
            stack.append((text[j:j + 2], j))
            j += 2
            continue
        if c == "`":
            stack.append(("`", j))
            j += 1
            continue
        if top == '"':
            j += 1
            continue
        if c in "'\"":
            stack.append((c, j))
            j += 1
            continue
        if top == "${":
            if c == "}":
                stack.pop()
            j += 1
            continue
        # command text or arithmetic: $( (( (
        if c == "#" and top != "$((" and (j == 0 or text[j - 1] in " \t\n;|&("):
            k = text.find("\n", j)
            j = n if k < 0 else k
            continue
        if c == "(":
            stack.append(("(", j))
        elif c == ")":
            if top == "$((":
                if not text.startswith("))", j):
                    raise _Refuse(lines(j), "')' closes $(( arithmetic; expected '))'")
                j += 1
            stack.pop()
        j += 1
    return j


def _lex(text: str) -> list[Tok]:
    nls = [k for k, ch in enumerate(text) if ch == "\n"]

    def lines(pos: int) -> int:
        return bisect.bisect_right(nls, pos - 1) + 1 if pos > 0 else 1

    toks: list[Tok] = []
    heredocs: list[tuple[str, bool]] = []
    n = len(text)
    i = 0

    def word_end(j: int, stop: str) -> int:
        while j < n and text[j] not in stop:
            c = text[j]
            if c == "\\":
                j += 2
            elif c in "'\"`":
                j = _scan(text, j, c, lines)
            elif c == "$" and j + 1 < n and text[j + 1] in "({'":
                op = "$((" if text.startswith("$((", j) else text[j:j + 2]
                j = _scan(text, j, op, lines)
            else:
                j += 1
        return min(j, n)

    while i < n:
        c = text[i]
        if c in " \t\r":
            i += 1
        elif c == "\\" and i + 1 < n and text[i + 1] == "\n":
            i += 2
        elif c == "\n":
            toks.append(Tok("nl", "\n", lines(i)))
            i += 1
            for delim, strip in heredocs:  # the here-documents' bodies follow this line
                while i < n:
                    k = text.find("\n", i)
                    k = n if k < 0 else k
                    body_line = text[i:k]
                    i = k + 1
                    if (body_line.lstrip("\t") if strip else body_line) == delim:
                        break
            heredocs = []
        elif c == "#":
            k = text.find("\n", i)
            i = n if k < 0 else k
        elif text.startswith("((", i) and (not toks or toks[-1].kind in ("nl", "op")
                                           or toks[-1].text in _RESERVED):
            end = _arith_end(text, i, lines)
            toks.append(Tok("arith", text[i + 2:end - 2], lines(i)))
            i = end
        elif any(text.startswith(op, i) for op in _OPS):
            op = next(op for op in _OPS if text.startswith(op, i))
            toks.append(Tok("op", op, lines(i)))
            i += len(op)
            if op in ("<<", "<<-"):
                j = i
                while j < n and text[j] in " \t":
                    j += 1
                end = word_end(j, _METACHARS)
                raw = text[j:end]
                if not raw:
                    raise _Refuse(lines(i), "a here-document without its delimiter word")
                heredocs.append((re.sub(r"[\"'\\]", "", raw), op == "<<-"))
        else:
            end = word_end(i, _METACHARS)
            raw = text[i:end]
            m = _assign(raw)
            if m and m.end == len(raw) and end < n and text[end] == "(":  # NAME=( ... ) an array assignment
                items: list[Tok] = []
                j = end + 1
                while True:
                    while j < n and text[j] in " \t\r\n":
                        j += 1
                    if j < n and text[j] == "\\" and text[j + 1:j + 2] == "\n":
                        j += 2
                        continue
                    if j >= n:
                        raise _Refuse(lines(end), f"unclosed array {raw}( (opened here)")
                    if text[j] == "#":
                        k = text.find("\n", j)
                        j = n if k < 0 else k
                        continue
                    if text[j] == ")":
                        j += 1
                        break
                    e = word_end(j, _METACHARS)
                    if e == j:
                        raise _Refuse(lines(j), f"{text[j]!r} inside the array {raw}(...)")
                    items.append(Tok("word", text[j:e], lines(j)))
                    j = e
                toks.append(Tok("array", raw, lines(i), items))
                i = j
                continue
            if raw.isdigit() and end < n and text[end] in "<>":  # 2>&1: the fd is no word
                i = end
                continue
            toks.append(Tok("word", raw, lines(i)))
            i = end
    toks.append(Tok("eof", "", lines(n)))
    return toks


def _arith_end(text: str, i: int, lines: Callable[[int], int]) -> int:
    depth, j, n = 0, i, len(text)
    while j < n:
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j + 1
        j += 1
    raise _Refuse(lines(i), "unclosed (( arithmetic (opened here)")


# --------------------------------------------------------------------------- parsing

_RESERVED = {"if", "then", "elif", "else", "fi", "for", "in", "do", "done", "while", "until",
             "case", "esac", "function", "{", "}", "!", "[[", "]]", "select"}


@dataclass
class Simple:
    line: int
    assigns: list[Tok]  # "word" NAME=value or "array" tokens before the command
    words: list[Tok]  # the command and its arguments ("array" tokens after declare/local)


@dataclass
class AndOr:
    line: int
    first: Node
    rest: list[tuple[str, Node]]


@dataclass
class Pipeline:
    line: int
    cmds: list[Node]
    negate: bool


@dataclass
class If:
    line: int
    arms: list[tuple[list[Node], list[Node]]]
    orelse: list[Node] | None


@dataclass
class For:
    line: int
    var: str
    words: list[Tok] | None  # None: "$@"; an arithmetic for has var ""
    body: list[Node]


@dataclass
class Loop:
    line: int
    until: bool
    cond: list[Node]
    body: list[Node]


@dataclass
class Case:
    line: int
    word: Tok
    arms: list[tuple[list[Tok], list[Node]]]


@dataclass
class Group:
    line: int
    body: list[Node]
    subshell: bool


@dataclass
class FuncDef:
    line: int
    name: str
    body: Node


@dataclass
class Test:
    line: int
    items: list[Tok]  # [[ ... ]]: words and operators


@dataclass
class Arith:
    line: int
    expr: str


Node = Simple | AndOr | Pipeline | If | For | Loop | Case | Group | FuncDef | Test | Arith


class _Parser:
    def __init__(self, toks: list[Tok]):
        self.t, self.i = toks, 0

    def peek(self) -> Tok:
        return self.t[self.i]

    def take(self) -> Tok:
        tok = self.t[self.i]
        if tok.kind != "eof":
            self.i += 1
        return tok

    def is_word(self, *texts: str) -> bool:
        tok = self.peek()
        return tok.kind == "word" and tok.text in texts

    def expect(self, text: str, opened: Tok) -> Tok:
        tok = self.peek()
        if tok.text != text or tok.kind not in ("word", "op"):
            got = "the end of the file" if tok.kind == "eof" else repr(tok.text)
            raise _Refuse(tok.line, f"expected {text!r} to close the {opened.text!r} of line "
                                    f"{opened.line}, found {got}")
        return self.take()

    def newlines(self) -> None:
        while self.peek().kind == "nl":
            self.take()

    def program(self) -> list[Node]:
        body = self.list_until(set())
        tok = self.peek()
        if tok.kind != "eof":
            raise _Refuse(tok.line, f"unexpected {tok.text!r}")
        return body

    def list_until(self, stops: set[str]) -> list[Node]:
        items: list[Node] = []
        while True:
            while self.peek().kind == "nl" or (self.peek().kind == "op"
                                               and self.peek().text in (";", "&")
                                               and self.peek().text not in stops):
                self.take()
            tok = self.peek()
            if tok.kind == "eof" or (tok.kind in ("word", "op") and tok.text in stops):
                return items
            if tok.kind == "op" and tok.text not in ("(", "!") and tok.text not in _REDIRECTS:
                raise _Refuse(tok.line, f"unexpected {tok.text!r}")
            items.append(self.and_or())
            tok = self.peek()
            if tok.kind == "op" and tok.text in (";", "&"):
                self.take()
            elif tok.kind in ("nl", "eof") or tok.text in stops:
                continue
            else:
                raise _Refuse(tok.line, f"unexpected {tok.text!r}")

    def and_or(self) -> Node:
        first = self.pipeline()
        rest: list[tuple[str, Node]] = []
        while self.peek().kind == "op" and self.peek().text in ("&&", "||"):
            op = self.take().text
            self.newlines()
            rest.append((op, self.pipeline()))
        return AndOr(getattr(first, "line", 0), first, rest) if rest else first

    def pipeline(self) -> Node:
        negate = False
        if self.is_word("!"):
            self.take()
            negate = True
        line = self.peek().line
        cmds = [self.command()]
        while self.peek().kind == "op" and self.peek().text in ("|", "|&"):
            self.take()
            self.newlines()
            cmds.append(self.command())
        return Pipeline(line, cmds, negate) if negate or len(cmds) > 1 else cmds[0]

    def redirections(self) -> None:
        while self.peek().kind == "op" and self.peek().text in _REDIRECTS:
            op = self.take()
            if self.peek().kind != "word":
                raise _Refuse(op.line, f"{op.text!r} without a file or descriptor")
            self.take()

    def command(self) -> Node:
        tok = self.peek()
        node: Node
        if tok.kind == "arith":
            self.take()
            node = Arith(tok.line, tok.text)
        elif tok.kind == "op" and tok.text == "(":
            self.take()
            node = Group(tok.line, self.list_until({")"}), True)
            self.expect(")", tok)
        elif tok.kind == "word" and tok.text == "if":
            node = self.if_()
        elif tok.kind == "word" and tok.text in ("for", "select"):
            node = self.for_()
        elif tok.kind == "word" and tok.text in ("while", "until"):
            self.take()
            cond = self.list_until({"do"})
            self.expect("do", tok)
            node = Loop(tok.line, tok.text == "until", cond, self.list_until({"done"}))
            self.expect("done", tok)
        elif tok.kind == "word" and tok.text == "case":
            node = self.case()
        elif tok.kind == "word" and tok.text == "{":
            self.take()
            node = Group(tok.line, self.list_until({"}"}), False)
            self.expect("}", tok)
        elif tok.kind == "word" and tok.text == "[[":
            self.take()
            items = []
            while not self.is_word("]]"):
                if self.peek().kind in ("eof", "nl"):
                    raise _Refuse(tok.line, "'[[' without its ']]'")
                items.append(self.take())
            self.take()
            node = Test(tok.line, items)
        elif tok.kind == "word" and tok.text == "function":
            self.take()
            name = self.take()
            if self.peek().kind == "op" and self.peek().text == "(":
                self.take()
                self.expect(")", name)
            self.newlines()
            node = FuncDef(tok.line, name.text, self.command())
        elif tok.kind == "word" and self.t[self.i + 1].kind == "op" \
                and self.t[self.i + 1].text == "(" and _NAME.fullmatch(tok.text.replace(
                    "-", "_").replace(":", "_").replace(".", "_")):
            self.take()
            self.take()
            self.expect(")", tok)
            self.newlines()
            node = FuncDef(tok.line, tok.text, self.command())
        else:
            return self.simple()
        self.redirections()
        return node

    def if_(self) -> If:
        opened = self.take()
        arms: list[tuple[list[Node], list[Node]]] = []
        orelse = None
        while True:
            cond = self.list_until({"then"})
            self.expect("then", opened)
            body = self.list_until({"elif", "else", "fi"})
            arms.append((cond, body))
            kw = self.take()
            if kw.text == "elif":
                continue
            if kw.text == "else":
                orelse = self.list_until({"fi"})
                self.expect("fi", opened)
            elif kw.text != "fi":
                raise _Refuse(kw.line, f"expected 'fi' to close the 'if' of line {opened.line}")
            return If(opened.line, arms, orelse)

    def for_(self) -> For:
        opened = self.take()
        if self.peek().kind == "arith":  # for ((i=0; i<n; i++))
            self.take()
            var, words = "", None
        else:
            var = self.take().text
            if not _NAME.fullmatch(var):
                raise _Refuse(opened.line, f"'for {var}': not a variable name")
            self.newlines()
            words = None
            if self.is_word("in"):
                self.take()
                words = []
                while self.peek().kind == "word":
                    words.append(self.take())
        while self.peek().kind == "nl" or self.peek().text == ";":
            self.take()
        if self.is_word("{"):
            body_tok = self.take()
            body = self.list_until({"}"})
            self.expect("}", body_tok)
        else:
            self.expect("do", opened)
            body = self.list_until({"done"})
            self.expect("done", opened)
        return For(opened.line, var, words, body)

    def case(self) -> Case:
        opened = self.take()
        word = self.take()
        self.newlines()
        self.expect("in", opened)
        arms: list[tuple[list[Tok], list[Node]]] = []
        while True:
            self.newlines()
            if self.is_word("esac"):
                self.take()
                return Case(opened.line, word, arms)
            if self.peek().kind == "op" and self.peek().text == "(":
                self.take()
            pats: list[Tok] = []
            while True:
                tok = self.take()
                if tok.kind != "word":
                    raise _Refuse(tok.line, f"a case pattern expected, found {tok.text!r}")
                pats.append(tok)
                nxt = self.take()
                if nxt.text == ")":
                    break
                if nxt.text != "|":
                    raise _Refuse(nxt.line, f"expected ')' after the case pattern {tok.text!r}")
            body = self.list_until({";;", ";&", ";;&", "esac"})
            arms.append((pats, body))
            if self.peek().kind == "op" and self.peek().text in (";;", ";&", ";;&"):
                self.take()

    def simple(self) -> Simple:
        line = self.peek().line
        assigns: list[Tok] = []
        words: list[Tok] = []
        while True:
            tok = self.peek()
            if tok.kind == "op" and tok.text in _REDIRECTS:
                self.redirections()
                continue
            if tok.kind == "array":
                (words if words else assigns).append(self.take())
                continue
            if tok.kind != "word":
                break
            if not words and _assign(tok.text):
                assigns.append(self.take())
                continue
            words.append(self.take())
        if not assigns and not words:
            tok = self.peek()
            raise _Refuse(tok.line, f"unexpected {tok.text or 'end of file'!r}")
        return Simple(line, assigns, words)


def parse(text: str) -> list[Node]:
    """The script's commands; a construct bash would not read is a :class:`_Refuse`."""
    return _Parser(_lex(text)).program()


# --------------------------------------------------------------------------- interpreting

Value = str | list | dict  # a string, an indexed array (list) or an associative one


_DECLARE = ("export", "declare", "typeset", "local", "readonly")


class _Exit(Exception):
    pass


class _Return(Exception):
    pass


class _Unknown(Exception):
    """A ``$(...)`` whose output the script does not determine."""


@dataclass
class Seen:
    """A simple command the script runs: its expanded words and where it is."""

    words: list[str]
    line: int
    path: str
    conditions: list[int]  # lines of the undecided conditions it sits under


@dataclass
class _State:
    vars: dict[str, Value]
    funcs: dict[str, Node]
    cwd: str | None
    positional: list[str]


class Shell:
    """The interpreter; :func:`run_script` is how the rest of lrdoctor uses it.

    ``given``: variables fixed from outside (``--set``): the script's own assignments
    to them are ignored, as a caller's environment would not be (the user asked for
    that value). ``on_command`` sees every simple command the script would run.
    """

    def __init__(self, path: str, env: dict[str, Value] | None = None,
                 given: set[str] | None = None,
                 on_command: Callable[[Seen], None] | None = None):
        self.st = _State(dict(env or {}), {}, os.getcwd(), [])
        self.given = set(given or ())
        self.on_command = on_command
        self.notes: list[str] = []
        self.why: dict[str, str] = {}  # an unresolved variable -> why
        self.files: list[str] = []
        self.conds: list[int] = []
        self.steps = 0
        self.depth = 0
        self.sourced = 0
        self.capture: list[str] | None = None
        self.line = 0
        self.positional_used = False

    # ----------------------------------------------------------------- entry points
    def run_text(self, text: str, path: str) -> None:
        self.files.append(path)
        try:
            nodes = parse(text)
            self.run_list(nodes)
        except (_Exit, _Return):
            pass
        finally:
            self.files.pop()

    def note(self, text: str) -> None:
        if text not in self.notes and len(self.notes) < 50:
            self.notes.append(text)

    # ----------------------------------------------------------------- control
    def tick(self, line: int) -> None:
        self.line = line
        self.steps += 1
        if self.steps > MAX_STEPS:
            raise _Refuse(line, f"the script runs more than {MAX_STEPS} commands (a loop "
                                "lrdoctor does not follow to its end)")

    def run_list(self, nodes: list[Node]) -> int | None:
        status: int | None = 0
        for node in nodes:
            status = self.run(node)
        return status

    def run(self, node: Node) -> int | None:
        """Run ``node``; its exit status when the script determines it, else None."""
        self.tick(node.line)
        if isinstance(node, Simple):
            return self.simple(node)
        if isinstance(node, AndOr):
            status = self.run(node.first)
            for op, nxt in node.rest:
                if status is None:
                    self.branches(node.line, "'&&'/'||' list", [self.runner([nxt]),
                                                                self.runner([])])
                    status = None
                elif (status == 0) == (op == "&&"):
                    status = self.run(nxt)
            return status
        if isinstance(node, Pipeline):
            if len(node.cmds) > 1:  # each part runs in a subshell: nothing persists
                if self.capture is not None:
                    raise _Unknown()
                saved = copy.deepcopy(self.st)
                for c in node.cmds:
                    self.run(c)
                self.st = saved
                status = None
            else:
                status = self.run(node.cmds[0])
            return None if status is None else int(not status) if node.negate else status
        if isinstance(node, If):
            return self.if_(node)
        if isinstance(node, For):
            return self.for_(node)
        if isinstance(node, Loop):
            self.loop_unknown(node.line, "while/until loop", node.cond + node.body)
            return None
        if isinstance(node, Case):
            return self.case(node)
        if isinstance(node, Group):
            if node.subshell:
                saved = copy.deepcopy(self.st)
                try:
                    return self.run_list(node.body)
                finally:
                    self.st = saved
            return self.run_list(node.body)
        if isinstance(node, FuncDef):
            self.st.funcs[node.name] = node.body
            return 0
        if isinstance(node, Test):
            return _status(self.test_dbl(node.items))
        if isinstance(node, Arith):
            for name in re.findall(r"([A-Za-z_]\w*)\s*(?:[-+*/%]?=(?!=)|\+\+|--)|(?:\+\+|--)\s*"
                                   r"([A-Za-z_]\w*)", node.expr):
                self.forget("".join(name), node.line, "(( ))")
            val = self.arith(node.expr)
            return None if val is None else int(val == 0)
        raise AssertionError(node)

    def branches(self, line: int, what: str, runs: list[Callable[[], object]]) -> None:
        """Each of ``runs`` from the same state, then one state: a variable the branches
        leave alike keeps its value, one they leave differently becomes unresolved (the
        script does not say which branch runs)."""
        base = copy.deepcopy(self.st)
        ends: list[_State] = []
        exited = 0
        self.conds.append(line)
        try:
            for run in runs:
                self.st = copy.deepcopy(base)
                try:
                    run()
                except (_Exit, _Return):
                    exited += 1
                    continue
                ends.append(self.st)
        finally:
            self.conds.pop()
        if not ends:
            self.st = base
            raise _Exit()
        out = copy.deepcopy(ends[0])
        for name in set().union(*(e.vars for e in ends)):
            vals = [e.vars.get(name) for e in ends]
            if any(v != vals[0] for v in vals[1:]):
                if name in self.given:
                    continue
                out.vars[name] = unresolved(name)
                self.why.setdefault(name, f"set differently by the branches of the {what} at "
                                          f"line {line}, which the script does not decide")
        for name in set().union(*(e.funcs for e in ends)):
            if any(e.funcs.get(name) is not out.funcs.get(name) for e in ends):
                out.funcs.pop(name, None)
        if any(e.cwd != out.cwd for e in ends):
            out.cwd = None
        self.st = out

    def loop_unknown(self, line: int, what: str, body: list[Node]) -> None:
        self.branches(line, what, [self.runner([]), self.runner(body)])

    def runner(self, body: list[Node]) -> Callable[[], object]:
        return lambda: self.run_list(body)

    def if_(self, node: If) -> int | None:
        undecided: list[tuple[list[Node] | None, list[Node]]] = []
        for cond, body in node.arms:
            truth = self.truth(cond)
            if truth is True and not undecided:
                return self.run_list(body)
            if truth is None:
                undecided.append((cond, body))
            elif truth is True:
                undecided.append((None, body))
                break
        else:
            undecided.append((None, node.orelse or []))
        if len(undecided) == 1:
            return self.run_list(undecided[0][1])
        self.branches(node.line, "'if'", [self.runner(b) for _, b in undecided])
        return None

    def truth(self, cond: list[Node]) -> bool | None:
        if not cond:
            return True
        for node in cond[:-1]:
            self.run(node)
        status = self.status_of(cond[-1])
        return None if status is None else status == 0

    def status_of(self, node: Node) -> int | None:
        """A condition's exit status without its side effects when it is a test."""
        return self.run(node)

    def for_(self, node: For) -> int | None:
        if not node.var:
            self.loop_unknown(node.line, "'for ((...))' loop", node.body)
            return None
        if node.words is None:
            items: list[str] | None = list(self.st.positional)
            self.positional_used = True
        else:
            items = []
            for w in node.words:
                fields = self.expand(w.text, w.line)
                if any(UNRESOLVED_RE.search(f) for f in fields):
                    items = None
                    break
                items.extend(fields)
        if items is None:
            self.forget(node.var, node.line, "'for' loop over values the script does not set")
            self.loop_unknown(node.line, "'for' loop", node.body)
            return None
        status: int | None = 0
        for item in items:
            self.set_var(node.var, item, node.line)
            status = self.run_list(node.body)
        return status

    def case(self, node: Case) -> int | None:
        word = self.expand_one(node.word.text, node.word.line)
        if UNRESOLVED_RE.search(word):
            self.branches(node.line, "'case'", [self.runner(b) for _, b in node.arms]
                          + [self.runner([])])
            return None
        for pats, body in node.arms:
            for p in pats:
                pat = self.expand_one(p.text, p.line, pattern=True)
                if UNRESOLVED_RE.search(pat):
                    self.branches(node.line, "'case'", [self.runner(b) for _, b in node.arms]
                                  + [self.runner([])])
                    return None
                if fnmatch.fnmatchcase(word, pat):
                    return self.run_list(body)
        return 0

    # ----------------------------------------------------------------- simple commands
    def simple(self, node: Simple) -> int | None:
        cmd = ""
        if node.words:
            first = node.words[0]
            head = self.expand(first.text, first.line) if first.kind == "word" else []
            cmd = head[0] if head else ""
        if cmd in _DECLARE:
            for a in node.assigns:
                self.assign_tok(a)
            return self.declare(node)
        words: list[str] = []
        for w in node.words:
            words.extend(self.expand(w.text, w.line) if w.kind == "word" else [w.text])
        if not words:
            for a in node.assigns:
                self.assign_tok(a)
            return 0
        cmd = words[0]
        if self.capture is not None:
            return self.pure(words, node.line)
        if cmd in ("source", "."):
            return self.source(words, node.line)
        if cmd == "eval":
            return self.eval(words, node.line)
        if cmd == "unset":
            for name in words[1:]:
                if not name.startswith("-"):
                    self.st.vars.pop(name, None)
                    self.st.funcs.pop(name, None)
            return 0
        if cmd in ("exit",):
            raise _Exit()
        if cmd == "return":
            raise _Return()
        if cmd == "set" and len(words) > 1 and words[1] == "--":
            self.st.positional = words[2:]
            return 0
        if cmd == "shift":
            self.st.positional = self.st.positional[1:]
            return 0
        if cmd in ("true", ":"):
            return 0
        if cmd == "false":
            return 1
        if cmd in ("[", "test"):
            args = words[1:-1] if cmd == "[" and words[-1] == "]" else words[1:]
            return _status(self.test(args, dbl=False))
        if cmd == "cd":
            self.cd(words[1:])
            return None
        if cmd in ("read", "mapfile", "readarray", "getopts", "let", "printf"):
            names = [w for w in words[1:] if _NAME.fullmatch(w)]
            if cmd == "printf":
                names = words[2:3] if len(words) > 2 and words[1] == "-v" else []
            elif cmd == "let":
                names = re.findall(r"([A-Za-z_]\w*)\s*[-+*/%]?=", " ".join(words[1:]))
            elif cmd == "getopts":
                names = words[2:3]
            for name in names:
                self.forget(name, node.line, f"set by '{cmd}' at line {node.line}")
            return None
        func = self.st.funcs.get(cmd)
        if func is not None:
            return self.call(func, words[1:], node.line)
        if self.on_command is not None:
            self.on_command(Seen(words, node.line, self.files[-1], list(self.conds)))
        return None

    def call(self, body: Node, args: list[str], line: int) -> int | None:
        self.enter(line)
        saved = self.st.positional
        self.st.positional = list(args)
        try:
            return self.run(body)
        except _Return:
            return None
        finally:
            self.st.positional = saved
            self.depth -= 1

    def enter(self, line: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Refuse(line, f"functions, sources or $(...) nested more than {MAX_DEPTH} deep")

    def declare(self, node: Simple) -> int:
        """``export``/``declare``/``local``/``readonly``: their ``NAME=value`` arguments are
        assignments (not split), ``-a``/``-A`` make arrays."""
        flags = ""
        for tok in node.words[1:]:
            if tok.kind == "array" or _assign(tok.text):
                self.assign_tok(tok)
                continue
            for w in self.expand(tok.text, tok.line):
                if w.startswith(("-", "+")):
                    flags += w[1:]
                elif _NAME.fullmatch(w) and w not in self.st.vars and "f" not in flags:
                    if "A" in flags:
                        self.set_var(w, {}, node.line)
                    elif "a" in flags:
                        self.set_var(w, [], node.line)
        return 0

    def assign_tok(self, tok: Tok) -> None:
        m = _assign(tok.text)
        if m is None:
            return
        if tok.kind == "array":
            items: list[str] = []
            keyed: dict[str, str] = {}
            for item in tok.items:
                km = _assign("x" + item.text) if item.text.startswith("[") else None
                if km is not None and km.index is not None:
                    keyed[self.expand_one(km.index, item.line)] = \
                        self.expand_one(item.text[km.end - 1:], item.line, assignment=True)
                else:
                    items.extend(self.expand(item.text, item.line))
            old = self.st.vars.get(m.name)
            if isinstance(old, dict) or (keyed and not items):
                new_d: dict[str, str] = dict(old) if m.plus and isinstance(old, dict) else {}
                new_d.update(keyed)
                self.set_var(m.name, new_d, tok.line)
                return
            base = list(old) if m.plus and isinstance(old, list) else \
                [old] if m.plus and isinstance(old, str) else []
            self.set_var(m.name, base + items, tok.line)
            return
        value = self.expand_one(tok.text[m.end:], tok.line, assignment=True)
        name, line = m.name, tok.line
        old = self.st.vars.get(name)
        if m.index is not None:
            key = self.expand_one(m.index, line)
            if isinstance(old, dict):
                d = dict(old)
                d[key] = (d.get(key, "") if m.plus else "") + value
                self.set_var(name, d, line)
                return
            arr = list(old) if isinstance(old, list) else [old] if isinstance(old, str) else []
            idx = self.arith(key)
            if idx is None or idx < 0 or idx > 100_000:
                self.forget(name, line, f"an element set at an index the script does not fix "
                                        f"(line {line})")
                return
            arr.extend([""] * (idx + 1 - len(arr)))
            arr[idx] = (arr[idx] if m.plus else "") + value
            self.set_var(name, arr, line)
            return
        if isinstance(old, list):
            self.set_var(name, old + [value] if m.plus else [value] + old[1:], line)
            return
        if m.plus:
            value = (old if isinstance(old, str) else "") + value
        self.set_var(name, value, line)

    def set_var(self, name: str, value: Value, line: int) -> None:
        if name in self.given:
            return
        size = len(value) if isinstance(value, str) else sum(len(str(v)) for v in (
            value.values() if isinstance(value, dict) else value))
        if size > MAX_VALUE:
            raise _Refuse(line, f"{name} grows beyond {MAX_VALUE} characters")
        self.st.vars[name] = value
        self.why.pop(name, None)

    def forget(self, name: str, line: int, why: str) -> None:
        if name in self.given or not _NAME.fullmatch(name):
            return
        self.st.vars[name] = unresolved(name)
        self.why[name] = why

    def cd(self, args: list[str]) -> None:
        args = [a for a in args if a not in ("--", "-P", "-L")]
        target = args[0] if args else None
        if target is None or UNRESOLVED_RE.search(target) or self.st.cwd is None:
            self.st.cwd = None if target is None or not target.startswith("/") or \
                UNRESOLVED_RE.search(target) else posixpath.normpath(target)
            return
        self.st.cwd = posixpath.normpath(posixpath.join(self.st.cwd, target))

    def source(self, words: list[str], line: int) -> int | None:
        if len(words) < 2:
            return None
        target = words[1]
        if UNRESOLVED_RE.search(target):
            self.note(f"line {line}: 'source {target}' not read: its path depends on what the "
                      "script does not set; the variables it sets are unknown")
            return None
        base = self.st.cwd or os.getcwd()
        p = Path(posixpath.join(base, target))
        try:
            ok = p.is_file() and p.stat().st_size <= MAX_VALUE
        except OSError:
            ok = False
        if not ok or self.sourced >= MAX_SOURCED:
            self.note(f"line {line}: 'source {target}' not read (no such file here); the "
                      "variables it sets are unknown")
            return None
        try:
            text = p.read_text(errors="replace")
        except OSError:
            self.note(f"line {line}: 'source {target}' could not be read")
            return None
        self.sourced += 1
        self.enter(line)
        saved_pos = self.st.positional
        self.st.positional = words[2:] or saved_pos
        self.files.append(str(p))
        try:
            self.run_list(parse(text))
        except _Refuse as exc:
            raise UnusableInput(f"line {exc.line}: {exc.what}", str(p)) from None
        except _Return:
            pass
        finally:
            self.files.pop()
            self.depth -= 1
            self.st.positional = saved_pos
        self.note(f"line {line}: read 'source {target}' ({p})")
        return 0

    def eval(self, words: list[str], line: int) -> int | None:
        text = " ".join(words[1:])
        if UNRESOLVED_RE.search(text):
            self.note(f"line {line}: 'eval' of what the script does not set was not read; "
                      "the variables it sets are unknown")
            return None
        self.enter(line)
        try:
            return self.run_list(parse(text))
        finally:
            self.depth -= 1

    # ----------------------------------------------------------------- $(...)
    def pure(self, words: list[str], line: int) -> int | None:
        """A command inside ``$(...)``: the few whose output is a function of their
        arguments; any other makes the substitution unresolved."""
        assert self.capture is not None
        cmd, args = words[0], words[1:]
        if any(UNRESOLVED_RE.search(w) for w in words):
            raise _Unknown()
        if cmd == "echo":
            newline = True
            while args and args[0] in ("-n", "-e", "-E", "-ne", "-en"):
                newline = newline and "n" not in args[0]
                args = args[1:]
            self.capture.append(" ".join(args) + ("\n" if newline else ""))
            return 0
        if cmd == "basename":
            args = [a for a in args if a != "--"]
            if not args or args[0].startswith("-"):
                raise _Unknown()
            base = posixpath.basename(args[0].rstrip("/")) or "/"
            if len(args) > 1 and base != args[1] and base.endswith(args[1]):
                base = base[:-len(args[1])]
            self.capture.append(base + "\n")
            return 0
        if cmd == "dirname":
            args = [a for a in args if a != "--"]
            if len(args) != 1:
                raise _Unknown()
            p = args[0].rstrip("/") or "/"
            self.capture.append((posixpath.dirname(p) or ".") + "\n")
            return 0
        if cmd == "cd":
            self.cd(args)
            if self.st.cwd is None:
                raise _Unknown()
            return 0
        if cmd == "pwd" and self.st.cwd is not None:
            self.capture.append(self.st.cwd + "\n")
            return 0
        if cmd in ("true", ":"):
            return 0
        raise _Unknown()

    def substitute(self, body: str, line: int) -> str:
        if not body.strip():
            return ""
        self.enter(line)
        saved_cap, saved_st = self.capture, copy.deepcopy(self.st)
        self.capture = []
        try:
            self.run_list(parse(body))
            return "".join(self.capture).rstrip("\n")
        except (_Unknown, _Refuse, _Exit, _Return):
            return unresolved("$(" + body.strip() + ")")
        finally:
            self.capture = saved_cap
            self.st = saved_st
            self.depth -= 1

    # ----------------------------------------------------------------- expansion
    def expand(self, raw: str, line: int) -> list[str]:
        """The fields a word becomes: expansions, word splitting of unquoted results, one
        field per element for ``"${A[@]}"``, quotes removed."""
        return _Fields(self, line).fields_of(raw)

    def expand_one(self, raw: str, line: int, assignment: bool = False,
                   pattern: bool = False) -> str:
        """A word expanded without splitting (an assignment's value, a case word)."""
        return _Fields(self, line, split=False).text_of(raw, assignment=assignment)

    def lookup(self, name: str, line: int) -> Value | None:
        """A parameter's value; None when unset."""
        if name.isdigit():
            k = int(name)
            if k == 0:
                return self.st.vars.get("0")
            self.positional_used = True
            return self.st.positional[k - 1] if k <= len(self.st.positional) else None
        if name == "#":
            self.positional_used = True
            return str(len(self.st.positional))
        if name in ("@", "*"):
            self.positional_used = True
            return list(self.st.positional)
        if name == "BASH_SOURCE" and name not in self.st.vars:
            return self.files[::-1]
        return self.st.vars.get(name)

    def arith(self, expr: str) -> int | None:
        return arithmetic(expr, self)

    # ----------------------------------------------------------------- tests
    def test(self, args: list[str], dbl: bool) -> bool | None:
        return _TestEval(args, dbl).run()

    def test_dbl(self, items: list[Tok]) -> bool | None:
        args: list[str] = []
        for tok in items:
            if tok.kind == "op":
                args.append(tok.text)
            else:
                args.append(self.expand_one(tok.text, tok.line))
        return self.test(args, dbl=True)


def _status(truth: bool | None) -> int | None:
    return None if truth is None else int(not truth)


class _Fields:
    """One word's expansion into fields (bash's expansion, splitting and quote removal)."""

    def __init__(self, sh: Shell, line: int, split: bool = True):
        self.sh, self.line, self.split = sh, line, split
        self.fields: list[str] = []
        self.cur: list[str] = []
        self.have = False

    def brk(self) -> None:
        if self.have:
            self.fields.append("".join(self.cur))
        self.cur, self.have = [], False

    def lit(self, s: str) -> None:
        self.cur.append(s)
        self.have = True

    def unquoted(self, s: str) -> None:
        if not self.split:
            self.lit(s)
            return
        if not s:
            return
        pieces = s.split()
        if s[0] in " \t\n":
            self.brk()
        for k, p in enumerate(pieces):
            if k:
                self.brk()
            self.lit(p)
        if s[-1] in " \t\n":
            self.brk()

    def fields_of(self, raw: str) -> list[str]:
        self.walk(raw, False)
        self.brk()
        return self.fields

    def text_of(self, raw: str, assignment: bool = False) -> str:
        self.walk(raw, assignment)
        return "".join(self.cur)

    def walk(self, raw: str, assignment: bool) -> None:
        n, i, dq = len(raw), 0, False
        dq_only_at = dq_saw_at = False
        sh = self.sh
        while i < n:
            c = raw[i]
            if c == "\\":
                nxt = raw[i + 1:i + 2]
                if nxt == "\n":
                    i += 2
                    continue
                if dq and nxt not in ('$', '`', '"', "\\"):
                    self.lit("\\" + nxt)
                else:
                    self.lit(nxt)
                i += 2
                continue
            if c == "'" and not dq:
                j = raw.find("'", i + 1)
                j = n if j < 0 else j
                self.lit(raw[i + 1:j])
                i = j + 1
                continue
            if c == '"':
                if not dq:
                    dq, dq_only_at, dq_saw_at = True, True, False
                    if not self.split:
                        self.have = True
                else:
                    dq = False
                    if not dq_only_at or not dq_saw_at:
                        self.have = True
                i += 1
                continue
            if c == "$" and raw.startswith("$'", i) and not dq:
                j = _scan(raw, i, "$'", lambda _: self.line)
                self.lit(_ansi_c(raw[i + 2:j - 1]))
                i = j
                continue
            if c == "`":
                j = _scan(raw, i, "`", lambda _: self.line)
                body = re.sub(r"\\([$`\\])", r"\1", raw[i + 1:j - 1])
                self.value(sh.substitute(body, self.line), dq)
                dq_only_at = False
                i = j
                continue
            if c == "$" and i + 1 < n:
                j, val, is_at = self.dollar(raw, i, dq)
                if j > i + 1:
                    if is_at and isinstance(val, list):
                        dq_saw_at = True
                        self.elements(val, dq)
                    else:
                        dq_only_at = False
                        self.value(val if isinstance(val, str) else
                                   " ".join(val) if isinstance(val, list) else "", dq)
                    i = j
                    continue
            if c == "~" and not dq and (i == 0 or assignment and raw[i - 1] in ":=") \
                    and (i + 1 == n or raw[i + 1] in "/:"):
                home = sh.st.vars.get("HOME")
                self.lit(home if isinstance(home, str) else unresolved("HOME"))
                i += 1
                continue
            self.lit(c)
            if dq:
                dq_only_at = False
            i += 1

    def value(self, s: str, quoted: bool) -> None:
        if quoted:
            self.lit(s)
        else:
            self.unquoted(s)

    def elements(self, els: list[str], quoted: bool) -> None:
        if not self.split:
            self.lit(" ".join(els))
            return
        for k, e in enumerate(els):
            if k:
                self.brk()
            if quoted:
                self.lit(e)
            else:
                self.unquoted(e)

    def dollar(self, raw: str, i: int, dq: bool) -> tuple[int, Value | None, bool]:
        """The expansion at ``raw[i] == '$'``: (end, value, whether it is a list to keep
        apart, as ``$@`` and ``${A[@]}`` are)."""
        sh, line = self.sh, self.line
        nxt = raw[i + 1]
        if raw.startswith("$((", i):
            j = _scan(raw, i, "$((", lambda _: line)
            num = sh.arith(raw[i + 3:j - 2])
            return j, unresolved("$((" + raw[i + 3:j - 2] + "))") if num is None else str(num), \
                False
        if nxt == "(":
            j = _scan(raw, i, "$(", lambda _: line)
            return j, sh.substitute(raw[i + 2:j - 1], line), False
        if nxt == "{":
            j = _scan(raw, i, "${", lambda _: line)
            val, is_at = self.param(raw[i + 2:j - 1])
            if is_at and dq and isinstance(val, list) and re.match(
                    r"!?[A-Za-z_0-9]*(\[\*\])?$|\*$", raw[i + 2:j - 1]) and \
                    "*" in raw[i + 2:j - 1]:
                return j, " ".join(val), False  # "${A[*]}": one word, joined by a space
            return j, val, is_at
        if nxt in "@*":
            val = sh.lookup(nxt, line)
            self.sh.positional_used = True
            return i + 2, val if val is not None else [], nxt == "@" or not dq
        if nxt.isdigit() or nxt in "#":
            val = sh.lookup(nxt, line)
            return i + 2, "" if val is None else val, False
        if nxt in "?$!-":
            return i + 2, unresolved("$" + nxt), False
        m = _NAME.match(raw, i + 1)
        if m:
            val = sh.lookup(m.group(0), line)
            if isinstance(val, list):
                val = val[0] if val else ""
            elif isinstance(val, dict):
                val = val.get("0", "")
            return m.end(), unresolved(m.group(0)) if val is None else val, False
        return i + 1, "", False

    def param(self, body: str) -> tuple[Value | None, bool]:
        """``${...}``: the forms launch scripts use; anything else unresolved by name."""
        sh, line = self.sh, self.line
        if body.startswith("#") and len(body) > 1:
            name, sub = _name_sub(body[1:])
            if name is None:
                return unresolved("${" + body + "}"), False
            val = self.get(name, sub, keep_list=True)
            if isinstance(val, str) and UNRESOLVED_RE.search(val):
                return unresolved("${#" + name + "}"), False
            if isinstance(val, (list, dict)):
                return str(len(val)), False
            return str(len(val or "")), False
        if body.startswith("!") and len(body) > 1:
            name, sub = _name_sub(body[1:])
            if name is None:
                return unresolved("${" + body + "}"), False
            if sub in ("@", "*"):
                val = sh.lookup(name, line)
                if isinstance(val, list):
                    return [str(k) for k in range(len(val))], True
                if isinstance(val, dict):
                    return list(val), True
                return (["0"] if val is not None else []), True
            target = self.get(name, sub)
            if not isinstance(target, str) or not _NAME.fullmatch(target):
                return unresolved("${" + body + "}"), False
            return self.get(target, None) if target in sh.st.vars else unresolved(target), False
        m = re.match(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*#?$!-])(\[[^\]]*\])?", body)
        if not m:
            return unresolved("${" + body + "}"), False
        name, sub = m.group(1), (m.group(2) or "")[1:-1] or None
        rest = body[m.end():]
        is_list = sub in ("@", "*") or (name in ("@", "*") and sub is None)
        val = self.get(name, sub, keep_list=is_list)
        if name in "?$!-" and len(name) == 1:
            return unresolved("$" + name), False
        unset = val is None
        if not rest:
            if unset:
                return (unresolved(name + ("[@]" if is_list else "")), False)
            if isinstance(val, str) and is_list and UNRESOLVED_RE.search(val):
                return unresolved(name + "[@]"), False  # an unknown list of words
            return val, is_list and isinstance(val, list)
        op_m = re.match(r":?[-=+?]|##?|%%?|//?|/#|/%|\^\^?|,,?|:|@", rest)
        if not op_m:
            return unresolved("${" + body + "}"), False
        op, arg = op_m.group(0), rest[op_m.end():]
        if op in (":-", "-", ":=", "=", ":+", "+", ":?", "?"):
            empty = unset or (op.startswith(":") and val in ("", []))
            if op in (":-", "-"):
                return (self.sub_word(arg), False) if empty else (val, is_list)
            if op in (":=", "="):
                if empty:
                    sh.set_var(name, str(self.sub_word(arg)), line)
                    return sh.st.vars.get(name, ""), False
                return val, is_list
            if op in (":+", "+"):
                return ("" if empty else self.sub_word(arg)), False
            return (unresolved(name), False) if empty else (val, is_list)
        if unset or (isinstance(val, str) and UNRESOLVED_RE.search(val)):
            return unresolved("${" + body + "}"), False
        items = val if isinstance(val, list) else list(val.values()) if isinstance(val, dict) \
            else [val]
        out = [self.transform(str(v), op, arg) for v in items]
        if any(o is None for o in out):
            return unresolved("${" + body + "}"), False
        res = [o for o in out if o is not None]
        if is_list:
            return res, True
        return (res[0] if res else ""), False

    def sub_word(self, arg: str) -> str:
        return _Fields(self.sh, self.line, split=False).text_of(arg)

    def transform(self, v: str, op: str, arg: str) -> str | None:
        if op in ("#", "##", "%", "%%"):
            pat = self.sub_word(arg)
            rx = _glob_re(pat, greedy=len(op) == 2)
            if op.startswith("#"):
                m = re.match(rx, v, re.S)
                return v[m.end():] if m else v
            best = None
            rng = range(len(v) + 1) if len(op) == 2 else range(len(v), -1, -1)
            for k in rng:
                if re.fullmatch(_glob_re(pat, True), v[k:], re.S):
                    best = k
                    break
            return v[:best] if best is not None else v
        if op in ("/", "//", "/#", "/%"):
            pat, _, rep = arg.partition("/")
            pat, rep = self.sub_word(pat), self.sub_word(rep)
            rx = _glob_re(pat, greedy=True)
            if op == "/#":
                return re.sub("^" + rx, rep.replace("\\", "\\\\"), v, count=1, flags=re.S)
            if op == "/%":
                return re.sub(rx + "$", rep.replace("\\", "\\\\"), v, count=1, flags=re.S)
            return re.sub(rx, rep.replace("\\", "\\\\"), v, count=0 if op == "//" else 1,
                          flags=re.S) if pat else v
        if op in ("^^", "^"):
            return v.upper() if op == "^^" else v[:1].upper() + v[1:]
        if op in (",,", ","):
            return v.lower() if op == ",," else v[:1].lower() + v[1:]
        if op == ":":
            off_s, _, len_s = arg.partition(":")
            off = self.sh.arith(off_s)
            ln = self.sh.arith(len_s) if len_s else len(v)
            if off is None or ln is None:
                return None
            if off < 0:
                off = max(0, len(v) + off)
            end = off + ln if ln >= 0 else len(v) + ln
            return v[off:end]
        return None

    def get(self, name: str, sub: str | None, keep_list: bool = False) -> Value | None:
        sh = self.sh
        val = sh.lookup(name, self.line)
        if sub is None:
            if isinstance(val, list) and not keep_list:
                return val[0] if val else None
            if isinstance(val, dict) and not keep_list:
                return val.get("0")
            return val
        if sub in ("@", "*"):
            if isinstance(val, dict):
                return list(val.values())
            if isinstance(val, str):
                return val if UNRESOLVED_RE.search(val) else [val]
            return val
        key = self.sub_word(sub)
        if isinstance(val, dict):
            return val.get(key) if not UNRESOLVED_RE.search(key) else unresolved(name)
        if isinstance(val, str) and UNRESOLVED_RE.search(val):
            return val
        idx = sh.arith(key)
        if idx is None:
            return unresolved(f"{name}[{key}]")
        arr = val if isinstance(val, list) else [val] if isinstance(val, str) else []
        if idx < 0:
            idx += len(arr)
        return arr[idx] if 0 <= idx < len(arr) else None


def _name_sub(text: str) -> tuple[str | None, str | None]:
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*|[0-9]+|[@*])(?:\[([^\]]*)\])?", text)
    return (m.group(1), m.group(2)) if m else (None, None)


def _glob_re(pat: str, greedy: bool) -> str:
    out = []
    for ch in pat:
        if ch == "*":
            out.append(".*" if greedy else ".*?")
        elif ch == "?":
            out.append(".")
        else:
            out.append(re.escape(ch))
    return "".join(out)


def _ansi_c(s: str) -> str:
    table = {"n": "\n", "t": "\t", "\\": "\\", "'": "'", '"': '"', "r": "\r", "a": "\a",
             "b": "\b", "e": "\x1b", "f": "\f", "v": "\v"}
    return re.sub(r"\\(.)", lambda m: table.get(m.group(1), "\\" + m.group(1)), s)


class _TestEval:
    """``[ ]`` / ``test`` / ``[[ ]]``: string and integer comparisons, ``-z``/``-n``,
    ``!``, ``&&``/``||``/``-a``/``-o`` and parentheses. An operand the script does not
    set, or a file test (the files are the run's, not this machine's), is undecided
    (None), and an undecided part decides nothing unless the other side does."""

    def __init__(self, args: list[str], dbl: bool):
        self.a, self.i, self.dbl = args, 0, dbl

    def run(self) -> bool | None:
        if not self.a:
            return False
        try:
            val = self.or_()
        except (IndexError, ValueError):
            return None
        return val if self.i == len(self.a) else None

    def or_(self) -> bool | None:
        left = self.and_()
        while self.i < len(self.a) and self.a[self.i] in ("||", "-o"):
            self.i += 1
            right = self.and_()
            left = True if left is True or right is True else \
                None if left is None or right is None else False
        return left

    def and_(self) -> bool | None:
        left = self.not_()
        while self.i < len(self.a) and self.a[self.i] in ("&&", "-a"):
            self.i += 1
            right = self.not_()
            left = False if left is False or right is False else \
                None if left is None or right is None else True
        return left

    def not_(self) -> bool | None:
        if self.a[self.i] == "!" and self.i + 1 < len(self.a):
            self.i += 1
            v = self.not_()
            return None if v is None else not v
        if self.a[self.i] == "(":
            self.i += 1
            v = self.or_()
            if self.a[self.i] != ")":
                raise ValueError
            self.i += 1
            return v
        return self.prim()

    def prim(self) -> bool | None:
        a = self.a
        if self.i + 2 < len(a) + 0 and self.i + 1 < len(a) and a[self.i + 1] in _BINARY:
            x, op, y = a[self.i], a[self.i + 1], a[self.i + 2]
            self.i += 3
            if UNRESOLVED_RE.search(x) or UNRESOLVED_RE.search(y):
                return None
            if op in ("=", "==", "!="):
                same = fnmatch.fnmatchcase(x, y) if self.dbl else x == y
                return same if op != "!=" else not same
            if op in ("<", ">"):
                return x < y if op == "<" else x > y
            if op == "=~":
                return None
            try:
                xi, yi = int(x), int(y)
            except ValueError:
                return None
            return {"-eq": xi == yi, "-ne": xi != yi, "-lt": xi < yi, "-le": xi <= yi,
                    "-gt": xi > yi, "-ge": xi >= yi}[op]
        if a[self.i] in ("-z", "-n") and self.i + 1 < len(a):
            op, x = a[self.i], a[self.i + 1]
            self.i += 2
            if UNRESOLVED_RE.search(x):
                return None
            return (x == "") if op == "-z" else (x != "")
        if a[self.i].startswith("-") and len(a[self.i]) == 2 and self.i + 1 < len(a):
            self.i += 2  # -f FILE, -d DIR, -v NAME ...: about the machine the run is on
            return None
        x = a[self.i]
        self.i += 1
        return None if UNRESOLVED_RE.search(x) else x != ""


_BINARY = {"=", "==", "!=", "<", ">", "=~", "-eq", "-ne", "-lt", "-le", "-gt", "-ge"}


_ARITH_NAME = re.compile(r"\$?\{?([A-Za-z_][A-Za-z0-9_]*)\}?")


def arithmetic(expr: str, sh: Shell | None = None, env: dict[str, str] | None = None,
               _depth: int = 0) -> int | None:
    """Shell integer arithmetic over ``+ - * / %``, comparisons and parentheses, names read
    as the shell reads them (``x`` and ``$x`` alike); None when anything else is in it (a
    command, an unset name, a power, a result out of range), so the value stays
    unresolved and named rather than guessed."""
    import ast

    if len(expr) > 400 or _depth > 8:
        return None
    if "$(" in expr or "`" in expr:
        if sh is None:
            return None
        expr = sh.expand_one(expr, sh.line)
        if UNRESOLVED_RE.search(expr):
            return None

    def name_value(m: re.Match) -> str:
        name = m.group(1)
        val: object = (sh.lookup(name, sh.line) if sh is not None else (env or {}).get(name))
        if isinstance(val, list):
            val = val[0] if val else None
        if val is None or isinstance(val, dict) or UNRESOLVED_RE.search(str(val)):
            return "?"
        s = str(val).strip() or "0"
        if not re.fullmatch(r"-?\d+", s):
            inner = arithmetic(s, sh, env, _depth + 1)
            return "?" if inner is None else f"({inner})"
        return f"({s})"

    text = _ARITH_NAME.sub(name_value, expr)
    if "?" in text or "**" in text:
        return None
    try:
        tree = ast.parse(text.strip() or "0", mode="eval")
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.Compare) and len(node.ops) == 1:
            a, b = ev(node.left), ev(node.comparators[0])
            ops = {ast.Lt: a < b, ast.LtE: a <= b, ast.Gt: a > b, ast.GtE: a >= b,
                   ast.Eq: a == b, ast.NotEq: a != b}
            if type(node.ops[0]) not in ops:
                raise ValueError("operator")
            return int(ops[type(node.ops[0])])
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, (ast.Div, ast.FloorDiv, ast.Mod)):
                if b == 0:
                    raise ValueError("division by zero")
                q = abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1)  # truncates
                out = q if not isinstance(node.op, ast.Mod) else a - q * b
            elif isinstance(node.op, ast.Add):
                out = a + b
            elif isinstance(node.op, ast.Sub):
                out = a - b
            elif isinstance(node.op, ast.Mult):
                out = a * b
            else:
                raise ValueError("operator")
            if abs(out) > 10**15:
                raise ValueError("out of range")
            return out
        raise ValueError("not arithmetic")

    try:
        return ev(tree.body)
    except (ValueError, RecursionError):
        return None


# --------------------------------------------------------------------------- the API


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
