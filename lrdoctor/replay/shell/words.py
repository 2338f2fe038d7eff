"""Lexing: a script's words with their quoting kept whole, its operators and arrays;
and the shapes the reader shares (markers, values, the refusal)."""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lrdoctor.replay.shell.parse import Node

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
_RESERVED = {"if", "then", "elif", "else", "fi", "for", "in", "do", "done", "while", "until",
             "case", "esac", "function", "{", "}", "!", "[[", "]]", "select"}
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


# --------------------------------------------------------------------------- shared shapes

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
    # per running function, the values its ``local`` names had before (None: unset)
    frames: list[dict[str, Value | None]] = field(default_factory=list)

