"""Replay engine: config validation, window rules, and fast path == real torch path."""

from __future__ import annotations

import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.findings import Severity
from lrdoctor.replay import engine, planning, torch_exec
from lrdoctor.replay.config import config_from_dict, load_config, with_key
from lrdoctor.replay.packing import MicroBatch, StepPlan
from lrdoctor.replay.samples import load_samples

BASE = {
    "schedule": {"family": "megatron", "kind": "cosine", "max_lr": 1e-3, "min_lr": 1e-5,
                 "warmup": 2},
    "train": {"steps": 6, "samples_per_step": 32, "micro_batch_size": 2,
              "gradient_accumulation": 4},
    "dp": {"size": 2},
    "batching": {"strategy": "token_budget", "max_tokens_per_microbatch": 4096},
}


def _cfg(**over):
    d = {k: dict(v) for k, v in BASE.items()}
    for k, v in over.items():
        d[k] = {**d.get(k, {}), **v}
    return config_from_dict(d, "run.yaml")


def _lengths(steps=6, per=32, lo=100, hi=3000, seed=0):
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"step": np.repeat(np.arange(steps), per),
                         "tokens": rng.integers(lo, hi, steps * per),
                         "docs": rng.integers(1, 6, steps * per)})


def static_planner(rows_per_mb: int):
    """A tiny local plan: every micro-batch holds ``rows_per_mb`` rows on rank 0."""

    def plan(batching, train, frame, dp):
        n = len(frame["tokens"])
        mbs = [MicroBatch([list(range(i, min(i + rows_per_mb, n)))], [8], [8])
               for i in range(0, n, rows_per_mb)]
        return StepPlan(mbs, None, None, {})

    return plan


# ---------------------------------------------------------------- config


@pytest.mark.parametrize("bad, expected", [
    ({"batching": {"strategy": "magic"}}, "key 'batching.strategy': got 'magic'; input should be"),
    ({"batching": {"max_token": 3}}, "unknown key 'batching.max_token' (allowed: strategy,"),
    ({"schedule": {"horizon": "soon"}}, "key 'schedule.horizon': got 'soon'; allowed: a number or 'auto'"),
    ({"scheduler": {"increment": "tokens"}}, "allowed: a number or 'samples' or 'micro_batches'"),
    ({"train": {"steps": 0}}, "key 'train.steps': got 0; input should be greater than or equal to 1"),
    ({"batching": {"strategy": "doc_target"}}, "strategy doc_target needs docs_per_step"),
])
def test_config_errors_are_one_line_naming_key_value_and_allowed(bad, expected):
    d = {k: dict(v) for k, v in BASE.items()}
    for k, v in bad.items():
        d[k] = v if k == "batching" and "max_token" in v else {**d.get(k, {}), **v}
    with pytest.raises(UnusableInput) as exc:
        config_from_dict(d, "run.yaml")
    msg = str(exc.value)
    assert "\n" not in msg and msg.startswith("run.yaml: ")
    assert expected in msg


def test_load_config_reads_yaml_and_rejects_non_mapping(tmp_path):
    p = tmp_path / "run.yaml"
    p.write_text(textwrap.dedent("""
        train: {steps: 3, samples_per_step: 8}
        schedule: {max_lr: 1e-4}
    """))
    cfg = load_config(p)
    assert cfg.schedule.max_lr == 1e-4 and cfg.train.steps == 3
    p.write_text("- just\n- a list\n")
    with pytest.raises(UnusableInput, match="must be a YAML mapping"):
        load_config(p)
    p.write_text("train: [unclosed\n")
    with pytest.raises(UnusableInput, match="not valid YAML at line"):
        load_config(p)


def test_with_key_sets_and_validates_dotted_keys():
    cfg = _cfg()
    assert with_key(cfg, "batching.max_tokens_per_microbatch", 8192).batching \
        .max_tokens_per_microbatch == 8192
    with pytest.raises(UnusableInput, match="unknown key 'batching.nope'"):
        with_key(cfg, "batching.nope", 1)
    with pytest.raises(UnusableInput, match="batching.max_tokens_per_microbatch"):
        with_key(cfg, "batching.max_tokens_per_microbatch", -5)


