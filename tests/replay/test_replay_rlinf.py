"""RLinf from its own files: its Hydra YAML (``defaults:`` composition), its Megatron
actor's stepping, and its dynamic-batching micro-batch count.

Reproduces RLinf (github.com/RLinf/RLinf a3816b5 == rlinf 0.3.0):
``MegatronWorker.training_step`` (scheduler advanced by the global batch in samples),
``MegatronModelManager.optimizer_step`` (advanced on failed updates too), Megatron-LM
``get_optimizer_param_scheduler`` (horizon ``lr_decay_iters x global_batch_size``,
``train_iters = 100000`` from ``rlinf/config.py``), ``configure_batch_sizes``
(megatron-core's calculator, run here) and ``data_iter_utils.get_iterator_dynamic``
(its counts on a seeded batch log, computed by RLinf's own functions in
scripts/gen_rlinf_counts.py into tests/data/rlinf/rlinf_counts.json).
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.findings import Severity
from lrdoctor.replay import ReplayOptions, replay_full
from lrdoctor.replay.config import load_config
from lrdoctor.replay.packing.rlinf_dynamic import bfd_count, fit_count
from tests.helpers.paths import TESTS

DATA = TESTS / "data" / "rlinf"
COUNTS = json.loads((DATA / "rlinf_counts.json").read_text())
GBS, DP = 64, 4  # 16 prompts x 8 // 2 global batches; GPUs 0-7 at tensor parallel 2


def _batch_log(tmp_path) -> str:
    p = tmp_path / "rlinf.csv"
    rows = [f"{s},{n}" for s, lens in enumerate(COUNTS["lengths"]) for n in lens]
    p.write_text("step,tokens\n" + "\n".join(rows) + "\n")
    return str(p)


def _replay(tmp_path, *sets: str):
    return replay_full(str(DATA / "grpo_dynamic.yaml"), batch_log=_batch_log(tmp_path),
                       options=ReplayOptions(engine="fast", sets=sets))


def _megatron_lrs(updates: int, warmup: float, horizon: float) -> list[float]:
    """megatron-core's OptimizerParamScheduler stepped as MegatronWorker.training_step
    does (increment = global batch): the LR each update's micro-batches use."""
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    sched = OptimizerParamScheduler(
        opt, init_lr=0.0, max_lr=2e-5, min_lr=1e-6, lr_warmup_steps=warmup,
        lr_decay_steps=horizon, lr_decay_style="cosine", start_wd=0.0, end_wd=0.0,
        wd_incr_steps=100000 * GBS, wd_incr_style="constant")
    out = []
    for _ in range(updates):
        out.append(opt.param_groups[0]["lr"])
        sched.step(increment=GBS)
    return out


def test_yaml_with_defaults_is_read_as_rlinf_computes_it():
    cfg = load_config(DATA / "grpo_dynamic.yaml")
    assert cfg._format == "rlinf-config"
    assert cfg.dp.size == DP and cfg.train.mini_batch_size == GBS
    assert cfg.train.micro_batch_size == 2 and cfg.train.steps == 6
    assert cfg.train.samples_per_step == 128
    # lr_decay_iters 10 x global batch 64; warmup fraction 0.1 of it; lr_sched.min_lr wins.
    assert cfg.schedule.horizon == 640 and cfg.schedule.warmup == 64
    assert cfg.schedule.min_lr == 1e-6 and cfg.schedule.max_lr == 2e-5
    assert cfg.scheduler.increment == "samples" and cfg.scheduler.step_on_failed_update
    assert cfg.batching.strategy == "rlinf_dynamic"
    assert cfg.batching.max_tokens_per_microbatch == 8192
    # The hydra/job_logging default configures Hydra, not the run: nothing was skipped.
    assert "defaults_not_followed" not in cfg._source


