"""A shell launch script read as a config, without running it.

Many users' only config is the ``.sh`` they launch with: ``python3 -m
verl.trainer.main_ppo data.train_batch_size=1024 ...``. This module reads such a
script the way the shell would build the trainer's command line, and nothing
more:

- line continuations (``\\`` at the end of a line) are joined, comments dropped,
  words split by :mod:`shlex` (a real shell-word parser);
- simple assignments (``VAR=value``, ``export VAR=value``) are remembered and
  ``$VAR``, ``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``,
  ``${VAR:=default}`` expanded (not inside single quotes, as the shell does);
- a variable set outside the script (the environment, a sourced file) and any
  ``$(...)`` or backquoted command stay unresolved: the keys that use them are
  named in one line, and ``--set KEY=VALUE`` (a variable name or a config key)
  supplies them;
- the trainer command is found by its entry point (:data:`ENTRY_POINTS`) and
  its arguments are returned for the framework's translator.

Nothing is executed, sourced or imported.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from lrdoctor.core.errors import UnusableInput

# A value the script does not determine: kept in the word so the key using it is known.
_MARK = "@@unresolved:{}@@"


class _Unresolved:
    """``_UNRESOLVED.format(what)``: a marker that stays one shell word (no spaces or
    quotes inside) whatever ``what`` holds."""

    @staticmethod
    def format(what: str) -> str:
        return _MARK.format(re.sub(r"[^A-Za-z0-9_$(){}./:=+-]", "_", what))


_UNRESOLVED = _Unresolved()
UNRESOLVED_RE = re.compile(r"@@unresolved:([^@]*)@@")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)


@dataclass(frozen=True)
class EntryPoint:
    """One framework's trainer command: how to recognise it and how it takes its config.

    ``modules``: ``python -m`` names (a trailing ``*`` matches a prefix);
    ``scripts``: a regular expression on a script path (``python path.py``) or a
    console command (``fast-llm``); ``style``: ``"hydra"`` (``key=value`` overrides,
    ``--config-name``/``--config-path``), ``"args"`` (``--key value``) or ``"config"``
    (``--config FILE`` then ``key=value`` overrides).
    """

    framework: str  # the translator's name
    modules: tuple[str, ...]
    scripts: str | None
    style: str
    example: str


ENTRY_POINTS: tuple[EntryPoint, ...] = (
    EntryPoint("verl", ("verl.trainer.main_ppo", "recipe.*"), None, "hydra",
               "python3 -m verl.trainer.main_ppo key=value ..."),
    EntryPoint("skyrl", ("skyrl_train.entrypoints.*", "skyrl.train.entrypoints.*"),
               r"(^|/)skyrl(_train|/train)/entrypoints/main_\w+\.py$", "hydra",
               "uv run --isolated --extra vllm -m skyrl_train.entrypoints.main_base key=value"),
    EntryPoint("roll", (), r"(^|/)start_\w+_pipeline\.py$", "roll",
               "python examples/start_rlvr_pipeline.py --config_path DIR --config_name NAME"),
    EntryPoint("openrlhf", ("openrlhf.cli.*",), None, "args",
               "python3 -m openrlhf.cli.train_ppo_ray --key value ..."),
    EntryPoint("nemo_rl", (), r"(^|/)run_(grpo|sft|dpo)\w*\.py$", "config",
               "uv run examples/run_grpo_math.py --config FILE.yaml key=value"),
    EntryPoint("fast-llm", ("fast_llm.cli", "fast_llm.tools.cli"), r"(^|/)fast-llm$", "config",
               "fast-llm train gpt --config FILE.yaml"),
)


def supported() -> str:
    """The supported entry points, for messages."""
    return "; ".join(e.example for e in ENTRY_POINTS)


@dataclass
class LaunchCommand:
    """The trainer command a launch script runs."""

    entry: EntryPoint
    args: list[str]  # the words after the entry point (module or script)
    line: int  # where the command starts in the script (1-based)
    script_word: str | None = None  # the Python file or command the entry point matched
    # key or word -> the variables / commands it needs that the script does not set
    unresolved: dict[str, list[str]] = field(default_factory=dict)


def logical_lines(text: str) -> list[tuple[int, str]]:
    """Lines with continuations joined: (first physical line number, text)."""
    out: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 1
    for i, line in enumerate(text.splitlines(), 1):
        if not buf:
            start = i
        stripped = line.rstrip()
        if stripped.endswith("\\") and not stripped.endswith("\\\\"):
            buf.append(stripped[:-1])
            continue
        buf.append(line)
        out.append((start, " ".join(buf)))
        buf = []
    if buf:
        out.append((start, " ".join(buf)))
    return out


_MAX_NESTING = 16  # ${A:-${B:-...}} deeper than this is left unresolved, not recursed


def expand(text: str, env: dict[str, str], _depth: int = 0) -> str:
    """Shell parameter expansion of the simple forms, outside single quotes.

    ``$(...)``, backquotes and unknown variables become an unresolved marker that
    names them; ``${VAR:=default}`` also assigns ``VAR``.
    """
    if _depth > _MAX_NESTING:
        return _UNRESOLVED.format("nested-too-deep")
    out: list[str] = []
    i, n = 0, len(text)
    quote = ""
    while i < n:
        c = text[i]
        if c == "'" and quote != '"':
            quote = "" if quote == "'" else "'"
            out.append(c)
            i += 1
            continue
        if c == '"' and quote != "'":
            quote = "" if quote == '"' else '"'
            out.append(c)
            i += 1
            continue
        if c == "\\" and quote != "'" and i + 1 < n:
            out.append(text[i:i + 2])
            i += 2
            continue
        if quote == "'" or c not in "$`":
            out.append(c)
            i += 1
            continue
        if c == "`":
            j = text.find("`", i + 1)
            j = n if j < 0 else j + 1
            out.append(_UNRESOLVED.format(text[i:j].replace("@", "")))
            i = j
            continue
        # c == "$"
        nxt = text[i + 1] if i + 1 < n else ""
        if nxt == "(":
            depth, j = 0, i + 1
            while j < n:
                if text[j] == "(":
                    depth += 1
                elif text[j] == ")":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            out.append(_command(text[i + 2:j], env, _depth))
            i = j + 1
            continue
        if nxt == "{":
            j = _closing_brace(text, i + 1)
            body = text[i + 2:j]
            out.append(_param(body, env, _depth))
            i = j + 1
            continue
        if nxt == "0":
            out.append(env.get("0", _UNRESOLVED.format("$0")))
            i += 2
            continue
        m = _NAME.match(text, i + 1)
        if m:
            name = m.group(0)
            out.append(env[name] if name in env else _UNRESOLVED.format(name))
            i = m.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)


def _command(body: str, env: dict[str, str], depth: int = 0) -> str:
    """``$(...)``: only ``dirname``/``basename`` of a known path are pure string
    functions worth evaluating (ROLL's scripts name their config folder so), and
    ``$((...))`` is shell arithmetic (verl's recipes size token caps so:
    ``$(((max_prompt_length + max_response_length) * 2))``); anything else is unresolved."""
    if body.startswith("(") and body.endswith(")"):
        value = _arithmetic(body[1:-1], env, depth)
        if value is not None:
            return str(value)
    words = body.strip().split(None, 1)
    if len(words) == 2 and words[0] in ("dirname", "basename"):
        arg = expand(words[1], env, depth + 1).strip().strip("\"'")
        if arg and not UNRESOLVED_RE.search(arg):
            p = arg.rstrip("/") or "/"
            import posixpath

            return posixpath.dirname(p) or "." if words[0] == "dirname" else posixpath.basename(p)
    return _UNRESOLVED.format("$(" + body.replace("@", "") + ")")


_ARITH_OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}


def _arithmetic(expr: str, env: dict[str, str], depth: int) -> int | None:
    """Shell integer arithmetic over ``+ - * / %`` and parentheses, names read as
    the shell reads them (``x`` and ``$x`` alike); None when anything else is in it
    (a command, an unset name, a power, a result out of range), so the key stays
    unresolved and named rather than guessed."""
    import ast

    text = expand(expr, env, depth + 1)
    if UNRESOLVED_RE.search(text):
        return None
    text = _NAME_WORD.sub(lambda m: env.get(m.group(0), "?"), text)
    if "?" in text or "**" in text or len(text) > 200:
        return None
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        return None

    def ev(node: ast.AST) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            v = ev(node.operand)
            return -v if isinstance(node.op, ast.USub) else v
        if isinstance(node, ast.BinOp):
            a, b = ev(node.left), ev(node.right)
            if isinstance(node.op, (ast.Div, ast.Mod)):
                if b == 0:
                    raise ValueError("division by zero")
                q = abs(a) // abs(b) * (1 if (a >= 0) == (b > 0) else -1)  # truncates
                out = q if isinstance(node.op, ast.Div) else a - q * b
            else:
                op = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}.get(type(node.op))
                if op is None:
                    raise ValueError("operator")
                out = _ARITH_OPS[op](a, b)
            if abs(out) > 10**15:
                raise ValueError("out of range")
            return out
        raise ValueError("not arithmetic")

    try:
        return ev(tree.body)
    except (ValueError, RecursionError):
        return None


_NAME_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _closing_brace(text: str, start: int) -> int:
    depth = 0
    for j in range(start, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return j
    raise UnusableInput(f"unclosed ${{ in {text[start - 1:start + 40]!r}")


def _param(body: str, env: dict[str, str], depth: int = 0) -> str:
    m = re.fullmatch(r"([A-Za-z_][A-Za-z0-9_]*)(?:(:?[-=+?])(.*))?", body, re.S)
    if not m:  # ${#VAR}, ${VAR/x/y}, ...: not ours to evaluate
        return _UNRESOLVED.format("${" + body.replace("@", "") + "}")
    name, op, arg = m.group(1), m.group(2), m.group(3) or ""
    val = env.get(name)
    unset_or_empty = val is None or (op is not None and op.startswith(":") and val == "")
    if op in (":-", "-"):
        return expand(arg, env, depth + 1) if unset_or_empty else str(val)
    if op in (":=", "="):
        if unset_or_empty:
            env[name] = expand(arg, env, depth + 1)
        return env[name]
    if op in (":+", "+"):
        return "" if unset_or_empty else expand(arg, env, depth + 1)
    if val is None:
        return _UNRESOLVED.format(name)
    return val


def _words(line: str, lineno: int) -> list[str]:
    try:
        return shlex.split(line, comments=True)
    except ValueError as exc:
        raise UnusableInput(f"line {lineno}: cannot split into shell words: {exc}") from None


def _match(words: list[str]) -> tuple[EntryPoint, int, str | None] | None:
    """The entry point in ``words``, the index of the first word after it, and the script
    word it matched (None for ``-m module``)."""
    for i, w in enumerate(words):
        for e in ENTRY_POINTS:
            if w == "-m" and i + 1 < len(words) and _module_match(words[i + 1], e.modules):
                return e, i + 2, None
            if w.startswith("-m") and len(w) > 2 and _module_match(w[2:], e.modules):
                return e, i + 1, None
            if e.scripts and re.search(e.scripts, w):
                return e, i + 1, w
    return None


def _module_match(name: str, patterns: tuple[str, ...]) -> bool:
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def parse_script(text: str, sets: dict[str, str] | None = None,
                 script: Path | None = None) -> LaunchCommand | None:
    """The trainer command of a launch script, or None when it runs no known trainer.

    ``sets``: ``--set`` values; the variable names among them are in scope from
    the first line (as if exported by the caller). ``script``: the script's path,
    which ``$0`` expands to.
    """
    env: dict[str, str] = {k: v for k, v in (sets or {}).items() if _NAME.fullmatch(k)}
    given = set(env)
    if script is not None:
        env.setdefault("0", str(script))
    found: LaunchCommand | None = None
    for lineno, raw in logical_lines(text):
        stripped = raw.strip()
        if not stripped or stripped.startswith("#"):
            continue
        line = expand(raw, env)
        words = _words(line, lineno)
        if not words:
            continue
        head = words[1:] if words[0] in ("export", "declare", "local", "readonly") else words
        if head and all(_ASSIGN.match(w) for w in head):
            for w in head:
                m = _ASSIGN.match(w)
                assert m is not None
                if m.group(1) not in given:  # --set wins over the script
                    env[m.group(1)] = m.group(2)
            continue
        hit = _match(words)
        if hit is not None and found is None:
            entry, at, word = hit
            args = words[at:]
            cmd = LaunchCommand(entry, args, lineno, word)
            for w in args:
                names = UNRESOLVED_RE.findall(w)
                if names:
                    key = w.lstrip("+~").partition("=")[0] if "=" in w else w
                    cmd.unresolved[key] = names
            found = cmd
    return found


def looks_like_script(path: Path, text: str) -> bool:
    """A shell script rather than YAML: its name or its first line says so."""
    first = text.lstrip().split("\n", 1)[0]
    return path.suffix in (".sh", ".bash") or first.startswith("#!") and "sh" in first
