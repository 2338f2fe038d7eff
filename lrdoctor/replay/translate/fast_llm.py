"""Fast-LLM's trainer YAML (``training:``, ``optimizer:``, ``data:``, optional ``schedule:``).

What Fast-LLM does with the keys (``engine/schedule/config.py``,
``engine/training/trainer.py``, ``engine/optimizer/learning_rate.py``; the current
schema, read at Fast-LLM main 2026-07, has no ``batch:`` section, ``schedule:``
only when its defaults of 1 change, and ``data.micro_batch_size`` in tokens: one
micro-batch is one packed sample of that many tokens):

- one training iteration is one optimizer update over
  ``breadth_first_micro_batches x depth_first_micro_batches`` micro-batches per
  rank; with ``schedule.docs_per_step > 0`` (PR 520) it instead fetches
  micro-batches until the global document count reaches the target (strategy
  ``doc_target``, counted over the data stream);
- ``training.train_iters`` iterations; the LR warms up linearly over
  ``warmup_iterations`` then decays (``decay_style``) to ``minimum`` at
  ``decay_iterations``;
- dp = ``model.distributed.world_size`` / (tensor x pipeline x sequence-data
  parallel); the world size usually comes from the launcher's environment.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.translate.common import Reader, Translation, Translator

D = "model.distributed"


def looks_like(data: Any) -> bool:
    if not isinstance(data, dict):
        return False
    sc = data.get("schedule")
    if isinstance(sc, dict) and (any(k in sc for k in (
            "depth_first_micro_batches", "breadth_first_micro_batches", "docs_per_step"))
            or "training" in data):
        return True
    # The current schema (no schedule: section needed): training.train_iters beside
    # Fast-LLM's optimizer.learning_rate or data.micro_batch_size (tokens).
    tr, opt, dat = data.get("training"), data.get("optimizer"), data.get("data")
    return isinstance(tr, dict) and "train_iters" in tr and (
        (isinstance(opt, dict) and isinstance(opt.get("learning_rate"), dict))
        or (isinstance(dat, dict) and "micro_batch_size" in dat))


def translate(data: dict, base: Path | None = None) -> Translation:
    r = Reader(data)
    depth = r.count("schedule.depth_first_micro_batches", 1)
    breadth = r.count("schedule.breadth_first_micro_batches", 1)
    docs = r.get("schedule.docs_per_step", 0, int)
    iters = r.need("training.train_iters", "the replay needs the number of iterations")
    world = r.count(f"{D}.world_size")
    if world is None:
        world = 1
        r.unmodelled.append({"key": f"{D}.world_size", "value": None,
                             "why": "the world size comes from the launcher (WORLD_SIZE); "
                                    "replayed with dp 1: set model.distributed.world_size"})
    par = (r.count(f"{D}.tensor_parallel", 1) * r.count(f"{D}.pipeline_parallel", 1)
           * r.count(f"{D}.sequence_data_parallel", 1))
    if world % par:
        raise UnusableInput(f"{D}.world_size {world} is not divisible by tensor x pipeline x "
                            f"sequence-data parallel = {par}")
    dp = max(1, world // par)
    seq = breadth * depth
    lr_key = "optimizer.learning_rate"
    style = r.get(f"{lr_key}.decay_style", "constant", str)
    if style not in ("constant", "linear", "cosine"):
        raise UnusableInput(f"{lr_key}.decay_style {style!r}: lrdoctor reads constant, linear, "
                            "cosine")
    decay = r.get(f"{lr_key}.decay_iterations", iters, int)
    schedule = {"family": "megatron", "kind": style,
                "max_lr": r.get(f"{lr_key}.base", 1e-4, float),
                "min_lr": r.get(f"{lr_key}.minimum", 0.0, float),
                "warmup": r.get(f"{lr_key}.warmup_iterations", 0, int),
                "horizon": float(decay)}
    r.unmodelled_if(f"{lr_key}.schedule", bool, "a schedule string is not translated")
    r.unmodelled_if("schedule.skip_step", bool, "skipped weight updates do not move the LR")
    batching: dict[str, Any] = {"strategy": "static"}
    accumulation: dict[str, Any] = {"rule": "correct", "flush_at_step_end": True}
    if docs > 0:
        batching = {"strategy": "doc_target", "docs_per_step": docs}
        accumulation["flush_at_step_end"] = False
    # Current schema: data.micro_batch_size is the tokens of one micro-batch (one packed
    # sample; default 2048, fast_llm/data/dataset/config.py SamplingConfigBase); older
    # releases: batch.sequence_length tokens per sample.
    length = (r.get("data.sequence_length", kind=int) or r.get("batch.sequence_length", kind=int)
              or r.get("data.micro_batch_size", 2048, int))
    cfg: dict[str, Any] = {
        "framework": "fast-llm",
        "schedule": schedule,
        "budget": {"formula": "nominal"},
        # One lrdoctor "step" = one nominal iteration's samples: seq micro-batches per rank.
        "train": {"steps": iters, "samples_per_step": seq * dp, "micro_batch_size": 1,
                  "gradient_accumulation": seq},
        "dp": {"size": dp},
        "batching": batching,
        "accumulation": accumulation,
        "scheduler": {"step_on": "update", "increment": 1},
        "data": {"synthetic": f"fixed:{length}" + (";docs:1:8" if docs > 0 else "")},
    }
    return r.done("fast-llm", cfg)


TRANSLATOR = Translator("fast-llm", "Fast-LLM (trainer YAML)", "yaml", looks_like, translate)
