"""ROLL's own pipeline YAML, translated into the lrdoctor run config."""

from __future__ import annotations

import copy

import pytest
import yaml

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.translate import roll as roll_yaml
from tests.helpers.paths import REPO

EXAMPLE = REPO / "examples" / "roll-sokoban-dynamic.yaml"


@pytest.fixture
def sokoban() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def test_sokoban_translation(sokoban):
    assert roll_yaml.looks_like_roll(sokoban)
    cfg = roll_yaml.to_config(EXAMPLE)
    assert cfg["train"] == {
        "steps": 1024,
        "samples_per_step": 1024,  # rollout_batch_size 1024 x 1 (agentic)
        "epochs_per_step": 1,
        "micro_batch_size": 2,
        "gradient_accumulation": 64,
    }
    assert cfg["dp"] == {"size": 8}
    assert cfg["batching"] == {
        "strategy": "token_budget",
        "max_tokens_per_microbatch": 8192,
        "round_to": 128,
    }
    assert cfg["budget"] == {"formula": "roll"}
    s = cfg["schedule"]
    assert (s["family"], s["kind"], s["max_lr"], s["min_lr"], s["warmup"]) == (
        "megatron",
        "cosine",
        1e-6,
        0.0,
        10,
    )
    assert s["horizon"] == "auto"


def test_sokoban_validates_as_run_config_and_budget(sokoban):
    from lrdoctor.replay.config import config_from_dict, load_config

    cfg = config_from_dict(roll_yaml.to_config(sokoban))
    assert cfg.batching.strategy == "token_budget"
    # ROLL's horizon: 1024 * 1024 * 1 // (2 * 64) // 8 = 1024 updates.
    t = cfg.train
    assert (
        t.steps
        * t.samples_per_step
        * t.epochs_per_step
        // (t.micro_batch_size * t.gradient_accumulation)
        // cfg.dp.size
        == 1024
    )
    loaded = load_config(EXAMPLE)
    assert loaded.dp.size == 8
    assert loaded.train.gradient_accumulation == 64


def test_interpolations_resolved_and_unneeded_ones_left(sokoban):
    data = roll_yaml.resolve(sokoban)
    assert data["checkpoint_config"]["output_dir"] == "./output/models/agentic_pipeline"
    assert data["custom_envs"]["SimpleSokoban"] == "${custom_env.SimpleSokoban}"
    d = {"a": {"b": 4}, "c": "${a.b}", "d": "x-${a.b}-y", "e": "${c}"}
    assert roll_yaml.resolve(d) == {"a": {"b": 4}, "c": 4, "d": "x-4-y", "e": 4}
    with pytest.raises(UnusableInput, match="interpolation cycle"):
        roll_yaml.resolve({"a": "${b}", "b": "${a}"})


def test_interpolated_key_the_replay_needs(sokoban):
    # rlvr-style: num_return_sequences comes from a top-level key by interpolation.
    d = copy.deepcopy(sokoban)
    for k in ("train_env_manager", "val_env_manager", "custom_envs"):
        d.pop(k)
    d["num_return_sequences_in_group"] = 8
    d["actor_infer"]["generating_args"]["num_return_sequences"] = "${num_return_sequences_in_group}"
    d["rollout_batch_size"] = 64
    cfg = roll_yaml.to_config(d)
    assert cfg["train"]["samples_per_step"] == 512
    d["actor_infer"]["generating_args"]["num_return_sequences"] = "${nowhere}"
    with pytest.raises(UnusableInput, match=r"\$\{nowhere\}.*does not resolve"):
        roll_yaml.to_config(d)


@pytest.mark.parametrize(
    ("mapping", "tp", "dp"),
    [
        ("list(range(0,8))", 1, 8),
        ("list(range(0,16))", 2, 8),
        ("[0, 1, 2, 3]", 1, 4),
        ("list(range(0,4)) + list(range(6,8))", 1, 6),
        (list(range(8)), 4, 2),
    ],
)
def test_dp_from_device_mapping(sokoban, mapping, tp, dp):
    d = copy.deepcopy(sokoban)
    d["actor_train"]["device_mapping"] = mapping
    d["actor_train"]["strategy_args"]["strategy_config"]["tensor_model_parallel_size"] = tp
    assert roll_yaml.to_config(d)["dp"]["size"] == dp


