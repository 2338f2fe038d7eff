"""RLinf's Hydra YAML (``examples/reasoning/config/...``) for its Megatron and FSDP actors.

Read from RLinf's code (github.com/RLinf/RLinf at a3816b5; ``rlinf==0.3.0`` agrees):

- ``rlinf/config.py validate_reasoning_cfg``: ``actor.micro_batch_size =
  algorithm.training_batch_size_per_gpu`` (default 1) and ``actor.global_batch_size =
  data.rollout_batch_size x algorithm.group_size // algorithm.n_minibatches``
  (default 1): one rollout step is ``n_minibatches`` optimizer updates.
- ``validate_megatron_cfg``: ``megatron.train_iters = 100000`` always; ``lr_sched``
  defaults ``lr_decay_style: constant``, ``min_lr: 0.0``, ``lr_decay_iters: None``,
  ``lr_warmup_iters: 0``; the LR is ``optim.lr``. ``rlinf/utils/initialize.py
  extract_selected_fields`` flattens ``model``, ``optim``, ``lr_sched``, ``megatron``
  into Megatron's args in that order, so ``lr_sched.min_lr`` wins over ``optim.min_lr``.
- Megatron-LM ``get_optimizer_param_scheduler`` (called by
  ``MegatronModelManager``): ``lr_decay_iters`` defaults to ``train_iters``; horizon
  ``lr_decay_iters x global_batch_size`` samples; warmup ``lr_warmup_fraction x``
  horizon, else ``lr_warmup_iters x global_batch_size``.
- ``rlinf/workers/megatron_worker.py MegatronWorker.training_step``: after each global
  batch, ``optimizer_step(increment)`` with ``increment = total_batch_size_per_dp x dp //
  n_minibatches``, the global batch in samples whatever the dp size;
  ``rlinf/hybrid_engines/megatron/megatron_model_manager.py optimizer_step`` calls
  ``lr_scheduler.step(increment=...)`` whatever ``optimizer.step()`` returned, so a
  failed (fp16 overflow) update still advances it.
- Micro-batches per rank: ``gbs / (mbs x dp)`` (``calc_num_microbatches`` ->
  ``rlinf/utils/utils.py configure_batch_sizes``, recomputed at every dp change), or
  with ``runner.enable_dynamic_batch_size`` the packer
  :mod:`lrdoctor.replay.packing.rlinf_dynamic`.
- ``rlinf/runners/reasoning_runner.py _set_max_steps``: ``len(train_dataloader) x
  runner.max_epochs``, capped by ``runner.max_steps`` when >= 0. ``_build_dataloader``:
  a ``StatefulDataLoader`` with ``batch_size = data.rollout_batch_size x
  algorithm.max_num_gen_batches`` (default 1) and ``drop_last=True``, so
  ``len(train_dataloader) = N // batch`` for N prompts, the records of
  ``data.train_data_paths`` (``rlinf/data/datasets/reasoning/dataset.py _load_data``: a
  ``.jsonl`` line or a ``.json`` list item each; ``load_post_process`` then drops prompts
  longer than ``data.max_prompt_length`` when ``data.filter_prompt_by_length``).
  RLinf's shipped configs all say ``max_steps: -1``: :func:`_run_length` derives the
  length where the data files are there, else replays an assumed length that the output
  names with the ``--set`` that gives the real one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.translate.common import Reader, Translation, Translator, synthetic_up_to
from lrdoctor.replay.translate.common import truthy as _truthy

TRAIN_ITERS = 100000  # rlinf/config.py validate_megatron_cfg: megatron.train_iters
_STYLES = ("constant", "linear", "cosine", "inverse-square-root", "WSD")
_RANKS = re.compile(r"^\s*\d+(\s*-\s*\d+)?(\s*,\s*\d+(\s*-\s*\d+)?)*\s*$")


def looks_like(data: Any) -> bool:
    """An RLinf config: ``runner``, ``algorithm`` and ``actor`` sections, with RLinf's
    ``runner.task_type`` or ``cluster.component_placement``."""
    if not isinstance(data, dict):
        return False
    runner, cluster = data.get("runner"), data.get("cluster")
    return (isinstance(runner, dict) and isinstance(data.get("actor"), dict)
            and isinstance(data.get("algorithm"), dict)
            and ("task_type" in runner or (isinstance(cluster, dict)
                                           and "component_placement" in cluster)))


def _count_ranks(spec: str) -> int:
    """``"0-3,5"`` -> 5 (RLinf's ``parse_rank_config`` format)."""
    n = 0
    for part in spec.split(","):
        a, _, b = part.partition("-")
        lo, hi = int(a), int(b or a)
        if hi < lo:
            raise UnusableInput(f"cluster.component_placement: rank range {part.strip()!r} "
                                "runs backwards")
        n += hi - lo + 1
    return n


def _actor_gpus(r: Reader) -> int:
    """GPUs of the actor from ``cluster.component_placement`` (a key naming ``actor``,
    alone or in a comma list: ``actor,rollout,reward: all``)."""
    placement = r.raw("cluster.component_placement")
    if not isinstance(placement, dict):
        raise UnusableInput("cluster.component_placement is missing: the replay needs the "
                            "actor's GPUs")
    for key, val in placement.items():
        if "actor" not in [k.strip() for k in str(key).split(",")]:
            continue
        r.used[f"cluster.component_placement.{key}"] = val
        if isinstance(val, int) and not isinstance(val, bool):
            return 1
        text = str(val).strip()
        if text.lower() == "all":
            nodes = r.count("cluster.num_nodes", 1)
            # "all" is every accelerator Ray finds; the config does not count them.
            per = r.count("cluster.gpus_per_node", 8)
            return nodes * per
        if _RANKS.match(text):
            return _count_ranks(text)
        raise UnusableInput(f"cluster.component_placement.{key} is {val!r}: expected 'all' or "
                            "GPU ranks like '0-3,6'")
    raise UnusableInput("cluster.component_placement names no actor")


def _schedule(r: Reader, gbs: int) -> tuple[dict[str, Any], float]:
    """Megatron's OptimizerParamScheduler as RLinf configures it, and its horizon in
    samples (``lr_decay_iters x global_batch_size``)."""
    s = "actor.lr_sched"
    style = r.get(f"{s}.lr_decay_style", "constant", str)
    if style not in _STYLES:
        raise UnusableInput(f"{s}.lr_decay_style {style!r}: megatron-core knows "
                            f"{', '.join(_STYLES)}")
    lr = r.get("actor.optim.lr", kind=float)
    if lr is None:
        raise UnusableInput("actor.optim.lr is missing: RLinf's LR (lr_sched.lr = optim.lr)")
    r.get("actor.optim.min_lr", None, float)  # shown: lr_sched.min_lr overrides it
    decay_iters = r.get(f"{s}.lr_decay_iters", TRAIN_ITERS, int)
    if decay_iters < 1:
        raise UnusableInput(f"{s}.lr_decay_iters is {decay_iters}; expected >= 1")
    horizon = float(decay_iters * gbs)
    frac = r.get(f"{s}.lr_warmup_fraction", None, float)
    warmup = frac * horizon if frac is not None else \
        float(r.get(f"{s}.lr_warmup_iters", 0, int) * gbs)
    params: dict[str, Any] = {}
    if style == "WSD":
        wsd = r.get(f"{s}.lr_wsd_decay_iters", None, int)
        params = {"wsd_decay_steps": wsd * gbs if wsd is not None else None,
                  "lr_wsd_decay_style": r.get(f"{s}.lr_wsd_decay_style", "exponential", str)}
    return {"family": "megatron", "kind": style, "max_lr": lr,
            "min_lr": r.get(f"{s}.min_lr", 0.0, float),
            "init_lr": r.get(f"{s}.lr_warmup_init", 0.0, float),
            "warmup": warmup, "horizon": horizon, "params": params}, horizon


_FSDP_KINDS = ("constant", "cosine")


def _fsdp_schedule(r: Reader) -> dict[str, Any]:
    """``FSDPModelManager.build_lr_scheduler`` -> ``rlinf/hybrid_engines/fsdp/utils.py
    get_lr_scheduler``: ``constant`` is a ``LambdaLR`` ramping ``step / max(1, warmup)``
    then 1 (transformers' ``constant_with_warmup`` lambda, the same arithmetic);
    ``cosine`` is transformers' ``get_cosine_with_min_lr_schedule_with_warmup`` over
    ``optim.total_training_steps`` (default 0: nothing in RLinf sets it). Warmup:
    ``optim.lr_warmup_steps``, else (``-1``) ``int(lr_warmup_steps_ratio x total)``."""
    o = "actor.optim"
    kind = r.get(f"{o}.lr_scheduler", "constant", str)
    if kind not in _FSDP_KINDS:
        raise UnusableInput(f"{o}.lr_scheduler {kind!r}: lrdoctor models RLinf's FSDP "
                            f"{' and '.join(_FSDP_KINDS)} (get_lr_scheduler); write another in "
                            "lrdoctor's schema (docs/replay-frameworks.md, RLinf)")
    lr = r.get(f"{o}.lr", kind=float)
    if lr is None:
        raise UnusableInput(f"{o}.lr is missing: the FSDP optimizer's LR")
    total = r.get(f"{o}.total_training_steps", 0, int)
    warmup = r.get(f"{o}.lr_warmup_steps", -1, int)
    if warmup < 0:
        warmup = int(r.get(f"{o}.lr_warmup_steps_ratio", 0.0, float) * total)
    if kind == "constant":
        return {"family": "hf", "kind": "constant_with_warmup", "max_lr": lr,
                "warmup": float(warmup)}
    if total < 1:
        raise UnusableInput(f"{o}.total_training_steps is {total}: RLinf's FSDP cosine decays "
                            "over it and nothing in RLinf sets it (FSDPModelManager."
                            "build_lr_scheduler reads it, default 0: the cosine wraps every "
                            "scheduler step); set it in the config")
    rate = r.get(f"{o}.min_lr_rate", None, float)
    params: dict[str, Any] = {"num_cycles": r.get(f"{o}.num_cycles", 0.5, float)}
    # get_lr_scheduler: min_lr_rate, when set, wins over min_lr
    params.update({"min_lr_rate": rate} if rate is not None else
                  {"min_lr": r.get(f"{o}.min_lr", 0.0, float)})
    return {"family": "hf", "kind": "cosine_with_min_lr", "max_lr": lr,
            "warmup": float(warmup), "horizon": float(total), "params": params}


def _fsdp(r: Reader, sps: int, gbs: int, n_mini: int, mbs: int,
          max_steps: int) -> dict[str, Any]:
    """RLinf's FSDP actor (``rlinf/workers/actor/fsdp_actor_worker.py FSDPActor``), read at
    a3816b5: dp is the actor's world size; ``run_training`` runs ``n_minibatches``
    ``training_step`` calls per rollout step, each ``total_batch_size_per_dp //
    n_minibatches // micro_batch_size`` micro-batches then ``optimizer_step``;
    ``lr_scheduler.step()`` (one count) after each when ``actor.lr_sched_sync_with_optim``
    (default True), else once per rollout step after them. ``FSDPModelManager.
    optimizer_step`` skips ``optimizer.step`` on a non-finite grad norm but the scheduler
    is stepped all the same. ``validate_reasoning_cfg`` asserts ``global_batch_size %
    (micro_batch_size x world_size) == 0``."""
    dp = _actor_gpus(r)
    if sps % dp:
        raise UnusableInput(f"rollout_batch_size x group_size = {sps} is not divisible by the "
                            f"actor's world size {dp} (FSDPActor.total_batch_size_per_dp)")
    if gbs % (mbs * dp):
        raise UnusableInput(f"actor.global_batch_size {gbs} is not divisible by micro batch "
                            f"{mbs} x world size {dp} (validate_reasoning_cfg asserts it)")
    if r.get("runner.enable_dynamic_batch_size", False, bool):
        raise UnusableInput("runner.enable_dynamic_batch_size with the FSDP actor: its "
                            "micro-batches come from FSDPActor._split_to_micro_batch, which "
                            "lrdoctor does not model; replay the Megatron actor's config or "
                            "write the run in lrdoctor's schema")
    schedule = _fsdp_schedule(r)
    sync = r.get("actor.lr_sched_sync_with_optim", True, bool)
    r.unmodelled_if("actor.fsdp_config.mixed_precision.param_dtype",
                    lambda v: str(v) in ("fp16", "float16"),
                    "updates with a non-finite grad norm are skipped and still step the "
                    "scheduler (FSDPModelManager.optimizer_step); which ones is in no config: "
                    "replayed with none (list them as scheduler.failed_updates in an lrdoctor "
                    "config)")
    r.unmodelled_if("actor.enable_dp_load_balance", _truthy,
                    "rows are rebalanced across dp ranks before training; replayed as dealt")
    horizon = schedule.get("horizon")
    cfg: dict[str, Any] = {
        "schedule": schedule,
        "budget": {"formula": "explicit", "total": horizon} if horizon else
        {"formula": "nominal"},
        "train": {"steps": max_steps, "samples_per_step": sps, "micro_batch_size": mbs,
                  "mini_batch_size": gbs, "gradient_accumulation": gbs // (mbs * dp)},
        "dp": {"size": dp},
        "batching": {"strategy": "static"},
        "accumulation": {"rule": "correct", "flush_at_step_end": True},
        "scheduler": {"step_on": "update" if sync else "rollout_step", "increment": 1.0,
                      "step_on_failed_update": True},
    }
    return cfg


# The run length replayed when RLinf's own (len(train_dataloader) x max_epochs) needs a
# data file that is not there: one rollout step per epoch, the least RLinf runs
# (_build_dataloader asserts len(train_dataloader) >= 1). Stated as assumed, never hidden.
ASSUMED_STEPS_PER_EPOCH = 1


def _records(path: Path) -> int | None:
    """The prompts RLinf's ``_load_data`` reads from one file (a ``.jsonl`` line each, a
    ``.json`` list's items or one object), or None for a suffix it skips. Lines are
    counted in chunks, not parsed: a data file can be gigabytes."""
    if path.suffix == ".jsonl":
        n, last = 0, b"\n"
        with path.open("rb") as f:
            while chunk := f.read(1 << 20):
                n += chunk.count(b"\n")
                last = chunk[-1:]
        return n + (last != b"\n")  # a last line without its newline is a record too
    if path.suffix == ".json":
        import json

        try:
            content = json.loads(path.read_bytes())
        except ValueError as exc:
            raise UnusableInput(f"data.train_data_paths: {path} is not JSON ({exc}); RLinf's "
                                "_load_data fails on it") from None
        return len(content) if isinstance(content, list) else 1
    return None


def _dataset_size(r: Reader, base: Path | None) -> tuple[int | None, str]:
    """The prompts of ``data.train_data_paths`` where every file is there (a relative path
    is read from the config's folder), else None and why not."""
    paths = r.raw("data.train_data_paths")
    if isinstance(paths, str):
        paths = [paths]
    if not isinstance(paths, list) or not paths:
        return None, "data.train_data_paths is not set"
    r.used["data.train_data_paths"] = paths
    total = 0
    for p in paths:
        path = Path(str(p)).expanduser()
        if not path.is_absolute() and base is not None:
            path = base / path
        if not path.is_file():
            return None, f"data.train_data_paths names {p}, which is not here"
        n = _records(path)
        if n is None:
            continue  # RLinf logs "Unsupported ..., skip" and reads the others
        total += n
    return total, f"{total:,} records in data.train_data_paths"


def _run_length(r: Reader, prompts: int, base: Path | None) -> tuple[int, dict[str, Any]]:
    """RLinf's rollout steps (``_set_max_steps``) and, where ``runner.max_steps`` does not
    give them, where the number came from: derived from the data files, or assumed."""
    max_steps = r.get("runner.max_steps", -1, int)
    if max_steps == 0:
        raise UnusableInput("runner.max_steps is 0: the run takes no step")
    epochs = r.get("runner.max_epochs", None, int)
    if epochs is None:
        if max_steps > 0:  # RLinf's own config has it; a hand-trimmed one may not
            return max_steps, {}
        raise UnusableInput("runner.max_epochs is missing: RLinf runs len(train_dataloader) "
                            "x runner.max_epochs steps when runner.max_steps is -1")
    if epochs < 1:
        raise UnusableInput(f"runner.max_epochs is {epochs}: the run takes no step")
    gen = r.count("algorithm.max_num_gen_batches", 1)
    batch = prompts * gen
    formula = (f"len(train_dataloader) x runner.max_epochs {epochs}, len(train_dataloader) = "
               f"N prompts // (data.rollout_batch_size {prompts} x "
               f"algorithm.max_num_gen_batches {gen}) (reasoning_runner._set_max_steps)")
    give = "--set runner.max_steps=N"
    n, where = _dataset_size(r, base)
    filtered = r.get("data.filter_prompt_by_length", False, bool)
    if n is not None:
        if n < batch:
            raise UnusableInput(f"{where}: fewer than one rollout batch of {batch} "
                                "(RLinf asserts len(train_dataloader) >= 1)")
        steps = n // batch * epochs
        if max_steps > 0 and (max_steps <= steps or not filtered):
            # min(len x epochs, max_steps): the cap decides, or both numbers are read.
            return min(steps, max_steps), {}
        if not filtered:
            return steps, {"value": steps, "from": "derived", "set": give,
                           "why": f"{formula}, N = {where}"}
        return steps, {"value": steps, "from": "assumed", "set": give,
                       "why": f"{formula}, N = at most {where}: data.filter_prompt_by_length "
                       "drops prompts longer than data.max_prompt_length tokens, which only "
                       "the tokenizer counts; replayed as if none were dropped"}
    if max_steps > 0:
        return max_steps, {}  # the data decides only when it is shorter: as configured
    steps = ASSUMED_STEPS_PER_EPOCH * epochs
    return steps, {"value": steps, "from": "assumed", "set": give,
                   "why": f"{formula}, and N is in no file here ({where}); replayed with "
                   f"{ASSUMED_STEPS_PER_EPOCH} step per epoch, the least RLinf runs"}


def translate(data: dict, base: Path | None = None) -> Translation:
    r = Reader(data)
    backend = r.get("actor.training_backend", "megatron", str)
    if backend not in ("megatron", "fsdp"):
        raise UnusableInput(f"actor.training_backend is {backend!r}: lrdoctor models RLinf's "
                            "Megatron actor (MegatronWorker) and its FSDP actor (FSDPActor); "
                            "write another run in lrdoctor's schema (docs/replay-frameworks.md, "
                            "RLinf)")
    prompts = r.need("data.rollout_batch_size", "the prompts per rollout step")
    group = r.count("algorithm.group_size", 1)
    n_mini = r.count("algorithm.n_minibatches", 1)
    mbs = r.count("algorithm.training_batch_size_per_gpu", 1)
    sps = prompts * group
    gbs = sps // n_mini
    if gbs < 1:
        raise UnusableInput(f"data.rollout_batch_size x algorithm.group_size = {sps} is less "
                            f"than algorithm.n_minibatches {n_mini}")
    max_steps, length = _run_length(r, prompts, base)
    if backend == "fsdp":
        return r.done("rlinf", _fsdp(r, sps, gbs, n_mini, mbs, max_steps),
                      {"runner.max_steps": length} if length else None)
    tp = r.count("actor.model.tensor_model_parallel_size", 1)
    pp = r.count("actor.model.pipeline_model_parallel_size", 1)
    cp = r.count("actor.model.context_parallel_size", 1)
    gpus = _actor_gpus(r)
    if gpus % (tp * pp * cp):
        raise UnusableInput(f"the actor's {gpus} GPUs do not divide into tensor x pipeline x "
                            f"context parallel = {tp * pp * cp}")
    dp = gpus // (tp * pp * cp)
    if sps % dp:
        raise UnusableInput(f"rollout_batch_size x group_size = {sps} is not divisible by the "
                            f"actor's dp size {dp} (MegatronWorker.__init__ asserts it)")
    if (sps // dp) % n_mini:
        raise UnusableInput(f"each dp rank's {sps // dp} sequences do not split into "
                            f"algorithm.n_minibatches {n_mini} global batches "
                            "(get_iterator_k_split asserts it)")
    if gbs % (mbs * dp):
        raise UnusableInput(f"global batch {gbs} is not divisible by micro batch {mbs} x dp "
                            f"{dp} (megatron-core's num-microbatches calculator asserts it)")
    schedule, horizon = _schedule(r, gbs)
    batching: dict[str, Any] = {"strategy": "static"}
    if r.get("runner.enable_dynamic_batch_size", False, bool):
        cap = r.need("runner.max_tokens_per_mbs", "the token cap of RLinf's dynamic batching")
        batching = {"strategy": "rlinf_dynamic", "max_tokens_per_microbatch": cap * cp}
        vpp = r.get("actor.model.virtual_pipeline_model_parallel_size", None, int)
        if vpp and vpp > 1:
            batching["vpp_divisor"] = r.get(
                "actor.model.microbatch_group_size_per_vp_stage", pp, int)
    r.unmodelled_if("actor.model.precision", lambda v: str(v) in ("fp16", "16", "16-mixed"),
                    "fp16 updates that overflow fail and still advance the scheduler "
                    "(MegatronModelManager.optimizer_step); which ones fail is in no config: "
                    "replayed with none failing (list them as scheduler.failed_updates in an "
                    "lrdoctor config)")
    if n_mini > 1:
        r.unmodelled_if("algorithm.shuffle_rollout", lambda v: _truthy(v) and bool(
            batching["strategy"] != "static"),
            "each rank's rows are shuffled (torch.randperm, seed actor.seed) before the split "
            "into global batches: which rows share a global batch is replayed in log order")
    r.unmodelled_if("actor.enable_dp_load_balance", _truthy,
                    "rows are rebalanced across dp ranks before training; replayed as dealt")
    if r.get("critic.use_critic_model", False, bool):
        r.unmodelled_if("critic.lr_sched", lambda v: isinstance(v, dict),
                        "the critic's scheduler is stepped the same way (MegatronWorker) over "
                        "its own lr_sched; the replay follows the actor's")
    seq = r.get("runner.seq_length", None, int)
    cfg: dict[str, Any] = {
        "schedule": schedule,
        # The horizon is lr_decay_iters x gbs samples: "budgeted" updates = lr_decay_iters.
        "budget": {"formula": "explicit", "total": horizon},
        "train": {"steps": max_steps, "samples_per_step": sps, "micro_batch_size": mbs,
                  "mini_batch_size": gbs, "gradient_accumulation": max(1, gbs // (mbs * dp))},
        "dp": {"size": dp},
        "batching": batching,
        "accumulation": {"rule": "correct", "flush_at_step_end": True},
        "scheduler": {"step_on": "update", "increment": "samples",
                      "step_on_failed_update": True},
    }
    synthetic = synthetic_up_to(seq)
    if synthetic:
        cfg["data"] = {"synthetic": synthetic}
    return r.done("rlinf", cfg, {"runner.max_steps": length} if length else None)


TRANSLATOR = Translator("rlinf", "RLinf (Hydra YAML, Megatron and FSDP actors)", "yaml", looks_like,
                        translate)
