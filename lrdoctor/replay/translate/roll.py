"""Read ROLL's own pipeline YAML and translate it into an lrdoctor run config.

ROLL users should not have to restate their run: the keys that decide the
step accounting (``max_steps``, ``rollout_batch_size``, the number of returned
sequences, ``ppo_epochs``, ``actor_train.training_args.*``, the dynamic
batching knobs and the dp size from ``device_mapping``) are all in the YAML
they launch with. The translation follows what ROLL does with them:

- scheduler horizon = ``max_steps * rollout_batch_size * num_return_sequences *
  ppo_epochs // (per_device_train_batch_size * gradient_accumulation_steps)``,
  then ``// dp_size`` on each worker (``budget.formula: roll``);
- megatron strategies map HF ``lr_scheduler_type`` to Megatron decay styles
  and step the scheduler by 1 per optimizer update; warmup is
  ``warmup_steps`` or ``ceil(warmup_ratio * horizon)``;
- agentic pipelines (env managers) force ``num_return_sequences`` to 1.

Hydra ``${...}`` interpolations are resolved by :mod:`.interpolate`;
``device_mapping`` strings such as ``list(range(0,8))`` are read by
a tiny evaluator that only knows lists, ``range``, ``list`` and ``+`` (never
``eval``).
"""

from __future__ import annotations

import ast
import math
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.translate.common import (
    Translation,
    Translator,
    absent_near_misses,
    checked_number,
    near_misses,
)
from lrdoctor.replay.translate.interpolate import MISSING as _MISSING
from lrdoctor.replay.translate.interpolate import lookup as _lookup
from lrdoctor.replay.translate.interpolate import resolve

# HF SchedulerType -> Megatron lr_decay_style, as ROLL's mcore adapter maps them.
_HF_TO_MEGATRON = {
    "constant_with_warmup": "constant",
    "inverse_sqrt": "inverse-square-root",
    "cosine_with_min_lr": "cosine",
    "cosine_warmup_with_min_lr": "cosine",
    "warmup_stable_decay": "WSD",
}
_MEGATRON_STYLES = ("constant", "linear", "cosine", "inverse-square-root", "WSD")
# transformers TrainingArguments defaults, which ROLL inherits.
_HF_DEFAULTS = {
    "per_device_train_batch_size": 8,
    "gradient_accumulation_steps": 1,
    "learning_rate": 5e-5,
    "lr_scheduler_type": "linear",
    "warmup_steps": 0,
    "warmup_ratio": 0.0,
}
ROLL_ROUND_DEFAULT = 4  # WorkerConfig.sequence_length_round_in_train default


def looks_like_roll(data: Any) -> bool:
    """A ROLL pipeline YAML: an ``actor_train`` worker with training args or rollout keys."""
    if not isinstance(data, dict):
        return False
    actor = data.get("actor_train")
    if not isinstance(actor, dict):
        return False
    return (
        "training_args" in actor
        or "rollout_batch_size" in data
        or "use_dynamic_batching_in_train" in actor
    )


# --------------------------------------------------------------------------- device mapping


def _eval_node(node: ast.AST) -> Any:
    if isinstance(node, ast.Expression):
        return _eval_node(node.body)
    if isinstance(node, ast.Constant) and isinstance(node.value, int):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_eval_node(node.operand)
    if isinstance(node, (ast.List, ast.Tuple)):
        return [_eval_node(e) for e in node.elts]
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _eval_node(node.left), _eval_node(node.right)
        if isinstance(left, list) and isinstance(right, list):
            return left + right
        if isinstance(left, int) and isinstance(right, int):
            return left + right
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and not node.keywords
        and node.func.id in ("range", "list")
    ):
        args = [_eval_node(a) for a in node.args]
        if (
            node.func.id == "range"
            and 1 <= len(args) <= 3
            and all(isinstance(a, int) for a in args)
        ):
            return list(range(*args))
        if node.func.id == "list" and len(args) == 1 and isinstance(args[0], list):
            return list(args[0])
    raise ValueError(ast.dump(node)[:60])


def parse_device_mapping(value: Any, key: str = "device_mapping") -> list[int]:
    """``list(range(0,8))``, ``[0,1,2]``, ``list(range(0,4)) + [6]``: the GPU ids."""
    if isinstance(value, list) and all(isinstance(x, int) for x in value):
        return list(value)
    if isinstance(value, int):
        return [value]
    if isinstance(value, str):
        try:
            out = _eval_node(ast.parse(value.strip(), mode="eval"))
        except (SyntaxError, ValueError):
            out = None
        if isinstance(out, list) and all(isinstance(x, int) for x in out):
            return out
    raise UnusableInput(
        f"{key} {value!r}: expected a list of GPU ids or list(range(a, b)) (nothing else is evaluated)"
    )


