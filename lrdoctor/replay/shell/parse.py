"""Parsing: the words and operators into commands, as bash's grammar groups them."""

from __future__ import annotations

from dataclasses import dataclass

from lrdoctor.replay.shell.words import _NAME, _REDIRECTS, Tok, _assign, _lex, _Refuse


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
            if self.peek().kind == "op" and self.peek().text == "(" and op.text in "<>":
                raise _Refuse(op.line, f"process substitution {op.text}(...) is not read")
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

