"""verl's Hydra PPO/GRPO config (``ppo_trainer.yaml`` shape) -> an lrdoctor run config.

What verl does with the keys (read in verl 0.9.1, ``ray_trainer.py``,
``workers/config/actor.py``, ``workers/engine/fsdp/transformer_impl.py``):

- a train step takes ``data.train_batch_size`` prompts x ``rollout.n`` samples;
  ``ppo_mini_batch_size`` is in prompts and becomes ``x rollout.n`` samples
  (global), ``ppo_micro_batch_size_per_gpu`` samples per rank; one optimizer
  update per mini-batch, ``ppo_epochs`` passes per step;
- ``use_dynamic_bsz``: micro-batches by Karmarkar-Karp with
  ``ppo_max_token_len_per_gpu x ulysses_sequence_parallel_size`` tokens (the
  release decides the count rule, see ``framework``);
- the LR scheduler steps once per train step (after ``update_policy``) over
  ``trainer.total_training_steps``; warmup ``lr_warmup_steps`` or
  ``int(lr_warmup_steps_ratio x total)``; FSDP: ``constant`` or ``cosine``
  (``min_lr_ratio``, ``num_cycles``); Megatron: megatron-core's scheduler with
  ``lr_decay_style``, ``lr_decay_steps``, ``min_lr``, ``lr_warmup_init``;
- dp = ``nnodes x n_gpus_per_node`` / (ulysses x, for megatron, tp x pp x cp).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.translate.common import (
    Reader,
    Translation,
    Translator,
    positive,
    synthetic_up_to,
    truthy,
)
from lrdoctor.replay.translate.rl_config import rl_config

A = "actor_rollout_ref.actor"


def looks_like(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("actor_rollout_ref"), dict) \
        and isinstance(data.get("data"), dict)


def _fsdp_schedule(r: Reader, optim: str, lr: float, horizon: int) -> dict[str, Any]:
    """FSDP (``workers/engine/fsdp``): HF-style constant or cosine with warmup."""
    warm = r.get(f"{optim}.lr_warmup_steps", -1, int)
    if warm <= 0:
        warm = int(r.get(f"{optim}.lr_warmup_steps_ratio", 0.0, float) * horizon)
    kind = r.get(f"{optim}.lr_scheduler_type", None, str) or r.get(
        f"{optim}.warmup_style", "constant", str)
    if kind == "constant":
        return {"family": "hf", "kind": "constant_with_warmup", "max_lr": lr,
                "warmup": warm, "horizon": float(horizon)}
    if kind == "cosine":
        return {"family": "hf", "kind": "cosine_with_min_lr", "max_lr": lr,
                "warmup": warm, "horizon": float(horizon),
                "params": {"min_lr_rate": r.get(f"{optim}.min_lr_ratio", 0.0, float),
                           "num_cycles": r.get(f"{optim}.num_cycles", 0.5, float)}}
    raise UnusableInput(f"{optim}.lr_scheduler_type {kind!r}: verl supports constant and cosine")


_MEGATRON_STYLES = ("constant", "linear", "cosine", "inverse-square-root", "WSD")


def _megatron_schedule(r: Reader, optim: str, lr: float, horizon: int) -> dict[str, Any]:
    """Megatron (``utils/megatron/optimizer.get_megatron_optimizer_param_scheduler``):
    megatron-core's OptimizerParamScheduler over ``lr_decay_steps`` (default the
    total training steps), warmup ``lr_warmup_steps`` or ``int(ratio x decay
    steps)``, stepped by 1 per train step (``lr_scheduler_step``)."""
    decay = r.get(f"{optim}.lr_decay_steps", None, int) or horizon
    warm = r.get(f"{optim}.lr_warmup_steps", -1, int)
    if warm is None or warm <= 0:
        warm = int(r.get(f"{optim}.lr_warmup_steps_ratio", 0.0, float) * decay)
    style = r.get(f"{optim}.lr_decay_style", "constant", str)
    if style not in _MEGATRON_STYLES:
        raise UnusableInput(f"{optim}.lr_decay_style {style!r}: megatron-core knows "
                            f"{', '.join(_MEGATRON_STYLES)}")
    params: dict[str, Any] = {}
    if style == "WSD":
        params = {"wsd_decay_steps": r.get(f"{optim}.lr_wsd_decay_steps", None, int),
                  "lr_wsd_decay_style": r.get(f"{optim}.lr_wsd_decay_style", "exponential",
                                              str)}
    return {"family": "megatron", "kind": style, "max_lr": lr,
            "min_lr": r.get(f"{optim}.min_lr", 0.0, float),
            "init_lr": r.get(f"{optim}.lr_warmup_init", 0.0, float),
            "warmup": warm, "horizon": float(decay), "params": params}


def translate(data: dict, base: Path | None = None) -> Translation:
    r = Reader(data)
    n = r.count("actor_rollout_ref.rollout.n", 1)
    tbs = r.need("data.train_batch_size", "the replay needs the prompts per step")
    sps = tbs * n
    steps = r.get("trainer.total_training_steps", kind=int)
    if not steps or steps < 1:
        raise UnusableInput(
            "trainer.total_training_steps is not set: verl derives it from the dataset length "
            "x trainer.total_epochs, which a config alone does not hold; set it to the run's steps")
    r.count("trainer.total_epochs", 1)  # shown: the steps above override it
    nnodes = r.count("trainer.nnodes", 1)
    gpus = r.count("trainer.n_gpus_per_node", 8)
    strategy = r.get(f"{A}.strategy", "fsdp", str)
    ulysses = r.count(f"{A}.ulysses_sequence_parallel_size", 1)
    model_par = ulysses
    if strategy == "megatron":
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                    "context_parallel_size"):
            model_par *= r.count(f"{A}.megatron.{key}", 1)
    world = nnodes * gpus
    if world % model_par:
        raise UnusableInput(f"trainer.nnodes x n_gpus_per_node = {world} is not divisible by the "
                            f"model-parallel size {model_par}")
    dp = max(1, world // model_par)
    mini = r.count(f"{A}.ppo_mini_batch_size", 256) * n
    micro = r.count(f"{A}.ppo_micro_batch_size_per_gpu")
    if micro is None and r.has(f"{A}.ppo_micro_batch_size"):
        micro = max(1, r.need(f"{A}.ppo_micro_batch_size", "checked above") // dp)
    dynamic = r.get(f"{A}.use_dynamic_bsz", False, bool)
    if micro is None and not dynamic:
        raise UnusableInput(f"{A}.ppo_micro_batch_size_per_gpu is missing and use_dynamic_bsz is "
                            "false: verl needs one of them")
    micro = micro or 1
    epochs = r.count(f"{A}.ppo_epochs", 1)
    per_rank_mini = max(1, mini // dp)
    batching: dict[str, Any] = {"strategy": "static"}
    if dynamic:
        cap = r.count(f"{A}.ppo_max_token_len_per_gpu", 16384) * ulysses
        batching = {"strategy": "karmarkar_karp", "max_tokens_per_microbatch": cap,
                    "balance_dp": r.get("trainer.balance_batch", True, bool)}
    else:
        r.get("trainer.balance_batch", True, bool)

    optim = f"{A}.optim"
    lr = r.get(f"{optim}.lr", 1e-6, float)
    total = r.get(f"{optim}.total_training_steps", -1, int)
    horizon = total if total and total > 0 else steps
    if strategy == "megatron":
        schedule = _megatron_schedule(r, optim, lr, horizon)
    else:
        schedule = _fsdp_schedule(r, optim, lr, horizon)

    # Keys that change the step accounting and are not modelled: said, not dropped.
    r.unmodelled_if("data.gen_batch_size", lambda v: int(v) != tbs,
                    "a generation batch other than train_batch_size (DAPO dynamic sampling) "
                    "makes the samples per step vary; replayed with train_batch_size x n")
    r.unmodelled_if("algorithm.filter_groups.enable", truthy,
                    "filtered groups make the samples per step vary; replayed as fixed")
    r.unmodelled_if("trainer.critic_warmup", positive,
                    "the actor (and its LR scheduler) does not update during critic warmup steps; "
                    "replayed as updating from step 0")
    r.unmodelled_if(f"{A}.shuffle", truthy,
                    "mini-batches are drawn from a shuffled step: counts are replayed, "
                    "which rows share a micro-batch is not")
    r.unmodelled_if(f"{optim}.zero_indexed_step", lambda v: not truthy(v),
                    "one-indexed steps shift the cosine by one step")
    max_len = r.get("data.max_prompt_length", 0, int) + r.get("data.max_response_length", 0, int)
    return r.done("verl", rl_config(
        r.get("framework", "verl", str), schedule, dp=dp, batching=batching,
        step_on="rollout_step",
        train={"steps": steps, "samples_per_step": sps, "epochs_per_step": epochs,
               "micro_batch_size": micro, "mini_batch_size": mini,
               "gradient_accumulation": max(1, per_rank_mini // micro)},
        synthetic=synthetic_up_to(max_len)))


TRANSLATOR = Translator("verl", "verl (Hydra ppo_trainer.yaml)", "yaml", looks_like, translate)