# --------------------------------------------------------------------------- translation


def _get(node: Any, dotted: str, default: Any = _MISSING) -> Any:
    val = _lookup(node, dotted) if isinstance(node, dict) else _MISSING
    if val is _MISSING or val is None:
        return default
    if isinstance(val, str) and "${" in val:
        raise UnusableInput(f"{dotted} is {val!r}: the interpolation does not resolve in this file")
    return val


def _required(data: dict, key: str, why: str) -> int:
    val = _get(data, key, None)
    if val is None:
        near = absent_near_misses(data, [key], "")  # `max_step: 1024` for max_steps
        said = "".join(f" ({n['key']} is set: rename it to {key} if that is the key meant)"
                       for n in near[:1])
        raise UnusableInput(f"{key} is missing: {why}{said}")
    return checked_number(val, key)


def _dp_size(actor: dict) -> tuple[int, dict]:
    """dp = world size / (tensor * pipeline * context parallel), ROLL's megatron layout."""
    mapping = actor.get("device_mapping")
    world = actor.get("world_size")
    if mapping is not None:
        gpus = parse_device_mapping(mapping, "actor_train.device_mapping")
        per_worker = checked_number(actor.get("num_gpus_per_worker") or 1, "actor_train.num_gpus_per_worker")
        strategy = str(_get(actor, "strategy_args.strategy_name", ""))
        if strategy not in ("hf_infer", "vllm", "sglang"):
            per_worker = 1  # ROLL forces 1 GPU per worker for training strategies
        world = len(gpus) // per_worker
    elif world is not None:
        world = checked_number(world, "actor_train.world_size")
    else:
        raise UnusableInput(
            "actor_train has neither device_mapping nor world_size: cannot tell the dp size"
        )
    sc = _get(actor, "strategy_args.strategy_config", {}) or {}
    tp = checked_number(sc.get("tensor_model_parallel_size") or 1, "tensor_model_parallel_size")
    pp = checked_number(sc.get("pipeline_model_parallel_size") or 1, "pipeline_model_parallel_size")
    cp = checked_number(sc.get("context_parallel_size") or 1, "context_parallel_size")
    ulysses = checked_number(_get(actor, "model_args.ulysses_size", 1) or 1, "model_args.ulysses_size")
    model_par = tp * pp * cp * ulysses
    if world % model_par:
        raise UnusableInput(
            f"actor_train: world size {world} is not divisible by tp*pp*cp*ulysses = {model_par}"
        )
    return max(1, world // model_par), {
        "world_size": world,
        "tp": tp,
        "pp": pp,
        "cp": cp,
        "ulysses": ulysses,
    }


def _num_return_sequences(data: dict) -> tuple[int, str]:
    agentic = any(k in data for k in ("train_env_manager", "custom_envs", "val_env_manager"))
    if agentic:
        return 1, "agentic pipeline (ROLL forces num_return_sequences to 1)"
    v = _get(data, "actor_infer.generating_args.num_return_sequences")
    if v is not None:
        return checked_number(v, "actor_infer.generating_args.num_return_sequences"), (
            "actor_infer.generating_args.num_return_sequences"
        )
    v = _get(data, "num_return_sequences_in_group")
    if v is not None:
        return checked_number(v, "num_return_sequences_in_group"), "num_return_sequences_in_group"
    return 1, "default"


