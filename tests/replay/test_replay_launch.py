"""Launch scripts, Hydra overrides and ``defaults:`` inheritance read as configs.

The scripts are in the frameworks' own shapes (examples/*.sh follow verl's
examples/grpo_trainer/run_qwen2-7b_seq_balance.sh and
run_qwen2-7b_math_megatron.sh, SkyRL's examples/gsm8k/run_gsm8k.sh). Generality:
the shell reading (continuations, ``${VAR:-default}``, ``$(dirname $0)``,
unresolved variables) is written once and tested here on verl, SkyRL and
OpenRLHF scripts alike.
"""

from __future__ import annotations

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay import launch, shell
from lrdoctor.replay.config import load_config
from lrdoctor.replay.translate import release_defaults
from tests.helpers.paths import REPO

EX = REPO / "examples"


def test_verl_fsdp_script_is_verls_defaults_plus_its_overrides():
    cfg = load_config(EX / "verl-grpo-seq-balance.sh")
    assert cfg._format == "verl-config"
    # train_batch_size 64 x n 5; mini 16 x 5 = 80 samples; dp 8; cap from ${MAX_TOKENS:-24000}
    assert (cfg.train.samples_per_step, cfg.train.mini_batch_size, cfg.dp.size) == (320, 80, 8)
    assert cfg.batching.strategy == "karmarkar_karp"
    assert cfg.batching.max_tokens_per_microbatch == 24000
    assert cfg.train.steps == 40 and cfg.scheduler.step_on == "rollout_step"
    # keys the script does not set come from verl's own config (balance_batch: True)
    assert cfg.batching.balance_dp is True
    assert cfg._source["entry_point"] == "verl" and cfg._source["line"] == 16
    assert cfg.data.synthetic == "uniform:192:3072"  # up to 1024 + 2048


def _verl_files():
    if release_defaults._installed_file("verl", "trainer/config/_generated_ppo_trainer.yaml") \
            is None:
        pytest.skip("verl is not installed (pip install --no-deps verl==0.9.1)")


def test_release_table_gives_the_same_config_as_the_installed_verl(monkeypatch):
    _verl_files()
    for name in ("verl-grpo-seq-balance.sh", "verl-ppo-megatron.sh"):
        installed = load_config(EX / name)
        assert "(installed)" in installed._source["base_config"]
        monkeypatch.setattr(release_defaults, "_installed_file", lambda *a: None)
        table = load_config(EX / name)
        monkeypatch.undo()
        assert "verl 0.9.1 defaults" in table._source["base_config"]
        assert table.model_dump() == installed.model_dump()


def test_release_tables_hold_the_installed_verl_files_values():
    _verl_files()
    from lrdoctor.replay.translate.compose import load_tree
    from lrdoctor.replay.translate.interpolate import MISSING, lookup

    for key in ("verl", "verl-megatron"):
        t = release_defaults.TABLES[key]
        path = release_defaults._installed_file("verl", t.source.partition("/")[2])
        assert path is not None
        tree = load_tree(path)
        for dotted, value in t.values.items():
            got = lookup(tree, dotted)
            assert got is not MISSING and got == value, (key, dotted, got, value)


def test_verl_megatron_script_reads_the_megatron_config_and_schedule():
    cfg = load_config(EX / "verl-ppo-megatron.sh")
    assert "megatron" in cfg._source["base_config"]
    assert cfg.dp.size == 2  # 8 GPUs / (tp 2 x pp 2)
    s = cfg.schedule
    assert (s.family, s.kind, s.max_lr, s.min_lr, s.warmup, s.horizon) == (
        "megatron", "cosine", 1e-6, 1e-7, 5, 60)
    assert not cfg._unmodelled  # lr_decay_style is modelled now, not LRD213


def test_skyrl_uv_entry_point_and_stepwise_prompt_ids_without_a_log():
    cfg = load_config(EX / "skyrl-gsm8k-stepwise.sh")
    assert cfg._format == "skyrl-config" and cfg.batching.strategy == "prompt_unit"
    assert (cfg.train.samples_per_step, cfg.dp.size, cfg.train.micro_batch_size) == (320, 4, 4)
    assert cfg.data.synthetic.endswith(";group:5")


def test_unresolved_variable_is_named_and_settable(tmp_path):
    p = tmp_path / "run.sh"
    p.write_text("python3 -m verl.trainer.main_ppo \\\n  data.train_batch_size=$BS \\\n"
                 "  actor_rollout_ref.model.path=$(cat model.txt) \\\n"
                 "  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2 \\\n"
                 "  trainer.total_training_steps=3\n")
    with pytest.raises(UnusableInput, match=r"data.train_batch_size comes from BS.*--set "
                                            r"data.train_batch_size=VALUE") as exc:
        load_config(p)
    assert exc.value.path == str(p)
    assert load_config(p, ["BS=32"]).train.samples_per_step == 32
    cfg = load_config(p, ["data.train_batch_size=16"])
    assert cfg.train.samples_per_step == 16
    # the $(...) feeds a key the replay does not read: named in the source, not an error
    assert "actor_rollout_ref.model.path" in cfg._source["unresolved"]


