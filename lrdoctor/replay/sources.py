"""Where a replay's config comes from: lrdoctor's YAML, a framework's YAML, or a launch script.

:func:`load` reads the file once and decides by content:

- a shell script (``.sh`` or a ``#!`` line): the trainer command it runs
  (:mod:`.launch`), its framework's default tree (installed, else the release
  table of :mod:`.translate.release_defaults`) or the YAML it names, with its
  overrides applied (:mod:`.translate.compose`);
- YAML with a ``train:`` section: lrdoctor's own run config;
- other YAML: ``defaults:`` followed, then the framework whose shape it has
  (:data:`.translate.TRANSLATORS`);
- text that is not YAML: an argument list (OpenRLHF).

``sets`` (``--set KEY=VALUE``) give what a script leaves unresolved: a name
without dots is a shell variable, a dotted name a config key (applied last); for a
YAML config every name is a config key.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lrdoctor.core.errors import NotParsed, UnusableInput

if TYPE_CHECKING:
    from lrdoctor.replay.config import RunConfig
    from lrdoctor.replay.launch import LaunchCommand
    from lrdoctor.replay.translate.common import Translator


def split_sets(sets: tuple[str, ...] | list[str]) -> tuple[dict[str, str], list[str]]:
    """``--set`` values as (shell variables, config-key overrides)."""
    env: dict[str, str] = {}
    keys: list[str] = []
    for s in sets:
        key, eq, val = s.partition("=")
        key = key.strip()
        if not eq or not key:
            raise UnusableInput(f"--set {s!r}: expected KEY=VALUE (a script variable or a "
                                "dotted config key)")
        if "." in key:
            keys.append(f"{key.lstrip('+')}={val}")
        else:
            env[key] = val
    return env, keys


def load(path: Path, text: str, sets: tuple[str, ...] = (),
         config_root: Path | None = None) -> RunConfig:
    from lrdoctor.read.bytes import safetext
    from lrdoctor.replay import launch, translate
    from lrdoctor.replay.config import config_from_dict

    env, key_sets = split_sets(sets)
    if launch.looks_like_script(path, text):
        return _from_script(path, text, env, key_sets, config_root)
    # no script, so no variables: a top-level key (AReaL's total_train_steps) is a key
    key_sets = [f"{k}={v}" for k, v in env.items()] + key_sets
    try:
        # size, nesting, alias/merge-key expansion and key checks (lrdoctor.read.bytes.limits)
        data = safetext.yaml_loads(text, str(path))
    except UnusableInput as exc:
        tr = translate.detect(text, "args") if isinstance(exc, NotParsed) else None
        if tr is None:
            raise
        return translated(tr, _args_text(text, key_sets), path)
    if not isinstance(data, dict):
        tr = translate.detect(text, "args")
        if tr is not None:
            return translated(tr, _args_text(text, key_sets), path)
        raise UnusableInput("the run config must be a YAML mapping (lrdoctor's run config or a "
                            f"framework's own: {translate.known()})", str(path))
    from lrdoctor.replay.translate.compose import apply_overrides, load_tree

    # lrdoctor's own config always has ``train``; the frameworks' never do (verl's and
    # Fast-LLM's share other top-level names with it: data, schedule).
    if "train" in data:
        cfg = config_from_dict(apply_overrides(data, key_sets), str(path))
        cfg._base_dir = path.resolve().parent
        return cfg
    skipped: list[str] = []
    tree = load_tree(path, config_root or project_root(path), _data=data, skipped=skipped)
    tr = translate.detect(tree)
    if tr is None:
        raise UnusableInput(unknown_config_message(), str(path))
    source = {"defaults_not_followed": skipped} if skipped else None
    try:
        return translated(tr, apply_overrides(tree, key_sets), path, source)
    except UnusableInput as exc:
        if not skipped:
            raise
        # The missing key may be in the file the defaults name: say which were not read.
        msg, prefix = str(exc), f"{exc.path}: " if exc.path else ""
        msg = msg[len(prefix):] if prefix and msg.startswith(prefix) else msg
        raise UnusableInput(f"{msg} (defaults not followed: {'; '.join(skipped)})",
                            exc.path or str(path)) from None


def unknown_config_message() -> str:
    """The refusal of a config no translator recognises: the frameworks lrdoctor reads
    (their YAML, their launch scripts) and how to write any other run in lrdoctor's own
    schema, so the user has a next step whatever their framework."""
    from lrdoctor.replay import launch, translate

    return ("matches no framework config lrdoctor reads and is not an lrdoctor run config "
            "(no 'train' section). lrdoctor reads the YAML configs of "
            f"{translate.known()}, and launch scripts running {launch.supported()}. "
            "Any other run can be written in lrdoctor's schema: a YAML with 'train' (steps, "
            "samples_per_step, micro_batch_size, gradient_accumulation), 'schedule' (family, "
            "kind, max_lr, warmup, horizon), 'scheduler' (step_on, increment), and as needed "
            "'dp', 'batching', 'accumulation', 'budget'; see docs/replay.md 'The run config' "
            "and examples/onevision-offbyone.yaml")


def project_root(path: Path, levels: int = 6) -> Path:
    """The folder tree ``defaults:`` may read from: the nearest ancestor holding a
    project marker (``.git``, ``pyproject.toml``, ``setup.py``), at most ``levels`` up;
    else the config's own folder. NeMo-RL recipes name ``../../grpo_math_1B.yaml``."""
    here = path.resolve().parent
    for cand in (here, *list(here.parents)[:levels]):
        if any((cand / m).exists() for m in (".git", "pyproject.toml", "setup.py")):
            return cand
    return here


