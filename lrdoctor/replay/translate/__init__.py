"""The frameworks' own configs, translated into an lrdoctor run config.

One module per framework, each defining ``TRANSLATOR`` (a
:class:`~lrdoctor.replay.translate.common.Translator`); :data:`TRANSLATORS` lists
them, in the order their ``looks_like`` is asked (the more specific shapes first).
Each returns a :class:`~lrdoctor.replay.translate.common.Translation` holding the
config, the keys it read (``config_keys_used``) and the keys it saw but does not
model (warning LRD213). Adding a framework is one new module plus one line here.
"""

from __future__ import annotations

from typing import Any

from lrdoctor.replay.translate import (
    areal,
    fast_llm,
    nemo_rl,
    onevision,
    openrlhf,
    rlinf,
    roll,
    skyrl,
    slime,
    verl,
)
from lrdoctor.replay.translate.common import Translation, Translator

TRANSLATORS: tuple[Translator, ...] = (
    roll.TRANSLATOR,
    verl.TRANSLATOR,
    nemo_rl.TRANSLATOR,
    skyrl.TRANSLATOR,
    fast_llm.TRANSLATOR,
    rlinf.TRANSLATOR,
    areal.TRANSLATOR,
    slime.TRANSLATOR,
    openrlhf.TRANSLATOR,
    onevision.TRANSLATOR,
)

__all__ = ["TRANSLATORS", "Translation", "Translator", "by_name", "detect", "known"]


def detect(data: Any, reads: str = "yaml") -> Translator | None:
    """The translator whose framework ``data`` is (a parsed mapping for ``reads="yaml"``,
    the text of an argument list for ``"args"``), or None."""
    for tr in TRANSLATORS:
        if tr.reads == reads and tr.looks_like(data):
            return tr
    return None


def by_name(name: str) -> Translator:
    """The translator of framework ``name`` (as a launch script's entry point names it)."""
    for tr in TRANSLATORS:
        if tr.name == name:
            return tr
    raise KeyError(name)  # ENTRY_POINTS name only registered translators (a test checks)


def known() -> str:
    """The frameworks lrdoctor translates, for messages."""
    return ", ".join(tr.title for tr in TRANSLATORS)
