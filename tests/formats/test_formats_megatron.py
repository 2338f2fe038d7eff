"""Megatron-LM reader against checkpoints written with megatron-core's own scheduler."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.facts import Storage
from lrdoctor.core.state import Unit
from lrdoctor.read.layouts import megatron
from lrdoctor.schedules import lr_at
from tests.helpers.factories import free_port, megatron_run
from tests.helpers.paths import REPO, TESTS


def test_detect_and_find(megatron_run_dir):
    root = megatron_run_dir.root
    assert megatron.detect(root)
    ckpts = megatron.find_checkpoints(root)
    assert [p.name for p in ckpts] == ["iter_0000010", "iter_0000020"]
    assert megatron.detect(ckpts[0])
    assert megatron.detect(ckpts[0] / "mp_rank_00" / "model_optim_rng.pt")
    assert megatron.find_checkpoints(ckpts[0]) == [ckpts[0]]
    assert not megatron.detect(root.parent)


def test_read_matches_live_scheduler(megatron_run_dir):
    truth = megatron_run_dir
    for saved in truth.saves:
        st = megatron.read(saved.path)
        sch = saved.scheduler
        spec = st.schedule
        assert (spec.family, spec.kind, spec.unit) == ("megatron", "cosine", Unit.SAMPLES)
        assert spec.max_lr == sch["max_lr"] and spec.min_lr == sch["min_lr"]
        assert spec.warmup == sch["lr_warmup_steps"] == 4 * 16
        assert spec.horizon == sch["lr_decay_steps"] == 40 * 16
        assert st.scheduler_progress.value == sch["num_steps"]
        assert st.scheduler_progress.unit is Unit.SAMPLES
        c = saved.counters
        assert st.counter("megatron.iteration").value == c["iteration"]
        assert st.counter("consumed_train_samples").value == c["consumed_train_samples"]
        assert st.counter("consumed_train_samples").unit is Unit.SAMPLES
        assert st.nominal_progress.value == c["consumed_train_samples"] - c["skipped_train_samples"]
        assert st.nominal_progress.value == sch["num_steps"]  # healthy: the invariant holds
        assert st.samples_per_update == 16
        assert (st.planned_end.name, st.planned_end.value, st.planned_end.unit) == (
            "train_iters", 40, Unit.UPDATES)
        assert st.trainer_progress.value == c["iteration"]
        assert st.optimizer_lrs == pytest.approx(saved.lrs, rel=0, abs=0)
        assert st.extras["expected_from_args"]["lr_decay_steps"] == sch["lr_decay_steps"]
        assert st.extras["ranks_agree"] is True


def test_schedule_reproduces_live_lr(megatron_run_dir):
    """The spec lrdoctor rebuilds gives the LR the live scheduler set."""
    saved = megatron_run_dir.last
    st = megatron.read(saved.path)
    assert math.isclose(lr_at(st.schedule, st.scheduler_progress.value), saved.lrs[0],
                        rel_tol=1e-12)


def test_optimizer_step(megatron_run_dir):
    saved = megatron_run_dir.last
    st = megatron.read(saved.path)
    assert st.counter("optimizer.step").value == saved.optimizer_step == 20
    assert st.counter("optimizer.step").unit is Unit.UPDATES


def test_run_dir_reads_tracked_iteration(megatron_run_dir):
    st = megatron.read(megatron_run_dir.root)
    assert st.extras["tracker"] == 20
    assert st.counter("megatron.iteration").value == 20
    assert st.path.endswith("iter_0000020")


def test_many_ranks_fp16_wrapper_and_overflow(tmp_path):
    """tp=2 pp=2 layout, Float16 optimizer wrapper, one overflowed update."""
    truth = megatron_run(tmp_path / "ck", save_at=(6,), tp=2, pp=2, overflow_iters=(3,),
                         fp16_wrapper=True, train_iters=12, lr_decay_style="linear",
                         global_batch_size=8)
    saved = truth.last
    files = megatron.rank_files(saved.path)
    assert [f.parent.name for f in files] == ["mp_rank_00_000", "mp_rank_00_001",
                                              "mp_rank_01_000", "mp_rank_01_001"]
    st = megatron.read(saved.path)
    assert st.extras["rank_files"] == 4 and st.extras["ranks_agree"]
    # The overflowed update did not step the scheduler, but consumed samples grew.
    assert st.scheduler_progress.value == saved.scheduler["num_steps"] == 5 * 8
    # Megatron counts the overflowed iteration's samples but skips its scheduler step.
    assert st.counter("consumed_train_samples").value == 6 * 8
    assert st.counter("megatron.overflowed_updates").value == 1
    assert st.nominal_progress.value == 5 * 8
    assert st.optimizer_lrs == saved.lrs
    assert st.schedule.kind == "linear"


def test_rank_disagreement_is_reported(tmp_path):
    import torch

    truth = megatron_run(tmp_path / "ck", save_at=(4,), tp=2, train_iters=10)
    f = truth.last.path / "mp_rank_01" / "model_optim_rng.pt"
    sd = torch.load(f, weights_only=False)
    sd["opt_param_scheduler"]["num_steps"] += 16
    torch.save(sd, f)
    st = megatron.read(truth.last.path)
    assert st.extras["ranks_agree"] is False
    assert st.extras["rank_disagreement"][0]["differs"]["num_steps"] == (64, 80)


def test_wsd_and_sample_based(tmp_path):
    truth = megatron_run(tmp_path / "ck", save_at=(5,), train_iters=None, train_samples=320,
                         lr_decay_style="WSD", lr_wsd_decay_samples=96,
                         lr_wsd_decay_style="minus_sqrt", lr_warmup_samples=32)
    st = megatron.read(truth.last.path)
    assert st.schedule.kind == "WSD"
    assert st.schedule.params["wsd_decay_steps"] == 96
    assert st.schedule.params["lr_wsd_decay_style"] == "minus_sqrt"
    assert st.schedule.warmup == 32 and st.schedule.horizon == 320
    assert (st.planned_end.name, st.planned_end.unit) == ("train_samples", Unit.SAMPLES)
    assert st.trainer_progress.name == "consumed_train_samples"
    assert st.trainer_progress.value == 5 * 16


def test_legacy_keys(tmp_path):
    """Pre-2021 names (lr_scheduler, start_lr, end_iter, num_iters) still read, in iterations."""
    import torch

    d = tmp_path / "iter_0000100" / "mp_rank_00"
    d.mkdir(parents=True)
    torch.save({"args": argparse.Namespace(global_batch_size=8, train_iters=200),
                "iteration": 100,
                "lr_scheduler": {"start_lr": 1e-4, "min_lr": 1e-5, "warmup_iter": 10,
                                 "end_iter": 200, "decay_style": "linear", "num_iters": 100}},
               d / "model_optim_rng.pt")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("100")
    st = megatron.read(tmp_path)
    assert st.schedule.unit is Unit.UPDATES and st.schedule.horizon == 200
    assert st.scheduler_progress.value == 100 and st.nominal_progress.value == 100


def test_unusable_inputs(tmp_path):
    import torch

    d = tmp_path / "iter_0000001" / "mp_rank_00"
    d.mkdir(parents=True)
    (d / "model_optim_rng.pt").write_bytes(b"not a zip")
    with pytest.raises(UnusableInput, match="model_optim_rng.pt"):
        megatron.read(tmp_path / "iter_0000001")
    torch.save({"iteration": 1, "model": {}}, d / "model_optim_rng.pt")
    with pytest.raises(UnusableInput, match="opt_param_scheduler"):
        megatron.read(tmp_path / "iter_0000001")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("banana")
    with pytest.raises(UnusableInput, match="latest_checkpointed_iteration.txt"):
        megatron.read(tmp_path)


def test_roll_checkpoint_is_not_megatron(roll_run_dir):
    ck = roll_run_dir.last.path
    assert not megatron.detect(ck)
    assert not megatron.detect(ck / "iter_0000001")
    assert not megatron.detect(Path(ck / "iter_0000001" / "mp_rank_00" / "model_optim_rng.pt"))


SAMPLES = REPO / "sample_checkpoints"


def test_sample_megatron_healthy_reads_as_documented():
    st = megatron.read(SAMPLES / "megatron-healthy")
    assert st.scheduler_progress.value == 400 * 256 == st.nominal_progress.value
    assert st.extras["ranks_agree"] and st.extras["rank_files"] == 2
    assert st.schedule.horizon == 500 * 256 and st.schedule.warmup == 50 * 256
    assert math.isclose(lr_at(st.schedule, st.scheduler_progress.value), st.optimizer_lrs[0],
                        rel_tol=1e-12)


def test_torch_dist_common_pt(tmp_path):
    """torch_dist checkpoints: the non-sharded state (args, iteration, scheduler, param
    groups) lands in iter_*/common.pt, written by megatron-core's own save strategy."""
    import copy

    import torch
    import torch.distributed as dist

    from tests.helpers.factories import _quiet_megatron, megatron_args

    Sched = _quiet_megatron()
    from megatron.core.dist_checkpointing import ShardedTensor
    from megatron.core.dist_checkpointing.state_dict_utils import save_preprocess
    from megatron.core.dist_checkpointing.strategies.common import TorchCommonSaveStrategy

    w = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.AdamW([w], lr=2e-4)
    sched = Sched(opt, init_lr=0.0, max_lr=2e-4, min_lr=2e-5, lr_warmup_steps=16,
                  lr_decay_steps=160, lr_decay_style="linear", start_wd=0.0, end_wd=0.0,
                  wd_incr_steps=160, wd_incr_style="constant")
    for _ in range(7):
        w.grad = torch.ones(3)
        opt.step()
        sched.step(increment=8)
    args = megatron_args(global_batch_size=8, train_iters=20, consumed_train_samples=56,
                         ckpt_format="torch_dist")
    osd = opt.state_dict()
    osd["state"] = {k: {n: ShardedTensor.from_rank_offsets(f"optimizer.state.{n}.{k}", v)
                        if v.dim() else v for n, v in s.items()} for k, s in osd["state"].items()}
    sd = {"args": copy.deepcopy(args), "checkpoint_version": 3.0, "iteration": 7,
          "model": {"w": ShardedTensor.from_rank_offsets("w", w.detach())},
          "optimizer": osd, "opt_param_scheduler": sched.state_dict()}
    port = free_port()
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        _, common = save_preprocess(sd)[:2]
        ckpt = tmp_path / "iter_0000007"
        ckpt.mkdir()
        TorchCommonSaveStrategy("torch", 1).save_common(common, ckpt)
    finally:
        dist.destroy_process_group()
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("7")
    assert "model" not in common  # the sharded part went elsewhere
    assert megatron.detect(tmp_path) and megatron.find_checkpoints(tmp_path) == [ckpt]
    st = megatron.read(tmp_path)
    assert st.files[0].endswith("common.pt")
    assert st.scheduler_progress.value == sched.num_steps == 56 == st.nominal_progress.value
    assert st.schedule.kind == "linear" and st.schedule.horizon == 160
    assert st.optimizer_lrs == [opt.param_groups[0]["lr"]]
    assert st.counter("optimizer.step").value == 7