def test_dynamic_counts_horizon_progress_and_lrs_equal_rlinfs(tmp_path):
    res = _replay(tmp_path)
    t, s = res.replay.trace, res.report.extra["summary"]
    closes = t["is_update"]
    # One update per global batch: 6 steps x 2; micro-batches per update = RLinf's count.
    assert s["actual_updates"] == 12
    assert t["window_size"][closes].tolist() == [n for c in COUNTS["counts"] for n in c]
    # ... and the same partitions: tokens per micro-batch per rank, in RLinf's order.
    got = [[mb.tokens for mb in i.plan.micro_batches] for i in res.replay.infos]
    want = [[[toks[r][m] for r in range(DP)] for toks in step for m in range(len(toks[0]))]
            for step in COUNTS["tokens"]]
    assert got == want
    # Progress: the global batch per update (samples), over a 640-sample horizon.
    assert t["scheduler_progress"][closes].tolist() == [GBS * (u + 1) for u in range(12)]
    assert s["horizon"] == 640 and s["scheduler_unit"] == "samples"
    first = np.flatnonzero(np.r_[True, closes[:-1]])
    assert t["lr"][first].tolist() == pytest.approx(_megatron_lrs(12, 64, 640), rel=1e-12)
    found = {f.code: f for f in res.report.findings}
    # 12 updates over a 10-update horizon on a cosine: the LR floors after step 5 of 6.
    assert found["LRD201"].severity == Severity.ERROR
    assert "after train step 5 of 6" in found["LRD201"].message
    assert "LRD210" not in found and "LRD211" not in found and "LRD213" not in found


