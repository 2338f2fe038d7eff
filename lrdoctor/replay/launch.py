"""A shell launch script read as a config, without running it.

Many users' only config is the ``.sh`` they launch with: ``python3 -m
verl.trainer.main_ppo data.train_batch_size=1024 ...``. The script is read as bash
reads it by :mod:`.shell` (arrays, multi-line quotes, ``$(...)``, conditions,
``source``; nothing executed); this module finds the trainer command among the
commands it runs, by its entry point (:data:`ENTRY_POINTS`), and returns its
arguments for the framework's translator.

What the script does not determine stays an unresolved marker naming it: the keys
that use one are named in one line, and ``--set KEY=VALUE`` (a variable name or a
config key) supplies them. A word that stands for an unknown list of arguments
(``"${ARGS[@]}"`` of an array the script does not set, a bare ``$EXTRA``) is a
refusal naming the file and line: the replay never runs on arguments it could not see.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.shell import UNRESOLVED_RE, Value, expand_words, run_script

__all__ = ["ENTRY_POINTS", "UNRESOLVED_RE", "EntryPoint", "LaunchCommand", "looks_like_script",
           "parse_script", "supported"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


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
    # A script name shared by many projects (slime's ``train.py``): the command is this
    # framework's only when one of its arguments matches this regular expression.
    args_marker: str | None = None
    # "args" style: the launcher's words before the entry point go to the translator too
    # (torchrun's --nproc_per_node x --nnodes is OneVision-Encoder's world size).
    with_launcher: bool = False


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
    EntryPoint("slime", (), r"(^|/)train(_async)?\.py$", "args",
               "python3 train.py --rollout-batch-size N --num-rollout N ... (slime)",
               args_marker=r"--(rollout-batch-size|num-rollout)(=|$)"),
    EntryPoint("onevision_encoder", ("training.train",), None, "args",
               "torchrun --nproc_per_node 8 -m training.train --key value ...",
               with_launcher=True),
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
    launcher: list[str] = field(default_factory=list)  # the words before the entry point
    # key or word -> the variables / commands it needs that the script does not set
    unresolved: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # what the reader could not decide
    why: dict[str, str] = field(default_factory=dict)  # unresolved variable -> why


def _match(words: list[str]) -> tuple[EntryPoint, int, str | None] | None:
    """The entry point in ``words``, the index of the first word after it, and the script
    word it matched (None for ``-m module``)."""
    for i, w in enumerate(words):
        for e in ENTRY_POINTS:
            if w == "-m" and i + 1 < len(words) and _module_match(words[i + 1], e.modules):
                return e, i + 2, None
            if w.startswith("-m") and len(w) > 2 and _module_match(w[2:], e.modules):
                return e, i + 1, None
            if e.scripts and re.search(e.scripts, w) and (
                    e.args_marker is None
                    or any(re.match(e.args_marker, a) for a in words[i + 1:])):
                return e, i + 1, w
    return None


def _module_match(name: str, patterns: tuple[str, ...]) -> bool:
    return any(name.startswith(p[:-1]) if p.endswith("*") else name == p for p in patterns)


def parse_script(text: str, sets: dict[str, str] | None = None,
                 script: Path | None = None) -> LaunchCommand | None:
    """The trainer command of a launch script, or None when it runs no known trainer.

    ``sets``: ``--set`` values; the variable names among them are in scope from
    the first line (as if exported by the caller) and the script's own assignments
    to them are ignored. ``script``: the script's path, which ``$0`` expands to.
    """
    env: dict[str, Value] = {k: v for k, v in (sets or {}).items() if _NAME.fullmatch(k)}
    given = set(env)
    for k, v in list(env.items()):  # --set ARGS='(--a 1 --b 2)': an array, as bash writes one
        if isinstance(v, str) and v.startswith("(") and v.endswith(")"):
            env[k] = expand_words(v[1:-1])
    path = str(script) if script is not None else "<script>"
    env.setdefault("0", path)
    read = run_script(text, path, env, given, wanted=lambda words: _match(words) is not None)
    if not read.commands:
        return None
    first = read.commands[0]
    hit = _match(first.words)
    assert hit is not None
    entry, at, word = hit
    cmd = LaunchCommand(entry, first.words[at:], first.line, word, launcher=first.words[:at])
    if first.path != path:
        cmd.notes.append(f"the command is in {first.path}, which the script sources")
    for c in first.conditions:
        cmd.notes.append(f"the command runs only if the condition at line {c} holds, which "
                         "the script does not decide")
    others = sorted({c.line for c in read.commands[1:] if c.line != first.line})
    if others:
        cmd.notes.append(f"other {entry.framework} commands at line(s) "
                         f"{', '.join(map(str, others))} are not replayed")
    if read.positional_used:
        cmd.notes.append("the script's own arguments ($@, $1...) are taken as none, as when "
                         "it is run without arguments")
    cmd.notes.extend(read.notes)
    cmd.why = dict(read.why)
    _check_unknown_lists(cmd, path)
    for w in cmd.args:
        names = UNRESOLVED_RE.findall(w)
        if names:
            key = w.lstrip("+~").partition("=")[0] if "=" in w else w
            cmd.unresolved[key] = names
    return cmd


def _check_unknown_lists(cmd: LaunchCommand, path: str) -> None:
    """Refuse a word that stands for arguments the script does not show: ``${A[@]}`` of
    an array it does not set, or a bare unresolved word that is no option's value (an
    unquoted ``$EXTRA_ARGS`` may be any number of arguments)."""
    for k, w in enumerate(cmd.args):
        names = UNRESOLVED_RE.findall(w)
        if not names:
            continue
        lists = [n for n in names if n.endswith(("[@]", "[*]")) or n in ("@", "*")]
        prev = cmd.args[k - 1] if k else ""
        bare = UNRESOLVED_RE.fullmatch(w) is not None and not (
            prev.startswith("-") and "=" not in prev and len(prev) > 1)
        if lists or bare:
            name = (lists or names)[0]
            var = name.removesuffix("[@]").removesuffix("[*]")
            why = cmd.why.get(var) or "the script does not set it"
            shown = f"${{{var}[@]}}" if lists else name
            raise UnusableInput(
                f"line {cmd.line}: the {cmd.entry.framework} command's argument {shown!r} "
                f"stands for arguments lrdoctor cannot see ({why}); give them with "
                f"--set {var}='(--key value ...)' (or --set {var}= for none)", path)


def looks_like_script(path: Path, text: str) -> bool:
    """A shell script rather than YAML: its name or its first line says so."""
    first = text.lstrip().split("\n", 1)[0]
    return path.suffix in (".sh", ".bash") or first.startswith("#!") and "sh" in first
