"""SkyRL (NovaSky-AI/SkyRL) FSDP checkpoints, refined from what discovery found.

Layout (``skyrl_train/trainer.py`` ``save_checkpoints``, ``workers/fsdp`` strategy)::

    <ckpt_path>/latest_ckpt_global_step.txt
    <ckpt_path>/global_step_N/
        trainer_state.pt        # {"global_step": N, "config": <the run's config>}
        data.pt                 # dataloader state
        policy/model_world_size_W_rank_R.pt, optim_world_size_W_rank_R.pt
        policy/extra_state_world_size_W_rank_R.pt  # {"lr_scheduler", "world_size", "client_state"}
        critic/...              # when a critic is trained

``config`` is an OmegaConf ``DictConfig`` in some releases: read as an opaque,
inert value (its fields, never its code). The scheduler is stepped with the
optimizer (``optimizer_step``), once per mini-batch update: ``last_epoch ==
optimizer step``. A training step is meant to take ``train_batch_size /
policy_mini_batch_size * update_epochs_per_batch`` updates; variable sequences
per prompt (SkyRL PR 1483/1529) take more.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, TypeGuard

from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.state import Counter, RunState, Unit
from lrdoctor.read.layouts import RECOGNISED, _common, torchsave
from lrdoctor.read.scan import shapes

NAME = "skyrl"

EXTRA_STATE = re.compile(r"^extra_state_world_size_(\d+)_rank_(\d+)\.pt$")
TRAINER_STATE = "trainer_state.pt"
ROLES = ("policy", "critic")


def _trainer_state(sc: shapes.Scan) -> tuple[str, _common.Loaded] | None:
    for f, obj in sc.objects.items():
        if Path(f).name == TRAINER_STATE and isinstance(obj, dict) and "global_step" in obj:
            return f, obj
    return None


def _claims_content(sc: shapes.Scan) -> bool:
    return _trainer_state(sc) is not None and any(
        EXTRA_STATE.match(Path(f.file).name) and Path(f.file).parent.name in ROLES
        for f in sc.found if f.kind in shapes.SCHEDULER_KINDS)


def refine(sc: shapes.Scan, st: RunState) -> None:
    """SkyRL's budget: ``global_step`` training steps of a fixed number of mini-batch updates."""
    found = _trainer_state(sc)
    if found is None:
        return  # not claimed: no trainer_state.pt here
    tf, ts = found
    n = ts["global_step"]
    if not isinstance(n, int):
        return
    gs = Counter("skyrl.global_step", n, Unit.ROLLOUT_STEPS, f"{tf}:global_step",
                 FieldRef(tf, ("global_step",)))
    st.counters.append(gs)
    st.trainer_progress = gs
    cfg_found = next((f for f in sc.of(shapes.CONFIG) if f.file == tf and f.key == "config"),
                     None)
    cfg = cfg_found.value if cfg_found else None
    trainer = _common.mapping(_common.dig(cfg, "trainer"))  # any other type says nothing
    tbs, mbs = trainer.get("train_batch_size"), trainer.get("policy_mini_batch_size")
    epochs = trainer.get("update_epochs_per_batch", 1)
    if _positive_int(tbs) and _positive_int(mbs) and _positive_int(epochs) and tbs >= mbs:
        per_step = tbs // mbs * epochs
        st.extras["nominal_updates_per_step"] = per_step
        st.nominal_progress = Counter(
            "skyrl.global_step x updates per step", n * per_step, Unit.UPDATES,
            f"global_step {n} x train_batch_size {tbs} / policy_mini_batch_size {mbs} x "
            f"update_epochs_per_batch {epochs}")
        total = trainer.get("epochs")
        if st.scheduler_progress is not None and n > 0:
            st.extras["actual_updates_per_step"] = st.scheduler_progress.value / n
        if isinstance(total, int):
            st.extras["epochs"] = total
    elif cfg is None:
        st.notes.append(f"{tf}: no config saved: the per-step update budget is unknown")
    else:
        st.notes.append(f"{tf}: its config has no positive whole trainer.train_batch_size, "
                        "policy_mini_batch_size and update_epochs_per_batch: the per-step "
                        "update budget is unknown")


def _positive_int(x: Any) -> TypeGuard[int]:
    return isinstance(x, int) and not isinstance(x, bool) and x > 0


# ---------------------------------------------------------------- layout (read by content)

# claims: RECOGNISED + 1 when the content read classified a checkpoint laid out as SkyRL saves;
# read: the generic content read, then SkyRL's normalisation (:func:`refine`).
_LAYOUT = torchsave.Recognised(NAME, RECOGNISED + 1, _claims_content, refine)
claims, find_checkpoints, read = _LAYOUT.claims, _LAYOUT.find_checkpoints, _LAYOUT.read
