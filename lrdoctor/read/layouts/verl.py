"""verl (volcengine/verl) FSDP checkpoints, refined from what discovery found.

Layout (``verl/utils/checkpoint/fsdp_checkpoint_manager.py``, ``ray_trainer.py``)::

    <default_local_dir>/latest_checkpointed_iteration.txt   # "N" (Megatron's tracker name)
    <default_local_dir>/global_step_N/
        data.pt                                             # dataloader state
        actor/model_world_size_W_rank_R.pt
        actor/optim_world_size_W_rank_R.pt                  # torch optimizer state (sharded)
        actor/extra_state_world_size_W_rank_R.pt            # {"lr_scheduler": ..., "rng": ...}
        actor/fsdp_config.json, actor/huggingface/
        critic/...                                          # same, when a critic is trained

The Megatron path (``megatron_checkpoint_manager.py``) saves the actor through
Megatron's dist_checkpointing in ``global_step_N/actor/dist_ckpt/`` (torch_dist:
``common.pt`` in older megatron-core, DCP ``common_state`` from 0.19) with the
megatron-core scheduler under ``lr_scheduler`` (not ``opt_param_scheduler``) and
no ``args``/``iteration``; it steps that scheduler by 1 per ``update_actor``.

The actor's scheduler (transformers' warmup + constant/cosine LambdaLR, or
megatron-core's scheduler on the Megatron path) is stepped **once per
``update_actor`` call**, i.e. once per training step, while the optimizer steps
once per PPO mini-batch: ``last_epoch == N`` at ``global_step_N`` by design, and
the optimizer's ``step`` is a multiple of it. The horizon is
``actor.optim.total_training_steps`` (in the run's Hydra config, not saved).
"""

from __future__ import annotations

import re
from pathlib import Path

from lrdoctor.core.state import Counter, RunState, Unit
from lrdoctor.read.layouts import RECOGNISED, torchsave
from lrdoctor.read.scan import shapes

NAME = "verl"

EXTRA_STATE = re.compile(r"^extra_state_world_size_(\d+)_rank_(\d+)\.pt$")
ROLES = ("actor", "critic")
TRACKER = "latest_checkpointed_iteration.txt"


def _step_dir(f: Path) -> Path | None:
    d = f.parent
    for _ in range(4):
        if re.match(r"^global_step_(\d+)$", d.name):
            return d
        d = d.parent
    return None


def _role_dir(f: shapes.Found) -> Path | None:
    """The ``actor``/``critic`` folder a verl scheduler state was found in, or None.

    FSDP: ``extra_state_world_size_W_rank_R.pt`` key ``lr_scheduler``. Megatron:
    ``dist_ckpt/`` (torch_dist: ``common.pt`` or the DCP items) key ``lr_scheduler``.
    """
    p = Path(f.file)
    if f.key == "lr_scheduler" and EXTRA_STATE.match(p.name) and p.parent.name in ROLES:
        return p.parent
    if f.key.rsplit(".", 1)[-1] == "lr_scheduler" and "dist_ckpt" in p.parts:
        d = p.parents[len(p.parts) - 2 - p.parts.index("dist_ckpt")]  # .../dist_ckpt
        if d.parent.name in ROLES:
            return d.parent
    return None


def _placed_hits(sc: shapes.Scan) -> list[tuple[shapes.Found, Path, Path]]:
    """(scheduler state, its role folder, its ``global_step_N`` folder) of every scheduler
    state saved where verl saves one: the claim and the read judge the same hits."""
    out = []
    for f in sc.found:
        role = _role_dir(f) if f.kind in shapes.SCHEDULER_KINDS else None
        step = _step_dir(Path(f.file)) if role is not None else None
        if role is not None and step is not None:
            out.append((f, role, step))
    return out


def refine(sc: shapes.Scan, st: RunState) -> None:
    """verl's unit: one scheduler step per training (rollout) step; ``global_step_N`` is N."""
    hits = _placed_hits(sc)
    if not hits:
        return  # not claimed: no verl scheduler state here
    actor, role, step_dir = next((h for h in hits if h[1].name == "actor"), hits[0])
    n = int(step_dir.name.rsplit("_", 1)[1])
    world = EXTRA_STATE.match(Path(actor.file).name)
    st.extras.update({"role": role.name, "global_step": n,
                      "backend": "fsdp" if world else "megatron"})
    if world:
        st.extras["world_size"] = int(world.group(1))
    tracker = step_dir.parent / TRACKER
    if tracker.is_file():
        st.files.append(str(tracker))
        st.extras["tracker"] = tracker.read_text(errors="replace").strip()[:40]
    gs = Counter("verl.global_step", n, Unit.ROLLOUT_STEPS,
                 f"{step_dir.name} (training steps done)")
    st.counters.append(gs)
    st.trainer_progress = gs
    for c in (st.scheduler_progress,):
        if c is not None:
            c.unit = Unit.ROLLOUT_STEPS
    if st.schedule is not None:
        st.schedule.unit = Unit.ROLLOUT_STEPS
    st.nominal_progress = Counter(
        "verl.global_step", n, Unit.ROLLOUT_STEPS,
        f"{step_dir.name} (verl steps the actor's scheduler once per training step)")
    opt = st.counter("optimizer.step")
    if opt is not None and n > 0:
        st.extras["optimizer_updates_per_training_step"] = opt.value / n
    st.notes.append("verl layout: the scheduler is stepped once per update_actor call "
                    "(training step); the optimizer once per PPO mini-batch, by design")


# ---------------------------------------------------------------- layout (read by content)

# claims: RECOGNISED when the content read classified a checkpoint laid out as verl saves;
# read: the generic content read, then verl's normalisation (:func:`refine`).
_LAYOUT = torchsave.Recognised(NAME, RECOGNISED, lambda sc: bool(_placed_hits(sc)), refine)
claims, find_checkpoints, read = _LAYOUT.claims, _LAYOUT.find_checkpoints, _LAYOUT.read