def test_distributed_optimizer_param_group_step(tmp_path):
    """DistributedOptimizer.state_dict() keeps no per-param state in model_optim_rng.pt:
    param groups lose 'params' and carry 'step' (as megatron-core builds it)."""
    import torch

    truth = megatron_run(tmp_path / "ck", save_at=(5,), train_iters=10,
                         use_distributed_optimizer=True)
    f = truth.last.path / "mp_rank_00" / "model_optim_rng.pt"
    sd = torch.load(f, weights_only=False)
    inner = sd["optimizer"]
    step = {float(s["step"]) for s in inner["state"].values()}.pop()
    dist_sd = {"optimizer": {k: v for k, v in inner.items() if k != "state"}}
    for g in dist_sd["optimizer"]["param_groups"]:
        del g["params"]
        g["step"] = step
    sd["optimizer"] = dist_sd
    torch.save(sd, f)
    st = megatron.read(truth.last.path)
    assert st.counter("optimizer.step").value == 5 == truth.last.optimizer_step
    assert st.optimizer_lrs == truth.last.lrs
    assert st.extras["use_distributed_optimizer"] is True


def test_release_checkpoint(tmp_path):
    truth = megatron_run(tmp_path / "ck", save_at=(3,), train_iters=10)
    truth.last.path.rename(tmp_path / "ck" / "release")
    (tmp_path / "ck" / "latest_checkpointed_iteration.txt").write_text("release")
    assert [p.name for p in megatron.find_checkpoints(tmp_path / "ck")] == ["release"]
    st = megatron.read(tmp_path / "ck")
    assert st.extras["tracker"] == "release" and st.path.endswith("release")
    assert st.scheduler_progress.value == truth.last.scheduler["num_steps"] == 48