def test_dp_from_world_size_without_device_mapping(sokoban):
    d = copy.deepcopy(sokoban)
    del d["actor_train"]["device_mapping"]
    d["actor_train"]["world_size"] = 16
    d["actor_train"]["strategy_args"]["strategy_config"]["pipeline_model_parallel_size"] = 2
    assert roll_yaml.to_config(d)["dp"]["size"] == 8
    del d["actor_train"]["world_size"]
    with pytest.raises(UnusableInput, match="neither device_mapping nor world_size"):
        roll_yaml.to_config(d)


def test_device_mapping_never_evaluated(sokoban):
    d = copy.deepcopy(sokoban)
    d["actor_train"]["device_mapping"] = "__import__('os').system('true')"
    with pytest.raises(UnusableInput, match="nothing else is evaluated"):
        roll_yaml.to_config(d)


def test_static_batches_warmup_ratio_and_hf_family(sokoban):
    d = copy.deepcopy(sokoban)
    a = d["actor_train"]
    a["use_dynamic_batching_in_train"] = False
    a["strategy_args"]["strategy_name"] = "fsdp2_train"
    a["training_args"].pop("warmup_steps")
    a["training_args"]["warmup_ratio"] = 0.05
    a["training_args"]["lr_scheduler_type"] = "cosine_with_min_lr"
    cfg = roll_yaml.to_config(d)
    assert cfg["batching"]["strategy"] == "static"
    assert cfg["schedule"]["family"] == "hf"
    assert cfg["schedule"]["kind"] == "cosine_with_min_lr"
    assert cfg["schedule"]["warmup"] == 52  # ceil(0.05 * 1024)


def test_megatron_style_mapping_and_defaults(sokoban):
    d = copy.deepcopy(sokoban)
    t = d["actor_train"]["training_args"]
    t["lr_scheduler_type"] = "constant_with_warmup"
    t["lr_scheduler_kwargs"] = {"min_lr": 1e-7}
    del t["gradient_accumulation_steps"]
    del d["actor_train"]["sequence_length_round_in_train"]
    cfg = roll_yaml.to_config(d)
    assert cfg["schedule"]["kind"] == "constant"
    assert cfg["schedule"]["min_lr"] == 1e-7
    assert cfg["train"]["gradient_accumulation"] == 1  # transformers default
    assert cfg["batching"]["round_to"] == 4  # ROLL's default rounding


@pytest.mark.parametrize(
    ("edit", "msg"),
    [
        (lambda d: d.update(max_steps=-1), "max_steps is -1"),
        (lambda d: d.pop("max_steps"), "max_steps is missing"),
        (lambda d: d.update(rollout_batch_size=None), "rollout_batch_size is missing"),
        (
            lambda d: d["actor_train"].update(max_tokens_per_microbatch_in_train=0),
            "max_tokens_per_microbatch_in_train is not set",
        ),
        (
            lambda d: d["actor_train"]["training_args"].update(per_device_train_batch_size="two"),
            "per_device_train_batch_size is 'two'",
        ),
        (
            lambda d: d["actor_train"]["training_args"].update(lr_scheduler_type="polynomial"),
            "'polynomial' is not supported",
        ),
        (
            lambda d: d["actor_train"]["strategy_args"]["strategy_config"].update(
                tensor_model_parallel_size=3
            ),
            "not divisible by tp",
        ),
    ],
)
def test_bad_roll_yaml_one_line(sokoban, edit, msg):
    edit(sokoban)
    with pytest.raises(UnusableInput, match=msg) as exc:
        roll_yaml.to_config(sokoban, "run.yaml")
    assert str(exc.value).startswith("run.yaml: ")
    assert "\n" not in str(exc.value)


def test_not_roll():
    assert not roll_yaml.looks_like_roll({"train": {"steps": 3}})
    assert not roll_yaml.looks_like_roll([1, 2])
    with pytest.raises(UnusableInput, match="not a ROLL pipeline YAML"):
        roll_yaml.to_config({"actor_train": 3})


def test_keys_used_are_reported_for_roll_yaml(sokoban):
    from lrdoctor.replay.config import load_config

    cfg = load_config(EXAMPLE)
    used = cfg._keys_used
    assert used["max_steps"] == sokoban["max_steps"]
    assert used["rollout_batch_size"] == sokoban["rollout_batch_size"]
    assert used["actor_train.use_dynamic_batching_in_train"] is True
    assert set(used) <= set(roll_yaml.KEYS_READ)