def test_static_micro_batches_are_megatrons_calculator(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core import num_microbatches_calculator as nmc
    nmc.reconfigure_num_microbatches_calculator(
        rank=0, rampup_batch_size=None, global_batch_size=GBS, micro_batch_size=2,
        data_parallel_size=DP)
    res = _replay(tmp_path, "runner.enable_dynamic_batch_size=false")
    t = res.replay.trace
    assert res.replay.cfg.batching.strategy == "static"
    assert set(t["window_size"][t["is_update"]].tolist()) == {nmc.get_num_microbatches()}
    assert int(t["is_update"].sum()) == 12


def test_fp16_and_the_default_horizon(tmp_path):
    # No lr_decay_iters: train_iters = 100000 (rlinf/config.py), horizon 100000 x 64.
    res = _replay(tmp_path, "actor.lr_sched.lr_decay_iters=null", "actor.model.precision=fp16")
    s = res.report.extra["summary"]
    assert s["horizon"] == 100000 * GBS
    found = {f.code: f for f in res.report.findings}
    assert found["LRD202"].severity == Severity.WARNING  # cosine: the LR barely moves
    assert "actor.model.precision" in found["LRD213"].message


SHIPPED = DATA / "shipped" / "math"  # RLinf's own configs, unchanged (a3816b5; README.md)


@pytest.mark.parametrize("name,epochs", [("qwen2.5-1.5b-grpo-megatron", 5),
                                         ("qwen2.5-1.5b-grpo-megatron-dynamic", 5),
                                         ("qwen2.5-1.5b-ppo-megatron", 15),
                                         ("qwen2.5-1.5b-grpo-fsdp", 5)])
def test_shipped_configs_are_accepted_with_their_run_length_assumed_and_said(name, epochs):
    # RLinf's shipped max_steps: -1 runs len(train_dataloader) x max_epochs steps
    # (reasoning_runner._set_max_steps); the data file (/dataset/boba/...) is not here.
    cfg = load_config(SHIPPED / f"{name}.yaml")
    assert cfg._format == "rlinf-config"
    assert cfg.train.steps == epochs  # one step per epoch, the least RLinf runs
    v = cfg._source["values"]["runner.max_steps"]
    assert (v["from"], v["value"], v["set"]) == ("assumed", epochs, "--set runner.max_steps=N")
    assert "/dataset/boba/AReaL-boba-106k.jsonl" in v["why"] and "not here" in v["why"]


def test_an_assumed_run_length_caps_the_findings_resting_on_it(tmp_path):
    # A linear decay over lr_decay_iters 10 updates; 5 rollout steps x 4 updates overshoot
    # it. Read from --set, LRD201 is an error; assumed, a warning naming the number.
    path = str(SHIPPED / "qwen2.5-1.5b-grpo-megatron.yaml")
    linear = "actor.lr_sched.lr_decay_style=linear"
    opts = ReplayOptions(engine="fast", sets=(linear,), knob_check=False)
    assumed = {f.code: f for f in replay_full(path, options=opts).report.findings}
    opts = ReplayOptions(engine="fast", sets=(linear, "runner.max_steps=5"), knob_check=False)
    read = {f.code: f for f in replay_full(path, options=opts).report.findings}
    assert read["LRD201"].severity == Severity.ERROR
    assert "Assumed" not in read["LRD201"].message
    assert assumed["LRD201"].severity == Severity.WARNING
    assert "runner.max_steps = 5" in assumed["LRD201"].message
    assert "--set runner.max_steps=N" in assumed["LRD201"].message
    prov = assumed["LRD201"].evidence.raw()["provenance"]
    assert prov["severity_with_real_lengths"] == str(Severity.ERROR)
    assert prov["assumed_values"]["runner.max_steps"]["value"] == 5


def test_a_batch_log_sets_an_assumed_run_length_to_its_logged_steps(tmp_path):
    # grpo_dynamic.yaml with max_steps -1: max_epochs 5, no data file -> 5 steps assumed;
    # the seeded batch log holds 6 steps, so the run took at least 6: replayed 6, still
    # assumed (the log may have stopped first).
    res = _replay(tmp_path, "runner.max_steps=-1")
    s = res.report.extra["summary"]
    v = s["config_source"]["values"]["runner.max_steps"]
    assert (s["train_steps"], v["value"], v["from"]) == (6, 6, "assumed")
    assert "the batch log holds 6 steps" in v["why"]
    assert "cycled" not in res.report.state["notes"]  # 6 logged steps, 6 replayed
    found = {f.code: f for f in res.report.findings}
    assert found["LRD201"].severity == Severity.WARNING  # an error with the steps read
    assert "runner.max_steps = 6" in found["LRD201"].message


def _prompts(tmp_path, n: int, suffix: str = ".jsonl"):
    p = tmp_path / f"prompts{suffix}"
    if suffix == ".jsonl":
        p.write_text("".join(f'{{"prompt": "q{i}"}}\n' for i in range(n - 1)) + '{"prompt": "x"}')
    else:
        p.write_text(json.dumps([{"prompt": i} for i in range(n)]))
    return str(p)


def test_the_run_length_is_derived_from_the_data_files_rlinf_reads(tmp_path):
    # N = 1,300 jsonl lines (the last without its newline) + 300 json items = 1,600
    # prompts; 1,600 // 512 = 3 steps per epoch x 5 epochs (drop_last=True).
    files = f"data.train_data_paths=[{_prompts(tmp_path, 1300)},{_prompts(tmp_path, 300, '.json')}]"
    path = SHIPPED / "qwen2.5-1.5b-grpo-megatron.yaml"
    cfg = load_config(path, (files, "data.filter_prompt_by_length=false"))
    assert cfg.train.steps == 1600 // 512 * 5
    v = cfg._source["values"]["runner.max_steps"]
    assert v["from"] == "derived" and "1,600 records" in v["why"]
    # Filtered by prompt length (as shipped): N is an upper bound, so still assumed.
    cfg = load_config(path, (files,))
    v = cfg._source["values"]["runner.max_steps"]
    assert (cfg.train.steps, v["from"]) == (15, "assumed") and "at most 1,600" in v["why"]
    # max_steps >= 0 caps it (min(len x epochs, max_steps)); read, nothing assumed.
    cfg = load_config(path, (files, "data.filter_prompt_by_length=false", "runner.max_steps=7"))
    assert cfg.train.steps == 7 and "values" not in cfg._source
    with pytest.raises(UnusableInput, match="fewer than one rollout batch of 512"):
        load_config(path, (f"data.train_data_paths={_prompts(tmp_path, 100)}",))


FSDP = SHIPPED / "qwen2.5-1.5b-grpo-fsdp.yaml"


def test_the_fsdp_actor_as_shipped():
    # FSDPActor: dp = the actor's world size (1 node x 8); 512 x 8 // 4 = 1,024 per update,
    # 1,024 // (1 x 8) = 128 micro-batches per rank; no optim.lr_scheduler: RLinf's
    # "constant" LambdaLR, no warmup (lr_warmup_steps -1 x ratio 0 x total 0).
    cfg = load_config(FSDP)
    assert (cfg.dp.size, cfg.train.mini_batch_size, cfg.train.gradient_accumulation) == \
        (8, 1024, 128)
    assert (cfg.schedule.family, cfg.schedule.kind, cfg.schedule.warmup) == \
        ("hf", "constant_with_warmup", 0.0)
    assert (cfg.scheduler.step_on, cfg.scheduler.increment,
            cfg.scheduler.step_on_failed_update) == ("update", 1.0, True)
    cfg = load_config(FSDP, ("actor.lr_sched_sync_with_optim=false",))
    assert cfg.scheduler.step_on == "rollout_step"  # once per run_training, after the updates


def test_the_fsdp_cosine_lrs_equal_transformers_helper_as_rlinf_calls_it():
    """rlinf/hybrid_engines/fsdp/utils.py get_lr_scheduler("cosine") is transformers'
    get_cosine_with_min_lr_schedule_with_warmup, stepped once per optimizer update
    (FSDPActor.training_step, lr_sched_sync_with_optim): run here, 5 steps x 4 updates."""
    import torch
    from transformers.optimization import get_cosine_with_min_lr_schedule_with_warmup

    sets = ("actor.optim.lr_scheduler=cosine", "actor.optim.total_training_steps=16",
            "actor.optim.lr_warmup_steps_ratio=0.25", "actor.optim.min_lr=1e-6")
    res = replay_full(str(FSDP), options=ReplayOptions(engine="fast", sets=sets,
                                                        knob_check=False))
    t = res.replay.trace
    closes = t["is_update"]
    first = np.flatnonzero(np.r_[True, closes[:-1]])
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2e-5)
    sched = get_cosine_with_min_lr_schedule_with_warmup(opt, num_warmup_steps=4,
                                                        num_training_steps=16, min_lr=1e-6)
    want = []
    for _ in range(20):
        want.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert t["lr"][first].tolist() == pytest.approx(want, rel=1e-12)
    found = {f.code: f for f in res.report.findings}
    # 20 updates over a 16-update cosine (floored at min_lr past it): LRD201, capped at a
    # warning because the 5 steps are assumed (the data file is not here).
    assert found["LRD201"].severity == Severity.WARNING
    assert "runner.max_steps = 5" in found["LRD201"].message
    with pytest.raises(UnusableInput, match="total_training_steps is 0"):
        load_config(FSDP, ("actor.optim.lr_scheduler=cosine",))