def test_shell_expansion_forms():
    """Parameter expansion as bash does it (checked against bash 5 by hand): defaults,
    single quotes literal, ${C:=7} assigning, $(basename $(dirname $0)) evaluated."""
    words = shell.expand_words
    env = {"A": "1", "EMPTY": ""}
    assert words("x=${A:-2} y=${B:-3} z=${EMPTY:-4} w=${EMPTY-5}", env) == \
        ["x=1", "y=3", "z=4", "w="]
    assert words("'$A' \"$A\" ${C:=7} $C", env) == ["$A", "1", "7", "7"]
    env["0"] = "/repo/examples/qwen-rlvr/run.sh"
    assert words("$(basename $(dirname $0))", env) == ["qwen-rlvr"]
    assert launch.UNRESOLVED_RE.search(words("$(nproc)", env)[0])


def test_shell_arithmetic_as_verl_recipes_size_token_caps():
    """verl's DAPO recipe: max_response_length=$((1024 * 8)) and
    ppo_max_token_len=$(((max_prompt_length + max_response_length) * 2))."""
    env = {"P": "2048", "R": "8192"}
    assert shell.expand_words("$((1024 * 8)) $(((P + R) * 2)) $(($P / 3)) $((-7 / 2)) "
                              "$((-7 % 2))", env) == ["8192", "20480", "682", "-3", "-1"]
    for unresolved in ("$((X * 2))", "$((2 ** 3))", "$((1 / 0))", "$(($(nproc) * 2))",
                       "$((10 ** 100))", "$((99999999 * 99999999 * 99999999))"):
        assert launch.UNRESOLVED_RE.search(shell.expand_words(unresolved, env)[0]), unresolved


def test_a_dapo_style_script_with_arithmetic_replays(tmp_path):
    """A launch script shaped like verl's DAPO recipe (not one of the shipped examples):
    the token cap computed by shell arithmetic is read, not left unresolved."""
    p = tmp_path / "run_dapo.sh"
    p.write_text("""#!/usr/bin/env bash
set -xeuo pipefail
train_prompt_bsz=${TRAIN_BSZ:-256}
max_prompt_length=$((1024 * 2))
max_response_length=$((1024 * 8))
actor_ppo_max_token_len=$(((max_prompt_length + max_response_length) * 2))
python3 -m verl.trainer.main_ppo \\
    data.train_batch_size=${train_prompt_bsz} \\
    data.max_prompt_length=${max_prompt_length} \\
    data.max_response_length=${max_response_length} \\
    actor_rollout_ref.rollout.n=16 \\
    actor_rollout_ref.actor.use_dynamic_bsz=True \\
    actor_rollout_ref.actor.ppo_max_token_len_per_gpu=${actor_ppo_max_token_len} \\
    actor_rollout_ref.actor.ppo_mini_batch_size=32 \\
    trainer.n_gpus_per_node=8 trainer.nnodes=1 trainer.total_training_steps=100 "$@"
""")
    cfg = load_config(p)
    assert cfg.batching.max_tokens_per_microbatch == 20480  # (2048 + 8192) * 2


def test_hydra_overrides_add_and_delete(tmp_path):
    from lrdoctor.replay.translate.compose import apply_overrides

    tree = {"a": {"b": 1, "c": 2}}
    out = apply_overrides(tree, ["a.b=1e-6", "+a.d=[1,2]", "~a.c", "++x.y=true", "a.e=null"])
    assert out == {"a": {"b": 1e-6, "d": [1, 2], "e": None}, "x": {"y": True}}
    assert tree == {"a": {"b": 1, "c": 2}}  # the input is not modified


def test_shell_script_without_a_trainer_names_the_entry_points(tmp_path):
    p = tmp_path / "train.sh"
    p.write_text("#!/bin/bash\nexport X=1\ntorchrun my_train.py --lr 1e-4\n")
    with pytest.raises(UnusableInput) as exc:
        load_config(p)
    msg = str(exc.value)
    assert "verl.trainer.main_ppo" in msg and "skyrl_train.entrypoints.main_base" in msg
    assert "start_rlvr_pipeline.py" in msg and "openrlhf.cli.train_ppo_ray" in msg


def test_yaml_of_no_known_framework_lists_the_frameworks(tmp_path):
    p = tmp_path / "cfg.yaml"
    p.write_text("model: {name: x}\noptim: {lr: 1e-4}\n")
    with pytest.raises(UnusableInput) as exc:
        load_config(p)
    msg = str(exc.value)
    assert "matches no framework config" in msg
    assert "verl" in msg and "NeMo-RL" in msg and "ROLL" in msg and "OpenRLHF" in msg
    assert "missing key" not in msg


def test_openrlhf_script_still_reads_through_the_launch_parser():
    cfg = load_config(EX / "openrlhf-train-ppo-ray.sh")
    assert cfg._format == "openrlhf-config" and cfg._source["entry_point"] == "openrlhf"
    assert cfg.batching.strategy == "karmarkar_karp"