# ---------------------------------------------------------------- torch_dist, megatron-core 0.19

MCORE_019 = TESTS / "data" / "megatron_core_0_19"


def test_torch_dist_019_common_state_healthy():
    """megatron-core 0.19.2 torch_dist: no common.pt; the non-sharded state is the DCP bytes
    item common_state/shard_0_1. Fixture written by megatron-core 0.19.2's own
    dist_checkpointing.save (tests/data/megatron_core_0_19/make_fixtures.py says how)."""
    from lrdoctor.core.findings import Severity
    from lrdoctor.diagnose import diagnose

    root = MCORE_019 / "healthy"
    ckpt = root / "iter_0000005"
    assert not (ckpt / "common.pt").exists() and (ckpt / ".metadata").is_file()
    assert megatron.detect(root) and megatron.find_checkpoints(root) == [ckpt]
    st = megatron.read(root)
    assert st.files == [str(ckpt / ".metadata"), str(ckpt / "__0_0.distcp"),
                        str(root / "latest_checkpointed_iteration.txt")]
    assert st.scheduler_progress.value == 80 == st.nominal_progress.value  # 5 iters x gbs 16
    assert st.scheduler_progress.source.endswith("iter_0000005:common_state/shard_0_1")
    assert st.counter("megatron.iteration").value == 5
    assert st.counter("optimizer.step").value == 5  # optimizer.state.common_step
    assert (st.schedule.kind, st.schedule.warmup, st.schedule.horizon) == ("cosine", 64, 640)
    assert math.isclose(lr_at(st.schedule, 80), st.optimizer_lrs[0], rel_tol=1e-12)
    assert st.facts.storage is Storage.DCP
    assert not [f for f in diagnose(st) if f.severity >= Severity.WARNING]


