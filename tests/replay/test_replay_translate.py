"""replay --config on the frameworks' own configs: detection, translation, audit trail."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from lrdoctor.cli import app
from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay import ReplayOptions, replay_full
from lrdoctor.replay.config import load_config
from tests.helpers.paths import REPO

EX = REPO / "examples"


def test_verl_hydra_config_is_translated():
    cfg = load_config(EX / "verl-grpo-trainer.yaml")
    assert cfg._format == "verl-config"
    # 256 prompts x rollout.n 8; mini 64 prompts x 8; dp = 2 nodes x 8 GPUs.
    assert (cfg.train.samples_per_step, cfg.train.mini_batch_size, cfg.dp.size) == (2048, 512, 16)
    assert cfg.train.steps == 40 and cfg.scheduler.step_on == "rollout_step"
    assert cfg.batching.strategy == "karmarkar_karp"
    assert cfg.batching.max_tokens_per_microbatch == 24000
    assert cfg.batching.flavor == "verl"  # newest release unless the config says otherwise
    # cosine with min_lr_ratio; warmup int(0.05 x 40) = 2
    assert (cfg.schedule.kind, cfg.schedule.warmup, cfg.schedule.params["min_lr_rate"]) == (
        "cosine_with_min_lr", 2, 0.1)
    used = cfg._keys_used
    assert used["actor_rollout_ref.rollout.n"] == 8
    assert used["actor_rollout_ref.actor.use_dynamic_bsz"] is True
    assert used["trainer.nnodes"] == 2
    assert [u["key"] for u in cfg._unmodelled] == ["trainer.critic_warmup"]


def test_unmodelled_key_is_a_warning_and_keys_used_are_in_json(tmp_path):
    res = CliRunner().invoke(app, ["replay", "--config", str(EX / "verl-grpo-trainer.yaml"),
                                   "--fast", "--json", "--no-knob-check"])
    out = json.loads(res.stdout)
    codes = {f["code"]: f for f in out["findings"]}
    assert codes["LRD213"]["severity"] == "warning"
    assert codes["LRD213"]["location"].endswith("trainer.critic_warmup")
    assert out["summary"]["config_keys_used"]["data.train_batch_size"] == 256
    assert res.exit_code == 1  # a warning reaches the default --fail-on warning gate


def test_skyrl_config_and_release():
    cfg = load_config(EX / "skyrl-trainer.yaml")
    assert cfg._format == "skyrl-config"
    assert (cfg.train.samples_per_step, cfg.train.mini_batch_size) == (1024, 256)
    assert cfg.batching.strategy == "balanced_first_fit" and cfg.batching.flavor == "skyrl"
    # horizon = max_training_steps x train_batch_size // policy_mini_batch_size x epochs
    assert cfg.schedule.horizon == 30 * 4
    assert cfg._keys_used["trainer.max_tokens_per_microbatch"] == 16384


def test_skyrl_older_release_from_framework_key(tmp_path):
    text = (EX / "skyrl-trainer.yaml").read_text() + "framework: skyrl==0.1.0\n"
    p = tmp_path / "skyrl.yaml"
    p.write_text(text)
    assert load_config(p).batching.flavor == "skyrl_rank_first"


def test_nemo_rl_config_with_sequence_packing():
    cfg = load_config(EX / "nemo-rl-grpo-math.yaml")
    assert cfg._format == "nemo_rl-config"
    assert cfg.batching.strategy == "sequence_packing"
    # ${mul:${policy.max_total_sequence_length}, ${policy.train_micro_batch_size}}
    assert cfg.batching.max_tokens_per_microbatch == 4096 * 4
    assert (cfg.train.samples_per_step, cfg.train.mini_batch_size) == (512, 512)
    assert cfg.schedule.family == "torch" and cfg.schedule.kind == "SequentialLR"
    rep = replay_full(str(EX / "nemo-rl-grpo-math.yaml"), options=ReplayOptions(engine="fast", knob_check=False))
    s = rep.report.extra["summary"]
    assert s["actual_updates"] == 200 and s["progress_ratio"] == 1.0


def test_fast_llm_docs_per_step():
    cfg = load_config(EX / "fast-llm-trainer.yaml")
    assert cfg._format == "fast-llm-config"
    assert cfg.batching.strategy == "doc_target" and cfg.batching.docs_per_step == 256
    assert cfg.accumulation.flush_at_step_end is False
    rep = replay_full(str(EX / "fast-llm-trainer.yaml"), options=ReplayOptions(engine="fast", knob_check=False))
    assert "LRD201" in {f.code for f in rep.report.findings}


def test_openrlhf_launch_script_and_args_file(tmp_path):
    cfg = load_config(EX / "openrlhf-train-ppo-ray.sh")
    assert cfg._format == "openrlhf-config"
    assert (cfg.train.samples_per_step, cfg.train.mini_batch_size, cfg.dp.size) == (1024, 256, 8)
    assert cfg.train.steps == 12800 // 128
    assert cfg.batching.flavor == "openrlhf" and cfg.batching.max_tokens_per_microbatch == 16384
    # 12800 prompts x 8 // 256 = 400 updates; warmup ceil(0.03 x 400) = 12
    assert (cfg.schedule.horizon, cfg.schedule.warmup) == (400, 12)
    (tmp_path / "rest.txt").write_text("--train.batch_size 512\n--data.max_samples 6400\n")
    (tmp_path / "args.txt").write_text("--rollout.batch_size 128 --rollout.n_samples_per_prompt 8"
                                       " --args-file rest.txt\n")
    cfg2 = load_config(tmp_path / "args.txt")
    assert (cfg2.train.mini_batch_size, cfg2.train.steps) == (512, 50)


@pytest.mark.parametrize("text,needle", [
    ("data: {train_batch_size: 8}\nactor_rollout_ref: {actor: {ppo_micro_batch_size_per_gpu: 1}}"
     "\ntrainer: {total_epochs: 2}\n", "trainer.total_training_steps"),
    ("trainer: {policy_mini_batch_size: 4}\ngenerator: {n_samples_per_prompt: 2}\n",
     "trainer.max_training_steps"),
    ("--rollout.batch_size 8 --train.batch_size 8\n", "--data.max_samples"),
])
def test_missing_step_count_is_one_line_naming_the_file_and_key(tmp_path, text, needle):
    p = tmp_path / "cfg.yaml"
    p.write_text(text)
    with pytest.raises(UnusableInput) as exc:
        load_config(p)
    assert needle in str(exc.value) and exc.value.path == str(p)


def _leaves(node, path=()):
    if isinstance(node, dict):
        for k, v in node.items():
            yield from _leaves(v, (*path, k))
    else:
        yield path


@pytest.mark.parametrize("name", ["verl-grpo-trainer.yaml", "skyrl-trainer.yaml",
                                  "nemo-rl-grpo-math.yaml", "fast-llm-trainer.yaml"])
def test_bad_values_in_framework_configs_are_one_line_errors(name, tmp_path):
    """Any leaf replaced by a wrong type: a translated config or UnusableInput, never a traceback."""
    import yaml

    base = yaml.safe_load((EX / name).read_text())
    rng = np.random.default_rng(7)
    bad_values = ["abc", -3, 0, [1, 2], {"x": 1}, None, True, 1e30, "${missing.key}"]
    paths = list(_leaves(base))
    for case in range(60):
        data = yaml.safe_load((EX / name).read_text())
        path = paths[int(rng.integers(len(paths)))]
        node = data
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = bad_values[int(rng.integers(len(bad_values)))]
        p = tmp_path / f"{case}.yaml"
        p.write_text(yaml.safe_dump(data))
        try:
            load_config(p)
        except UnusableInput as exc:
            assert "\n" not in str(exc), (case, path)
