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

from typing import Any

import numpy as np

from lrdoctor.errors import UnusableInput
from lrdoctor.replay.packing.balanced_first_fit import balanced_first_fit, plan_balanced_first_fit
from lrdoctor.replay.packing.common import (
    STRATEGIES,
    MicroBatch,
    StepPlan,
    _get,
    _mini_per_rank,
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
from lrdoctor.replay.packing.kk_plan import plan_karmarkar_karp_steps
from lrdoctor.replay.packing.prompt_unit import plan_prompt_unit, prompt_runs
from lrdoctor.replay.packing.sequence_packing import plan_sequence_packing
from lrdoctor.replay.packing.static import plan_static
from lrdoctor.replay.packing.token_budget import plan_token_budget

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
    "plan_karmarkar_karp_steps",
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

    Karmarkar-Karp is planned for all the steps at once
    (:func:`plan_karmarkar_karp_steps`: lockstep partitions, no per-call
    overhead); the other strategies step by step. The garbage collector is
    paused meanwhile (:func:`paused_gc`).
    """
    frs = [_frame(f) for f in frames]
    dps = [_dp(d) for d in dps]
    with paused_gc():
        if _get(batching_cfg, "strategy", "static") != "karmarkar_karp" or not frs:
            return [plan_step(batching_cfg, train_cfg, f, d) for f, d in zip(frs, dps, strict=True)]
        cap = _kk_cap(batching_cfg)
        step_notes: list[dict] = [{} for _ in frs]
        mprs = [_mini_per_rank(train_cfg, d, n) for d, n in zip(dps, step_notes, strict=True)]
        plans = plan_karmarkar_karp_steps(frs, dps, cap, mini_per_rank=mprs,
                                          **_kk_options(batching_cfg))
    for plan, n in zip(plans, step_notes, strict=True):
        plan.notes.update(n)
    return plans


def _kk_cap(batching_cfg: Any) -> int:
    cap = _get(batching_cfg, "max_tokens_per_microbatch")
    if not cap and not _get(batching_cfg, "num_micro_batches"):
        raise UnusableInput(
            "strategy karmarkar_karp needs batching.max_tokens_per_microbatch or num_micro_batches"
        )
    return int(cap or 0)


def _kk_options(batching_cfg: Any) -> dict[str, Any]:
    return dict(
        num_micro_batches=_get(batching_cfg, "num_micro_batches"),
        equal_size=bool(_get(batching_cfg, "equal_size", False)),
        flavor=str(_get(batching_cfg, "flavor", "verl")),
        balance_dp=bool(_get(batching_cfg, "balance_dp", True)),
        keep_minibatch=bool(_get(batching_cfg, "keep_minibatch", False)),
        round_to=int(_get(batching_cfg, "round_to", 1)),
    )


def plan_step(batching_cfg: Any, train_cfg: Any, frame: Any, dp: int) -> StepPlan:
    """Plan one train step's micro-batches with the configured framework strategy."""
    fr = _frame(frame)
    dp = _dp(dp)
    strategy = _get(batching_cfg, "strategy", "static")
    round_to = int(_get(batching_cfg, "round_to", 1))
    cap = _get(batching_cfg, "max_tokens_per_microbatch")
    mbs = int(_get(train_cfg, "micro_batch_size", 1))
    if strategy == "static":
        return plan_static(fr, dp, mbs, round_to,
                           drop_last=bool(_get(train_cfg, "drop_last", False)))
    if strategy in ("token_budget", "balanced_first_fit") and not cap:
        raise UnusableInput(
            f"batching.max_tokens_per_microbatch is required for strategy {strategy}"
        )
    if strategy == "token_budget":
        return plan_token_budget(
            fr,
            dp,
            int(cap),
            round_to,
            flavor=str(_get(batching_cfg, "flavor", "roll")),
            mini_batch_size=_get(train_cfg, "mini_batch_size"),
        )
    if strategy == "karmarkar_karp":
        notes: dict = {}
        plan = plan_karmarkar_karp(fr, dp, _kk_cap(batching_cfg),
                                   mini_per_rank=_mini_per_rank(train_cfg, dp, notes),
                                   **_kk_options(batching_cfg))
        plan.notes.update(notes)
        return plan
    if strategy == "balanced_first_fit":
        return plan_balanced_first_fit(
            fr,
            dp,
            int(cap),
            mini_batch_size=_get(train_cfg, "mini_batch_size"),
            round_to=round_to,
            flavor=str(_get(batching_cfg, "flavor", "skyrl")),
        )
    if strategy == "prompt_unit":
        return plan_prompt_unit(
            fr,
            dp,
            mbs,
            prompts_per_mini_batch=_get(batching_cfg, "prompts_per_mini_batch"),
            samples_per_step=_get(train_cfg, "samples_per_step"),
            mini_batch_size=_get(train_cfg, "mini_batch_size"),
            pad_mode=str(_get(batching_cfg, "pad_mode", "copy")),
            max_tokens=cap,
            inner=str(_get(batching_cfg, "inner", "static")),
            round_to=round_to,
        )
    if strategy == "sequence_packing":
        if not cap:
            raise UnusableInput("batching.max_tokens_per_microbatch is required for strategy "
                                "sequence_packing")
        return plan_sequence_packing(
            fr,
            dp,
            int(cap),
            mini_batch_size=_get(train_cfg, "mini_batch_size"),
            round_to=round_to,
            algorithm=str(_get(batching_cfg, "algorithm", "modified_first_fit_decreasing")),
        )
    if strategy == "doc_target":
        dps = _get(batching_cfg, "docs_per_step")
        if not dps:
            raise UnusableInput("batching.docs_per_step is required for strategy doc_target")
        return plan_doc_target(
            fr, dp, mbs, int(dps), round_to, str(_get(batching_cfg, "loss_divisor", "step_total"))
        )
    raise UnusableInput(f"batching.strategy {strategy!r} is not one of {', '.join(STRATEGIES)}")
