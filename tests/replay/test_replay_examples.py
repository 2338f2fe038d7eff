"""Every config in examples/ reports exactly what its comment says it demonstrates.

Run from another directory (the configs' data paths are relative to the config
file), on the fast path, and on the torch path where it is cheap enough, so a
false alarm or a wrong figure in an example fails here first.
"""

from __future__ import annotations

import numpy as np
import pytest

from lrdoctor.replay import ReplayOptions, planning, replay_full, run
from lrdoctor.replay import engine as eng
from lrdoctor.replay.config import load_config, with_key
from lrdoctor.replay.samples import load_samples
from tests.helpers.paths import REPO

EX = REPO / "examples"
SOKOBAN_LOG = str(EX / "batchlogs" / "roll-sokoban.csv")


def _summary(report) -> dict:
    return report.extra["summary"]


def _codes(report) -> set[str]:
    return {f.code for f in report.findings}


def _ev(report, code: str) -> dict:
    return next(f.evidence for f in report.findings if f.code == code)


def _severity(report, code: str) -> tuple[str, str | None]:
    """A finding's severity, and the one it would have with real lengths when synthetic
    lengths capped it (replay_context.with_provenance)."""
    d = next(f for f in report.findings if f.code == code).to_dict()
    return d["severity"], d["evidence"]["provenance"].get("severity_with_real_lengths")


def check_fastllm(rep, s):
    # The documents per sample are drawn (data.synthetic docs:1:8): the overshoot rests on
    # them, so it is a warning that would be an error on a batch log with these counts.
    assert _severity(rep, "LRD201") == ("warning", "error")
    # Documents counted over the stream: windows of 6-9 micro-batches, ~274 documents.
    assert s["actual_updates"] == 420 and s["budget_updates"] == 400
    assert s["updates_per_step"]["min"] == 8 and s["updates_per_step"]["max"] == 9
    assert s["progress_ratio"] == pytest.approx(1.05)
    assert s["windows_by"] == "strategy"


def check_onevision(rep, s):
    assert s["window_sizes"]["first"] == 1 and s["window_sizes"]["nominal"] == 4
    # One run-wide counter: 8000 micro-batches, 1 + 4 x 1999 in windows, 3 left over.
    assert s["actual_updates"] == 2000 and s["nominal_updates"] == 2000
    assert s["budget_updates"] == 2000  # the explicit 8000 micro-steps / k
    assert s["unapplied_micro_batches"] == 3
    assert _ev(rep, "LRD205")["scheduler_moves_per_update"] == pytest.approx(4.0)


def check_rlinf(rep, s):
    # RLinf (MegatronWorker.training_step): 512 samples per update at every dp size, over
    # lr_decay_iters 200 x 512; micro-batches per rank gbs / (mbs x dp): 64, 32, 64.
    assert s["horizon"] == s["scheduler_progress_end"] == 200 * 512
    assert s["scheduler_unit"] == "samples"
    assert _ev(rep, "LRD211")["failed_updates"] == 3
    assert (s["window_sizes"]["min"], s["window_sizes"]["max"]) == (32, 64)
    assert s["window_sizes"]["short"] == 0  # 32 at dp 8 is that dp's nominal k


def check_rlinf_fixed(rep, s):
    # Failed updates skip the scheduler (Megatron-LM's train_step): 197 x 512 samples.
    assert s["horizon"] == 200 * 512 and s["scheduler_progress_end"] == 197 * 512
    assert s["actual_updates"] == 200 and s["failed_updates"] == 3
    assert s["window_sizes"]["short"] == 0


def check_rlinf_default_horizon(rep, s):
    # rlinf/config.py train_iters 100000 x global batch 512; the run reaches 200 x 512.
    assert s["horizon"] == 100000 * 512 and s["scheduler_progress_end"] == 200 * 512
    assert s["lr_end"] > 0.99 * 2e-6


def check_sokoban(rep, s):
    assert _severity(rep, "LRD201") == ("error", None)  # read from the batch log
    assert s["actual_updates"] == 2048 and s["budget_updates"] == 1024
    assert s["floor_step"] == 512
    assert _ev(rep, "LRD203")["rows"] == [(8192, 2048, 2048.0), (16384, 1024, 1024.0)]


def check_skyrl(rep, s):
    assert s["actual_updates"] == s["budget_updates"] == 32


def check_verl(rep, s):
    ev = _ev(rep, "LRD209")
    assert ev["cap"] == 16384 and ev["measure"] == "real tokens"
    assert 16384 < ev["max_tokens"] < 20000  # not rows x padded length (~35k)
    assert s["actual_updates"] == 400 and s["progress_ratio"] == 1.0
    # The same run on verl 0.9.1 fits every micro-batch under the cap: no LRD209.
    cfg = load_config(EX / "verl-dynamic-bsz.yaml")
    new = with_key(with_key(cfg, "framework", "verl==0.9.1"), "batching.flavor", "verl")
    infos = planning.plan_steps(new, load_samples(new))
    assert max(i.plan.notes["max_micro_batch_tokens"] for i in infos) <= 16384


