"""The run config an RL trainer's translation ends in: the accounting OpenRLHF, SkyRL,
verl and NeMo-RL share, written once (each translator passes what differs)."""

from __future__ import annotations

from typing import Any


def rl_config(framework: str, schedule: dict[str, Any], *, train: dict[str, Any], dp: int,
              batching: dict[str, Any], step_on: str,
              synthetic: str | None = None) -> dict[str, Any]:
    """The run config an RL trainer's translation ends in (OpenRLHF, SkyRL, verl, NeMo-RL).

    They share the accounting: the budget is the nominal one, accumulation is correct and
    flushed at the end of each step, the scheduler moves once per ``step_on`` (an update,
    or a rollout step for trainers that step it once per ``train()`` call). What differs
    is passed in: ``train`` (steps, samples per step, batch sizes, accumulation),
    ``batching``, and the synthetic lengths used without a batch log."""
    cfg: dict[str, Any] = {
        "framework": framework,
        "schedule": schedule,
        "budget": {"formula": "nominal"},
        "train": train,
        "dp": {"size": dp},
        "batching": batching,
        "accumulation": {"rule": "correct", "flush_at_step_end": True},
        "scheduler": {"step_on": step_on, "increment": 1},
    }
    if synthetic:
        cfg["data"] = {"synthetic": synthetic}
    return cfg
