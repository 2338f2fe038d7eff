"""AReaL's experiment YAML (``examples/math/gsm8k_grpo.yaml`` shape) -> an lrdoctor run config.

What AReaL 1.0.4 does with the keys (``areal/api/cli_args.py`` defaults,
``areal/trainer/rl_trainer.py``, ``areal/trainer/ppo/actor.py``,
``areal/engine/fsdp_engine.py``; the same at inclusionAI/AReaL
4aef98d8d818af55b43621aaadba047ae10f4e77):

- a global step takes ``train_dataset.batch_size`` prompts x ``gconfig.n_samples``
  samples (one trajectory per prompt); ``len(dataloader) = dataset size //
  batch_size`` steps per epoch (``drop_last`` defaults to true) for
  ``total_train_epochs``, stopped early at ``total_train_steps`` when set;
- the actor's batch is cut into ``actor.ppo_n_minibatches`` (default 4) mini-batches,
  one optimizer update each, micro-batches by ``actor.mb_spec`` (``max_tokens_per_mb``,
  ``n_mbs``, ``n_mbs_divisor``; the ``areal_ffd`` packer); dp is the ``d`` of
  ``actor.backend`` (``fsdp:d4p1t1``);
- the scheduler steps once per global step (``step_lr_scheduler`` after
  ``ppo_update``) over ``FinetuneSpec.total_train_steps = total_train_epochs x
  len(dataloader)``, warmup ``int(warmup_steps_proportion x`` that), kind
  ``optimizer.lr_scheduler_type``: ``constant`` and ``linear`` are transformers'
  (with warmup), ``cosine`` AReaL's own (``fsdp_utils.get_cosine_schedule_with_warmup``).

The dataset size is in no config file: give the prompt count with ``--set
lrdoctor.dataset_size=N`` (lrdoctor's key, not AReaL's).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.translate.common import Reader, Translation, Translator, synthetic_up_to

A = "actor"


def looks_like(data: Any) -> bool:
    actor = data.get("actor") if isinstance(data, dict) else None
    return isinstance(actor, dict) and isinstance(data.get("gconfig"), dict) \
        and ("mb_spec" in actor or "backend" in actor)


def translate(data: dict, base: Path | None = None) -> Translation:
    r = Reader(data)
    bs = r.count("train_dataset.batch_size", 1)
    n = r.count("gconfig.n_samples", 1)
    epochs = r.count("total_train_epochs", 1)
    size = r.count("lrdoctor.dataset_size")
    if size is None:
        raise UnusableInput("AReaL sizes the run and its schedule from the dataset: "
                            "total_train_epochs x (prompts // train_dataset.batch_size) steps; "
                            "no config key holds the prompt count: give it with "
                            "--set lrdoctor.dataset_size=N")
    per_epoch = size // bs  # drop_last (AReaL's default for the training set)
    if per_epoch < 1:
        raise UnusableInput(f"lrdoctor.dataset_size {size} < train_dataset.batch_size {bs}: "
                            "not one step")
    r.unmodelled_if("train_dataset.drop_last", lambda v: str(v).lower() == "false",
                    "the last short batch is kept; the replay drops it")
    horizon = epochs * per_epoch
    steps = horizon
    cap_steps = r.get("total_train_steps", None, int)
    if cap_steps is not None and cap_steps < steps:
        steps = cap_steps  # the loop stops; the schedule keeps its horizon
    backend = r.get(f"{A}.backend", None, str) or ""
    m = re.search(r"d(\d+)", backend.partition(":")[2] or backend)
    if not m:
        raise UnusableInput(f"{A}.backend {backend!r}: the replay needs the data-parallel size "
                            "(the 'd' of e.g. fsdp:d4p1t1)")
    dp = int(m.group(1))
    pp_m = re.search(r"p(\d+)", backend.partition(":")[2])
    divisor = r.get(f"{A}.mb_spec.n_mbs_divisor", 1, int)
    if backend.startswith("megatron") and pp_m:
        divisor = int(pp_m.group(1))  # MegatronEngine sets n_mbs_divisor=pp_size
    minis = r.count(f"{A}.ppo_n_minibatches", 4)
    batching: dict[str, Any] = {"strategy": "areal_ffd", "minibatches": minis,
                                "num_micro_batches": r.get(f"{A}.mb_spec.n_mbs", 1, int) or 1,
                                "n_mbs_divisor": max(1, divisor), "group_size": n}
    cap = r.get(f"{A}.mb_spec.max_tokens_per_mb", None, int)
    if cap:
        batching["max_tokens_per_microbatch"] = cap
    r.unmodelled_if(f"{A}.mb_spec.granularity", lambda v: int(v) != 1,
                    "sequences grouped before packing; the replay packs them one by one")
    r.unmodelled_if(f"{A}.mb_spec.packing_algorithm", lambda v: v != "ffd",
                    "Karmarkar-Karp micro-batches; the replay uses ffd_allocate")
    r.unmodelled_if("dynamic_bs", lambda v: str(v).lower() == "true",
                    "rejected samples make the step's batch vary; replayed as fixed")
    opt = f"{A}.optimizer"
    lr = r.get(f"{opt}.lr", 1e-3, float)
    kind = r.get(f"{opt}.lr_scheduler_type", "constant", str)
    warm = int(r.get(f"{opt}.warmup_steps_proportion", 0.001, float) * horizon)
    schedule: dict[str, Any]
    if kind == "constant":
        schedule = {"family": "hf", "kind": "constant_with_warmup", "max_lr": lr,
                    "warmup": warm, "horizon": float(horizon)}
    elif kind == "linear":
        schedule = {"family": "hf", "kind": "linear", "max_lr": lr, "warmup": warm,
                    "horizon": float(horizon)}
    elif kind == "cosine":
        ratio = r.get(f"{opt}.min_lr_ratio", 0.0, float)
        schedule = {"family": "hf", "kind": "cosine_with_min_lr", "max_lr": lr, "warmup": warm,
                    "horizon": float(horizon), "params": {"min_lr_rate": ratio}}
        if ratio > 0 and warm > 0:
            r.unmodelled.append({"key": f"{opt}.min_lr_ratio", "value": ratio, "why":
                                 "AReaL's cosine warms up from min_lr_ratio, the model from 0 "
                                 "(the decay is the same)"})
    else:
        raise UnusableInput(f"{opt}.lr_scheduler_type {kind!r}: AReaL knows constant, linear "
                            "and cosine")
    max_len = (r.get("gconfig.max_new_tokens", None, int) or 0) + (
        r.get("train_dataset.max_length", None, int) or 0)
    config: dict[str, Any] = {
        "framework": "areal",
        "schedule": schedule,
        "budget": {"formula": "nominal"},
        "train": {"steps": steps, "samples_per_step": bs * n,
                  "mini_batch_size": -(-bs * n // minis), "gradient_accumulation": 1},
        "dp": {"size": dp},
        "batching": batching,
        "accumulation": {"rule": "correct", "flush_at_step_end": True},
        "scheduler": {"step_on": "rollout_step", "increment": 1},
    }
    synthetic = synthetic_up_to(max_len or None)
    if synthetic:
        config["data"] = {"synthetic": synthetic}
    return r.done("areal", config)


TRANSLATOR = Translator("areal", "AReaL (experiment YAML)", "yaml", looks_like, translate)
