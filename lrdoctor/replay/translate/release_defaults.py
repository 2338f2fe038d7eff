"""The defaults that change step accounting, per framework release, written down as facts.

A launch script passes only overrides; the rest of the config is the framework's
own default tree. When the framework is installed its own file is read
(:func:`base_tree`); when it is not, these tables stand in. Each value was read
from the file named in ``source`` of the release named in ``release`` (the
installed wheel or the PyPI wheel, 2026-11); only keys a translator reads are
listed, and a test compares the verl tables with the installed verl's files.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class ReleaseDefaults:
    framework: str
    release: str
    source: str  # the file (inside the release) the values come from
    values: dict[str, Any]  # dotted key -> default


_VERL_COMMON: dict[str, Any] = {
    "data.train_batch_size": 1024,
    "data.gen_batch_size": None,
    "data.max_prompt_length": 512,
    "data.max_response_length": 512,
    "actor_rollout_ref.rollout.n": 1,
    "trainer.total_training_steps": None,
    "trainer.total_epochs": 30,
    "trainer.nnodes": 1,
    "trainer.n_gpus_per_node": 8,
    "trainer.balance_batch": True,
    "trainer.critic_warmup": 0,
    "actor_rollout_ref.actor.ppo_mini_batch_size": 256,
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": None,
    "actor_rollout_ref.actor.use_dynamic_bsz": False,
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": 16384,
    "actor_rollout_ref.actor.ppo_epochs": 1,
    "actor_rollout_ref.actor.shuffle": False,
    "algorithm.filter_groups.enable": False,
    "actor_rollout_ref.actor.optim.lr": 1e-06,
    "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": 0.0,
    "actor_rollout_ref.actor.optim.total_training_steps": -1,
    "actor_rollout_ref.actor.optim.lr_warmup_steps": -1,
}

TABLES: dict[str, ReleaseDefaults] = {
    "verl": ReleaseDefaults(
        "verl", "0.9.1", "verl/trainer/config/_generated_ppo_trainer.yaml",
        {**_VERL_COMMON,
         "actor_rollout_ref.actor.strategy": "fsdp",
         "actor_rollout_ref.actor.ulysses_sequence_parallel_size": 1,
         "actor_rollout_ref.actor.optim.min_lr_ratio": 0.0,
         "actor_rollout_ref.actor.optim.num_cycles": 0.5,
         "actor_rollout_ref.actor.optim.lr_scheduler_type": "constant",
         "actor_rollout_ref.actor.optim.zero_indexed_step": True,
         "actor_rollout_ref.actor.optim.warmup_style": None}),
    "verl-megatron": ReleaseDefaults(
        "verl", "0.9.1", "verl/trainer/config/_generated_ppo_megatron_trainer.yaml",
        {**_VERL_COMMON,
         "actor_rollout_ref.actor.strategy": "megatron",
         "actor_rollout_ref.actor.optim.lr_warmup_init": 0.0,
         "actor_rollout_ref.actor.optim.lr_decay_steps": None,
         "actor_rollout_ref.actor.optim.lr_decay_style": "constant",
         "actor_rollout_ref.actor.optim.min_lr": 0.0,
         "actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 1,
         "actor_rollout_ref.actor.megatron.pipeline_model_parallel_size": 1,
         "actor_rollout_ref.actor.megatron.context_parallel_size": 1}),
    # SkyRL 0.4.0 keeps its defaults in dataclasses (skyrl/train/config/config.py:
    # TrainerConfig, PlacementConfig, GeneratorConfig, OptimizerConfig, SamplingParams).
    "skyrl": ReleaseDefaults(
        "skyrl", "0.4.0", "skyrl/train/config/config.py",
        {"trainer.train_batch_size": 1024,
         "trainer.policy_mini_batch_size": 256,
         "trainer.micro_train_batch_size_per_gpu": 1,
         "trainer.update_epochs_per_batch": 1,
         "trainer.epochs": 1,
         "trainer.max_training_steps": None,
         "trainer.max_tokens_per_microbatch": -1,
         "trainer.max_prompt_length": 512,
         "trainer.placement.policy_num_nodes": 1,
         "trainer.placement.policy_num_gpus_per_node": 1,
         "trainer.policy.optimizer_config.lr": 1e-06,
         "trainer.policy.optimizer_config.num_warmup_steps": 0,
         "trainer.policy.optimizer_config.scheduler": "constant_with_warmup",
         "generator.n_samples_per_prompt": 5,
         "generator.step_wise_trajectories": False,
         "generator.sampling_params.max_generate_length": 1024}),
}


def _installed_file(package: str, rel: str) -> Path | None:
    """A data file of an installed package, found without importing the package."""
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(list(spec.submodule_search_locations)[0]) / rel
    return path if path.is_file() else None


def base_tree(table: str, use_installed: bool = True) -> tuple[dict, str]:
    """The framework's default config tree and where it came from (for the report).

    The installed framework's own file when there is one (``use_installed``), else
    the release table.
    """
    from lrdoctor.replay.translate.compose import nested

    t = TABLES[table]
    if use_installed and t.source.endswith(".yaml"):
        package, _, rel = t.source.partition("/")
        path = _installed_file(package, rel)
        if path is not None:
            from lrdoctor.replay.translate.compose import load_tree

            data = load_tree(path)
            if isinstance(data, dict):
                return data, f"{path} (installed)"
    return nested(t.values), f"{t.framework} {t.release} defaults ({t.source})"
