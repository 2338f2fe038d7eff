"""OpenRLHF's command line (``openrlhf.cli.train_ppo_ray``) -> an lrdoctor run config.

The config is the argument list the run was launched with: a saved list, a
launch script (``python -m openrlhf.cli.train_ppo_ray --... \\``), or an
``--args-file`` it names. What OpenRLHF 0.11.2 does with the keys
(``cli/train_ppo_ray.py``, ``trainer/ppo_trainer.py``, ``utils/deepspeed``):

- a train step (rollout) takes ``--rollout.batch_size`` prompts x
  ``--rollout.n_samples_per_prompt`` samples; an optimizer update per
  ``--train.batch_size`` samples, ``--train.max_epochs`` passes;
- ``--train.micro_batch_size`` per GPU, or with ``--train.dynamic_batch_enable``
  first-fit counts and Karmarkar-Karp partitions of ``--train.max_tokens_per_gpu
  x ring_attn_size x ds.tensor_parallel_size`` tokens;
- the scheduler (HF ``get_scheduler(--actor.lr_scheduler)``, warmup
  ``ceil(lr_warmup_ratio x steps)``, ``min_lr_rate = --actor.min_lr_ratio``)
  steps per update over ``prompts x n // train.batch_size x num_episodes x
  max_epochs``, where prompts is the dataset size (``--data.max_samples``
  caps it; lrdoctor needs it set to the real count).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.translate.common import Reader, Translation, Translator, synthetic_up_to
from lrdoctor.replay.translate.rl_config import rl_config

MARKERS = ("--rollout.batch_size", "--train.batch_size", "--rollout.n_samples_per_prompt",
           "openrlhf.cli.train_ppo_ray")
_FLAGS = ("train.dynamic_batch_enable", "ds.packing_samples", "algo.dynamic_filtering_enable")


def looks_like(text: str) -> bool:
    return any(m in text for m in MARKERS)


def parse_args(text: str, base: Path | None = None, depth: int = 0) -> dict[str, Any]:
    """The ``--key value`` / ``--flag`` pairs of an argument list or launch script."""
    lines = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        lines.append(line.rstrip().removesuffix("\\"))
    try:
        tokens = shlex.split(" ".join(lines), comments=True)
    except ValueError as exc:
        raise UnusableInput(f"cannot split the argument list: {exc}") from None
    out: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            i += 1
            continue
        key, eq, text = tok[2:].partition("=")
        val: str | bool = text
        if eq:
            i += 1
        elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
            val = tokens[i + 1]
            i += 2
        else:
            val = True
            i += 1
        if key == "args-file" or key == "args_file":
            if depth > 2:
                raise UnusableInput("--args-file nests too deep")
            path = Path(str(val))
            if base is not None and not path.is_absolute():
                path = base / path
            try:
                inner = path.read_text()
            except OSError as exc:
                raise UnusableInput(f"--args-file {val}: {exc.strerror or exc}") from None
            out.update(parse_args(inner, path.parent, depth + 1))
            continue
        out[key] = val
    return out


def _tree(flat: dict[str, Any]) -> dict:
    root: dict = {}
    for key, val in flat.items():
        node = root
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                break
        else:
            node[parts[-1]] = val
    return root


def translate(text: str, base: Path | None = None) -> Translation:
    flat = parse_args(text, base)
    r = Reader(_tree(flat), resolve_refs=False)
    rbs = r.count("rollout.batch_size", 1024)
    n = r.count("rollout.n_samples_per_prompt", 1)
    tbs = r.count("train.batch_size", 128)
    epochs = r.count("train.max_epochs", 1)
    episodes = r.count("train.num_episodes", 1)
    prompts = r.count("data.max_samples", int(1e8))
    if prompts >= int(1e8):
        raise UnusableInput("--data.max_samples is not set: OpenRLHF sizes the scheduler from "
                            "the dataset's prompt count; pass it as --data.max_samples N")
    steps = prompts // rbs * episodes
    if steps < 1:
        raise UnusableInput(f"--data.max_samples {prompts} < --rollout.batch_size {rbs}: "
                            "not one rollout step")
    sps = rbs * n
    nodes = r.count("actor.num_nodes", 1)
    gpus = r.count("actor.num_gpus_per_node", 8)
    ring = r.count("ds.ring_attn_size", 1)
    tp = r.count("ds.tensor_parallel_size", 1)
    dp = max(1, nodes * gpus // (ring * tp))
    micro = r.count("train.micro_batch_size", 1)
    dynamic = bool(flat.get("train.dynamic_batch_enable", False))
    r.used["train.dynamic_batch_enable"] = dynamic
    batching: dict[str, Any] = {"strategy": "static"}
    if dynamic:
        cap = r.count("train.max_tokens_per_gpu", 16192) * ring * tp
        batching = {"strategy": "karmarkar_karp", "max_tokens_per_microbatch": cap,
                    "flavor": "openrlhf", "balance_dp": False}
    scheduler_steps = prompts * n // tbs * episodes * epochs
    lr = r.get("actor.adam.lr", 1e-6, float)
    kind = r.get("actor.lr_scheduler", "cosine_with_min_lr", str)
    ratio = r.get("actor.lr_warmup_ratio", 0.03, float)
    import math

    schedule: dict[str, Any] = {"family": "hf", "kind": kind, "max_lr": lr,
                                "warmup": math.ceil(scheduler_steps * ratio),
                                "horizon": float(scheduler_steps)}
    if kind in ("cosine_with_min_lr", "cosine_warmup_with_min_lr"):
        schedule["params"] = {"min_lr_rate": r.get("actor.min_lr_ratio", 0.1, float)}
    if flat.get("algo.dynamic_filtering_enable"):
        r.unmodelled.append({"key": "algo.dynamic_filtering_enable", "value": True,
                             "why": "filtered prompts make the samples per step vary; "
                                    "replayed as fixed"})
        r.used["algo.dynamic_filtering_enable"] = True
    max_len = r.get("data.max_len", 2048, int)
    return r.done("openrlhf", rl_config(
        "openrlhf", schedule, dp=dp, batching=batching, step_on="update",
        train={"steps": steps, "samples_per_step": sps, "epochs_per_step": epochs,
               "micro_batch_size": micro, "mini_batch_size": tbs,
               "gradient_accumulation": max(1, tbs // dp // micro)},
        synthetic=synthetic_up_to(max_len)))


TRANSLATOR = Translator("openrlhf", "OpenRLHF (train_ppo_ray arguments)", "args", looks_like,
                        translate)
