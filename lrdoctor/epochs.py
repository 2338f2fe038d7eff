"""Epoch-end arithmetic: how many optimizer updates an epoch-based loop really takes.

A loop sized in epochs computes its horizon from ``len(dataloader)`` and the
accumulation ``GA``: ``epochs * floor(L / GA)`` or ``epochs * ceil(L / GA)``.
What it really takes depends on what it does with the short window at the end
of each epoch (transformers issues 37777, 31677; Lightning 19684; OpenRLHF PR
1351, 21 scheduled vs 23 real updates):

- ``flush``: it steps the short last window of every epoch (HF Trainer,
  accelerate's ``sync_gradients`` at the end of the dataloader):
  ``epochs * ceil(L / GA)``;
- ``drop``: the short window is never stepped (``(step + 1) % GA == 0`` with
  ``step`` reset each epoch; the leftover gradients join the next window):
  ``epochs * floor(L / GA)``;
- ``carry``: windows run across epochs (a global micro-step counter, DeepSpeed's
  engine): ``floor(epochs * L / GA)``.

``L`` itself is ``floor(N / B)`` with ``drop_last`` and ``ceil(N / B)`` without.
Pure functions; :func:`plan_from` reads the knobs out of a saved config (a
loop's ``args`` Namespace, Lightning ``hparams``, HF ``TrainingArguments``).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from lrdoctor.core.facts import EpochPlan

if TYPE_CHECKING:
    from lrdoctor.core.state import RunState

POLICIES = ("flush", "drop", "carry")


def batches_per_epoch(n: int, batch_size: int, world_size: int = 1,
                      drop_last: bool = False) -> int:
    """``len(dataloader)`` on each rank: a DistributedSampler pads to a multiple of the
    world size (without drop_last), then the loader floors or ceils by the batch."""
    per_rank = n // world_size if drop_last else math.ceil(n / world_size)
    return per_rank // batch_size if drop_last else math.ceil(per_rank / batch_size)


def updates(batches: int, epochs: int, ga: int, policy: str) -> int:
    """Optimizer updates the loop takes under a window ``policy`` (see the module doc)."""
    if policy == "flush":
        return epochs * math.ceil(batches / ga)
    if policy == "drop":
        return epochs * (batches // ga)
    if policy == "carry":
        return (epochs * batches) // ga
    raise ValueError(f"unknown window policy {policy!r} (one of {', '.join(POLICIES)})")


def updates_after(batches: int, epochs_done: float, ga: int, policy: str) -> int:
    """Updates taken after ``epochs_done`` whole epochs (the counter a checkpoint saved at
    an epoch boundary holds)."""
    e = int(epochs_done)
    return updates(batches, e, ga, policy)


def _finite_number(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return v


def plan_from(fields: dict[str, Any], source: str = "") -> EpochPlan | None:
    """An :class:`EpochPlan` from a config's fields, or None when it lacks epochs, GA or the
    epoch length (dataset length and batch size, or ``len(dataloader)``)."""
    from lrdoctor.read.evidence.vocabulary import epoch_knobs

    got: dict[str, Any] = {}
    for what, names in epoch_knobs().items():  # the names' one home: the evidence vocabulary
        for key in names:
            if key in fields and fields[key] is not None:
                got[what] = fields[key]
                break
    epochs, ga = _finite_number(got.get("epochs")), _finite_number(got.get("ga"))
    if epochs is None or ga is None or epochs <= 0 or ga < 1 or epochs != int(epochs):
        return None
    ws = _finite_number(got.get("world_size")) or 1
    drop = got.get("drop_last") if isinstance(got.get("drop_last"), bool) else None
    n, bs = _finite_number(got.get("dataset_len")), _finite_number(got.get("batch_size"))
    bpe = _finite_number(got.get("batches_per_epoch"))
    if bpe is None:
        if n is None or bs is None or n <= 0 or bs <= 0:
            return None
        bpe = batches_per_epoch(int(n), int(bs), int(ws), bool(drop))
    horizon = _finite_number(got.get("horizon"))
    window = got.get("window") if got.get("window") in POLICIES else None
    return EpochPlan(epochs=int(epochs), ga=int(ga), batches_per_epoch=int(bpe),
                     horizon=int(horizon) if horizon is not None and horizon > 0 else None,
                     dataset_len=int(n) if n is not None else None,
                     batch_size=int(bs) if bs is not None else None, world_size=int(ws),
                     drop_last=drop, window=window, source=source)


def attach(state: RunState, fields: dict[str, Any] | None, source: str) -> None:
    """Record the epoch plan of a config on ``state`` (the first config that has one)."""
    if not isinstance(fields, dict) or state.facts.epoch_plan is not None:
        return
    plan = plan_from(fields, source)
    if plan is not None:
        state.facts.epoch_plan = plan


def observed_policy(plan: EpochPlan, updates_done: float, epoch: float) -> list[str]:
    """The window policies consistent with a checkpoint saved at an epoch boundary that
    holds ``updates_done`` with an epoch counter ``epoch``: loops save either the epochs
    done or the index of the epoch just finished, so both readings are tried."""
    if epoch != int(epoch):
        return []
    done = [e for e in (int(epoch), int(epoch) + 1) if 1 <= e <= plan.epochs]
    return [p for p in POLICIES
            if any(updates_after(plan.batches_per_epoch, e, plan.ga, p) == updates_done
                   for e in done)]


#: What each window policy does, in words.
POLICY_TEXT = {
    "flush": "steps the short last window of each epoch",
    "drop": "never steps a short window",
    "carry": "carries windows across epochs",
}
