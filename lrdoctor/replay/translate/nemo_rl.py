"""NeMo-RL's GRPO YAML (``examples/configs/grpo_math_1B.yaml`` shape) -> lrdoctor.

What NeMo-RL does with the keys (``algorithms/grpo.py``,
``distributed/batched_data_dict.py``, ``models/policy``):

- a train step takes ``grpo.num_prompts_per_step x num_generations_per_prompt``
  samples; they are cut into global batches of ``policy.train_global_batch_size``
  rows, one optimizer update each;
- micro-batches: ``policy.train_micro_batch_size`` rows, or
  ``policy.dynamic_batching`` (sorted, dealt, greedy token budget per global
  batch: strategy ``token_budget`` flavor ``nemo_rl``) or
  ``policy.sequence_packing`` (bins of ``train_mb_tokens`` per global batch:
  strategy ``sequence_packing``), lengths rounded to ``sequence_length_round``
  (dynamic batching) or ``make_sequence_length_divisible_by`` (sequence packing,
  ``lm_policy.py``'s ``sequence_length_pad_multiple``);
- the scheduler steps once per ``train()`` call, i.e. once per GRPO step, in
  the DTensor v2 and Megatron workers, not per global batch (NeMo-RL main
  7ea279a, 2026-08: ``workers/dtensor_policy_worker_v2.py`` "increment scheduler
  after all batches in rollout are processed"; ``workers/megatron_policy_worker.py``
  ``scheduler.step(increment=gbs)``, "one tick == one train() call"): the DTensor path's
  list of torch schedulers with ``milestones`` (``SequentialLR``), or
  ``megatron_cfg.scheduler``;
- dp = ``cluster.num_nodes x gpus_per_node`` / (tp x cp, x pp for megatron).
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

P = "policy"
MAX_REPLAY_STEPS = 2000


def looks_like(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("grpo"), dict) \
        and isinstance(data.get("policy"), dict)


_TORCH_KWARGS = {
    "LinearLR": ("start_factor", "end_factor", "total_iters"),
    "ConstantLR": ("factor", "total_iters"),
    "CosineAnnealingLR": ("T_max", "eta_min"),
}


def _torch_schedule(r: Reader, lr: float) -> dict[str, Any]:
    items = r.get(f"{P}.scheduler")
    if not items:
        return {"family": "torch", "kind": "ConstantLR", "max_lr": lr,
                "params": {"factor": 1.0, "total_iters": 0}}
    if not isinstance(items, list):
        raise UnusableInput(f"{P}.scheduler must be a list of torch schedulers")
    children, kinds, milestones = [], [], []
    for it in items:
        if not isinstance(it, dict):
            raise UnusableInput(f"{P}.scheduler: {it!r} is not a mapping")
        if "milestones" in it:
            ms = it["milestones"]
            if not isinstance(ms, list) or not all(type(x) is int and x >= 0 for x in ms):
                raise UnusableInput(f"{P}.scheduler milestones {ms!r}: expected a list of "
                                    "step counts (whole numbers >= 0)")
            milestones = ms
            continue
        kind = str(it.get("name", "")).rsplit(".", 1)[-1]
        if kind not in _TORCH_KWARGS:
            raise UnusableInput(f"{P}.scheduler name {it.get('name')!r}: lrdoctor reads "
                                f"{', '.join(_TORCH_KWARGS)}")
        kw = it.get("kwargs") or {}
        if not isinstance(kw, dict) or not all(isinstance(k, str) for k in kw):
            raise UnusableInput(f"{P}.scheduler {kind} kwargs {kw!r}: expected a mapping")
        kw = dict(kw)
        kinds.append(kind)
        children.append({"kind": kind, **kw, "base_lrs": [lr], "last_epoch": 0})
    if len(children) == 1:
        child = children[0]
        return {"family": "torch", "kind": child["kind"], "max_lr": lr,
                "params": {k: v for k, v in child.items() if k != "kind"}}
    return {"family": "torch", "kind": "SequentialLR", "max_lr": lr,
            "params": {"_milestones": milestones, "_schedulers": children,
                       "_scheduler_kinds": kinds, "last_epoch": 0}}


def translate(data: dict, base: Path | None = None) -> Translation:
    r = Reader(data)
    prompts = r.need("grpo.num_prompts_per_step", "the replay needs the prompts per step")
    gens = r.count("grpo.num_generations_per_prompt", 1)
    sps = prompts * gens
    steps = r.need("grpo.max_num_steps", "the replay needs the number of steps")
    r.count("grpo.max_num_epochs", 1)
    if steps > MAX_REPLAY_STEPS:
        r.unmodelled.append({
            "key": "grpo.max_num_steps", "value": steps,
            "why": f"the run ends at the dataset's end (grpo.max_num_epochs) before "
                   f"{steps} steps, which a config alone does not tell; replayed "
                   f"{MAX_REPLAY_STEPS} steps"})
        steps = MAX_REPLAY_STEPS
    gbs = r.count(f"{P}.train_global_batch_size", sps)
    micro = r.count(f"{P}.train_micro_batch_size", 1)
    nodes = r.count("cluster.num_nodes", 1)
    gpus = r.count("cluster.gpus_per_node", 8)
    megatron = r.get(f"{P}.megatron_cfg.enabled", False, bool)
    if megatron:
        model_par = 1
        for key in ("tensor_model_parallel_size", "pipeline_model_parallel_size",
                    "context_parallel_size"):
            model_par *= r.count(f"{P}.megatron_cfg.{key}", 1)
    else:
        model_par = r.count(f"{P}.dtensor_cfg.tensor_parallel_size", 1) * r.count(
            f"{P}.dtensor_cfg.context_parallel_size", 1)
    world = nodes * gpus
    if world % model_par:
        raise UnusableInput(f"cluster.num_nodes x gpus_per_node = {world} is not divisible by "
                            f"the model-parallel size {model_par}")
    dp = max(1, world // model_par)
    batching: dict[str, Any] = {"strategy": "static"}
    if r.get(f"{P}.dynamic_batching.enabled", False, bool):
        batching = {"strategy": "token_budget", "flavor": "nemo_rl",
                    "max_tokens_per_microbatch": r.need(
                        f"{P}.dynamic_batching.train_mb_tokens", "dynamic batching needs it"),
                    "round_to": r.count(f"{P}.dynamic_batching.sequence_length_round", 64)}
    elif r.get(f"{P}.sequence_packing.enabled", False, bool):
        # lm_policy.py: sequence_length_pad_multiple = make_sequence_length_divisible_by
        # (sequence_packing.sequence_length_round is not what the packer rounds to);
        # grpo_math_1B.yaml sets it to ${policy.dtensor_cfg.tensor_parallel_size}.
        tp = r.get(f"{P}.dtensor_cfg.tensor_parallel_size", 1, int)
        batching = {"strategy": "sequence_packing",
                    "max_tokens_per_microbatch": r.need(
                        f"{P}.sequence_packing.train_mb_tokens", "sequence packing needs it"),
                    "round_to": r.count(f"{P}.make_sequence_length_divisible_by", tp),
                    "algorithm": r.get(f"{P}.sequence_packing.algorithm",
                                       "modified_first_fit_decreasing", str).lower()}
        order = r.get(f"{P}.sequence_packing.microbatch_order", "packer", str)
        if order not in ("packer", "None"):
            r.unmodelled.append({"key": f"{P}.sequence_packing.microbatch_order", "value": order,
                                 "why": "reorders micro-batches inside a rank; counts unchanged"})

    if megatron:
        o = f"{P}.megatron_cfg"
        lr = r.get(f"{o}.optimizer.lr", 5e-6, float)
        schedule = {"family": "megatron",
                    "kind": r.get(f"{o}.scheduler.lr_decay_style", "constant", str),
                    "max_lr": lr, "min_lr": r.get(f"{o}.optimizer.min_lr", 0.0, float),
                    "init_lr": r.get(f"{o}.scheduler.lr_warmup_init", 0.0, float),
                    "warmup": r.get(f"{o}.scheduler.lr_warmup_iters", 0, int),
                    "horizon": float(r.get(f"{o}.scheduler.lr_decay_iters", steps, int))}
    else:
        lr = r.get(f"{P}.optimizer.kwargs.lr", 5e-6, float)
        schedule = _torch_schedule(r, lr)
    r.unmodelled_if("grpo.async_grpo.enabled", truthy,
                    "async GRPO trains on off-policy batches; replayed as synchronous")
    r.unmodelled_if("grpo.use_dynamic_sampling", truthy,
                    "dynamic sampling makes the samples per step vary; replayed as fixed")
    # The DTensor v2 and Megatron workers step the scheduler once per train() call,
    # that is once per GRPO step, however many global batches the step holds.
    return r.done("nemo_rl", rl_config(
        "nemo_rl", schedule, dp=dp, batching=batching, step_on="rollout_step",
        train={"steps": steps, "samples_per_step": sps, "micro_batch_size": micro,
               "mini_batch_size": gbs, "gradient_accumulation": max(1, gbs // dp // micro)},
        synthetic=synthetic_up_to(r.get(f"{P}.max_total_sequence_length", kind=int))))


TRANSLATOR = Translator("nemo_rl", "NeMo-RL (GRPO YAML)", "yaml", looks_like, translate)
