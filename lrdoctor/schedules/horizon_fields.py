"""Which field of a learning-rate scheduler holds its horizon, by class: the one table.

The horizon is where a schedule's decay is sized to end, counted in the scheduler's own
steps (torch ``T_max``, megatron-core ``lr_decay_steps``, DeepSpeed ``total_num_steps``).
Four parts of lrdoctor ask for it: reading a saved scheduler state
(:mod:`lrdoctor.read.layouts._torchstate`, :mod:`lrdoctor.read.layouts.deepspeed`,
:mod:`lrdoctor.read.scan.shapes`), rebuilding and moving a schedule
(:mod:`lrdoctor.schedules.torch_builtin`, the repair), and the runtime guard, which reads
the live object inside a training loop (:func:`lrdoctor.runtime.guard.scheduler_horizon`).
They answer from this table, so a class one of them knows is known to all.

One name serves the saved state and the live object: torch's ``LRScheduler.state_dict()``
is the object's ``__dict__`` without the optimizer, megatron-core's
``OptimizerParamScheduler`` saves its attributes under their own names, and DeepSpeed's
schedulers keep their constructor arguments as attributes of the same name.

No imports: the guard runs inside training loops and must stay light.
"""

from __future__ import annotations

#: ``torch.optim.lr_scheduler`` class -> the field holding its horizon. ConstantLR's
#: ``total_iters`` ends its constant factor (no decay); OneCycleLR refuses to step past
#: ``total_steps``.
TORCH: dict[str, str] = {
    "CosineAnnealingLR": "T_max",
    "OneCycleLR": "total_steps",
    "LinearLR": "total_iters",
    "ConstantLR": "total_iters",
    "PolynomialLR": "total_iters",
}

#: ``deepspeed.runtime.lr_schedules`` class -> the field holding its horizon (its
#: ``scheduler.params`` key in ds_config too). ``WarmupLR`` holds its peak: no horizon.
DEEPSPEED: dict[str, str] = {
    "WarmupDecayLR": "total_num_steps",
    "WarmupCosineLR": "total_num_steps",
}

#: megatron-core ``OptimizerParamScheduler``: its horizon field, the current name first,
#: then the older names its ``load_state_dict`` still accepts.
MEGATRON: tuple[str, ...] = ("lr_decay_steps", "end_iter", "decay_steps")

#: transformers ``get_scheduler``: the ``functools.partial`` keyword of its lambdas that is
#: the horizon, and the three that sum to it for ``warmup_stable_decay``.
HF_TRAINING_STEPS = "num_training_steps"
HF_WSD_PHASES: tuple[str, ...] = ("num_warmup_steps", "num_stable_steps", "num_decay_steps")


def field_of(class_name: str) -> str | None:
    """The horizon field of a torch or DeepSpeed scheduler class, or None (none known)."""
    return TORCH.get(class_name) or DEEPSPEED.get(class_name)
