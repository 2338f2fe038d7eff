"""`fix` on torch.distributed.checkpoint folders (issue 20), each written by the framework's
own save code, repaired, and loaded back with the same framework's loader.

Every test asserts the counters and LR a resumed run sees, the tensor files unchanged
(sha256) and the input unchanged. Layouts: Megatron ``torch_dist`` from megatron-core 0.16
(the installed one: ``dist_checkpointing.save``, ``common.pt``) and 0.19.2 (its fixture,
``common_state`` bytes item), Megatron-LM ``torch_dcp`` (flattened leaves), torchtitan
``step-N``, NeMo-RL's optimizer DCP (SequentialLR children), and, for generality, a DCP
folder whose keys none of the repair code names (read by content).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from lrdoctor.cli import app
from lrdoctor.repair import plan_fix, write_fix
from tests.formats.test_formats_dcp_layouts import (
    _save,
    _torchtitan_lambda,
    _train,
    nemo_rl_run,
    torchtitan_run,
)
from tests.helpers.docs import reports as doc_reports
from tests.helpers.fix_support import assert_resumes_on_healthy_curve, tree_hash

pytestmark = pytest.mark.filterwarnings("ignore")
runner = CliRunner()
TESTS = Path(__file__).resolve().parents[1]
MCORE_019 = TESTS / "data" / "megatron_core_0_19"
ROOT = Path(__file__).resolve().parents[2]


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


def _tensor_files_kept(src: Path, out: Path, changed: bool = True) -> None:
    """Every .distcp of the input is in the output, byte for byte (hard-linked or copied);
    a folder nothing changed in keeps its .metadata too."""
    kept = sorted(p.name for p in src.glob("*.distcp"))
    assert kept
    for name in kept:
        assert _sha(out / name) == _sha(src / name), name
    if not changed:
        assert _sha(out / ".metadata") == _sha(src / ".metadata")
        assert not (out / "__lrdoctor_fix.distcp").exists()


def _loud_after(out: Path) -> set[str]:
    r = runner.invoke(app, ["inspect", "--json", str(out)])
    doc = json.loads(r.stdout)
    (doc,) = doc_reports(doc)
    return {f["code"] for f in doc["findings"] if f["severity"] in ("warning", "error")}


def _tdcp_load(state: dict, ckpt: Path) -> dict:
    import torch.distributed.checkpoint as tdcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tdcp.load(state, checkpoint_id=str(ckpt), no_dist=True)
    return state


def _mcore_scheduler(opt, gbs: int):
    from tests.helpers.factories import _quiet_megatron, megatron_args

    Sched = _quiet_megatron()
    args = megatron_args(train_iters=40, global_batch_size=gbs)
    return Sched(opt, init_lr=0.0, max_lr=args.lr, min_lr=args.min_lr,
                 lr_warmup_steps=4 * gbs, lr_decay_steps=40 * gbs, lr_decay_style="cosine",
                 start_wd=0.01, end_wd=0.01, wd_incr_steps=40 * gbs, wd_incr_style="constant")


# ---------------------------------------------------------------- Megatron torch_dist 0.19

def test_megatron_core_019_common_state_item(tmp_path):
    """The 0.19.2 fixture (megatron-core's own dist_checkpointing.save, scheduler stepped per
    micro-batch): the common_state item is rewritten into a new storage file; torch's DCP
    loader (what 0.19's load_common_state_dict calls) reads the repaired state, and a
    megatron-core scheduler resumed from it sets the schedule's LR."""
    src = MCORE_019 / "buggy"
    before = tree_hash(src)
    out = tmp_path / "out"
    r = runner.invoke(app, ["fix", str(src), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "verified by inspecting it again" in " ".join(r.stdout.split())
    assert tree_hash(src) == before
    ck = out / "iter_0000005"
    _tensor_files_kept(src / "iter_0000005", ck)
    assert _sha(ck / "metadata.json") == _sha(src / "iter_0000005" / "metadata.json")
    assert (out / "latest_checkpointed_iteration.txt").read_text() == "5"

    loaded = _tdcp_load({"common_state/shard_0_1": io.BytesIO()}, ck)["common_state/shard_0_1"]
    if isinstance(loaded, io.BytesIO):
        loaded.seek(0)
        loaded = torch.load(loaded, weights_only=False)
    common = loaded[0]
    assert common["opt_param_scheduler"]["num_steps"] == 80 == common["args"].consumed_train_samples
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=3e-4)
    sched = _mcore_scheduler(opt, 16)
    sched.load_state_dict(common["opt_param_scheduler"])  # megatron's resume: step(num_steps)
    assert math.isclose(common["optimizer"]["param_groups"][0]["lr"],
                        opt.param_groups[0]["lr"], rel_tol=1e-9)
    sched.step(increment=16)  # the next iteration
    healthy = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=3e-4)
    ref = _mcore_scheduler(healthy, 16)
    for _ in range(6):
        ref.step(increment=16)
    assert math.isclose(opt.param_groups[0]["lr"], healthy.param_groups[0]["lr"], rel_tol=1e-9)
    # The model tensors come back through DCP as saved.
    w = _tdcp_load({"decoder.weight": torch.zeros(3, 4)}, ck)["decoder.weight"]
    w0 = _tdcp_load({"decoder.weight": torch.zeros(3, 4)}, src / "iter_0000005")["decoder.weight"]
    assert torch.equal(w, w0)
    assert "LRD104" not in _loud_after(out)


# ---------------------------------------------------------------- Megatron torch_dist 0.16

MCORE_016_GEN = """
import copy, sys, warnings
from pathlib import Path
sys.path.insert(0, sys.argv[2])
warnings.filterwarnings("ignore")
import torch, torch.distributed as dist
torch.cuda.synchronize = lambda *a, **k: None  # megatron's save syncs a D2H copy (CPU here)
torch.cuda.current_device = lambda: "cpu"
from tests.helpers.factories import _quiet_megatron, megatron_args, free_port
_quiet_megatron()

def main():
    import megatron.core
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedTensor
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    out, mode = Path(sys.argv[1]), sys.argv[3]
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    args = megatron_args(train_iters=40, global_batch_size=16, micro_batch_size=2,
                         data_parallel_size=2, lr_warmup_iters=4, ckpt_format="torch_dist")
    sched = OptimizerParamScheduler(opt, init_lr=0.0, max_lr=args.lr, min_lr=args.min_lr,
        lr_warmup_steps=64, lr_decay_steps=640, lr_decay_style="cosine", start_wd=0.01,
        end_wd=0.01, wd_incr_steps=640, wd_incr_style="constant")
    if mode == "load":
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}",
                                rank=0, world_size=1)
        try:
            common = dist_checkpointing.load_common_state_dict(str(out))
            sd = {"model": {"weight": ShardedTensor.from_rank_offsets(
                "decoder.weight", torch.zeros(3, 4))}}
            got = dist_checkpointing.load(sd, str(out))
        finally:
            dist.destroy_process_group()
        sched.load_state_dict(common["opt_param_scheduler"])
        print("RESULT", common["opt_param_scheduler"]["num_steps"],
              common["optimizer"]["param_groups"][0]["lr"], opt.param_groups[0]["lr"],
              got["model"]["weight"].sum().item(), megatron.core.__version__)
        return
    for it in range(5):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        for _ in range(4):  # stepped per micro-batch: 16 / (2 x 2)
            sched.step(increment=16)
        args.consumed_train_samples += 16
    msd = {"weight": ShardedTensor.from_rank_offsets("decoder.weight", model.weight.detach()),
           "bias": ShardedTensor.from_rank_offsets("decoder.bias", model.bias.detach())}
    sd = {"args": copy.deepcopy(args), "checkpoint_version": 3.0, "iteration": 5,
          "model": msd, "optimizer": {"param_groups": opt.state_dict()["param_groups"]},
          "opt_param_scheduler": sched.state_dict(), "num_floating_point_operations_so_far": 0}
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    try:
        ck = out / "iter_0000005"
        ck.mkdir(parents=True)
        dist_checkpointing.save(sd, str(ck))
    finally:
        dist.destroy_process_group()
    (out / "latest_checkpointed_iteration.txt").write_text("5")
    print("RESULT", megatron.core.__version__, model.weight.detach().sum().item())

if __name__ == "__main__":
    main()
"""


def _mcore016(tmp_path: Path, *args: str) -> list[str]:
    gen = tmp_path / "mcore_gen.py"
    gen.write_text(MCORE_016_GEN)
    p = subprocess.run([sys.executable, str(gen), *args], capture_output=True, text=True,
                       timeout=300, cwd=str(ROOT))
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")]
    assert p.returncode == 0 and line, p.stderr[-2000:]
    return line[-1].split()[1:]


def test_megatron_core_016_dist_checkpointing_common_pt(tmp_path):
    """megatron-core 0.16 (installed): dist_checkpointing.save writes common.pt beside the
    DCP files; fix rewrites common.pt only, and megatron-core's own
    load_common_state_dict / dist_checkpointing.load read the repaired copy."""
    run = tmp_path / "run"
    version, wsum = _mcore016(tmp_path, str(run), str(ROOT), "save")
    assert version.startswith("0.16")
    src = run / "iter_0000005"
    assert (src / "common.pt").is_file() and (src / ".metadata").is_file()
    before = tree_hash(run)
    out = tmp_path / "out"
    plan = plan_fix(run)
    assert plan.target.policy == "nominal" and plan.target.progress == 80
    res = write_fix(plan, out)
    assert res.verified
    assert tree_hash(run) == before
    _tensor_files_kept(src, out / "iter_0000005")
    assert _sha(out / "iter_0000005" / ".metadata") == _sha(src / ".metadata")
    num_steps, saved_lr, resumed_lr, got_wsum, _ = _mcore016(
        tmp_path, str(out / "iter_0000005"), str(ROOT), "load")
    assert float(num_steps) == 80
    assert math.isclose(float(saved_lr), float(resumed_lr), rel_tol=1e-9)
    assert math.isclose(float(got_wsum), float(wsum), rel_tol=1e-6)
    assert "LRD104" not in _loud_after(out)


# ---------------------------------------------------------------- Megatron-LM torch_dcp

def test_megatron_torch_dcp_flattened_leaves(tmp_path):
    """--ckpt-format torch_dcp: generate_state_dict's dict through dcp.save, so the
    scheduler's leaves are items of their own (opt_param_scheduler.num_steps)."""
    import torch.distributed.checkpoint as tdcp

    from tests.helpers.factories import megatron_args

    w = torch.nn.Parameter(torch.zeros(3))
    opt = torch.optim.AdamW([w], lr=3e-4)
    sched = _mcore_scheduler(opt, 16)
    for _ in range(6):
        w.grad = torch.ones(3)
        opt.step()
        for _ in range(4):
            sched.step(increment=16)
    args = megatron_args(global_batch_size=16, train_iters=40, consumed_train_samples=96,
                         ckpt_format="torch_dcp")
    ck = tmp_path / "iter_0000006"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tdcp.save({"model": {"w": w.detach()}, "optimizer": opt.state_dict(), "args": args,
                   "checkpoint_version": 3.0, "iteration": 6,
                   "opt_param_scheduler": sched.state_dict(),
                   "num_floating_point_operations_so_far": 0},
                  storage_writer=tdcp.FileSystemWriter(str(ck)))
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("6")
    before = tree_hash(tmp_path)
    out = tmp_path.parent / (tmp_path.name + "-out")
    res = write_fix(plan_fix(tmp_path), out)
    assert res.verified and tree_hash(tmp_path) == before
    _tensor_files_kept(ck, out / ck.name)
    fresh = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(3))], lr=3e-4)
    template = {"opt_param_scheduler": _mcore_scheduler(fresh, 16).state_dict(),
                "optimizer": fresh.state_dict(), "model": {"w": torch.zeros(3)}}
    got = _tdcp_load(template, out / ck.name)
    assert got["opt_param_scheduler"]["num_steps"] == 96
    resumed = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(3))], lr=3e-4)
    s2 = _mcore_scheduler(resumed, 16)
    s2.load_state_dict(got["opt_param_scheduler"])
    assert math.isclose(got["optimizer"]["param_groups"][0]["lr"],
                        resumed.param_groups[0]["lr"], rel_tol=1e-9)
    assert torch.equal(got["model"]["w"], w.detach())


