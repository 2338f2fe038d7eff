"""Interpreting: the commands run as bash would run them, nothing executed."""

from __future__ import annotations

import copy
import fnmatch
import os
import posixpath
import re
from collections.abc import Callable
from pathlib import Path

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.shell.expand import _Fields, _status, _TestEval, arithmetic, pure
from lrdoctor.replay.shell.parse import (
    AndOr,
    Arith,
    Case,
    For,
    FuncDef,
    Group,
    If,
    Loop,
    Node,
    Pipeline,
    Simple,
    Test,
    parse,
)
from lrdoctor.replay.shell.words import (
    _DECLARE,
    _NAME,
    MAX_DEPTH,
    MAX_SOURCED,
    MAX_STEPS,
    MAX_VALUE,
    UNRESOLVED_RE,
    Seen,
    Tok,
    Value,
    _assign,
    _Exit,
    _Refuse,
    _Return,
    _State,
    _Unknown,
    unresolved,
)


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
            return self.declare(node, cmd == "local")
        words: list[str] = []
        for w in node.words:
            words.extend(self.expand(w.text, w.line) if w.kind == "word" else [w.text])
        if not words:
            for a in node.assigns:
                self.assign_tok(a)
            return 0
        cmd = words[0]
        if self.capture is not None:
            return pure(self, words, node.line)
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
        self.st.frames.append({})
        try:
            return self.run(body)
        except _Return:
            return None
        finally:
            self.st.positional = saved
            self.depth -= 1
            if self.st.frames:  # the caller's values of the function's locals come back
                for name, old in self.st.frames.pop().items():
                    if name in self.given:
                        continue
                    if old is None:
                        self.st.vars.pop(name, None)
                    else:
                        self.st.vars[name] = old

    def enter(self, line: int) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Refuse(line, f"functions, sources or $(...) nested more than {MAX_DEPTH} deep")

    def declare(self, node: Simple, local: bool = False) -> int:
        """``export``/``declare``/``local``/``readonly``: their ``NAME=value`` arguments are
        assignments (not split), ``-a``/``-A`` make arrays; ``local`` inside a function
        keeps the caller's value to put back when it returns."""
        flags = ""
        frame = self.st.frames[-1] if local and self.st.frames else None
        for tok in node.words[1:]:
            m = _assign(tok.text)
            if tok.kind == "array" or m:
                if frame is not None and m and m.name not in frame:
                    frame[m.name] = copy.deepcopy(self.st.vars.get(m.name))
                self.assign_tok(tok)
                continue
            for w in self.expand(tok.text, tok.line):
                if w.startswith(("-", "+")):
                    flags += w[1:]
                    continue
                if frame is not None and _NAME.fullmatch(w) and w not in frame:
                    frame[w] = copy.deepcopy(self.st.vars.get(w))
                    self.set_var(w, [] if "a" in flags else {} if "A" in flags else "",
                                 node.line)
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

