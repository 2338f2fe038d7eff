"""Replay severity follows provenance (issue 30, the CEO's rule from issue 27): an error
only when every number in its explanation was read from the files; a finding resting on
sample lengths no file holds (synthetic, drawn by lrdoctor) is at most a warning naming
them and how to give real ones. Reproduces OpenRLHF (its own shipped launch script,
train_reinforce_baseline_hybrid_engine.sh at 3c3be62) and OneVision-Encoder's off-by-one.
"""

from __future__ import annotations

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.replay import ReplayOptions, replay_full
from lrdoctor.runtime.record import BatchLogRecorder
from tests.helpers.paths import REPO

OPENRLHF = str(REPO / "tests/data/launch_scripts/openrlhf/"
               "train_reinforce_baseline_hybrid_engine.sh")
# data.max_samples 256 prompts / rollout.batch_size 128 = 2 train steps (the script's
# 128000 gives 1000): the same accounting, small enough for a unit test.
SMALL = ReplayOptions(engine="fast", sets=("data.max_samples=256",), knob_check=False)


def _lrd209(report):
    return next(f for f in report.findings if f.code == "LRD209")


def test_openrlhf_token_cap_on_synthetic_lengths_is_a_warning_naming_them():
    """OpenRLHF's script: cap 16192 x ring_attn_size 2 = 32384; no batch log, so the
    lengths are drawn up to data.max_len 74240. A sequence over the cap would make
    OpenRLHF raise, but no file says one exists: a warning, not an error."""
    f = _lrd209(replay_full(OPENRLHF, options=SMALL).report)
    assert f.severity == Severity.WARNING
    assert "uniform:4640:74240" in f.message and "--batch-log FILE" in f.message
    assert "the real run stops" not in f.message
    prov = f.to_dict()["evidence"]["provenance"]
    assert prov["lengths"]["kind"] == "synthetic" and prov["lengths"]["seed"] == 0
    assert prov["severity_with_real_lengths"] == "error"
    assert "train.max_tokens_per_gpu" in prov["config_keys_read"]
    assert prov["launch_script"].endswith("train_reinforce_baseline_hybrid_engine.sh")


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_openrlhf_token_cap_on_a_real_batch_log_is_an_error(tmp_path, fmt):
    """The same script with a batch log the recorder wrote (the run's own lengths): one
    sequence of 40000 tokens, over the 32384 cap, makes OpenRLHF's
    get_minimum_num_micro_batch_size raise at that step, read from the file: an error."""
    log = tmp_path / f"batches.{fmt}"
    with BatchLogRecorder(log) as rec:
        for step in range(2):  # 128 prompts x 8 samples per train step
            rec.log(step, tokens=[40000 if (step, i) == (1, 5) else 3000 + i
                                  for i in range(1024)])
    f = _lrd209(replay_full(OPENRLHF, batch_log=str(log), options=SMALL).report)
    assert f.severity == Severity.ERROR
    assert "the real run stops at train step 1" in f.message
    assert "Assumed" not in f.message
    ev = f.to_dict()["evidence"]
    assert ev["longest_sequence"] == 40000 and ev["cap"] == 32384
    assert ev["provenance"]["lengths"] == {"kind": "batch_log", "source": str(log),
                                           "given_by": "--batch-log"}
    assert "severity_with_real_lengths" not in ev["provenance"]


def test_openrlhf_real_lengths_under_the_cap_give_no_lrd209(tmp_path):
    """The finding is the lengths', not the config's: real lengths under the cap, none."""
    log = tmp_path / "batches.jsonl"
    with BatchLogRecorder(log) as rec:
        for step in range(2):
            rec.log(step, tokens=[3000 + i for i in range(1024)])
    report = replay_full(OPENRLHF, batch_log=str(log), options=SMALL).report
    assert "LRD209" not in {f.code for f in report.findings}


def test_config_entailed_error_stays_an_error_with_its_provenance():
    """OneVision-Encoder's ``global_step % k`` off-by-one: the first window is 1 whatever
    the lengths, so LRD204 stays an error; its evidence says it rests on no lengths."""
    report = replay_full(str(REPO / "examples/onevision-offbyone.yaml"),
                         options=ReplayOptions(engine="fast")).report
    f = next(f for f in report.findings if f.code == "LRD204")
    assert f.severity == Severity.ERROR
    assert f.to_dict()["evidence"]["provenance"]["rests_on_lengths"] is False


def test_every_replay_rule_declares_a_known_lengths_kind():
    from lrdoctor.rules import REPLAY
    from lrdoctor.rules.replay_context import LENGTHS_KINDS

    kinds = {m.__name__.rsplit(".", 1)[-1][:6]: getattr(m, "LENGTHS", "packing") for m in REPLAY}
    assert set(kinds.values()) <= set(LENGTHS_KINDS)
    assert kinds["lrd204"] == "none" and kinds["lrd209"] == "tokens"


def test_overshoot_fixed_by_the_config_stays_an_error_on_synthetic_lengths(tmp_path):
    """verl before 0.9.1 (examples/verl-dynamic-bsz.yaml): one update per mini-batch, the
    scheduler stepped once per train step, so the updates and the progress do not depend on
    the lengths. A cosine horizon of 60 train steps for a 100-step run overshoots for any
    lengths: LRD201 stays an error on synthetic lengths, marked as not resting on them,
    while LRD209 (the tokens themselves) is capped to a warning naming the draw."""
    import yaml

    data = yaml.safe_load((REPO / "examples/verl-dynamic-bsz.yaml").read_text())
    data["schedule"] = {"family": "hf", "kind": "cosine", "max_lr": 1e-6, "warmup": 0,
                        "horizon": 60}
    data["budget"] = {"formula": "explicit", "total": 60}
    path = tmp_path / "verl.yaml"
    path.write_text(yaml.safe_dump(data))
    found = {f.code: f for f in replay_full(str(path), options=ReplayOptions(
        engine="fast", knob_check=False)).report.findings}
    assert found["LRD201"].severity == Severity.ERROR
    prov = found["LRD201"].to_dict()["evidence"]["provenance"]
    assert prov["rests_on_lengths"] is False and prov["lengths"]["kind"] == "synthetic"
    assert "Assumed" not in found["LRD201"].message
    assert found["LRD209"].severity == Severity.WARNING  # no assert in verl 0.8.0 anyway
    assert "lognormal:mean=3000" in found["LRD209"].message
