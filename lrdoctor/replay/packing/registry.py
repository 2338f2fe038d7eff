"""The packer registry: one entry per micro-batching strategy, each with its own params.

A packer is one module under ``replay/packing/`` that defines ``PACKER`` (a
:class:`Packer`): its name (the ``batching.strategy`` value), the pydantic model
of the ``batching`` keys it reads (missing or bad keys fail there, with the
packer's name), what the framework's micro-batch costs in memory (packed real
tokens, or rows x padded length), whether ``max_tokens_per_microbatch`` is its
memory knob, and its planning function. :data:`PACKERS` lists them: the config's
``batching.strategy`` choices, the strategy table in docs/replay.md and
:func:`lrdoctor.replay.packing.plan_step` all come from it, so adding a packer is
one new file plus one line here.
"""

from __future__ import annotations

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.packing.common import Packer


def _packers() -> tuple[Packer, ...]:
    from lrdoctor.replay.packing import (
        balanced_first_fit,
        doc_target,
        karmarkar_karp,
        prompt_unit,
        roll_sequence_packing,
        sequence_packing,
        static,
        token_budget,
    )

    return (
        static.PACKER,
        token_budget.PACKER,
        karmarkar_karp.PACKER,
        balanced_first_fit.PACKER,
        prompt_unit.PACKER,
        doc_target.PACKER,
        sequence_packing.PACKER,
        roll_sequence_packing.PACKER,
    )


PACKERS: dict[str, Packer] = {p.name: p for p in _packers()}
NAMES: tuple[str, ...] = tuple(PACKERS)


def get(name: str) -> Packer:
    """The packer called ``name``; an unknown name is unusable input naming the known ones."""
    try:
        return PACKERS[name]
    except KeyError:
        raise UnusableInput(f"batching.strategy {name!r} is not one of "
                            f"{', '.join(PACKERS)}") from None


def docs_table() -> str:
    """The strategy table of docs/replay.md (a test compares it with the file)."""
    rows = ["| strategy | whose algorithm | keys it reads | micro-batch cost |",
            "|---|---|---|---|"]
    for p in PACKERS.values():
        keys = []
        for k, f in p.params.model_fields.items():
            keys.append(f"`{k}`" + (" (required)" if f.is_required() else ""))
        rows.append(f"| `{p.name}` | {p.summary} | {', '.join(keys) or '-'} | "
                    f"{'packed real tokens' if p.packed else 'rows x padded length'} |")
    return "\n".join(rows) + "\n"