def test_dp_size_at_follows_changes():
    cfg = _cfg(train={"steps": 30}, dp={"size": 4, "changes": [{"at_step": 10, "size": 8},
                                                              {"at_step": 20, "size": 4}]})
    assert [cfg.dp.size_at(s) for s in (0, 9, 10, 19, 20, 29)] == [4, 4, 8, 8, 4, 4]


# ---------------------------------------------------------------- window rules (local plan)


def _windows(cfg, per_step, rows_per_mb=1):
    df = pd.DataFrame({"step": np.repeat(np.arange(cfg.train.steps), per_step),
                       "tokens": np.full(cfg.train.steps * per_step, 8)})
    rep = engine.replay_fast(cfg, df, planner=static_planner(rows_per_mb))
    t = rep.trace
    return t["window_size"][t["is_update"]].tolist(), rep


def test_correct_rule_flushes_a_short_last_window_per_step():
    cfg = _cfg(train={"steps": 2, "gradient_accumulation": 4}, dp={"size": 1})
    sizes, _ = _windows(cfg, per_step=10)
    assert sizes == [4, 4, 2, 4, 4, 2]


def test_off_by_one_with_a_run_wide_counter_shifts_every_window():
    cfg = _cfg(train={"steps": 3, "gradient_accumulation": 4}, dp={"size": 1},
               accumulation={"rule": "off_by_one", "flush_at_step_end": False})
    sizes, rep = _windows(cfg, per_step=4)
    assert sizes == [1, 4, 4]          # 12 micro-batches: 1 + 4 + 4, three left over
    assert int((~rep.trace["applied"]).sum()) == 3


def test_off_by_one_with_flush_restarts_each_step():
    cfg = _cfg(train={"steps": 2, "gradient_accumulation": 4}, dp={"size": 1},
               accumulation={"rule": "off_by_one"})
    sizes, _ = _windows(cfg, per_step=9)
    assert sizes == [1, 4, 4, 1, 4, 4]


def test_scheduler_increments_multiplier_and_failed_updates():
    cfg = _cfg(train={"steps": 2, "gradient_accumulation": 2}, dp={"size": 1},
               scheduler={"multiplier": 3, "failed_updates": [1]})
    _, rep = _windows(cfg, per_step=4)
    # 4 updates, update 1 failed and is not stepped: 3 successful x multiplier 3.
    assert rep.trace["scheduler_progress"][-1] == 9.0
    cfg2 = with_key(cfg, "scheduler.step_on_failed_update", True)
    _, rep2 = _windows(cfg2, per_step=4)
    assert rep2.trace["scheduler_progress"][-1] == 12.0
    cfg3 = _cfg(train={"steps": 2, "gradient_accumulation": 2}, dp={"size": 1},
                scheduler={"increment": "samples"})
    _, rep3 = _windows(cfg3, per_step=4, rows_per_mb=3)
    # samples: windows hold 3+1 rows per step -> progress = all 8 samples
    assert rep3.trace["scheduler_progress"][-1] == 8.0


def test_lr_seen_is_the_schedule_before_the_micro_batch():
    from lrdoctor.schedules import lr_at

    cfg = _cfg(train={"steps": 3, "gradient_accumulation": 2}, dp={"size": 1},
               schedule={"horizon": 10})
    _, rep = _windows(cfg, per_step=4)
    t = rep.trace
    before = np.r_[0.0, t["scheduler_progress"][:-1]]
    assert np.allclose(t["lr"], [lr_at(rep.spec, p) for p in before], rtol=0, atol=0)
    assert rep.spec.horizon == 10.0


# ---------------------------------------------------------------- fast path == torch path


