"""A framework config as the framework composes it: ``defaults:`` inheritance, then overrides.

Two ways configs are put together before a trainer reads them:

- ``defaults:`` in a YAML file. NeMo-RL (``nemo_rl/utils/config.py``,
  ``load_config_with_inheritance``): a path or a list of paths relative to the
  file, each loaded the same way, merged parent first with the child on top
  (``OmegaConf.merge``: mappings merge key by key, lists and scalars are
  replaced). Hydra (verl's derived YAMLs): a list of config names from the same
  folder (``- ppo_trainer``), ``_self_`` where the file itself goes (last when
  absent), and ``group@package: option`` entries loading ``group/option.yaml``
  at ``package`` (Hydra's own groups, ``override hydra/job_logging: stdout`` as RLinf
  writes, configure Hydra, not the run: passed over). Followed at most :data:`MAX_DEPTH` deep, and never outside the
  allowed folder (the config's own folder tree unless the caller passes another).
- Hydra command-line overrides (``key=value``, ``+key=value``, ``++key=value``,
  ``~key``), as a launch script passes them: :func:`apply_overrides`.

Nothing here runs code from the configs.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput

MAX_DEPTH = 8


def merge(base: Any, top: Any) -> Any:
    """``OmegaConf.merge(base, top)`` on plain data: mappings key by key, the rest replaced."""
    if isinstance(base, dict) and isinstance(top, dict):
        out = dict(base)
        for k, v in top.items():
            out[k] = merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(top)


def _read_yaml(path: Path) -> Any:
    from lrdoctor.read.bytes import safetext

    return safetext.yaml_loads(safetext.read_text(path, "config_bytes", "a YAML config"),
                               str(path))


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except ValueError:
        return False
    return True


def load_tree(path: Path, root: Path | None = None, _depth: int = 0,
              _data: Any = None, skipped: list[str] | None = None) -> Any:
    """The YAML at ``path`` with its ``defaults:`` followed and merged.

    ``root``: the folder inheritance may read from (default: ``path``'s folder).
    A default outside it, or missing, is not read: with ``skipped`` given it is
    listed there (the replay shows it; ROLL's examples include shared files from
    a sibling folder that a copied config lacks), else it is an error naming it.
    ``_data``: the already-parsed file (saves reading it twice).
    """
    root = root or path.resolve().parent
    data = _read_yaml(path) if _data is None else _data
    if not isinstance(data, dict) or "defaults" not in data:
        return data
    if _depth >= MAX_DEPTH:
        raise UnusableInput(f"defaults: nested more than {MAX_DEPTH} deep", str(path))
    data = dict(data)
    defaults = data.pop("defaults")
    entries = [defaults] if isinstance(defaults, str) else defaults
    if not isinstance(entries, list):
        raise UnusableInput(f"defaults: expected a path or a list, got {type(defaults).__name__}",
                            str(path))
    base: Any = {}
    self_done = False
    for ent in entries:
        if ent == "_self_":
            base = merge(base, data)
            self_done = True
            continue
        if isinstance(ent, str):  # a path or name; ROLL writes ``../config/x@_here_``
            name, _, package = ent.partition("@")
            package = "" if package in ("", "_here_") else package
            target = _resolve_entry(path, name.strip())
        elif isinstance(ent, dict) and len(ent) == 1:
            (group, option), = ent.items()
            if option is None or str(option) == "null":
                continue
            group = str(group).removeprefix("override ").strip()
            if group == "hydra" or group.startswith("hydra/"):
                continue  # Hydra's own settings (job_logging, launcher): not the run's
            group, _, package = group.partition("@")
            package = package or group.replace("/", ".")
            target = _resolve_entry(path, f"{group}/{option}")
        else:
            raise UnusableInput(f"defaults: entry {ent!r} is not a path or group: option",
                                str(path))
        why = (f"{target} is outside {root} (pass --config-root to allow it)"
               if not _inside(target, root) else
               f"no such file {target}" if not target.is_file() else None)
        if why is not None:
            if skipped is None:
                raise UnusableInput(f"defaults: {ent!r}: {why}", str(path))
            skipped.append(f"{path.name}: {ent!r}: {why}")
            continue
        parent = load_tree(target, root, _depth + 1, skipped=skipped)
        if package and package != "_global_":
            for part in reversed(package.split(".")):
                parent = {part: parent}
        base = merge(base, parent)
    if not self_done:
        base = merge(base, data)
    return base


def _resolve_entry(path: Path, ent: str) -> Path:
    p = Path(ent)
    if not p.suffix:
        p = p.with_suffix(".yaml")
    return p if p.is_absolute() else path.parent / p


# --------------------------------------------------------------------------- overrides


def parse_scalar(text: str) -> Any:
    """A Hydra override value: int, float (``1e-6`` too), bool, null, a list/dict, or text."""
    t = text.strip()
    low = t.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none", "~"):
        return None
    for kind in (int, float):
        try:
            return kind(t)
        except ValueError:
            pass
    if t[:1] in "[{" and t[-1:] in "]}":
        import yaml

        try:
            return yaml.safe_load(t)
        except yaml.YAMLError:
            return t
    return t


def apply_overrides(tree: dict, overrides: list[str]) -> dict:
    """``tree`` with Hydra overrides applied: ``key=v`` and ``+key=v`` / ``++key=v`` set
    (creating the path), ``~key`` (or ``~key=v``) deletes."""
    out = copy.deepcopy(tree)
    for ov in overrides:
        delete = ov.startswith("~")
        body = ov.lstrip("+~")
        key, eq, raw = body.partition("=")
        key = key.strip()
        if not key or (not eq and not delete):
            raise UnusableInput(f"override {ov!r}: expected key=value, +key=value or ~key")
        parts = key.split(".")
        node = out
        for p in parts[:-1]:
            nxt = node.get(p)
            if not isinstance(nxt, dict):
                if delete:
                    break
                nxt = node[p] = {}
            node = nxt
        else:
            if delete:
                node.pop(parts[-1], None)
            else:
                node[parts[-1]] = parse_scalar(raw)
    return out


def nested(flat: dict[str, Any]) -> dict:
    """``{"a.b": 1}`` -> ``{"a": {"b": 1}}``."""
    return apply_overrides({}, [f"{k}={_text(v)}" for k, v in flat.items()])


def _text(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (list, dict)):
        import json

        return json.dumps(v)
    return str(v)