# The keys _translate reads (for ``config_keys_used``; absent ones took ROLL's defaults).
KEYS_READ = (
    "max_steps", "rollout_batch_size", "ppo_epochs", "num_return_sequences_in_group",
    "actor_infer.generating_args.num_return_sequences",
    "actor_train.training_args.per_device_train_batch_size",
    "actor_train.training_args.gradient_accumulation_steps",
    "actor_train.training_args.learning_rate", "actor_train.training_args.lr_scheduler_type",
    "actor_train.training_args.lr_scheduler_kwargs", "actor_train.training_args.warmup_steps",
    "actor_train.training_args.warmup_ratio", "actor_train.device_mapping",
    "actor_train.world_size", "actor_train.num_gpus_per_worker",
    "actor_train.strategy_args.strategy_name",
    "actor_train.strategy_args.strategy_config.tensor_model_parallel_size",
    "actor_train.strategy_args.strategy_config.pipeline_model_parallel_size",
    "actor_train.strategy_args.strategy_config.context_parallel_size",
    "actor_train.model_args.ulysses_size", "actor_train.use_dynamic_batching_in_train",
    "actor_train.max_tokens_per_microbatch_in_train",
    "actor_train.sequence_length_round_in_train", "sequence_length", "prompt_length",
    "response_length", "actor_train.use_sequence_packing",
    "actor_train.sequence_packing_args.algorithm",
    "actor_train.sequence_packing_args.max_packed_sequence_length_train",
    "actor_train.sequence_packing_args.min_num_micro_batches_train",
    "actor_train.strategy_args.strategy_config.virtual_pipeline_model_parallel_size",
)


def keys_used(data: dict) -> dict[str, Any]:
    """The keys of ``KEYS_READ`` this ROLL YAML sets, with their (resolved) values."""
    res = resolve(data)
    out = {}
    for key in KEYS_READ:
        val = _lookup(res, key)
        if val is not _MISSING and val is not None:
            out[key] = val
    return out


def to_config(path_or_dict: str | Path | dict, source: str | None = None) -> dict:
    """ROLL pipeline YAML (a path or the loaded mapping) -> lrdoctor run-config dict."""
    if isinstance(path_or_dict, dict):
        raw = path_or_dict
    else:
        from lrdoctor.read.bytes import safetext

        source = source or str(path_or_dict)
        raw = safetext.yaml_loads(safetext.read_text(path_or_dict, "config_bytes", "YAML"),
                                  source)
    if not looks_like_roll(raw):
        raise UnusableInput("not a ROLL pipeline YAML (no actor_train.training_args)", source)
    try:
        return _translate(resolve(raw))
    except UnusableInput as exc:
        if source and exc.path is None:
            raise exc.inside(source) from None  # same type: LRD303's advice follows it
        raise


