"""``[tool.lrdoctor]`` for the commands other than ``check``: the same file, the same keys.

Why: only ``check`` and ``report`` read the project's settings, so with
``fail-on = "never"`` and a code ignored, ``lrdoctor inspect ckpt`` still exited 1.
Every command now takes its threshold, ignores and per-path options from the nearest
``pyproject.toml``/``lrdoctor.toml`` (or ``-c FILE``), as ``check`` does:

- ``fail-on``: the command-line ``--fail-on`` wins, then the entry for this path, then
  the file's top-level ``fail-on`` (when written), then the command's own default;
- ``ignore``: the top-level ignores (with their ``path`` globs) and the matching entry's;
- per-path options: the ``[[tool.lrdoctor.inspect]]`` whose ``path`` matches the
  inspected PATH (its ``format``, ``max-progress-ratio``, ``fail-on``, ``ignore``), or
  the ``[[tool.lrdoctor.replay]]`` whose ``config`` is the replayed one.

An ignore that matched nothing is only reported by ``check`` (LRD301): a single
command sees one target, not the project.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Settings:
    source: Path | None = None
    fail_on: str | None = None             # None: the command's own default
    max_progress_ratio: float | None = None
    format: str | None = None
    ignores: list[Any] = field(default_factory=list)  # ci.config.Ignore
    entry: Any = None                      # the matching ci.config.Target, if any

    def threshold(self, flag: Any, default: str) -> str:
        """--fail-on given > this path's entry / the file's fail-on > the command's default."""
        if flag is not None:
            return getattr(flag, "value", flag)
        return self.fail_on or default


def _same(a: str, b: str) -> bool:
    try:
        return Path(a).resolve() == Path(b).resolve()
    except OSError:
        return False


def _matches(pattern: str, target: str) -> bool:
    from lrdoctor.read.bytes.storage import is_url

    if is_url(pattern) or is_url(target):
        return fnmatch.fnmatch(target.rstrip("/"), pattern.rstrip("/"))
    p = os.path.abspath(pattern.rstrip("/" + os.sep)) if pattern.rstrip("/") else pattern
    t = os.path.abspath(target.rstrip("/" + os.sep))
    return p == t or fnmatch.fnmatch(t, p) or _same(p, t)


def load(config: Path | None, kind: str, target: str) -> Settings:
    """The settings for one ``kind`` ("inspect" or "replay") of ``target``; an unusable
    file is :class:`~lrdoctor.ci.config.ConfigError` (one line, exit 2)."""
    if config is None:
        from lrdoctor.ci.find import find_config

        if find_config() is None:  # nothing to read: no pydantic import on the fast path
            return Settings()
    from lrdoctor.ci import config as ci_config

    cfg = ci_config.load(config, required=config is not None)
    s = Settings(source=cfg.source, max_progress_ratio=cfg.max_progress_ratio,
                 fail_on=cfg.fail_on if cfg.fail_on_set else None,
                 ignores=list(cfg.ignores))
    for t in cfg.targets:
        if t.kind == kind and _matches(cfg.resolve(t.path), target):
            s.entry = t
            s.fail_on = t.fail_on or s.fail_on
            s.max_progress_ratio = t.max_progress_ratio or s.max_progress_ratio
            s.format = t.format
            s.ignores = list(t.ignores) + s.ignores
            break
    return s


def apply(reports: list[Any], s: Settings) -> None:
    """The max-progress-ratio gate (LRD302) and the ignores, as ``check`` applies them."""
    if s.max_progress_ratio is None and not s.ignores:
        return  # nothing to apply (and no import of the CI gate on inspect's fast path)
    from lrdoctor.ci.check import _apply_ignores, _ratio_finding

    for rep in reports:
        if s.max_progress_ratio is not None:
            extra = _ratio_finding(rep, s.max_progress_ratio, s.entry)
            if extra is not None:
                rep.findings.append(extra)
        _apply_ignores(rep, s.ignores)