def test_torch_dist_019_common_state_matches_torch_dcp_load():
    """What lrdoctor reads is what torch's own DCP loader gives megatron-core
    (load_common_state_dict: dcp.load of the BytesIO, then torch.load)."""
    import io
    import warnings

    import torch
    import torch.distributed.checkpoint as tdcp

    ckpt = MCORE_019 / "healthy" / "iter_0000005"
    buf = {"common_state/shard_0_1": io.BytesIO()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tdcp.load(buf, checkpoint_id=str(ckpt), no_dist=True)
    loaded = buf["common_state/shard_0_1"]
    if isinstance(loaded, io.BytesIO):  # as load_common_state_dict: raw bytes or unpickled
        loaded.seek(0)
        loaded = torch.load(loaded, weights_only=False)
    truth = loaded[0]
    from lrdoctor.read.bytes import dcp

    ours = dcp.load(ckpt).flat["common_state/shard_0_1"][0]
    assert ours["opt_param_scheduler"] == truth["opt_param_scheduler"]
    assert ours["iteration"] == truth["iteration"]
    assert ours["args"].state == vars(truth["args"])
    assert ours["optimizer"]["param_groups"] == truth["optimizer"]["param_groups"]
    assert ours["optimizer"]["state"]["common_step"] == float(truth["optimizer"]["state"]
                                                               ["common_step"])


def test_torch_dist_019_scheduler_per_micro_batch_is_lrd104():
    from lrdoctor.diagnose import diagnose

    st = megatron.read(MCORE_019 / "buggy")
    (f,) = [f for f in diagnose(st) if f.code == "LRD104"]
    assert f.evidence["scheduler_progress"] == 320 and f.evidence["nominal_progress"] == 80
    assert f.evidence["ratio"] == 4 and f.evidence["k"] == 4
    assert "4 micro-batches per iteration" in f.message


def test_torch_dist_019_fix_writes_a_verified_copy(tmp_path):
    """fix repairs torch_dist (issue 20; loaded back with torch DCP in
    tests/repair/test_fix_dcp.py)."""
    import subprocess
    import sys

    out = tmp_path / "out"
    p = subprocess.run([sys.executable, "-m", "lrdoctor", "fix", str(MCORE_019 / "buggy"),
                        "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert megatron.read(out).scheduler_progress.value == 80


@pytest.mark.parametrize("per_micro", [False, True])
def test_torch_dcp_flattened_leaves(tmp_path, per_micro):
    """--ckpt-format torch_dcp: Megatron-LM's save_checkpoint hands generate_state_dict's
    dict to torch.distributed.checkpoint.save with a FileSystemWriter (training/checkpointing.py),
    so args/iteration are bytes items and opt_param_scheduler's leaves are flattened
    (opt_param_scheduler.num_steps, ...). Written here with megatron-core's scheduler."""
    import warnings

    import torch
    import torch.distributed.checkpoint as tdcp

    from tests.helpers.factories import _quiet_megatron, megatron_args

    Sched = _quiet_megatron()
    w = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.AdamW([w], lr=2e-4)
    sched = Sched(opt, init_lr=0.0, max_lr=2e-4, min_lr=2e-5, lr_warmup_steps=16,
                  lr_decay_steps=320, lr_decay_style="linear", start_wd=0.0, end_wd=0.0,
                  wd_incr_steps=320, wd_incr_style="constant")
    gbs, n_micro = 16, 4  # micro_batch_size 2 x data_parallel_size 2
    for _ in range(6):
        w.grad = torch.ones(3)
        opt.step()
        for _ in range(n_micro if per_micro else 1):
            sched.step(increment=gbs)
    args = megatron_args(global_batch_size=gbs, train_iters=20, consumed_train_samples=6 * gbs,
                         ckpt_format="torch_dcp")
    ckpt = tmp_path / "iter_0000006"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tdcp.save({"model": {"w": w.detach()}, "optimizer": opt.state_dict(), "args": args,
                   "checkpoint_version": 3.0, "iteration": 6,
                   "opt_param_scheduler": sched.state_dict(),
                   "num_floating_point_operations_so_far": 0},
                  storage_writer=tdcp.FileSystemWriter(str(ckpt)))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("6")
    from lrdoctor.core.findings import Severity
    from lrdoctor.diagnose import diagnose

    st = megatron.read(tmp_path)
    assert st.files[0] == str(ckpt / ".metadata") and st.facts.storage is Storage.DCP
    assert st.scheduler_progress.value == sched.num_steps
    assert st.nominal_progress.value == 96 and st.counter("optimizer.step").value == 6
    assert st.optimizer_lrs == [opt.param_groups[0]["lr"]]
    findings = diagnose(st)
    if not per_micro:
        assert not [f for f in findings if f.severity >= Severity.WARNING]
    else:
        (f,) = [f for f in findings if f.code == "LRD104"]
        assert (f.evidence["scheduler_progress"], f.evidence["nominal_progress"],
                f.evidence["k"]) == (384, 96, 4)
