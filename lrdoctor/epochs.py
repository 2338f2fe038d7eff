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
from dataclasses import asdict, dataclass
from typing import Any

POLICIES = ("flush", "drop", "carry")

_KEYS: dict[str, tuple[str, ...]] = {
    "dataset_len": ("num_train_samples", "train_dataset_size", "dataset_size", "dataset_len",
                    "len_train_dataset", "num_train_examples", "num_examples", "train_size",
                    "n_train_samples"),
    "batches_per_epoch": ("len_dataloader", "len_train_dataloader", "num_batches_per_epoch",
                          "batches_per_epoch"),
    "epochs": ("num_train_epochs", "epochs", "num_epochs", "max_epochs", "total_epochs"),
    "batch_size": ("per_device_train_batch_size", "train_micro_batch_size_per_gpu",
                   "micro_batch_size", "batch_size"),
    "ga": ("gradient_accumulation_steps", "accumulate_grad_batches", "grad_accum",
           "gradient_accumulation"),
    "world_size": ("world_size", "num_processes", "data_parallel_size", "dp_size"),
    "drop_last": ("dataloader_drop_last", "drop_last"),
    "horizon": ("max_train_steps", "num_training_steps", "total_training_steps",
                "total_steps", "max_steps", "train_steps"),
    "window": ("accumulation_window", "window_policy"),
}


@dataclass
class EpochPlan:
    """The knobs an epoch-based loop sizes its horizon from, and where they were read."""

    epochs: int
    ga: int
    batches_per_epoch: int
    horizon: int | None = None
    dataset_len: int | None = None
    batch_size: int | None = None
    world_size: int = 1
    drop_last: bool | None = None
    window: str | None = None  # flush / drop / carry when the config says
    source: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return v


def plan_from(fields: dict[str, Any], source: str = "") -> EpochPlan | None:
    """An :class:`EpochPlan` from a config's fields, or None when it lacks epochs, GA or the
    epoch length (dataset length and batch size, or ``len(dataloader)``)."""
    got: dict[str, Any] = {}
    for what, names in _KEYS.items():
        for n in names:
            if n in fields and fields[n] is not None:
                got[what] = fields[n]
                break
    epochs, ga = _num(got.get("epochs")), _num(got.get("ga"))
    if epochs is None or ga is None or epochs <= 0 or ga < 1 or epochs != int(epochs):
        return None
    ws = _num(got.get("world_size")) or 1
    drop = got.get("drop_last") if isinstance(got.get("drop_last"), bool) else None
    n, bs = _num(got.get("dataset_len")), _num(got.get("batch_size"))
    bpe = _num(got.get("batches_per_epoch"))
    if bpe is None:
        if n is None or bs is None or n <= 0 or bs <= 0:
            return None
        bpe = batches_per_epoch(int(n), int(bs), int(ws), bool(drop))
    horizon = _num(got.get("horizon"))
    window = got.get("window") if got.get("window") in POLICIES else None
    return EpochPlan(epochs=int(epochs), ga=int(ga), batches_per_epoch=int(bpe),
                     horizon=int(horizon) if horizon is not None and horizon > 0 else None,
                     dataset_len=int(n) if n is not None else None,
                     batch_size=int(bs) if bs is not None else None, world_size=int(ws),
                     drop_last=drop, window=window, source=source)


def attach(state, fields: dict[str, Any] | None, source: str) -> None:
    """Record the epoch plan of a config on ``state`` (the first config that has one)."""
    if not isinstance(fields, dict) or (state.extras or {}).get("epoch_plan"):
        return
    plan = plan_from(fields, source)
    if plan is not None:
        state.extras["epoch_plan"] = plan.to_dict()


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


