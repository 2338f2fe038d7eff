"""slime's command line (``python3 train.py --rollout-batch-size ...``) -> an lrdoctor run config.

What slime does with the arguments (THUDM/slime at
624b824a898ab0ec1fcb4d373004c7f3852bf515; Megatron-LM's argument defaults where slime
keeps them):

- a rollout takes ``--rollout-batch-size`` prompts x ``--n-samples-per-prompt``
  samples; ``--num-rollout`` rollouts (``--num-epoch`` needs the dataset size,
  which no argument holds);
- a training step is ``--global-batch-size`` samples (or ``rollout-batch-size x n //
  --num-steps-per-rollout``, ``slime/utils/arguments.py``); a rollout runs
  ``samples // global_batch_size`` of them, one optimizer update each
  (``slime/backends/megatron_utils/model.py`` ``train_one_step``);
- micro-batches by ``build_dp_schedule`` (the ``slime_dp_schedule`` packer):
  first-fit of ``--max-tokens-per-gpu x --context-parallel-size`` tokens with
  ``--use-dynamic-batch-size``, else ``--micro-batch-size``; ``--balance-data``
  spreads them over ranks by Karmarkar-Karp;
- dp = ``--actor-num-nodes x --actor-num-gpus-per-node`` / (tp x pp x cp);
- the scheduler is megatron-core's ``OptimizerParamScheduler`` in samples
  (``get_optimizer_param_scheduler``): decay over ``lr_decay_iters x
  global_batch_size`` (``lr_decay_iters`` defaults to ``train_iters = num_rollout x
  rollout_batch_size x n // global_batch_size``), warmup ``--lr-warmup-iters x
  global_batch_size`` or ``--lr-warmup-fraction x`` the decay, stepped by the step's
  sample count after each successful update (``opt_param_scheduler.step(increment=
  step_global_batch_size)``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.translate.common import Reader, Translation, Translator, synthetic_up_to
from lrdoctor.replay.translate.openrlhf import _tree, parse_args

MARKERS = ("--rollout-batch-size", "--num-rollout", "--n-samples-per-prompt")
_STYLES = ("constant", "linear", "cosine", "inverse-square-root", "WSD")


def looks_like(text: str) -> bool:
    return "--rollout-batch-size" in text and ("--num-rollout" in text or "--num-epoch" in text)


def translate(text: str, base: Path | None = None) -> Translation:
    flat = parse_args(text, base)
    r = Reader(_tree(flat), resolve_refs=False)
    rbs = r.count("rollout-batch-size")
    if rbs is None:
        raise UnusableInput("--rollout-batch-size is missing: slime needs the prompts per rollout")
    n = r.count("n-samples-per-prompt", 1)
    sps = rbs * n
    per_rollout = r.count("num-steps-per-rollout")
    gbs = r.count("global-batch-size")
    if per_rollout is not None:
        derived = sps // per_rollout
        if gbs is not None and gbs != derived:
            raise UnusableInput(f"--global-batch-size {gbs} is not --rollout-batch-size {rbs} x "
                                f"--n-samples-per-prompt {n} // --num-steps-per-rollout "
                                f"{per_rollout} = {derived}: slime asserts they agree")
        gbs = derived
    if not gbs:
        raise UnusableInput("--global-batch-size (or --num-steps-per-rollout) is missing: "
                            "slime needs the samples per training step")
    rollouts = r.count("num-rollout")
    if rollouts is None:
        raise UnusableInput("--num-rollout is not set: with --num-epoch slime derives it from "
                            "the dataset size, which no argument holds; pass --num-rollout N")
    if sps // gbs < 1:
        raise UnusableInput(f"a rollout of {sps} samples holds no training step of "
                            f"--global-batch-size {gbs}")
    tp = r.count("tensor-model-parallel-size", 1)
    pp = r.count("pipeline-model-parallel-size", 1)
    cp = r.count("context-parallel-size", 1)
    world = r.count("actor-num-nodes", 1) * r.count("actor-num-gpus-per-node", 8)
    if world % (tp * pp * cp):
        raise UnusableInput(f"--actor-num-nodes x --actor-num-gpus-per-node = {world} is not "
                            f"divisible by tp x pp x cp = {tp * pp * cp}")
    dp = world // (tp * pp * cp)
    dynamic = bool(flat.get("use-dynamic-batch-size", False))
    r.used["use-dynamic-batch-size"] = dynamic
    balance = bool(flat.get("balance-data", False))
    r.used["balance-data"] = balance
    micro = r.count("micro-batch-size", 1)
    batching: dict[str, Any] = {"strategy": "slime_dp_schedule", "balance_dp": balance}
    if dynamic:
        batching["max_tokens_per_microbatch"] = r.need(
            "max-tokens-per-gpu", "slime asserts it is set with --use-dynamic-batch-size") * cp
    for key, why in (("balance-by-flops", "micro-batches by estimated FLOPs, not first-fit"),
                     ("virtual-pipeline-model-parallel-size", "the count aligned to dp x the "
                                                              "VPP micro-batch group"),
                     ("num-layers-per-virtual-pipeline-stage", "the count aligned to dp x the "
                                                               "VPP micro-batch group"),
                     ("dynamic-sampling-filter-path", "filtered samples make the samples per "
                                                      "rollout vary; replayed as fixed")):
        r.unmodelled_if(key, lambda v: v not in (False, None, "None"), why)
    train_iters = rollouts * sps // gbs
    decay_iters = r.get("lr-decay-iters", None, int) or train_iters
    decay = decay_iters * gbs
    frac = r.get("lr-warmup-fraction", None, float)
    warm = frac * decay if frac is not None else r.get("lr-warmup-iters", 0, int) * gbs
    style = r.get("lr-decay-style", "linear", str)
    if style not in _STYLES:
        raise UnusableInput(f"--lr-decay-style {style!r}: megatron-core knows "
                            f"{', '.join(_STYLES)}")
    params: dict[str, Any] = {}
    if style == "WSD":
        wsd = r.get("lr-wsd-decay-iters", None, int)
        params = {"wsd_decay_steps": wsd * gbs if wsd else None,
                  "lr_wsd_decay_style": r.get("lr-wsd-decay-style", "exponential", str)}
    schedule = {"family": "megatron", "kind": style, "max_lr": r.need("lr", "the peak LR",
                                                                       float),
                "min_lr": r.get("min-lr", 0.0, float),
                "init_lr": r.get("lr-warmup-init", 0.0, float),
                "warmup": float(warm), "horizon": float(decay), "params": params}
    max_len = r.get("rollout-max-context-len", None, int) or r.get(
        "rollout-max-response-len", None, int)
    config: dict[str, Any] = {
        "framework": "slime",
        "schedule": schedule,
        "budget": {"formula": "nominal"},
        "train": {"steps": rollouts, "samples_per_step": sps, "micro_batch_size": micro,
                  "mini_batch_size": gbs, "gradient_accumulation": 1},
        "dp": {"size": dp},
        "batching": batching,
        "accumulation": {"rule": "correct", "flush_at_step_end": True},
        "scheduler": {"step_on": "update", "increment": "samples"},
    }
    synthetic = synthetic_up_to(max_len)
    if synthetic:
        config["data"] = {"synthetic": synthetic}
    return r.done("slime", config)


TRANSLATOR = Translator("slime", "slime (train.py arguments)", "args", looks_like, translate)