def test_every_entry_point_has_a_registered_translator():
    from lrdoctor.replay.translate import by_name

    for e in launch.ENTRY_POINTS:
        assert by_name(e.framework).name == e.framework


SCRIPTS = {
    "verl-grpo-seq-balance.sh": "verl-config",
    "verl-ppo-megatron.sh": "verl-config",
    "skyrl-gsm8k-stepwise.sh": "skyrl-config",
    "openrlhf-train-ppo-ray.sh": "openrlhf-config",
    "nemo-rl/run_grpo_math_seqpack.sh": "nemo_rl-config",
    "roll-rlvr/examples/qwen2.5-7B-rlvr_megatron/run_rlvr_pipeline.sh": "roll-yaml",
    "fast-llm-train.sh": "fast-llm-config",
}


@pytest.mark.parametrize("name", sorted(SCRIPTS))
def test_every_framework_launch_script_replays_without_a_batch_log(name, tmp_path,
                                                                   monkeypatch):
    import json

    from typer.testing import CliRunner

    from lrdoctor.cli import app

    monkeypatch.chdir(tmp_path)  # the script is found by its own path, not the cwd
    r = CliRunner().invoke(app, ["replay", "--config", str(EX / name), "--fast", "--json"])
    assert r.exit_code in (0, 1), r.output
    doc = json.loads(r.stdout)
    rep = doc["reports"][0] if "reports" in doc else doc
    assert rep["format"] == SCRIPTS[name]
    s = rep["summary"]
    assert s["actual_updates"] > 0
    assert "no batch log given" in s["lengths"]
    assert s["config_source"]["launch_script"] == str(EX / name)


def test_nemo_rl_recipe_yaml_follows_defaults_inside_its_project(tmp_path):
    """The recipe alone (no launch script): ``defaults: ../../grpo_math_1B.yaml`` is inside
    the project (the nearest folder with a project marker), so it is followed."""
    recipe = (EX / "nemo-rl" / "examples" / "configs" / "recipes" / "llm" /
              "grpo-qwen2.5-7b-instruct-4n8g-fsdp2tp4-seqpack.yaml")
    cfg = load_config(recipe)
    assert (cfg.train.samples_per_step, cfg.train.mini_batch_size) == (512, 128)


def test_defaults_do_not_escape_the_folder_tree_unless_allowed(tmp_path):
    base = (EX / "nemo-rl" / "examples" / "configs" / "grpo_math_1B.yaml").read_text()
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "grpo_math_1B.yaml").write_text(base)
    (tmp_path / "a" / "b" / "r.yaml").write_text(
        "defaults: ../grpo_math_1B.yaml\ngrpo: {max_num_steps: 5}\n"
        "policy: {train_global_batch_size: 128}\n")
    with pytest.raises(UnusableInput) as exc:
        load_config(tmp_path / "a" / "b" / "r.yaml")
    assert "grpo.num_prompts_per_step is missing" in str(exc.value)
    assert "defaults not followed" in str(exc.value) and "--config-root" in str(exc.value)
    cfg = load_config(tmp_path / "a" / "b" / "r.yaml", config_root=tmp_path / "a")
    assert (cfg.train.steps, cfg.train.samples_per_step) == (5, 512)
    # merged as NeMo-RL merges: the child's scalars win, the parent's other keys stay
    assert cfg.train.mini_batch_size == 128 and cfg.batching.strategy == "sequence_packing"


def test_defaults_chain_is_bounded(tmp_path):
    for i in range(12):
        (tmp_path / f"c{i}.yaml").write_text(f"defaults: c{i + 1}.yaml\nx{i}: 1\n")
    (tmp_path / "pyproject.toml").write_text("")
    from lrdoctor.replay.translate.compose import load_tree

    with pytest.raises(UnusableInput, match="nested more than 8 deep"):
        load_tree(tmp_path / "c0.yaml")


def test_hostile_scripts_are_one_line_errors_or_configs(tmp_path):
    """Whatever a .sh holds, the reader answers with a config or one UnusableInput line
    (never a traceback): random edits of a real launch script, deep nesting, bad quoting."""
    import random

    real = (EX / "verl-grpo-seq-balance.sh").read_text()
    rng = random.Random(18)
    texts = ["python3 -m verl.trainer.main_ppo data.train_batch_size=${A:-" * 3000,
             "python3 -m verl.trainer.main_ppo 'unclosed", "x=$(\n" * 50, "\x00\x01\\\n" * 20]
    for _ in range(120):
        chars = list(real)
        for _ in range(rng.randint(1, 12)):
            pos = rng.randrange(len(chars))
            chars[pos] = rng.choice(["$", "{", "}", "'", '"', "\\", "(", ")", "`", "\n", "=",
                                     "~", "+", "#", " "])
        texts.append("".join(chars))
    for i, text in enumerate(texts):
        p = tmp_path / f"s{i}.sh"
        p.write_text(text)
        try:
            load_config(p)
        except UnusableInput as exc:
            assert "\n" not in str(exc)