def findings(state) -> list:
    """LRD117 when the horizon differs from the updates the loop really takes.

    The loop's window policy comes from the config, or from the checkpoint's own counters
    when it was saved at an epoch boundary; when neither tells, and the policies disagree,
    an info finding names what each would take.
    """
    from lrdoctor.findings import Severity, finding

    raw = (state.extras or {}).get("epoch_plan")
    if not raw:
        return []
    plan = EpochPlan(**raw)
    horizon = plan.horizon
    if horizon is None and state.schedule is not None and state.schedule.horizon:
        horizon = int(state.schedule.horizon)
    if horizon is None:
        return []
    L, E, k = plan.batches_per_epoch, plan.epochs, plan.ga
    real = {p: updates(L, E, k, p) for p in POLICIES}
    ev: dict[str, Any] = {"plan": plan.to_dict(), "horizon": horizon,
                          "updates_by_policy": real,
                          "floor_per_epoch": L // k, "ceil_per_epoch": math.ceil(L / k)}
    how = f"len(dataloader) {L} per epoch x {E} epochs with gradient accumulation {k}"
    if plan.dataset_len is not None and plan.batch_size is not None:
        how = (f"{plan.dataset_len} samples / batch {plan.batch_size}"
               + (f" / world size {plan.world_size}" if plan.world_size > 1 else "")
               + f" ({'drop_last' if plan.drop_last else 'no drop_last'}) = {L} batches per "
               f"epoch x {E} epochs, gradient accumulation {k}")
    policy, why = plan.window, "the config says"
    if policy is None:
        prog = state.trainer_progress or state.nominal_progress
        ep = state.counter("loop.epoch") or state.counter("trainer.epoch") or next(
            (c for c in state.counters if c.unit.value == "epochs"), None)
        if prog is not None and ep is not None:
            fits = observed_policy(plan, prog.value, ep.value)
            if len({real[p] for p in fits}) == 1 and fits:
                policy = fits[0]
                why = (f"{prog.name} {prog.value:g} after {ep.name} {ep.value:g} whole epochs "
                       f"fits it")
    if policy is not None:
        if real[policy] == horizon:
            return []
        ev.update(policy=policy, real_updates=real[policy], difference=real[policy] - horizon)
        more = real[policy] > horizon
        tail = ("the last updates run past the horizon (a cosine rises again or the LR "
                "sits at its floor)" if more else "the schedule never finishes its decay")
        formula = next((f for f, v in (("epochs x floor(L/GA)", E * (L // k)),
                                       ("epochs x ceil(L/GA)", E * math.ceil(L / k)),
                                       ("floor(epochs x L/GA)", (E * L) // k)) if v == horizon),
                       "its own formula")
        ev["horizon_formula"] = formula
        return [finding(
            "LRD117",
            f"The horizon is {horizon} updates ({formula}) but the loop takes {real[policy]} "
            f"({policy}: {_POLICY_TEXT[policy]}; {why}): {how}. {abs(real[policy] - horizon)} "
            f"update(s) {'more' if more else 'fewer'} than scheduled: {tail}.",
            ev, location=plan.source or state.path)]
    if len(set(real.values())) == 1 or horizon in real.values() and len(
            {v for v in real.values() if v != horizon}) == 0:
        return []
    if horizon in real.values():
        others = {p: v for p, v in real.items() if v != horizon}
        return [finding(
            "LRD117",
            f"The horizon is {horizon} updates; {how}. A loop that "
            + " or ".join(f"{_POLICY_TEXT[p]} takes {v}" for p, v in others.items())
            + ": lrdoctor cannot tell from the checkpoint which this loop does (save it at an "
            "epoch end, or give the window policy).", ev, severity=Severity.INFO,
            location=plan.source or state.path)]
    ev["difference"] = {p: v - horizon for p, v in real.items()}
    return [finding(
        "LRD117",
        f"The horizon is {horizon} updates but {how} gives "
        + ", ".join(f"{v} ({p})" for p, v in real.items())
        + ": none is the horizon.", ev, location=plan.source or state.path)]


_POLICY_TEXT = {
    "flush": "steps the short last window of each epoch",
    "drop": "never steps a short window",
    "carry": "carries windows across epochs",
}
