"""The failure shapes of the design brief, replayed with their own numbers."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lrdoctor.replay import analysis, engine
from lrdoctor.replay.config import config_from_dict, with_key
from lrdoctor.replay.samples import load_samples
from lrdoctor.schedules import lr_at


def _run(cfg, df, knob=False):
    rep = engine.replay_fast(cfg, df)
    s = analysis.summarize(rep)
    k = analysis.memory_knob_check(rep, df) if knob else None
    return rep, s, {f.code: f for f in analysis.findings(rep, s, k)}


# ---------------------------------------------------------------- ROLL issue 442


ROLL = {
    "schedule": {"family": "megatron", "kind": "cosine", "max_lr": 1e-6, "min_lr": 0.0},
    "budget": {"formula": "roll"},
    "train": {"steps": 1024, "samples_per_step": 1024, "micro_batch_size": 2,
              "gradient_accumulation": 64},
    "dp": {"size": 8},
    "batching": {"strategy": "token_budget", "max_tokens_per_microbatch": 8192},
}


def _long_sequences(steps=4, per=1024, seed=0):
    """Every sequence longer than 4096 tokens: two never fit under 8192."""
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"step": np.repeat(np.arange(steps), per),
                         "tokens": rng.integers(4097, 8193, steps * per)})


def test_roll_sokoban_long_sequences_take_two_updates_per_pipeline_step():
    cfg = config_from_dict(ROLL)
    df = _long_sequences()  # 4 logged steps, cycled over the 1024 pipeline steps
    rep, s, found = _run(cfg, df, knob=True)
    t = rep.trace
    # Budget: 1024 * 1024 // (2 * 64) // 8 = 1024 optimizer updates.
    assert s["budget_updates"] == 1024 and s["horizon"] == 1024
    # One sequence per micro-batch: 128 per rank per step -> ceil(128 / 64) = 2 updates.
    assert set(t["rows"].tolist()) == {1}
    assert s["micro_batches"] == 1024 * 128
    assert s["updates_per_step"] == {"min": 2.0, "mean": 2.0, "max": 2.0}
    assert s["actual_updates"] == 2048 and s["scheduler_progress_end"] == 2048
    # Cosine reaches min_lr at pipeline step 512 of 1024.
    assert s["floor_step"] == 512 and s["floor_fraction"] == 0.5
    first = {int(st): i for i, st in reversed(list(enumerate(t["train_step"])))}
    assert t["lr"][first[512]] == 0.0 and t["lr"][first[511]] > 0.0
    assert t["lr"][first[256]] == pytest.approx(lr_at(rep.spec, 512))
    f = found["LRD201"]
    assert "after train step 512 of 1024 (50%)" in f.message
    assert f.evidence["corrected_progress_scale"] == 0.5
    assert "nominal/actual = 0.5" in f.fix and "2048" in f.fix
    # The automatic 2x check: 16384 tokens fit two sequences -> 1 update per step.
    knob = found["LRD203"]
    assert knob.evidence["rows"] == [(8192, 2048, 2048.0), (16384, 1024, 1024.0)]
    assert "LRD206" not in found


def test_roll_with_the_budget_following_the_real_count_is_clean():
    cfg = config_from_dict({**ROLL, "budget": {"formula": "explicit", "total": 2048}})
    _, s, found = _run(cfg, _long_sequences())
    assert s["progress_ratio"] == 1.0 and s["floor_step"] == 1024
    assert "LRD201" not in found and "LRD202" not in found


def test_roll_mixed_lengths_vary_updates_per_step():
    cfg = with_key(config_from_dict(ROLL), "train.steps", 8)
    rng = np.random.default_rng(3)
    # Half the steps long (2 updates), half short (1 update).
    tokens = np.concatenate([rng.integers(4097, 8193, 1024) if s % 2 == 0 else
                             rng.integers(100, 2000, 1024) for s in range(8)])
    df = pd.DataFrame({"step": np.repeat(np.arange(8), 1024), "tokens": tokens})
    _, s, found = _run(cfg, df)
    assert s["updates_per_step"]["min"] == 1 and s["updates_per_step"]["max"] == 2
    assert s["actual_updates"] == 12 and s["budget_updates"] == 8
    assert "LRD206" in found and "LRD201" in found


# ---------------------------------------------------------------- OneVision-Encoder PR 82


ONEVISION = {
    "schedule": {"family": "hf", "kind": "cosine", "max_lr": 1e-4},
    "train": {"steps": 25, "samples_per_step": 4, "micro_batch_size": 1,
              "gradient_accumulation": 4},
    "accumulation": {"rule": "off_by_one", "flush_at_step_end": False},
    "scheduler": {"step_on": "micro_step"},
    "batching": {"strategy": "static"},
}


def test_onevision_off_by_one_first_window_and_scheduler_four_times_fast():
    cfg = config_from_dict(ONEVISION)
    rep, s, found = _run(cfg, load_samples(cfg))
    t = rep.trace
    sizes = t["window_size"][t["is_update"]].tolist()
    assert sizes[:3] == [1, 4, 4] and len(sizes) == 25       # g % 4 == 0 at g = 0, 4, .., 96
    assert s["unapplied_micro_batches"] == 3                 # g = 97..99 never reach a step
    assert s["horizon"] == 25 and s["scheduler_progress_end"] == 100
    assert s["progress_ratio"] == 4.0                        # k = 4 times too fast
    assert s["floor_step"] == 7                              # 28 micro-steps >= 25
    # Inside each full window the LR changes 3 times: 24 windows + the open tail (2).
    assert s["lr_changes_inside_windows"] == 24 * 3 + 2
    assert {"LRD201", "LRD204", "LRD205"} <= set(found)
    assert found["LRD204"].evidence["window_sizes_head"] == [1, 4, 4, 4]


def test_onevision_fixed_loop_is_clean():
    cfg = config_from_dict({**ONEVISION, "accumulation": {"rule": "correct",
                                                          "flush_at_step_end": False},
                            "scheduler": {"step_on": "update"}})
    rep, s, found = _run(cfg, load_samples(cfg))
    assert set(rep.trace["window_size"][rep.trace["is_update"]].tolist()) == {4}
    assert s["actual_updates"] == 25 and s["progress_ratio"] == 1.0
    assert s["lr_changes_inside_windows"] == 0 and not found


# ---------------------------------------------------------------- SkyRL PR 1483 / 1529


TURNS = [3, 5, 4, 6, 4, 5, 6, 4]  # 8 prompts, 37 step-wise sequences


def _skyrl_log():
    pid = np.repeat(np.arange(len(TURNS)), TURNS)
    return pd.DataFrame({"step": np.zeros(len(pid), int), "tokens": np.full(len(pid), 512),
                         "prompt_id": pid})


SKYRL = {
    "schedule": {"family": "hf", "kind": "constant", "max_lr": 1e-6},
    # train_batch_size 8 prompts x n_samples 4 = 32; policy_mini_batch_size 4 x 4 = 16.
    "train": {"steps": 1, "samples_per_step": 32, "micro_batch_size": 4,
              "mini_batch_size": 16},
    "dp": {"size": 1},
}


def test_skyrl_sequence_unit_mini_batches_take_an_extra_step():
    cfg = config_from_dict({**SKYRL, "batching": {"strategy": "static"}})
    rep, s, found = _run(cfg, _skyrl_log())
    # 37 sequences in fixed mini-batches of 16: windows 16, 16, 5 sequences.
    assert s["nominal_updates_per_step"] == 2 and s["actual_updates"] == 3
    t = rep.trace
    assert t["window_size"][t["is_update"]].tolist() == [4, 4, 2]
    assert "37 sequences take 3 updates instead of 2" in found["LRD212"].message
    assert "LRD201" in found


def test_skyrl_prompt_unit_boundaries_keep_two_steps_per_batch():
    cfg = config_from_dict({**SKYRL, "batching": {"strategy": "prompt_unit"}})
    rep, s, found = _run(cfg, _skyrl_log())
    t = rep.trace
    assert s["actual_updates"] == 2 and s["progress_ratio"] == 1.0
    # Boundaries at prompts: 4 prompts each = 18 and 19 sequences.
    assert [int(t["samples"][t["window"] == w].sum()) for w in (0, 1)] == [18, 19]
    assert not found


def test_skyrl_slice_padding_comes_up_short():
    cfg = config_from_dict({**SKYRL, "dp": {"size": 8},
                            "batching": {"strategy": "prompt_unit", "pad_mode": "slice",
                                         "prompts_per_mini_batch": 1}})
    _, _, found = _run(cfg, _skyrl_log())
    ev = found["LRD208"].evidence["example"]
    # First prompt: 3 sequences, pad_size 5 > mb_size 3 -> only 6 rows, not 8.
    assert (ev["mb_size"], ev["pad_size"], ev["rows_after_padding"], ev["needed"]) == (3, 5, 6, 8)


# ---------------------------------------------------------------- Fast-LLM PR 520


def _docs_log():
    rng = np.random.default_rng(1)
    return pd.DataFrame({"step": np.repeat(np.arange(2), 32), "tokens": np.full(64, 2048),
                         "docs": rng.integers(1, 5, 64)})


FASTLLM = {
    "schedule": {"family": "megatron", "kind": "linear", "max_lr": 1e-4, "min_lr": 1e-5},
    "budget": {"formula": "explicit", "total": 8},
    "train": {"steps": 2, "samples_per_step": 32, "micro_batch_size": 2},
    "dp": {"size": 2},
    "batching": {"strategy": "doc_target", "docs_per_step": 16},
}


def test_fastllm_document_target_closes_on_global_docs_and_divides_by_the_step_total():
    cfg = config_from_dict(FASTLLM)
    df = _docs_log()
    rep, s, found = _run(cfg, df)
    t = rep.trace
    # Recompute the windows by hand: micro-step i holds rows 2i, 2i+1 of each rank's chunk.
    for step in range(2):
        d = df["docs"].to_numpy()[step * 32:(step + 1) * 32]
        per_mb = [int(d[2 * i:2 * i + 2].sum() + d[16 + 2 * i:16 + 2 * i + 2].sum())
                  for i in range(8)]
        expect, acc = [], 0
        for i, x in enumerate(per_mb):
            acc += x
            if acc >= 16 or i == 7:
                expect.append(i)
                acc = 0
        sel = t["train_step"] == step
        assert np.flatnonzero(t["is_update"][sel]).tolist() == expect
        assert t["docs"][sel].tolist() == per_mb
    # Every micro-batch divides by its window's global document total: weights sum to 1.
    closes = t["is_update"]
    assert np.allclose(t["window_weight_sum"][closes], 1.0)
    assert s["actual_updates"] == 8 and "LRD207" not in found


def test_fastllm_per_micro_batch_divisor_is_inconsistent():
    cfg = config_from_dict({**FASTLLM, "batching": {**FASTLLM["batching"],
                                                    "loss_divisor": "micro_batch"}})
    rep, _, found = _run(cfg, _docs_log())
    f = found["LRD207"]
    assert f.evidence["bad_updates"] == 8 and f.evidence["weight_sum_max"] == 2.0


# ---------------------------------------------------------------- RLinf online scaling


RLINF = {
    "schedule": {"family": "megatron", "kind": "cosine", "max_lr": 1e-6, "min_lr": 1e-7},
    "train": {"steps": 30, "samples_per_step": 128, "micro_batch_size": 2,
              "mini_batch_size": 64},
    "dp": {"size": 4, "changes": [{"at_step": 10, "size": 8}, {"at_step": 20, "size": 4}]},
    "batching": {"strategy": "static"},
}


def test_rlinf_dp_changes_with_sample_increments_do_not_drift():
    cfg = config_from_dict({**RLINF, "scheduler": {"increment": "samples"}})
    rep, s, found = _run(cfg, load_samples(cfg))
    ps = analysis.per_step(rep)
    # gbs 64 / (mbs 2 * dp) = 8 micro-batches per update at dp 4, 4 at dp 8.
    t = rep.trace
    assert set(t["window_size"][t["is_update"] & (t["dp"] == 4)].tolist()) == {8}
    assert set(t["window_size"][t["is_update"] & (t["dp"] == 8)].tolist()) == {4}
    assert set(ps["updates"].tolist()) == {2.0}
    assert set(ps["advance"].tolist()) == {128.0}               # samples per step, any dp
    assert s["horizon"] == 30 * 128 and s["progress_ratio"] == 1.0
    assert not found


def test_rlinf_per_micro_batch_increments_drift_with_dp():
    cfg = config_from_dict({**RLINF, "scheduler": {"increment": "micro_batches"}})
    rep, s, found = _run(cfg, load_samples(cfg))
    ps = analysis.per_step(rep)
    assert ps["advance"][:10].tolist() == [16.0] * 10            # 2 updates x 8 micro-batches
    assert ps["advance"][10:20].tolist() == [8.0] * 10           # dp 8: 2 x 4
    assert s["horizon"] == 30 * 2 * 8 and s["scheduler_progress_end"] == 400
    f = found["LRD210"]
    assert f.evidence["advance_by_dp"] == {4: 16.0, 8: 8.0}
    assert "LRD202" in found                                     # 400 of 480: never decays


def test_rlinf_steps_the_scheduler_on_failed_updates():
    cfg = config_from_dict({**RLINF, "dp": {"size": 4}, "scheduler": {
        "increment": "samples", "failed_updates": [3, 7, 11], "step_on_failed_update": True}})
    rep, s, found = _run(cfg, load_samples(cfg))
    assert s["failed_updates"] == 3 and s["progress_ratio"] == 1.0
    assert found["LRD211"].evidence["failed_updates"] == 3
    megatron_like = with_key(cfg, "scheduler.step_on_failed_update", False)
    _, s2, found2 = _run(megatron_like, load_samples(cfg))
    assert s2["scheduler_progress_end"] == 30 * 128 - 3 * 64 and "LRD211" not in found2


# ---------------------------------------------------------------- verl / accelerate siblings


def test_verl_steps_once_per_rollout_step_by_design_no_error():
    cfg = config_from_dict({
        "schedule": {"family": "hf", "kind": "cosine", "max_lr": 1e-6, "warmup": 2},
        "train": {"steps": 12, "samples_per_step": 64, "epochs_per_step": 2,
                  "micro_batch_size": 2, "mini_batch_size": 32},
        "dp": {"size": 2},
        "batching": {"strategy": "karmarkar_karp", "max_tokens_per_microbatch": 6000},
        "scheduler": {"step_on": "rollout_step"},
    })
    rep, s, found = _run(cfg, _long_sequences(steps=12, per=64))
    # 2 mini-batches x 2 epochs = 4 updates per step, one scheduler step per rollout step.
    assert s["updates_per_step"] == {"min": 4.0, "mean": 4.0, "max": 4.0}
    assert s["horizon"] == 12 and s["scheduler_progress_end"] == 12
    assert s["lr_changes_inside_windows"] == 0
    assert not {"LRD201", "LRD202", "LRD205"} & set(found)


def test_accelerate_scheduler_stepped_num_processes_times():
    cfg = config_from_dict({
        "schedule": {"family": "hf", "kind": "linear", "max_lr": 1e-4},
        "train": {"steps": 40, "samples_per_step": 32, "micro_batch_size": 4,
                  "gradient_accumulation": 2},
        "dp": {"size": 4},
        "scheduler": {"multiplier": 4},
    })
    _, s, found = _run(cfg, load_samples(cfg))
    assert s["actual_updates"] == 40 and s["scheduler_progress_end"] == 160
    assert s["progress_ratio"] == 4.0 and s["floor_step"] == 10
    assert found["LRD201"].evidence["corrected_progress_scale"] == 0.25
