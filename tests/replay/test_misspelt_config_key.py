"""Issue 29, item 9: a misspelt key of a known framework's config is said, with the key
meant. ROLL's pipeline YAML (examples/roll-sokoban-dynamic.yaml, the shape of ROLL's own
examples) with ``use_dynamic_batching_in_trian``: ROLL's WorkerConfig has no such field, so
dynamic batching stays off in ROLL and in the replay, and replay said "ok"."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from lrdoctor.cli import app
from lrdoctor.replay.translate.common import near_misses
from tests.helpers.paths import REPO

runner = CliRunner()
EXAMPLE = REPO / "examples" / "roll-sokoban-dynamic.yaml"


def _codes(path) -> dict[str, dict]:
    r = runner.invoke(app, ["replay", "-c", str(path), "--fast", "--json"])
    doc = json.loads(r.stdout)
    doc = doc[0] if isinstance(doc, list) else doc
    return {f["code"]: f for f in doc["findings"]}


def test_a_misspelt_roll_key_names_the_key_meant(tmp_path):
    text = EXAMPLE.read_text()
    assert "use_dynamic_batching_in_train: true" in text
    typo = tmp_path / "roll.yaml"
    typo.write_text(text.replace("use_dynamic_batching_in_train", "use_dynamic_batching_in_trian"))
    found = _codes(typo)
    f = found["LRD217"]
    assert f["severity"] == "warning"
    assert f["location"] == f"{typo}:actor_train.use_dynamic_batching_in_trian"
    assert f["evidence"]["nearest"] == "actor_train.use_dynamic_batching_in_train"
    assert "actor_train.use_dynamic_batching_in_train" in f["message"]
    assert "LRD217" not in _codes(EXAMPLE)  # the example as ROLL reads it: nothing to say


def test_only_near_misses_are_reported():
    """A key far from every known one may be a newer version's field: not reported."""
    known = frozenset({"use_dynamic_batching_in_train", "infer_batch_size"})
    got = near_misses({"use_dynamic_batching_in_trian": True, "lora_rank": 8,
                       "infer_batch_size": 4}, known, "actor_train", "ROLL's WorkerConfig")
    assert [g["key"] for g in got] == ["actor_train.use_dynamic_batching_in_trian"]


def test_a_misspelt_roll_pipeline_key_names_the_key_meant(tmp_path):
    """ROLL's top-level pipeline keys (the example's ``ppo_epochs: 1``, as ROLL's own
    examples set it): ``ppo_epoch: 2`` leaves ppo_epochs at its default in ROLL and in the
    replay; a misspelt required key (``max_step``) is named in the refusal."""
    typo = tmp_path / "roll.yaml"
    text = EXAMPLE.read_text()
    assert "\nppo_epochs: 1\n" in text and "\nmax_steps: 1024\n" in text
    typo.write_text(text.replace("\nppo_epochs: 1\n", "\nppo_epoch: 2\n"))
    f = _codes(typo)["LRD217"]
    assert f["evidence"]["key"] == "ppo_epoch" and f["evidence"]["nearest"] == "ppo_epochs"
    assert f["location"] == f"{typo}:ppo_epoch"
    typo.write_text(text.replace("\nmax_steps: 1024\n", "\nmax_step: 1024\n"))
    r = runner.invoke(app, ["replay", "-c", str(typo), "--fast"])
    assert r.exit_code == 2
    assert "max_steps is missing" in r.output and "max_step is set: rename it to max_steps" \
        in " ".join(r.output.split()), r.output


def test_a_misspelt_key_the_rlinf_translator_reads_is_named(tmp_path):
    """RLinf (its shipped qwen2.5-1.5b-grpo-megatron.yaml, tests/data/rlinf/shipped): a key
    the translator reads through its Reader (runner.enable_dynamic_batch_size) misspelt is
    absent, and the near miss beside it is named with the key meant."""
    import shutil

    shipped = tmp_path / "shipped"
    shutil.copytree(REPO / "tests" / "data" / "rlinf" / "shipped", shipped)
    cfg = shipped / "math" / "qwen2.5-1.5b-grpo-megatron.yaml"
    assert "LRD217" not in _codes(cfg)
    text = cfg.read_text()
    assert "enable_dynamic_batch_size: False" in text
    cfg.write_text(text.replace("enable_dynamic_batch_size: False",
                                "enable_dynamic_batch_sise: True"))
    f = _codes(cfg)["LRD217"]
    assert f["evidence"]["key"] == "runner.enable_dynamic_batch_sise"
    assert f["evidence"]["nearest"] == "runner.enable_dynamic_batch_size", f


def test_absent_near_misses_only_near_a_key_asked_for_and_missing():
    from lrdoctor.replay.translate.common import absent_near_misses

    data = {"max_step": 5, "lr_warmup_init": 0.0, "trainer": {"epochs": 2, "epoch": 3}}
    got = absent_near_misses(data, ["max_steps", "lr_warmup_iters", "trainer.epochs"], "t")
    # max_steps absent, max_step beside it: named; lr_warmup_init is a key of its own
    # (too far from lr_warmup_iters); trainer.epochs is set, so trainer.epoch is not named
    assert [(g["key"], g["nearest"]) for g in got] == [("max_step", "max_steps")]