VARIANTS = [
    {},
    {"accumulation": {"rule": "off_by_one"}},
    {"accumulation": {"rule": "off_by_one", "flush_at_step_end": False}},
    {"scheduler": {"step_on": "micro_step"}},
    {"scheduler": {"increment": "samples"}},
    {"scheduler": {"failed_updates": [1, 3], "step_on_failed_update": True, "multiplier": 2}},
    {"scheduler": {"step_on": "rollout_step"}, "train": {"epochs_per_step": 2}},
    {"schedule": {"family": "hf", "kind": "cosine", "max_lr": 1e-3, "min_lr": 0.0, "warmup": 3}},
    {"batching": {"strategy": "karmarkar_karp", "max_tokens_per_microbatch": 6000},
     "train": {"mini_batch_size": 16}},
    {"batching": {"strategy": "doc_target", "docs_per_step": 13}},
    {"batching": {"strategy": "doc_target", "docs_per_step": 13, "loss_divisor": "micro_batch"},
     "scheduler": {"increment": "micro_batches"}},
]


@pytest.mark.parametrize("over", VARIANTS, ids=lambda o: ",".join(
    f"{k}.{kk}={vv}" for k, v in o.items() for kk, vv in v.items()) or "plain")
def test_fast_path_agrees_with_real_torch_optimizer_and_scheduler(over):
    cfg = _cfg(**over)
    df = _lengths()
    infos = planning.plan_steps(cfg, df)
    fast = engine.simulate(cfg, infos)
    real = torch_exec.replay_torch(cfg, infos, device="cpu")
    F, T = fast.trace, real.trace
    assert len(F["lr"]) == len(T["lr"]) > 20
    for col in ("train_step", "epoch", "micro_index", "rows", "padded_len", "samples",
                "window", "window_size", "is_update", "applied", "update_index", "failed", "dp"):
        assert np.array_equal(F[col], T[col]), col
    assert int(F["is_update"].sum()) == int(T["is_update"].sum())
    assert np.allclose(F["lr"], T["lr"], rtol=1e-12, atol=0)
    assert np.allclose(F["scheduler_progress"], T["scheduler_progress"], rtol=1e-12, atol=0)
    # The torch path measured window sizes and loss-weight sums from gradients.
    closes = T["is_update"]
    assert np.allclose(F["window_weight_sum"][closes], T["window_weight_sum"][closes],
                       rtol=1e-12, atol=0)
    assert np.allclose(F["loss_weight"], T["loss_weight"], rtol=1e-12, atol=0)
    expected = "megatron-core" if cfg.schedule.family == "megatron" else "LambdaLR"
    assert expected in real.notes["scheduler_class"]
    assert np.all(np.isnan(T["peak_mem_bytes"]))