def _args_text(text: str, key_sets: list[str]) -> str:
    extra = [f"--{k}={v}" for k, _, v in (s.partition("=") for s in key_sets)]
    return text + ("\n" + shlex.join(extra) if extra else "")


def translated(tr: Translator, data: Any, path: Path,
               source: dict[str, Any] | None = None) -> RunConfig:
    """Run a translator (its one-line errors name the config file) and validate its config."""
    from lrdoctor.replay.config import config_from_dict

    try:
        out = tr.translate(data, path.resolve().parent)
    except UnusableInput as exc:
        if exc.path is None:  # same type: LRD303's advice follows it
            raise exc.inside(str(path)) from None
        raise
    conf = out.config
    if isinstance(conf.get("data"), dict) and not conf["data"].get("synthetic"):
        conf["data"].pop("synthetic", None)
    cfg = config_from_dict(conf, str(path))
    cfg._format = tr.format_name
    cfg._base_dir = path.resolve().parent
    cfg._keys_used = out.keys_used
    cfg._unmodelled = out.unmodelled
    cfg._source = dict(source or {})
    if out.provenance:  # derived or assumed values: the output names them (replay_full)
        cfg._source["values"] = dict(out.provenance)
    return cfg


def run_length_from_log(cfg: RunConfig, samples: Any, logged: bool) -> RunConfig:
    """Where the translation assumed ``train.steps`` (RLinf's run length without its data
    files), a batch log recorded from the run holds at least its logged steps: replay
    those when they are more. Still assumed (the log may stop before the run did), so the
    findings resting on it stay warnings; the output says the log set it."""
    values = cfg._source.get("values") or {}
    v = values.get("runner.max_steps")
    if not logged or not v or v.get("from") != "assumed":
        return cfg
    import numpy as np

    from lrdoctor.replay.config import with_key

    k = int(len(np.unique(samples["step"])))
    if k <= cfg.train.steps:
        return cfg
    out = with_key(cfg, "train.steps", k, "the batch log")
    out._source = {**cfg._source, "values": {**values, "runner.max_steps": {
        **v, "value": k, "why": f"the batch log holds {k} steps, so the run took at least {k}; "
        f"it may have run longer ({v['why']})"}}}
    return out


# --------------------------------------------------------------------------- launch scripts


def _from_script(path: Path, text: str, env: dict[str, str], key_sets: list[str],
                 config_root: Path | None) -> RunConfig:
    from lrdoctor.replay import launch
    from lrdoctor.replay.translate import by_name
    from lrdoctor.replay.translate.compose import apply_overrides

    env.setdefault("0", str(path))
    cmd = launch.parse_script(text, env, script=path)
    if cmd is None:
        raise UnusableInput("a shell script without a trainer command lrdoctor reads; "
                            f"supported entry points: {launch.supported()}", str(path))
    tr = by_name(cmd.entry.framework)
    source: dict[str, Any] = {"launch_script": str(path), "line": cmd.line,
                              "entry_point": cmd.entry.framework}
    if cmd.unresolved:
        source["unresolved"] = {k: v for k, v in cmd.unresolved.items()}
    notes = cmd.notes + [f"{name}: {why}" for name, why in cmd.why.items()
                         if any(name in v for v in cmd.unresolved.values())]
    if notes:
        source["script_notes"] = notes
    style = cmd.entry.style
    if style == "args":
        words = [*cmd.launcher, *cmd.args] if cmd.entry.with_launcher else cmd.args
        return translated(tr, _args_text(shlex.join(words), key_sets), path, source)
    opts, overrides = _split_args(cmd.args)
    root = config_root or path.resolve().parent
    if style == "hydra":
        tree, origin = _hydra_base(cmd, opts, path, root)
    else:
        cfile = opts.get("config") or opts.get("config_path") or opts.get("c")
        if style == "roll":
            cfile = _roll_yaml(path, cmd, opts)
        elif cfile is None and cmd.entry.framework == "nemo_rl":
            cfile = "examples/configs/grpo_math_1B.yaml"  # run_grpo_math.py's default
        if not cfile:
            raise UnusableInput(f"line {cmd.line}: the {cmd.entry.framework} command names no "
                                "config file (--config FILE)", str(path))
        found, base = _find_file(path, str(cfile), cmd)
        skipped: list[str] = []
        tree, origin = _load_found(found, config_root or base, skipped), str(found)
        if skipped:
            source["defaults_not_followed"] = skipped
    source["base_config"] = origin
    source["overrides"] = len(overrides) + len(key_sets)
    tree = apply_overrides(tree, overrides + key_sets)
    return translated(tr, tree, path, source)