# ---------------------------------------------------------------- torchtitan

def test_torchtitan_step_folder(tmp_path):
    """torchtitan's items: lr_scheduler.last_epoch alone and per-parameter
    optimizer.param_groups.<fqn>.lr. The LambdaLR's lambda is the job config's, not saved:
    the counter is written, one warning names the lr left. Resumed as torchtitan does
    (dcp.load of LRSchedulersContainer's {"last_epoch"} into a LambdaLR): every later step
    has the healthy run's LR."""
    ck = torchtitan_run(tmp_path / "run", steps_done=10, sched_per_step=4)
    before = tree_hash(tmp_path / "run")
    out = tmp_path / "out"
    r = runner.invoke(app, ["fix", str(tmp_path / "run"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert [ln for ln in r.stdout.splitlines() if ln.startswith("warning:")]
    assert tree_hash(tmp_path / "run") == before
    oc = out / "checkpoint" / ck.name
    _tensor_files_kept(ck, oc)
    got = _tdcp_load({"lr_scheduler": {"last_epoch": 0},
                      "train_state": {"step": 0, "ntokens_seen": 0}}, oc)
    assert got["lr_scheduler"]["last_epoch"] == 10 == got["train_state"]["step"]
    _, opt, sched = _train(1, 0, lambda o: torch.optim.lr_scheduler.LambdaLR(
        o, _torchtitan_lambda(2, 100)))
    sched.load_state_dict({**sched.state_dict(), "last_epoch": got["lr_scheduler"]["last_epoch"]})
    _, hopt, hsched = _train(10, 1, lambda o: torch.optim.lr_scheduler.LambdaLR(
        o, _torchtitan_lambda(2, 100)))
    for _ in range(5):
        sched.step()
        hsched.step()
        assert math.isclose(opt.param_groups[0]["lr"], hopt.param_groups[0]["lr"], rel_tol=1e-9)
    assert "LRD103" not in _loud_after(out)


# ---------------------------------------------------------------- NeMo-RL

def test_nemo_rl_optimizer_dcp_sequential_lr(tmp_path):
    """NeMo-RL's policy/optimizer DCP ({"optim": {"optim", "sched"}}), its SequentialLR
    stepped per optimizer update (3 per GRPO step): fix moves the SequentialLR and its
    children; loaded back as NeMo-RL does (dcp.load + set_optimizer_state_dict +
    scheduler.load_state_dict), the next steps follow the healthy run."""
    from torch.distributed.checkpoint.state_dict import (
        get_optimizer_state_dict,
        set_optimizer_state_dict,
    )

    ckpt = nemo_rl_run(tmp_path / "run", grpo_steps=8, sched_per_step=3)
    healthy = nemo_rl_run(tmp_path / "ok", grpo_steps=8, sched_per_step=1)
    before = tree_hash(tmp_path / "run")
    out = tmp_path / "fixed"  # not step_N: verification reads it under the input's name
    res = write_fix(plan_fix(ckpt), out)
    assert res.verified and tree_hash(tmp_path / "run") == before
    _tensor_files_kept(ckpt / "policy" / "weights", out / "policy" / "weights", changed=False)
    _tensor_files_kept(ckpt / "policy" / "optimizer", out / "policy" / "optimizer")

    def resume(d: Path):
        def make(o):
            warm = torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, end_factor=1.0,
                                                     total_iters=5)
            const = torch.optim.lr_scheduler.ConstantLR(o, factor=1.0, total_iters=10**9)
            return torch.optim.lr_scheduler.SequentialLR(o, [warm, const], milestones=[5])

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        sched = make(opt)
        state = {"optim": {"optim": get_optimizer_state_dict(model, opt),
                           "sched": sched.state_dict()}}
        _tdcp_load(state, d / "policy" / "optimizer")
        set_optimizer_state_dict(model, opt, state["optim"]["optim"])
        sched.load_state_dict(state["optim"]["sched"])
        return opt, sched

    o1, s1 = resume(out)
    o2, s2 = resume(healthy)
    assert s1.last_epoch == s2.last_epoch == 8
    assert [c.last_epoch for c in s1._schedulers] == [c.last_epoch for c in s2._schedulers]
    for _ in range(4):
        assert math.isclose(o1.param_groups[0]["lr"], o2.param_groups[0]["lr"], rel_tol=1e-9)
        s1.step()
        s2.step()


# ---------------------------------------------------------------- generality

def test_generality_a_dcp_layout_no_repair_code_names(tmp_path):
    """Generality: a DCP folder whose keys no reader or writer names ("net", "trainer" ->
    "optim" / "lr_schedule" / "updates") and a chainable CosineAnnealingLR stepped twice
    per update. Read and repaired by content; a real torch resume continues on the healthy
    run's curve (CosineAnnealingLR computes each LR from the previous one)."""
    def make(o):
        return torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=60, eta_min=1e-5)

    model, opt, sched = _train(12, 2, make)
    ck = tmp_path / "saves" / "update_12"
    _save({"net": model.state_dict(), "trainer": {"optim": opt.state_dict(),
                                                  "lr_schedule": sched.state_dict(),
                                                  "updates": 12}}, ck)
    before = tree_hash(tmp_path / "saves")
    out = tmp_path / "out"
    plan = plan_fix(tmp_path / "saves")
    assert plan.target.policy == "rescale" and plan.target.k == 2
    res = write_fix(plan, out)
    assert res.verified and tree_hash(tmp_path / "saves") == before
    oc = out / "update_12" if (out / "update_12").is_dir() else out
    _tensor_files_kept(ck, oc)
    _, hopt, hsched = _train(12, 1, make)
    fresh_model, fopt, fsched = _train(0, 1, make)
    state = {"trainer": {"optim": fopt.state_dict(), "lr_schedule": fsched.state_dict(),
                         "updates": 0}}
    _tdcp_load(state, oc)
    fopt.load_state_dict(state["trainer"]["optim"])
    fsched.load_state_dict(state["trainer"]["lr_schedule"])
    assert fsched.last_epoch == 12
    assert_resumes_on_healthy_curve(fopt, fsched, hopt, hsched, 30)
    assert not _loud_after(out) & {"LRD103", "LRD105"}


MCORE_019_LOAD = """
import sys, warnings
from unittest import mock
warnings.filterwarnings("ignore")
sys.modules["megatron.core.transformer.moe.ops.paged_stash"] = mock.MagicMock()  # GPU-only
import megatron.core
from megatron.core import dist_checkpointing
c = dist_checkpointing.load_common_state_dict(sys.argv[1])
print("RESULT", megatron.core.__version__, c["opt_param_scheduler"]["num_steps"],
      c["optimizer"]["param_groups"][0]["lr"])
"""


@pytest.mark.skipif(not __import__("os").environ.get("LRDOCTOR_MCORE_019"),
                    reason="set LRDOCTOR_MCORE_019 to an unpacked megatron-core 0.19 wheel "
                           "(tests/data/megatron_core_0_19/make_fixtures.py says how)")
def test_megatron_core_019_own_loader_reads_the_repaired_copy(tmp_path):
    """megatron-core 0.19.2's own load_common_state_dict on the repaired copy (the wheel is
    cp312-only: its pure-Python dist_checkpointing is put first on the path)."""
    import os

    out = tmp_path / "out"
    assert write_fix(plan_fix(MCORE_019 / "buggy"), out).verified
    p = subprocess.run([sys.executable, "-c", MCORE_019_LOAD, str(out / "iter_0000005")],
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=os.environ["LRDOCTOR_MCORE_019"]))
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")]
    assert p.returncode == 0 and line, p.stderr[-2000:]
    version, num_steps, lr = line[-1].split()[1:]
    assert version.startswith("0.19") and float(num_steps) == 80
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=3e-4)
    sched = _mcore_scheduler(opt, 16)
    for _ in range(5):
        sched.step(increment=16)
    assert math.isclose(float(lr), opt.param_groups[0]["lr"], rel_tol=1e-9)


