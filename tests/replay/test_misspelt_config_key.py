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
