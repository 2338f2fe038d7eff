"""SkyRL's trainer config (``skyrl/train/config``, ``trainer:``/``generator:``) -> lrdoctor.

What SkyRL does with the keys (read in SkyRL main, ``config.py``, ``trainer.py``,
``distributed/dispatch.py``):

- a train step takes ``trainer.train_batch_size`` prompts x
  ``generator.n_samples_per_prompt`` samples; ``policy_mini_batch_size`` is in
  prompts (global), one optimizer update per mini-batch,
  ``update_epochs_per_batch`` passes;
- ``micro_train_batch_size_per_gpu`` rows per micro-batch, or, with
  ``max_tokens_per_microbatch > 0``, SkyRL's balanced first-fit token packing
  (a soft cap); ``use_sample_packing`` is the old name of
  ``remove_microbatch_padding`` (packing without padding);
- ``generator.step_wise_trajectories``: every turn is a sequence; mini-batches
  end on prompt boundaries (strategy ``prompt_unit``);
- the scheduler (HF ``get_scheduler(policy.optimizer_config.scheduler)``)
  steps per update over ``total_training_steps x train_batch_size //
  policy_mini_batch_size x update_epochs_per_batch``;
- dp = ``policy_num_nodes x policy_num_gpus_per_node`` / (sequence parallel,
  or tp x pp x cp for megatron).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.translate.common import (
    Reader,
    Translation,
    Translator,
    synthetic_up_to,
    truthy,
)
from lrdoctor.replay.translate.rl_config import rl_config

T = "trainer"


def looks_like(data: Any) -> bool:
    if not isinstance(data, dict) or not isinstance(data.get("trainer"), dict):
        return False
    tr = data["trainer"]
    return "policy_mini_batch_size" in tr or "micro_train_batch_size_per_gpu" in tr or (
        isinstance(data.get("generator"), dict) and "n_samples_per_prompt" in data["generator"])


def translate(data: dict, base: Path | None = None) -> Translation:
    r = Reader(data)
    n = r.count("generator.n_samples_per_prompt", 5)
    tbs = r.count(f"{T}.train_batch_size", 1024)
    pmini = r.count(f"{T}.policy_mini_batch_size", 256)
    epochs = r.count(f"{T}.update_epochs_per_batch", 1)
    steps = r.get(f"{T}.max_training_steps", kind=int)
    if not steps or steps < 1:
        raise UnusableInput(
            f"{T}.max_training_steps is not set: SkyRL runs len(dataloader) x {T}.epochs steps, "
            "which a config alone does not hold; set it to the run's steps")
    r.count(f"{T}.epochs", 1)
    strategy = r.get(f"{T}.strategy", "fsdp", str)
    nodes = r.count(f"{T}.placement.policy_num_nodes", 1)
    gpus = r.count(f"{T}.placement.policy_num_gpus_per_node", 1)
    model_par = 1
    if strategy == "megatron":
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                    "context_parallel_size"):
            model_par *= r.count(f"{T}.policy.megatron_config.{key}", 1)
    else:
        model_par = r.count(f"{T}.policy.sequence_parallel_size", 1)
    world = nodes * gpus
    if world % model_par:
        raise UnusableInput(f"policy_num_nodes x policy_num_gpus_per_node = {world} is not "
                            f"divisible by the model-parallel size {model_par}")
    dp = max(1, world // model_par)
    micro = r.count(f"{T}.micro_train_batch_size_per_gpu", 1)
    cap = r.get(f"{T}.max_tokens_per_microbatch", -1, int)
    packing = r.get(f"{T}.remove_microbatch_padding", None, bool)
    if packing is None:
        packing = r.get(f"{T}.use_sample_packing", True, bool)
    stepwise = r.get("generator.step_wise_trajectories", False, bool)
    mini = pmini * n
    batching: dict[str, Any]
    if stepwise:
        batching = {"strategy": "prompt_unit", "prompts_per_mini_batch": pmini,
                    "pad_mode": "copy"}
        if cap and cap > 0:
            batching.update(inner="balanced_first_fit", max_tokens_per_microbatch=cap)
    elif cap and cap > 0:
        batching = {"strategy": "balanced_first_fit", "max_tokens_per_microbatch": cap}
    else:
        batching = {"strategy": "static"}
    batching["packed"] = bool(packing)

    opt = f"{T}.policy.optimizer_config"
    lr = r.get(f"{opt}.lr", 1e-6, float)
    warm = r.get(f"{opt}.num_warmup_steps", 0, int)
    kind = r.get(f"{opt}.scheduler", "constant_with_warmup", str)
    updates_per_step = tbs // pmini * epochs
    schedule = {"family": "hf", "kind": kind, "max_lr": lr, "warmup": warm,
                "horizon": float(steps * updates_per_step)}

    r.unmodelled_if("trainer.algorithm.dynamic_sampling.type", truthy,
                    "dynamic sampling changes the samples per step; replayed as fixed")
    r.unmodelled_if("trainer.fully_async", lambda v: isinstance(v, dict) and truthy(
        v.get("enabled", False)), "the fully-async trainer's step accounting is not modelled")
    r.unmodelled_if(f"{opt}.scheduler_kwargs", truthy,
                    "scheduler kwargs are not translated")
    max_len = r.get(f"{T}.max_prompt_length", 512, int) + r.get(
        "generator.sampling_params.max_generate_length", 1024, int)
    synth = synthetic_up_to(max_len)
    if synth and stepwise:
        # Step-wise: every turn is a sequence; without a log each of the n samples of a
        # prompt is one turn, and the prompt ids come from n (synthetic ``group:n``).
        synth += f";group:{n}"
    return r.done("skyrl", rl_config(
        r.get("framework", "skyrl", str), schedule, dp=dp, batching=batching, step_on="update",
        train={"steps": steps, "samples_per_step": tbs * n, "epochs_per_step": epochs,
               "micro_batch_size": micro, "mini_batch_size": mini,
               "gradient_accumulation": max(1, mini // dp // micro)},
        synthetic=synth))


TRANSLATOR = Translator("skyrl", "SkyRL (skyrl-train config)", "yaml", looks_like, translate)
