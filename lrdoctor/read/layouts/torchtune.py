"""torchtune recipe checkpoints, refined from what discovery found.

Layout (``recipes/full_finetune_*.py``, ``torchtune/training/checkpointing``)::

    <output_dir>/epoch_{E}/...                 # model weights
    <output_dir>/recipe_state/recipe_state.pt  # intermediate checkpoints only
        {"optimizer": ..., "seed", "epochs_run", "total_epochs", "max_steps_per_epoch",
         "steps_run", "dataloader"}

torchtune saves **no scheduler state**: on resume it rebuilds the scheduler with
``last_epoch = global_step - 1`` (``global_step = steps_run``), so the schedule
restarts where ``steps_run`` says. ``steps_run`` counts optimizer steps (one per
``gradient_accumulation_steps`` batches), so it must equal the optimizer's ``step``.
"""

from __future__ import annotations

from pathlib import Path

from lrdoctor.core.state import Counter, RunState, Unit
from lrdoctor.read.layouts import RECOGNISED, _common, torchsave
from lrdoctor.read.scan import shapes

NAME = "torchtune"

RECIPE_STATE = "recipe_state.pt"


def _recipe(sc: shapes.Scan) -> tuple[str, _common.Loaded] | None:
    for f, obj in sc.objects.items():
        if isinstance(obj, dict) and "epochs_run" in obj and "total_epochs" in obj \
                and (Path(f).name == RECIPE_STATE or "seed" in obj):
            return f, obj
    return None


def _claims_content(sc: shapes.Scan) -> bool:
    return _recipe(sc) is not None and not any(
        f.kind in shapes.SCHEDULER_KINDS for f in sc.found)


def refine(sc: shapes.Scan, st: RunState) -> None:
    """The scheduler torchtune will rebuild sits at ``steps_run``; that is its progress."""
    found = _recipe(sc)
    if found is None:
        return  # not claimed: no recipe state here
    f, rs = found
    steps, epochs = rs.get("steps_run"), rs.get("epochs_run")
    per_epoch, total = rs.get("max_steps_per_epoch"), rs.get("total_epochs")
    src = f"{f}:steps_run"
    if not isinstance(steps, int) and isinstance(epochs, int) and isinstance(per_epoch, int):
        steps, src = epochs * per_epoch, f"{f}:epochs_run x max_steps_per_epoch"
    if isinstance(steps, int):
        from lrdoctor.core.fieldref import FieldRef

        st.scheduler_progress = Counter(
            "torchtune.steps_run (scheduler rebuilt at)", steps, Unit.UPDATES, src,
            ref=FieldRef(str(f), ("steps_run",)) if src == f"{f}:steps_run" else None)
        st.notes = [n for n in st.notes if not n.startswith("no LR scheduler state found")]
        st.notes.append("torchtune saves no scheduler state: it rebuilds the scheduler at "
                        "last_epoch = steps_run - 1 on resume")
    if isinstance(total, int) and isinstance(per_epoch, int) and per_epoch > 0:
        st.planned_end = Counter("torchtune.total_epochs x max_steps_per_epoch",
                                 total * per_epoch, Unit.UPDATES,
                                 f"{f}:total_epochs x max_steps_per_epoch")
        st.trainer_progress = st.scheduler_progress


# ---------------------------------------------------------------- layout (read by content)

# claims: RECOGNISED when the content read classified a checkpoint laid out as torchtune saves;
# read: the generic content read, then torchtune's normalisation (:func:`refine`).
_LAYOUT = torchsave.Recognised(NAME, RECOGNISED, _claims_content, refine)
claims, find_checkpoints, read = _LAYOUT.claims, _LAYOUT.find_checkpoints, _LAYOUT.read
