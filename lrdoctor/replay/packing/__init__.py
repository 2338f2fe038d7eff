"""Micro-batching strategies, re-implemented from each framework's algorithm.

The replay needs the *number and shape* of micro-batches a framework builds from
one train step's samples, because that count is what the optimizer and the
scheduler consume. Each strategy follows the framework's own rules
(sort order, rank assignment, cap test, cross-rank synchronisation), written
from reading their code, so the replayed count matches what the run did.

``frame`` is one train step's samples as a dict of numpy arrays (``tokens``
required; ``prompt_id``, ``docs``, ``rank`` optional); a pandas DataFrame is
accepted too and converted. Row indices in the plan are positions in that frame.
``batching_cfg`` and ``train_cfg`` may be pydantic models, plain objects or dicts.

One module per strategy (``static``, ``token_budget``, ``karmarkar_karp``,
``balanced_first_fit``, ``prompt_unit``, ``doc_target``); shared shapes and
helpers in ``common``; :func:`plan_step` here picks the strategy from the config.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.packing import registry
from lrdoctor.replay.packing.balanced_first_fit import balanced_first_fit, plan_balanced_first_fit
from lrdoctor.replay.packing.common import (
    MicroBatch,
    StepPlan,
    _get,
    as_frame,
    paused_gc,
    split_steps,
)
from lrdoctor.replay.packing.doc_target import plan_doc_target
from lrdoctor.replay.packing.karmarkar_karp import (
    count_micro_batches,
    first_fit_count,
    karmarkar_karp,
    plan_karmarkar_karp,
    verl_workload,
)
from lrdoctor.replay.packing.prompt_unit import plan_prompt_unit, prompt_runs
from lrdoctor.replay.packing.sequence_packing import plan_sequence_packing
from lrdoctor.replay.packing.static import plan_static
from lrdoctor.replay.packing.token_budget import plan_token_budget

if TYPE_CHECKING:
    import numpy as np

STRATEGIES = registry.NAMES

__all__ = [
    "STRATEGIES",
    "MicroBatch",
    "StepPlan",
    "as_frame",
    "count_micro_batches",
    "balanced_first_fit",
    "first_fit_count",
    "karmarkar_karp",
    "plan_balanced_first_fit",
    "plan_doc_target",
    "plan_karmarkar_karp",
    "plan_many",
    "plan_prompt_unit",
    "plan_sequence_packing",
    "plan_static",
    "plan_step",
    "plan_token_budget",
    "prompt_runs",
    "paused_gc",
    "split_steps",
    "verl_workload",
]


def _frame(frame: Any) -> dict[str, np.ndarray]:
    import numpy as np
    fr = frame if isinstance(frame, dict) and "tokens" in frame else as_frame(frame)
    if isinstance(fr, dict) and fr["tokens"].dtype != np.int64:
        fr = as_frame(fr)
    return fr


def _dp(dp: Any) -> int:
    dp = int(dp)
    if dp < 1:
        raise UnusableInput(f"dp size must be >= 1, got {dp}")
    return dp


def plan_many(batching_cfg: Any, train_cfg: Any, frames: list[Any],
              dps: list[int]) -> list[StepPlan]:
    """Plan many train steps: the same plans as :func:`plan_step` on each.

    A packer with a whole-run planner (Karmarkar-Karp: lockstep partitions, no
    per-call overhead) plans them at once; the others step by step. The garbage
    collector is paused meanwhile (:func:`paused_gc`).
    """
    frs = [_frame(f) for f in frames]
    dps = [_dp(d) for d in dps]
    packer = registry.get(_get(batching_cfg, "strategy", "static"))
    params = packer.params_from(batching_cfg)
    with paused_gc():
        if packer.plan_steps is None or not frs:
            return [packer.plan(params, train_cfg, f, d) for f, d in zip(frs, dps, strict=True)]
        return packer.plan_steps(params, train_cfg, frs, dps)


def plan_step(batching_cfg: Any, train_cfg: Any, frame: Any, dp: int) -> StepPlan:
    """Plan one train step's micro-batches with the configured packer (:mod:`.registry`)."""
    packer = registry.get(_get(batching_cfg, "strategy", "static"))
    return packer.plan(packer.params_from(batching_cfg), train_cfg, _frame(frame), _dp(dp))