def check_verl_grpo(rep, s):
    # 256 prompts x 8 / (64 x 8) = 4 updates per step, 40 steps; verl 0.9.1 fits every
    # micro-batch under the 24000-token cap, so no LRD209.
    assert s["actual_updates"] == 160 and s["progress_ratio"] == 1.0
    assert "trainer.critic_warmup" in s["config_keys_used"]


def check_skyrl_trainer(rep, s):
    assert s["actual_updates"] == 120 and s["updates_per_step"]["min"] == 4
    assert s["config_keys_used"]["generator.n_samples_per_prompt"] == 4


def check_nemo(rep, s):
    assert s["actual_updates"] == 200 and s["progress_ratio"] == 1.0


def check_fast_llm(rep, s):
    assert s["actual_updates"] > 200 and s["progress_ratio"] > 1.0


def check_fast_llm_current(rep, s):
    # current schema: one micro-batch (8192 tokens) per rank per iteration, 100 iterations
    assert s["actual_updates"] == 100 and s["progress_ratio"] == 1.0
    assert rep.state["config"]["dp"]["size"] == 8


CASES = {
    # name: (extra args, expected codes, checker, also on the torch path)
    "fast-llm-current": ({}, set(), check_fast_llm_current, False),
    "fastllm-docs": ({}, {"LRD201"}, check_fastllm, True),
    "onevision-offbyone": ({}, {"LRD204", "LRD205"}, check_onevision, False),
    "rlinf-elastic": ({}, {"LRD211"}, check_rlinf, True),
    "rlinf-elastic-fixed": ({}, {"LRD202"}, check_rlinf_fixed, False),
    "rlinf-default-horizon": ({}, {"LRD202"}, check_rlinf_default_horizon, False),
    "roll-sokoban-dynamic": ({"batch_log": SOKOBAN_LOG}, {"LRD201", "LRD203"}, check_sokoban,
                             False),
    "skyrl-stepwise": ({}, set(), check_skyrl, True),
    "verl-dynamic-bsz": ({}, {"LRD209"}, check_verl, False),
    # The frameworks' own configs, translated (tests/replay/test_replay_translate.py checks the keys).
    "verl-grpo-trainer": ({}, {"LRD213"}, check_verl_grpo, False),
    "skyrl-trainer": ({}, set(), check_skyrl_trainer, False),
    "nemo-rl-grpo-math": ({}, set(), check_nemo, True),
    "fast-llm-trainer": ({}, {"LRD201"}, check_fast_llm, False),
}


def test_every_example_is_covered():
    assert {p.stem for p in EX.glob("*.yaml")} == set(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_example_reports_what_it_demonstrates(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # paths in the config are relative to the config file
    extra, codes, check, _ = CASES[name]
    # The fast path, backed on request by a real torch run of a sample (--cross-check).
    rep = run(str(EX / f"{name}.yaml"), **extra,
              options=ReplayOptions(device="cpu", cross_check=True))
    assert _codes(rep) == codes, [f.message for f in rep.findings]
    check(rep, _summary(rep))
    s = _summary(rep)
    assert s["engine"] == "fast"
    cross = s["cross_check"]
    assert cross["ran"] and cross["agree"], cross["mismatches"]
    assert 0 < cross["micro_batches"] <= cross["of"] and not cross["not_covered"]
    assert cross["segments"][0]["why"] == "first train steps"


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c[3]))
def test_example_same_verdict_on_torch_path(name):
    extra, codes, check, _ = CASES[name]
    rep = run(str(EX / f"{name}.yaml"), **extra, options=ReplayOptions(engine="torch", device="cpu"))
    assert _summary(rep)["engine"] == "torch"
    assert _codes(rep) == codes, [f.message for f in rep.findings]
    check(rep, _summary(rep))


@pytest.mark.parametrize("divisor, bad", [("step_total", 0), ("micro_batch", 420)])
def test_fastllm_loss_divisor_agrees_on_both_paths(divisor, bad):
    """Fast-LLM divides by the step's global document total: weight sums are exactly 1.

    The torch path once summed the probe in float32 and flagged 63 of 448 correct
    windows (1e-7 rounding against a 1e-9 test); both paths must give the same count.
    """
    from lrdoctor.replay import analysis, torch_exec

    cfg = with_key(load_config(EX / "fastllm-docs.yaml"), "batching.loss_divisor", divisor)
    infos = planning.plan_steps(cfg, load_samples(cfg))
    for rep in (eng.simulate(cfg, infos), torch_exec.replay_torch(cfg, infos, device="cpu")):
        sums = rep.trace["window_weight_sum"][rep.trace["is_update"]]
        found = {f.code: f for f in analysis.findings(rep)}
        if bad:
            assert found["LRD207"].evidence["bad_updates"] == bad
            assert sums.max() > 1.5
        else:
            assert "LRD207" not in found
            assert np.abs(sums - 1).max() < 1e-12