def _split_args(args: list[str]) -> tuple[dict[str, str], list[str]]:
    """(``--name value`` options, ``key=value`` overrides) of a trainer command."""
    opts: dict[str, str] = {}
    overrides: list[str] = []
    i = 0
    while i < len(args):
        w = args[i]
        if w.startswith("-"):
            name, eq, val = w.lstrip("-").partition("=")
            name = name.replace("-", "_")
            if not eq and i + 1 < len(args) and not args[i + 1].startswith("-") \
                    and "=" not in args[i + 1]:
                val = args[i + 1]
                i += 1
            opts[name] = val
        elif "=" in w or w.startswith("~"):
            overrides.append(w)
        i += 1
    return opts, overrides


def _hydra_base(cmd: LaunchCommand, opts: dict[str, str], script: Path,
                root: Path) -> tuple[dict, str]:
    from lrdoctor.replay.translate.release_defaults import base_tree

    name = opts.get("config_name") or opts.get("cn") or ""
    cpath = opts.get("config_path") or opts.get("cp")
    if cpath and name:  # the user's own config folder (a recipe): read it
        rel = Path(cpath) / (name if name.endswith(".yaml") else f"{name}.yaml")
        for base in (script.resolve().parent, *script.resolve().parents[:3]):
            if (base / rel).is_file():
                return _load_found(base / rel, None), str(base / rel)
    fw = cmd.entry.framework
    table = "verl-megatron" if fw == "verl" and "megatron" in name else fw
    return base_tree(table)


def _roll_yaml(script: Path, cmd: LaunchCommand, opts: dict[str, str]) -> str:
    cpath, name = opts.get("config_path"), opts.get("config_name")
    if not cpath or not name:
        raise UnusableInput(f"line {cmd.line}: ROLL's command needs --config_path and "
                            "--config_name", str(script))
    return str(Path(cpath) / (name if name.endswith(".yaml") else f"{name}.yaml"))


def _find_file(script: Path, rel: str, cmd: LaunchCommand) -> tuple[Path, Path]:
    """A file the command names, relative to where the command would run: the script's
    folder or one of its 3 parents (a repository root), and for ROLL's Hydra
    ``config_path`` also relative to the Python file's folder."""
    if launch_unresolved(rel):
        raise UnusableInput(f"line {cmd.line}: the config file {rel!r} depends on what the "
                            "script does not set; give it with --set VAR=VALUE", str(script))
    p = Path(rel)
    if p.is_absolute():
        if p.is_file():
            return p, p.parent
        raise UnusableInput(f"line {cmd.line}: config file {rel} not found", str(script))
    bases = [script.resolve().parent, *script.resolve().parents[:3]]
    subdirs = [""] + ([str(Path(cmd.script_word).parent)] if cmd.script_word else [])
    for base in bases:
        for sub in subdirs:
            cand = base / sub / p
            if cand.is_file():
                return cand, base
    raise UnusableInput(f"line {cmd.line}: config file {rel} not found next to the script or "
                        f"up to 3 folders above it", str(script))


def launch_unresolved(text: str) -> bool:
    from lrdoctor.replay.shell import UNRESOLVED_RE

    return bool(UNRESOLVED_RE.search(text))


def _load_found(path: Path, config_root: Path | None, skipped: list[str] | None = None) -> dict:
    from lrdoctor.replay.translate.compose import load_tree

    tree = load_tree(path, config_root, skipped=skipped)
    if not isinstance(tree, dict):
        raise UnusableInput("the config the script names is not a YAML mapping", str(path))
    return tree