def test_megatron_core_019_distributed_optimizer_items(tmp_path):
    """megatron-core 0.19.2 DistributedOptimizer, dp_reshardable, two chained optimizers
    (the fixture's param-group lr set by hand): the param groups live in the ShardedObject
    items chained_<i>.optimizer.distributed.dp_group_idx_0.optimizer/shard_0_1, and
    sync-lr rewrites every one of them; torch's DCP loader reads the schedule's LR back."""
    src = MCORE_019 / "distopt_lr_by_hand"
    before = tree_hash(src)
    out = tmp_path / "out"
    plan = plan_fix(src)
    assert plan.target.policy == "sync-lr"
    assert write_fix(plan, out).verified and tree_hash(src) == before
    ck = out / "iter_0000005"
    _tensor_files_kept(src / "iter_0000005", ck)
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=3e-4)
    sched = _mcore_scheduler(opt, 16)
    for _ in range(5):
        sched.step(increment=16)
    for i in (0, 1):
        key = f"chained_{i}.optimizer.distributed.dp_group_idx_0.optimizer/shard_0_1"
        got = _tdcp_load({key: io.BytesIO()}, ck)[key]
        if isinstance(got, io.BytesIO):
            got.seek(0)
            got = torch.load(got, weights_only=False)
        lrs = [g["lr"] for g in got[0]["param_groups"]]
        assert lrs and all(math.isclose(x, opt.param_groups[0]["lr"], rel_tol=1e-9)
                           for x in lrs), (key, lrs)
    assert "LRD105" not in _loud_after(out)