def test_verl_token_cap_is_checked_on_real_tokens():
    """verl packs without padding: the cap is against the rank's real tokens."""
    cfg = load_config(EX / "verl-dynamic-bsz.yaml")
    infos = planning.plan_steps(cfg, load_samples(cfg))
    real = max(i.plan.notes["max_micro_batch_tokens"] for i in infos)
    padded = max(len(r) * p for i in infos for mb in i.plan.micro_batches
                 for r, p in zip(mb.ranks, mb.padded_len, strict=True))
    rep = run(str(EX / "verl-dynamic-bsz.yaml"), options=ReplayOptions(engine="fast"))
    assert _ev(rep, "LRD209")["max_tokens"] == real < padded
    # The same loop with padding (packed: false) is judged on rows x padded length.
    padded_cfg = with_key(cfg, "batching.packed", False)
    rep2 = eng.simulate(padded_cfg, planning.plan_steps(padded_cfg, load_samples(padded_cfg)))
    assert int(rep2.trace["max_rank_tokens"].max()) == padded


def test_skyrl_prefix_sweep_shows_the_fixed_size_bug():
    res = replay_full(str(EX / "skyrl-stepwise.yaml"), options=ReplayOptions(engine="fast", sweep="batching.strategy=prompt_unit,static"))
    rows = {r["batching.strategy"]: r for r in res.report.extra["sweep"]["rows"]}
    assert rows["prompt_unit"]["findings"] == [] and rows["prompt_unit"]["actual_updates"] == 32
    assert set(rows["static"]["findings"]) == {"LRD201", "LRD206", "LRD212"}
    assert rows["static"]["actual_updates"] == 99
    # A strategy sweep is not a memory knob: no LRD203 for the base run.
    assert "LRD203" not in _codes(res.report)


def test_rlinf_sweep_contrasts_increments():
    res = replay_full(str(EX / "rlinf-elastic.yaml"), options=ReplayOptions(engine="fast", sweep="scheduler.increment=micro_batches,samples"))
    rows = {r["scheduler.increment"]: r for r in res.report.extra["sweep"]["rows"]}
    assert "LRD210" in rows["micro_batches"]["findings"]
    assert "LRD210" not in rows["samples"]["findings"]


def test_batch_log_in_config_is_relative_to_the_config(tmp_path, monkeypatch):
    (tmp_path / "cfg").mkdir()
    (tmp_path / "cfg" / "logs").mkdir()
    (tmp_path / "cfg" / "logs" / "b.csv").write_text(
        "step,tokens\n" + "".join(f"{s},{100 + i}\n" for s in range(2) for i in range(8)))
    (tmp_path / "cfg" / "run.yaml").write_text(
        "train: {steps: 2, micro_batch_size: 2, gradient_accumulation: 2}\n"
        "dp: {size: 2}\nbatching: {strategy: token_budget, max_tokens_per_microbatch: 512}\n"
        "data: {batch_log: logs/b.csv}\n")
    monkeypatch.chdir(tmp_path)  # not the config's directory
    rep = run("cfg/run.yaml", options=ReplayOptions(engine="fast"))
    assert rep.state["samples"] == 16


def test_fastllm_flush_sweep_shows_the_tail_windows():
    res = replay_full(str(EX / "fastllm-docs.yaml"), options=ReplayOptions(engine="fast", sweep="accumulation.flush_at_step_end=false,true"))
    rows = {r["accumulation.flush_at_step_end"]: r for r in res.report.extra["sweep"]["rows"]}
    assert rows[False]["actual_updates"] == 420 and rows[False]["findings"] == ["LRD201"]
    assert rows[True]["actual_updates"] == 448
    assert set(rows[True]["findings"]) == {"LRD201", "LRD206"}


def test_missing_config_batch_log_names_the_key(tmp_path):
    from lrdoctor.core.errors import UnusableInput

    (tmp_path / "run.yaml").write_text(
        "train: {steps: 1}\nbatching: {strategy: token_budget, max_tokens_per_microbatch: 9}\n"
        "data: {batch_log: logs/none.csv}\n")
    with pytest.raises(UnusableInput, match=r"data.batch_log 'logs/none.csv': no such file") as e:
        run(str(tmp_path / "run.yaml"), options=ReplayOptions(engine="fast"))
    assert e.value.path == str(tmp_path / "logs" / "none.csv")
