"""The frameworks' own configs, translated into an lrdoctor run config.

One module per framework (``verl``, ``skyrl``, ``openrlhf``, ``nemo_rl``,
``fast_llm``; ROLL's is :mod:`lrdoctor.replay.roll_yaml`). :func:`detect`
picks the translator from the file's shape; each returns a
:class:`~lrdoctor.replay.translate.common.Translation` holding the config, the
keys it read (``config_keys_used``) and the keys it saw but does not model
(warning LRD213).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lrdoctor.replay.translate.common import Translation

__all__ = ["Translation", "detect_yaml", "translate_text", "translate_yaml"]


def detect_yaml(data: Any) -> str | None:
    """The framework whose config ``data`` (a parsed YAML mapping) is, or None."""
    from lrdoctor.replay import roll_yaml
    from lrdoctor.replay.translate import fast_llm, nemo_rl, skyrl, verl

    if roll_yaml.looks_like_roll(data):
        return "roll"
    for name, mod in (("verl", verl), ("nemo_rl", nemo_rl), ("skyrl", skyrl),
                      ("fast-llm", fast_llm)):
        if mod.looks_like(data):
            return name
    return None


def translate_yaml(name: str, data: dict) -> Translation:
    from lrdoctor.replay.translate import fast_llm, nemo_rl, skyrl, verl

    mod = {"verl": verl, "nemo_rl": nemo_rl, "skyrl": skyrl, "fast-llm": fast_llm}[name]
    return mod.translate(data)


def translate_text(text: str, base: Path | None = None) -> Translation | None:
    """A non-YAML config: OpenRLHF's argument list or launch script, else None."""
    from lrdoctor.replay.translate import openrlhf

    if openrlhf.looks_like(text):
        return openrlhf.translate(text, base)
    return None
