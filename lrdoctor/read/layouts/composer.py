"""MosaicML Composer checkpoints, refined from what discovery found.

Layout (``composer/core/state.py`` ``State.state_dict``, ``composer/core/time.py``)::

    <save_folder>/ep{E}-ba{B}-rank{R}.pt   # {"state": {...}, "rng": [...]}
    state.schedulers = {"LambdaLR": LambdaLR.state_dict()}  # ComposerSchedulers compile to LambdaLR
    state.optimizers = {"DecoupledAdamW": ...}
    state.timestamp  = {"Timestamp": {"epoch", "batch", "sample", "token", "batch_in_epoch", ...}}

Composer steps its schedulers once per batch (``step_schedulers_every_batch``,
the default for Composer schedulers), so ``last_epoch == timestamp.batch``;
``max_duration`` is not saved, so the planned end is unknown.
"""

from __future__ import annotations

from lrdoctor.core.state import Counter, RunState, Unit
from lrdoctor.read.layouts import RECOGNISED, torchsave
from lrdoctor.read.scan import shapes

NAME = "composer"


def _timestamp(sc: shapes.Scan, field: str) -> shapes.Found | None:
    return next((f for f in sc.counters() if f.key.startswith("state.timestamp")
                 and f.key.rsplit(".", 1)[-1] == field), None)


def _claims_content(sc: shapes.Scan) -> bool:
    return _timestamp(sc, "batch") is not None and any(
        f.key.startswith("state.schedulers") for f in sc.found if f.kind in shapes.SCHEDULER_KINDS)


def refine(sc: shapes.Scan, st: RunState) -> None:
    """Composer's clock: ``timestamp.batch`` counts optimizer steps (batches)."""
    for field, unit in (("batch", Unit.UPDATES), ("epoch", Unit.EPOCHS),
                        ("sample", Unit.SAMPLES)):
        f = _timestamp(sc, field)
        if f is not None:
            st.counters.append(Counter(f"composer.timestamp.{field}", f.value, unit, f.where,
                                       f.ref))
    batch = st.counter("composer.timestamp.batch")
    st.trainer_progress = batch
    if batch is not None and (st.scheduler_progress is None
                              or st.scheduler_progress.unit is Unit.UPDATES):
        st.nominal_progress = Counter(
            "composer.timestamp.batch", batch.value, Unit.UPDATES,
            "timestamp.batch (Composer steps its schedulers once per batch)")
    st.notes.append("Composer saves no max_duration: the planned end is unknown")


# ---------------------------------------------------------------- layout (read by content)

# claims: RECOGNISED when the content read classified a checkpoint laid out as Composer saves;
# read: the generic content read, then Composer's normalisation (:func:`refine`).
_LAYOUT = torchsave.Recognised(NAME, RECOGNISED, _claims_content, refine)
claims, find_checkpoints, read = _LAYOUT.claims, _LAYOUT.find_checkpoints, _LAYOUT.read