def test_an_unknown_yaml_names_rlinf_and_the_schema(tmp_path):
    p = tmp_path / "cfg.yaml"
    p.write_text("model: {name: x}\n")
    with pytest.raises(UnusableInput) as exc:
        load_config(p)
    msg = str(exc.value)
    assert "RLinf" in msg and "docs/replay.md" in msg and "'train' (steps" in msg


def test_bfd_and_partitions_equal_rlinfs_own_functions():
    """Live against the installed rlinf (rlinf==0.3.0, --no-deps: the Makefile's PEERS, so
    CI runs it; its data_iter_utils needs only numpy and torch): random batches."""
    d = pytest.importorskip("rlinf.utils.data_iter_utils")
    rng = np.random.default_rng(1)
    for _ in range(60):
        cap = int(rng.integers(2000, 9000))
        rows = int(rng.integers(4, 60))  # every rank holds total_batch_size_per_dp rows
        lens = [[int(x) for x in rng.integers(50, cap + 1, rows)]
                for _ in range(int(rng.integers(1, 4)))]
        for ln in lens:
            assert bfd_count(ln, cap) == len(d.get_seqlen_BFD_partitions(ln, cap))
        k, parts, _ = fit_count(lens, cap)
        n = max(len(d.get_seqlen_BFD_partitions(ln, cap)) for ln in lens)
        while True:
            theirs = [d.get_seqlen_balanced_partitions(ln, n, False) for ln in lens]
            if all(sum(ln[i] for i in p) <= cap for ln, ps in zip(lens, theirs) for p in ps):
                break
            n += 1
        assert (k, parts) == (n, theirs)


def test_a_rank_batch_that_does_not_split_into_global_batches_is_refused():
    # 16 x 8 = 128 sequences, dp 4: 32 per rank; 3 global batches do not divide them.
    with pytest.raises(UnusableInput, match="get_iterator_k_split asserts"):
        load_config(DATA / "grpo_dynamic.yaml", ("algorithm.n_minibatches=3",))