def _translate(data: dict) -> dict:
    actor = data["actor_train"]
    targs = actor.get("training_args") or {}
    if not isinstance(targs, dict):
        raise UnusableInput("actor_train.training_args must be a mapping")

    def ta(key: str, kind: type = int):
        val = targs.get(key)
        if val is None:
            val = _HF_DEFAULTS[key]
        if kind is str:
            return str(val)
        return checked_number(val, f"actor_train.training_args.{key}", kind)

    steps = _required(data, "max_steps", "ROLL needs it to size the scheduler")
    if steps < 1:
        raise UnusableInput(
            f"max_steps is {steps}: an unlimited run has no scheduler horizon to replay"
        )
    rbs = _required(data, "rollout_batch_size", "the replay needs the samples per step")
    if rbs < 1:
        raise UnusableInput(f"rollout_batch_size is {rbs}: the replay needs a fixed batch size")
    nrs, nrs_from = _num_return_sequences(data)
    ppo_epochs = checked_number(_get(data, "ppo_epochs", 1), "ppo_epochs")
    mbs = ta("per_device_train_batch_size")
    ga = ta("gradient_accumulation_steps")
    for key, v in (("actor_train.training_args.per_device_train_batch_size", mbs),
                   ("actor_train.training_args.gradient_accumulation_steps", ga),
                   ("ppo_epochs", ppo_epochs)):
        if v < 1:  # each sizes (and divides) the horizon
            raise UnusableInput(f"{key} is {v}; expected a positive integer")
    dp, layout = _dp_size(actor)
    sps = rbs * nrs

    # Horizon ROLL hands the scheduler (updates, per worker).
    horizon = max(1, steps * sps * ppo_epochs // (mbs * ga)) // dp
    warmup_steps = ta("warmup_steps", float)
    if 0 < warmup_steps < 1:  # transformers 5 reads a fraction here as a ratio
        warmup = math.ceil(warmup_steps * horizon)
    elif warmup_steps > 0:
        warmup = int(warmup_steps)
    else:
        warmup = math.ceil(ta("warmup_ratio", float) * horizon)

    strategy = str(_get(actor, "strategy_args.strategy_name", "megatron_train"))
    hf_type = ta("lr_scheduler_type", str)
    kwargs = targs.get("lr_scheduler_kwargs") or {}
    lr = ta("learning_rate", float)
    if "megatron" in strategy:
        family = "megatron"
        kind = _HF_TO_MEGATRON.get(hf_type, hf_type)
        if kind not in _MEGATRON_STYLES:
            raise UnusableInput(
                f"actor_train.training_args.lr_scheduler_type {hf_type!r} is not supported by "
                "ROLL's megatron strategy"
            )
        params: dict[str, Any] = {}
        if kind == "WSD":
            params = {
                "wsd_decay_steps": kwargs.get("wsd_decay_steps"),
                "lr_wsd_decay_style": kwargs.get("lr_wsd_decay_style"),
            }
        schedule = {
            "family": family,
            "kind": kind,
            "max_lr": float(kwargs.get("max_lr", lr)),
            "min_lr": float(kwargs.get("min_lr", 0.0)),
            "init_lr": float(kwargs.get("init_lr", 0.0)),
            "warmup": warmup,
            "horizon": float(kwargs["lr_decay_steps"]) if "lr_decay_steps" in kwargs else "auto",
            "params": params,
        }
    else:
        schedule = {
            "family": "hf",
            "kind": hf_type,
            "max_lr": lr,
            "min_lr": float(kwargs.get("min_lr", 0.0)),
            "warmup": warmup,
            "horizon": "auto",
            "params": {k: v for k, v in kwargs.items() if k != "min_lr"},
        }

    dynamic = bool(actor.get("use_dynamic_batching_in_train", False))
    batching: dict[str, Any] = {"strategy": "static", "round_to": 1}
    if dynamic:
        cap = checked_number(
            actor.get("max_tokens_per_microbatch_in_train") or 0,
            "actor_train.max_tokens_per_microbatch_in_train",
        )
        if cap < 1:
            raise UnusableInput(
                "actor_train.use_dynamic_batching_in_train is true but "
                "max_tokens_per_microbatch_in_train is not set (ROLL requires it)"
            )
        rnd = actor.get("sequence_length_round_in_train")
        batching = {
            "strategy": "token_budget",
            "max_tokens_per_microbatch": cap,
            "round_to": checked_number(
                ROLL_ROUND_DEFAULT if rnd is None else rnd,
                "actor_train.sequence_length_round_in_train",
            ),
        }
    out: dict[str, Any] = {
        "schedule": schedule,
        "budget": {"formula": "roll"},
        "train": {
            "steps": steps,
            "samples_per_step": sps,
            "epochs_per_step": ppo_epochs,
            "micro_batch_size": mbs,
            "gradient_accumulation": ga,
        },
        "dp": {"size": dp},
        "batching": batching,
        "accumulation": {"rule": "correct"},
        "scheduler": {"step_on": "update", "increment": 1},
    }
    # No batch log: lengths up to the config's own maximum (ROLL's sequence_length, else
    # prompt_length + response_length).
    from lrdoctor.replay.translate.common import synthetic_up_to

    max_len = _get(data, "sequence_length", None)
    if max_len is None and _get(data, "prompt_length", None) is not None:
        max_len = checked_number(_get(data, "prompt_length"), "prompt_length") + checked_number(
            _get(data, "response_length", 0), "response_length")
    synth = synthetic_up_to(checked_number(max_len, "sequence_length") if max_len is not None else None)
    if synth:
        out["data"] = {"synthetic": synth}
    return out


def _sequence_packing(data: dict, actor: dict, layout: dict, out: dict,
                      unmodelled: list[dict[str, Any]]) -> None:
    """``actor_train.use_sequence_packing``: ROLL's megatron strategy packs each rank's
    mini-batch (:mod:`lrdoctor.replay.packing.roll_sequence_packing`)."""
    if not bool(actor.get("use_sequence_packing", False)):
        return
    key = "actor_train.sequence_packing_args"
    args = actor.get("sequence_packing_args") or {}
    if not isinstance(args, dict):
        raise UnusableInput(f"{key} must be a mapping")
    strategy = str(_get(actor, "strategy_args.strategy_name", "megatron_train"))
    algorithm = str(args.get("algorithm", "none"))
    if "megatron" not in strategy:
        unmodelled.append({"key": "actor_train.use_sequence_packing", "value": True,
                           "why": f"ROLL packs sequences only with the megatron strategy; "
                                  f"{strategy} is replayed without packing"})
        return
    if algorithm == "none":  # SequencePackingPacker: mini-batch // micro_batch_size chunks
        return
    if algorithm != "load_balance":
        raise UnusableInput(f"{key}.algorithm {algorithm!r}: ROLL knows none, load_balance")
    cap = args.get("max_packed_sequence_length_train")
    if cap is None:
        raise UnusableInput(f"{key}.max_packed_sequence_length_train is not set (ROLL's "
                            "load_balance packer asserts it)")
    tp, cp = int(layout["tp"]), int(layout["cp"])
    pad = math.lcm(16, cp * 2 * tp if cp > 1 else tp)
    sc = _get(actor, "strategy_args.strategy_config", {}) or {}
    vp = sc.get("virtual_pipeline_model_parallel_size") or 1
    out["batching"] = {
        "strategy": "roll_sequence_packing",
        "max_tokens_per_microbatch": checked_number(cap, f"{key}.max_packed_sequence_length_train"),
        "round_to": pad,
        "min_micro_batches": checked_number(args.get("min_num_micro_batches_train", 1),
                                  f"{key}.min_num_micro_batches_train"),
        "virtual_pipeline": checked_number(vp, "virtual_pipeline_model_parallel_size"),
    }


# The fields of ROLL's worker sections (roll/configs/worker_config.py: WorkerConfig, and its
# StrategyArguments and SequencePackingConfig), for LRD217's near misses. ROLL builds them
# from the YAML by field name, so a misspelt key sets nothing.
WORKER_KEYS = frozenset({
    "name", "worker_cls", "pg_variant", "model_args", "training_args", "data_args",
    "generating_args", "strategy_args", "world_size", "device_mapping", "num_gpus_per_worker",
    "model_update_frequency", "infer_batch_size", "backend_timeout", "system_envs",
    "topr_positive_weight", "topr_negative_weight", "max_concurrency",
    "use_dynamic_batching_in_train", "max_tokens_per_microbatch_in_train",
    "sequence_length_round_in_train", "use_dynamic_batching_in_infer",
    "max_tokens_per_microbatch_in_infer", "sequence_length_round_in_infer", "offload_nccl",
    "use_sequence_packing", "sequence_packing_args", "logits_in_fp32", "apply_loss_scale"})
STRATEGY_KEYS = frozenset({"strategy_name", "strategy_config"})
PACKING_KEYS = frozenset({
    "algorithm", "max_packed_sequence_length_forward", "max_packed_sequence_length_train",
    "min_num_micro_batches_forward", "min_num_micro_batches_train"})
# What makes a top-level mapping a worker section (actor_train, actor_infer, reference...).
_WORKER_MARKS = frozenset({"strategy_args", "device_mapping", "training_args", "worker_cls"})


def misspelt(data: dict) -> list[dict[str, Any]]:
    """The near-miss keys of every worker section (LRD217): ``use_dynamic_batching_in_trian``."""
    out: list[dict[str, Any]] = []
    for name, sec in data.items():
        if not isinstance(sec, dict) or not _WORKER_MARKS & set(sec):
            continue
        out += near_misses(sec, WORKER_KEYS, str(name), "ROLL's WorkerConfig")
        out += near_misses(sec.get("strategy_args"), STRATEGY_KEYS, f"{name}.strategy_args",
                           "ROLL's StrategyArguments")
        out += near_misses(sec.get("sequence_packing_args"), PACKING_KEYS,
                           f"{name}.sequence_packing_args", "ROLL's SequencePackingConfig")
    return out


def translate(data: dict, base: Path | None = None) -> Translation:
    """ROLL's YAML as a :class:`Translation` (the keys it read in ``keys_used``; near-miss
    keys of its schema among the ``unmodelled``, LRD217)."""
    if not looks_like_roll(data):
        raise UnusableInput("not a ROLL pipeline YAML (no actor_train.training_args)")
    res = resolve(data)
    out = _translate(res)
    unmodelled: list[dict[str, Any]] = []
    actor = res["actor_train"]
    _sequence_packing(res, actor, _dp_size(actor)[1], out, unmodelled)
    typos = misspelt(data)
    seen = {t["key"] for t in typos}
    # ROLL's top-level pipeline keys (max_steps, rollout_batch_size, ...): the ones the
    # replay reads (KEYS_READ), a near miss of one that is absent (LRD217).
    typos += [t for t in absent_near_misses(res, KEYS_READ, "ROLL's config as the replay reads it")
              if t["key"] not in seen]
    return Translation("roll", out, keys_used(data), unmodelled + typos)


TRANSLATOR = Translator("roll", "ROLL (pipeline YAML)", "yaml", looks_like_roll, translate,
                        format="roll-yaml")