def test_torch_path_takes_a_user_model(tmp_path, monkeypatch):
    (tmp_path / "lrd_user_model.py").write_text(textwrap.dedent("""
        import torch
        class M(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.emb = torch.nn.Embedding(256, 4)
                self.calls = []
            def forward(self, ids):
                self.calls.append(tuple(ids.shape))
                return {"logits": self.emb(ids)}
        made = []
        def factory():
            made.append(M())
            return made[-1]
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = _cfg(train={"steps": 2})
    infos = planning.plan_steps(cfg, _lengths(steps=2))
    factory = torch_exec.load_model_factory("lrd_user_model:factory")
    rep = torch_exec.replay_torch(cfg, infos, device="cpu", model_factory=factory,
                                  optimizer="adamw")
    model = sys.modules["lrd_user_model"].made[-1]
    # The model saw each micro-batch at its heaviest rank's real padded shape.
    assert len(model.calls) == len(rep.trace["lr"])
    assert [r * c for r, c in model.calls] == rep.trace["max_rank_tokens"].tolist()
    assert rep.notes["model"] == "user" and rep.notes["optimizer"] == "AdamW"
    with pytest.raises(UnusableInput, match="expected module:factory"):
        torch_exec.load_model_factory("nocolon")
    with pytest.raises(UnusableInput, match="cannot import"):
        torch_exec.load_model_factory("no_such_module_xyz:f")


def test_cuda_request_without_cuda_is_unusable_input():
    import torch

    if torch.cuda.is_available():
        pytest.skip("CUDA present")
    with pytest.raises(UnusableInput, match="no CUDA device"):
        torch_exec.pick_device("cuda")


def test_static_without_lengths_and_token_budget_needs_lengths():
    cfg = _cfg(batching={"strategy": "static"})
    df = load_samples(cfg)
    # One step's rows, the same at every step (UniformSamples): 6 steps x 32 in all.
    assert len(df) == 32 and df.total == 6 * 32 and set(df["tokens"]) == {1}
    with pytest.raises(UnusableInput, match="needs sample lengths"):
        load_samples(_cfg())


def test_short_log_is_cycled_and_noted():
    cfg = _cfg(train={"steps": 10})
    rep = engine.replay_fast(cfg, _lengths(steps=3))
    assert rep.notes["cycled"] == "the batch log holds 3 steps; cycled over 10"
    per = [int(rep.trace["is_update"][rep.trace["train_step"] == s].sum()) for s in range(10)]
    assert per[0:3] == per[3:6] == per[6:9]


# ---------------------------------------------------------------- property: any loop, both engines


from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(1, 5), rule=st.sampled_from(["correct", "off_by_one"]),
       flush=st.booleans(), step_on=st.sampled_from(["update", "micro_step", "rollout_step"]),
       inc=st.sampled_from([1, 2.5, "samples", "micro_batches"]), mult=st.integers(1, 3),
       epochs=st.integers(1, 2), failed=st.lists(st.integers(0, 12), max_size=3),
       on_failed=st.booleans(), per_step=st.integers(1, 9), rows=st.integers(1, 3))
def test_any_loop_replays_the_same_on_both_engines(k, rule, flush, step_on, inc, mult, epochs,
                                                  failed, on_failed, per_step, rows):
    cfg = config_from_dict({
        "schedule": {"family": "hf", "kind": "linear", "max_lr": 1e-3, "warmup": 1,
                     "horizon": 40},
        "train": {"steps": 4, "samples_per_step": per_step, "epochs_per_step": epochs,
                  "gradient_accumulation": k},
        "accumulation": {"rule": rule, "flush_at_step_end": flush},
        "scheduler": {"step_on": step_on, "increment": inc, "multiplier": mult,
                      "failed_updates": failed, "step_on_failed_update": on_failed},
    })
    df = pd.DataFrame({"step": np.repeat(np.arange(4), per_step),
                       "tokens": np.full(4 * per_step, 8)})
    infos = planning.plan_steps(cfg, df, planner=static_planner(rows))
    F = engine.simulate(cfg, infos).trace
    T = torch_exec.replay_torch(cfg, infos, device="cpu").trace
    for col in ("window", "window_size", "is_update", "applied", "update_index", "failed"):
        assert np.array_equal(F[col], T[col]), col
    assert np.allclose(F["scheduler_progress"], T["scheduler_progress"], rtol=1e-12, atol=0)
    assert np.allclose(F["lr"], T["lr"], rtol=1e-12, atol=0)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(strategy=st.sampled_from(["static", "token_budget", "karmarkar_karp",
                                 "balanced_first_fit", "prompt_unit", "doc_target"]),
       dp2=st.sampled_from([1, 2, 4]), inc=st.sampled_from([1, "samples", "micro_batches"]),
       seed=st.integers(0, 10_000), flush=st.booleans())
def test_real_packings_with_dp_changes_replay_the_same_on_both_engines(strategy, dp2, inc,
                                                                       seed, flush):
    rng = np.random.default_rng(seed)
    n = 4 * 24
    df = pd.DataFrame({"step": np.repeat(np.arange(4), 24),
                       "tokens": rng.integers(50, 3000, n),
                       "prompt_id": np.arange(n) // 3,
                       "docs": rng.integers(1, 4, n)})
    cfg = config_from_dict({
        "schedule": {"family": "megatron", "kind": "linear", "max_lr": 1e-3, "min_lr": 1e-4},
        "train": {"steps": 4, "samples_per_step": 24, "micro_batch_size": 2,
                  "gradient_accumulation": 3, "mini_batch_size": 12},
        "dp": {"size": 2, "changes": [{"at_step": 2, "size": dp2}]},
        "batching": {"strategy": strategy, "max_tokens_per_microbatch": 4096,
                     "docs_per_step": 9},
        "scheduler": {"increment": inc},
        "accumulation": {"flush_at_step_end": flush},
    })
    infos = planning.plan_steps(cfg, df)
    F = engine.simulate(cfg, infos).trace
    T = torch_exec.replay_torch(cfg, infos, device="cpu").trace
    for col in ("window", "window_size", "is_update", "samples", "max_rank_tokens", "dp"):
        assert np.array_equal(F[col], T[col]), col
    for col in ("scheduler_progress", "lr", "loss_weight"):
        assert np.allclose(F[col], T[col], rtol=1e-12, atol=0), col
    closes = F["is_update"]
    assert np.allclose(F["window_weight_sum"][closes], T["window_weight_sum"][closes],
                       rtol=1e-12, atol=0)


@pytest.mark.parametrize("strategy, packed, measure, worst", [
    # ROLL pads, but keeps count x max <= cap: only the lone 1500-token sequence is over.
    ("token_budget", None, "rows x padded length", 1500),
    # SkyRL packs: the 1500-token sequence sits alone; its real tokens are the cost.
    ("balanced_first_fit", None, "real tokens", 1500),
    # verl: 4 balanced partitions; packed, only the lone long sequence is over (1 of 4);
    # the same partitions padded put 2 rows x 700 = 1400 over the cap as well.
    ("karmarkar_karp", None, "real tokens", 1500),
    ("karmarkar_karp", False, "rows x padded length", None),
])
def test_token_cap_measure_follows_packing(strategy, packed, measure, worst):
    from lrdoctor.replay import analysis

    cfg = config_from_dict({
        "train": {"steps": 1, "samples_per_step": 6, "mini_batch_size": 6},
        "batching": {"strategy": strategy, "max_tokens_per_microbatch": 1000,
                     "packed": packed},
    })
    df = pd.DataFrame({"step": [0] * 6, "tokens": [1500, 600, 700, 300, 500, 300]})
    infos = planning.plan_steps(cfg, df)
    rep = engine.simulate(cfg, infos)
    f = {x.code: x for x in analysis.findings(rep)}["LRD209"]
    assert f.evidence["measure"] == measure
    real = max(max(mb.tokens) for mb in infos[0].plan.micro_batches)
    padded = max(len(r) * p for mb in infos[0].plan.micro_batches
                 for r, p in zip(mb.ranks, mb.padded_len, strict=True))
    assert f.evidence["max_tokens"] == (real if measure == "real tokens" else padded)
    if worst is not None:
        assert f.evidence["max_tokens"] == worst and f.evidence["longest_sequence"] == 1500
    # ROLL and verl assert on a sequence longer than the cap: the real run stops (an
    # error); SkyRL's balanced packer puts it alone in a micro-batch (a warning).
    asserts = strategy in ("token_budget", "karmarkar_karp")
    assert f.severity == (Severity.ERROR if asserts else Severity.WARNING)
    assert bool(f.evidence["framework_asserts"]) == asserts
    if asserts:
        assert "the real run stops at train step 0" in f.message
        assert "at least 1500" in f.fix


@pytest.mark.parametrize("strategy, flavor, who", [
    ("token_budget", "roll", "ROLL's dynamic_batching_shard"),
    ("token_budget", "nemo_rl", "NeMo-RL's dynamic batching"),
    ("karmarkar_karp", "openrlhf", "OpenRLHF's get_minimum_num_micro_batch_size"),
    ("balanced_first_fit", "verl", None),
])
def test_a_sequence_over_the_cap_is_an_error_where_the_framework_asserts(strategy, flavor, who):
    from lrdoctor.replay import analysis

    cfg = config_from_dict({
        "train": {"steps": 3, "samples_per_step": 4, "mini_batch_size": 4},
        "batching": {"strategy": strategy, "max_tokens_per_microbatch": 1000,
                     "flavor": flavor},
    })
    # Only train step 2 holds a sequence over the cap.
    df = pd.DataFrame({"step": [0] * 4 + [1] * 4 + [2] * 4,
                       "tokens": [100, 200, 300, 400] * 2 + [1200, 100, 100, 100]})
    rep = engine.simulate(cfg, planning.plan_steps(cfg, df))
    f = {x.code: x for x in analysis.findings(rep)}["LRD209"]
    if who is None:
        assert f.severity == Severity.WARNING and f.evidence["framework_asserts"] is None
    else:
        assert f.severity == Severity.ERROR
        assert who in f.evidence["framework_asserts"]
        assert "the real run stops at train step 2" in f.message


def test_doc_target_windows_carry_over_train_steps_without_flush():
    """Fast-LLM: the document count runs on across train steps; no short tail windows."""
    from lrdoctor.replay import analysis

    base = {"train": {"steps": 3, "samples_per_step": 10, "micro_batch_size": 1},
            "batching": {"strategy": "doc_target", "docs_per_step": 4}}
    df = pd.DataFrame({"step": np.repeat(np.arange(3), 10), "tokens": np.full(30, 8),
                       "docs": np.ones(30, dtype=np.int64)})
    flushed = engine.replay_fast(config_from_dict(base), df)
    carried_cfg = config_from_dict({**base, "accumulation": {"flush_at_step_end": False}})
    carried = engine.replay_fast(carried_cfg, df)
    # 10 documents per step, 4 per update: per step 4 + 4 + a tail of 2 -> 9 updates;
    # carried over the run: 30 // 4 = 7 updates, 2 documents left unapplied.
    assert int(flushed.trace["is_update"].sum()) == 9
    assert int(carried.trace["is_update"].sum()) == 7
    assert carried.trace["window_size"][carried.trace["is_update"]].tolist() == [4] * 7
    assert int((~carried.trace["applied"]).sum()) == 2
    # Every applied window divides by its own global total: weights sum to 1.
    sums = carried.trace["window_weight_sum"][carried.trace["is_update"]]
    assert np.allclose(sums, 1.0)
    assert "LRD207" not in {f.code for f in analysis.findings(carried)}
    torch_rep = torch_exec.replay_torch(carried_cfg, carried.infos, device="cpu")
    assert np.array_equal(torch_rep.trace["is_update"], carried.trace["is_update"])
    assert np.allclose(torch_rep.trace["loss_weight"], carried.trace["loss_weight"])


@pytest.mark.parametrize("per_step_rows, fires", [
    ([3, 3, 3, 3, 3, 3], False),     # k 4 over equal steps of 3: 0 or 1 update, phase only
    ([3, 5, 3, 5, 3, 5], False),     # differ by half a window: still phase
    ([2, 10, 2, 10, 2, 10], True),   # differ by two windows: a real drift
])
def test_lrd206_with_a_run_wide_counter_needs_a_real_difference(per_step_rows, fires):
    from lrdoctor.replay import analysis

    cfg = config_from_dict({
        "train": {"steps": 6, "gradient_accumulation": 4},
        "accumulation": {"flush_at_step_end": False},
    })
    df = pd.DataFrame({"step": np.repeat(np.arange(6), per_step_rows),
                       "tokens": np.ones(sum(per_step_rows), dtype=np.int64)})
    rep = engine.replay_fast(cfg, df)
    codes = {f.code for f in analysis.findings(rep)}
    assert ("LRD206" in codes) is fires
