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
    # Each packer module by its PACKER (the package re-exports functions that share
    # some module names, so the modules are not imported by package attribute).
    from lrdoctor.replay.packing.areal_ffd import PACKER as AREAL_FFD
    from lrdoctor.replay.packing.balanced_first_fit import PACKER as BALANCED_FIRST_FIT
    from lrdoctor.replay.packing.doc_target import PACKER as DOC_TARGET
    from lrdoctor.replay.packing.karmarkar_karp import PACKER as KARMARKAR_KARP
    from lrdoctor.replay.packing.prompt_unit import PACKER as PROMPT_UNIT
    from lrdoctor.replay.packing.rlinf_dynamic import PACKER as RLINF_DYNAMIC
    from lrdoctor.replay.packing.roll_sequence_packing import PACKER as ROLL_SEQUENCE_PACKING
    from lrdoctor.replay.packing.sequence_packing import PACKER as SEQUENCE_PACKING
    from lrdoctor.replay.packing.slime_dp_schedule import PACKER as SLIME_DP_SCHEDULE
    from lrdoctor.replay.packing.static import PACKER as STATIC
    from lrdoctor.replay.packing.token_budget import PACKER as TOKEN_BUDGET

    return (
        STATIC,
        TOKEN_BUDGET,
        KARMARKAR_KARP,
        BALANCED_FIRST_FIT,
        PROMPT_UNIT,
        DOC_TARGET,
        SEQUENCE_PACKING,
        ROLL_SEQUENCE_PACKING,
        RLINF_DYNAMIC,
        SLIME_DP_SCHEDULE,
        AREAL_FFD,
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
