"""Fast-LLM ``docs_per_step``: accumulate micro-batches until a global document target."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import Field

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.packing.common import Packer, PackerParams, StepPlan, _get
from lrdoctor.replay.packing.static import _static_core

if TYPE_CHECKING:
    pass


def plan_doc_target(
    fr, dp, micro_batch_size, docs_per_step, round_to=1, loss_divisor="step_total"
) -> StepPlan:
    """Fast-LLM ``docs_per_step``: accumulate until the global document count reaches the target.

    Micro-batches are taken one micro-step at a time (``micro_batch_size`` rows on
    every rank), the step's document count is summed over ranks, and the
    optimizer step closes as soon as it is >= ``docs_per_step`` (overshoot
    allowed). Every micro-batch in the window divides its loss by the window's
    global document total (``loss_divisor='micro_batch'`` reproduces a loop that
    divides by its own micro-batch's documents instead). Micro-batches left at
    the end of the train step close a short window (reported in notes).
    """
    import numpy as np
    notes: dict = {}
    tokens = fr["tokens"]
    docs = fr["docs"].astype(np.int64) if "docs" in fr else np.ones(len(tokens), np.int64)
    target = int(docs_per_step)
    if target <= 0:
        raise UnusableInput("batching.docs_per_step must be a positive integer")
    # Global documents per micro-step (summed over ranks) come with the static plan.
    mbs, mb_docs = _static_core(fr, dp, micro_batch_size, round_to, notes, extra=docs)
    bounds: list[int] = []
    divisors: list[float] = []
    acc = 0
    start = 0
    overshoot = []
    for i, d in enumerate(mb_docs):
        acc += d
        if acc >= target:
            bounds.append(i)
            divisors.extend([float(acc)] * (i - start + 1))
            if acc > target:
                overshoot.append(acc - target)
            acc = 0
            start = i + 1
    if start < len(mbs):
        bounds.append(len(mbs) - 1)
        divisors.extend([float(acc)] * (len(mbs) - start))
        notes["partial_tail"] = {"docs": acc, "target": target, "micro_batches": len(mbs) - start}
    if overshoot:
        notes["overshoot"] = {
            "windows": len(overshoot),
            "max": max(overshoot),
            "total": sum(overshoot),
        }
    if loss_divisor == "micro_batch":
        divisors = [float(max(d, 1)) for d in mb_docs]
    notes["docs_per_step"] = target
    notes["micro_batch_docs"] = mb_docs
    return StepPlan(mbs, bounds, divisors, notes)


class DocTargetParams(PackerParams):
    docs_per_step: int = Field(..., ge=1)
    round_to: int = Field(1, ge=1)
    loss_divisor: Literal["step_total", "micro_batch"] = "step_total"


def _plan(p: DocTargetParams, train, fr, dp) -> StepPlan:
    return plan_doc_target(fr, dp, int(_get(train, "micro_batch_size", 1)), p.docs_per_step,
                           p.round_to, p.loss_divisor)


PACKER = Packer("doc_target", "Fast-LLM `docs_per_step`: accumulate to a global document "
                "target", DocTargetParams, _plan, packed=True)
