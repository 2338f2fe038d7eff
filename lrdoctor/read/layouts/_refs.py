"""The fields a :class:`~lrdoctor.core.state.RunState` names, in one walk.

Every counter, horizon and LR a layout reports carries a
:class:`~lrdoctor.core.fieldref.FieldRef` (the one field index reading and repair
share). :func:`refs` lists them with what each names, so a check of the rule (and a
repair) walks one list; :func:`itemize` turns refs into a torch.distributed.checkpoint
folder's re-nested tree into refs to the DCP item that holds each field.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING

from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.state import Counter, RunState

if TYPE_CHECKING:
    from lrdoctor.read.bytes.dcp import DcpState


def counters(st: RunState) -> Iterator[tuple[str, Counter]]:
    """(role, counter) of every counter read from the checkpoint: the scheduler's progress,
    the planned end, the trainer's progress and every other counter. The nominal progress
    is a formula over these (its ``source`` says which), not a field, so it is not listed."""
    for role in ("scheduler_progress", "planned_end", "trainer_progress"):
        c = getattr(st, role)
        if c is not None:
            yield role, c
    for c in st.counters:
        yield "counter", c


def refs(st: RunState) -> Iterator[tuple[str, FieldRef | None]]:
    """(what, ref) of every counter, the schedule's horizon and every optimizer LR; ref None
    where the layout named no field (a gap in the field index)."""
    for role, c in counters(st):
        yield f"{role} {c.name}", c.ref
    spec = st.schedule
    if spec is not None and spec.horizon is not None:
        yield f"horizon of the {spec.family} {spec.kind} schedule", spec.refs.get("horizon")
    lr_refs: list[FieldRef | None] = list(st.optimizer_lr_refs)
    lr_refs += [None] * (len(st.optimizer_lrs) - len(lr_refs))
    for i, ref in enumerate(lr_refs):
        yield f"optimizer LR [{i}]", ref


def itemize(st: RunState, states: Iterable[DcpState]) -> None:
    """Refs into a DCP folder's re-nested tree (``file`` its ``.metadata``, no ``item``)
    become refs to the item holding the field (``item`` its fqn, ``key`` inside it), the
    way the folder stores it and a repair rewrites it."""
    from lrdoctor.read.bytes.dcp import METADATA

    by_file = {str(ds.path / METADATA): ds for ds in states}
    if not by_file:
        return

    def one(ref: FieldRef | None) -> FieldRef | None:
        ds = by_file.get(ref.file) if ref is not None and not ref.item else None
        if ref is None or ds is None:
            return ref
        return ds.ref(ref.key) or ref

    for _, c in counters(st):
        c.ref = one(c.ref)
    if st.schedule is not None:
        st.schedule.refs = {k: one(r) or r for k, r in st.schedule.refs.items()}
    st.optimizer_lr_refs = [one(r) or r for r in st.optimizer_lr_refs]
