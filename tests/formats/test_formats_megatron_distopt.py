"""Megatron's DISTRIBUTED optimizer: its param-group LRs, wherever megatron-core put them.

Fixtures: tests/data/megatron_core_0_19/distopt_*, written with megatron-core 0.19.2's own
DistributedDataParallel, get_megatron_optimizer (ChainedOptimizer of DistributedOptimizers),
OptimizerParamScheduler, sharded_state_dict and dist_checkpointing.save
(make_distopt_fixtures.py says what is real and what is a CPU shim). Each holds the live
param-group LRs at save in truth.json.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from lrdoctor.core.facts import Storage
from lrdoctor.core.findings import Severity
from lrdoctor.diagnose import diagnose
from lrdoctor.read.layouts import megatron
from lrdoctor.schedules import lr_at
from tests.helpers.factories import megatron_run
from tests.helpers.paths import TESTS

MCORE_019 = TESTS / "data" / "megatron_core_0_19"
ITEM = "optimizer.distributed.dp_group_idx_0.optimizer/shard_0_1"


def truth(name: str) -> dict:
    return json.loads((MCORE_019 / name / "truth.json").read_text())


def warnings_of(st) -> list:
    return [f for f in diagnose(st) if f.severity >= Severity.WARNING]


def test_dp_reshardable_param_groups_are_read():
    """Megatron-LM's default (dp_reshardable): the param groups are the ShardedObject
    optimizer.distributed.dp_group_idx_0.optimizer, not in common_state."""
    t = truth("distopt_dp_reshardable")
    st = megatron.read(MCORE_019 / "distopt_dp_reshardable")
    assert len(t["lrs"]) == 2  # Megatron's wd and no-wd groups
    assert st.optimizer_lrs == t["lrs"]
    assert st.extras["distributed_optimizer_items"] == [ITEM]
    assert st.counter("optimizer.step").value == t["step"][0] == 5
    assert st.counter("optimizer.step").source.endswith("iter_0000005:" + ITEM)
    assert st.extras["use_distributed_optimizer"] is True
    assert st.facts.optimizer_lrs_unread is None
    assert math.isclose(lr_at(st.schedule, st.scheduler_progress.value), st.optimizer_lrs[0],
                        rel_tol=1e-12)
    assert not warnings_of(st)


def test_param_group_item_matches_megatrons_own_load():
    """What lrdoctor reads is what torch's DCP loader gives megatron-core for that item."""
    import io
    import warnings

    import torch
    import torch.distributed.checkpoint as tdcp

    from lrdoctor.read.bytes import dcp

    ckpt = MCORE_019 / "distopt_dp_reshardable" / "iter_0000005"
    buf = {ITEM: io.BytesIO()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tdcp.load(buf, checkpoint_id=str(ckpt), no_dist=True)
    loaded = buf[ITEM]
    if isinstance(loaded, io.BytesIO):
        loaded.seek(0)
        loaded = torch.load(loaded, weights_only=False)
    ours = dcp.load(ckpt, prefixes=[ITEM]).flat[ITEM]
    assert ours == loaded
    assert [g["lr"] for g in loaded[0]["param_groups"]] == truth("distopt_dp_reshardable")["lrs"]


def test_chained_optimizers_dense_and_expert():
    """Dense + expert parameters: a ChainedOptimizer of two DistributedOptimizers, whose
    objects megatron-core prefixes chained_0. / chained_1.; groups in chained order."""
    t = truth("distopt_chained")
    st = megatron.read(MCORE_019 / "distopt_chained")
    assert t["chained"] == 2 and len(t["lrs"]) == 3
    assert st.optimizer_lrs == t["lrs"]
    assert st.extras["distributed_optimizer_items"] == ["chained_0." + ITEM, "chained_1." + ITEM]
    assert st.counter("optimizer.step").value == 5
    assert not warnings_of(st)


def test_fully_reshardable_groups_in_common_state():
    t = truth("distopt_fully_reshardable")
    st = megatron.read(MCORE_019 / "distopt_fully_reshardable")
    assert st.optimizer_lrs == t["lrs"]
    assert st.counter("optimizer.step").source.endswith("common_state/shard_0_1:optimizer")
    assert "distributed_optimizer_items" not in st.extras
    assert not warnings_of(st)


def test_legacy_torch_format_with_distrib_optim_pt():
    """--ckpt-format torch: DistributedOptimizer.state_dict() in model_optim_rng.pt; the
    parameter state in distrib_optim.pt beside it (no LRs there, so it is not read)."""
    t = truth("distopt_legacy")
    rank = MCORE_019 / "distopt_legacy" / "iter_0000005" / "mp_rank_00"
    assert (rank / "distrib_optim.pt").is_file()
    st = megatron.read(MCORE_019 / "distopt_legacy")
    assert st.optimizer_lrs == t["lrs"]
    assert st.counter("optimizer.step").value == 5
    assert st.files[0] == str(rank / "model_optim_rng.pt")
    assert not warnings_of(st)


def test_lr_set_by_hand_is_lrd105():
    """The distributed optimizer's LRs reach the LR-vs-schedule check."""
    t = truth("distopt_lr_by_hand")
    st = megatron.read(MCORE_019 / "distopt_lr_by_hand")
    assert st.optimizer_lrs == t["lrs"] == [1e-3, 1e-3, 1e-3]
    (f,) = [f for f in diagnose(st) if f.code == "LRD105"]
    assert f.evidence["optimizer_lrs"] == [1e-3, 1e-3, 1e-3]
    assert math.isclose(f.evidence["schedule_lr"], truth("distopt_chained")["lrs"][0],
                        rel_tol=1e-12)


def test_unknown_class_in_param_groups_is_opaque_and_said():
    """The param-group item also holds a ``fractions.Fraction`` (a class lrdoctor does not
    know): an opaque value with a note naming it (issue 28: unknown classes are opaque
    everywhere), the LRs beside it read and checked, nothing left unread."""
    t = truth("distopt_unreadable")
    st = megatron.read(MCORE_019 / "distopt_unreadable")
    assert st.optimizer_lrs == t["lrs"]
    assert st.facts.optimizer_lrs_unread is None
    (note,) = [n for n in st.notes if "fractions.Fraction" in n]
    assert "opaque" in note and "(DCP items)" in note
    assert not [f for f in diagnose(st) if f.code in ("LRD105", "LRD111")]
    # Everything else still read: the scheduler is healthy.
    assert st.scheduler_progress.value == 80 == st.nominal_progress.value


def _inspect(path, *extra) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lrdoctor", "inspect", str(path), "--json",
                           *extra], capture_output=True, text=True, timeout=120)


def test_inspect_json_shows_distributed_lrs_and_unread():
    p = _inspect(MCORE_019 / "distopt_chained")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["state"]["optimizer_lrs"] == truth("distopt_chained")["lrs"]
    assert doc["state"]["extras"]["distributed_optimizer_items"][1] == "chained_1." + ITEM
    p = _inspect(MCORE_019 / "distopt_unreadable", "--fail-on", "warning")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["state"]["optimizer_lrs"] == truth("distopt_unreadable")["lrs"]
    assert any("fractions.Fraction" in n for n in doc["state"]["notes"])


def test_torch_dist_common_pt_reads_groups_from_dcp(tmp_path):
    """megatron-core < 0.19 wrote the common state to common.pt (its own
    TorchCommonSaveStrategy here); the param-group objects stay in the DCP files."""
    import shutil

    import torch.distributed as dist

    from lrdoctor.read.bytes import dcp
    from tests.helpers.factories import _quiet_megatron, free_port

    _quiet_megatron()
    from megatron.core.dist_checkpointing.strategies.common import TorchCommonSaveStrategy

    src = MCORE_019 / "distopt_dp_reshardable"
    shutil.copytree(src, tmp_path / "run")
    ckpt = tmp_path / "run" / "iter_0000005"
    common = dcp.load(ckpt, prefixes=["common_state/"]).flat["common_state/shard_0_1"][0]
    assert "param_groups" not in str(common["optimizer"])  # only the sharding type
    args = common["args"].state  # the safe loader's record of the Namespace
    import argparse

    common = {**common, "args": argparse.Namespace(**args)}
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    try:
        TorchCommonSaveStrategy("torch", 1).save_common(common, ckpt)
    finally:
        dist.destroy_process_group()
    st = megatron.read(tmp_path / "run")
    assert st.files[0].endswith("common.pt") and str(ckpt / ".metadata") in st.files
    assert st.optimizer_lrs == truth("distopt_dp_reshardable")["lrs"]
    assert st.counter("optimizer.step").value == 5
    assert not warnings_of(st)


@pytest.mark.parametrize("no_save_optim", [False, True])
def test_args_say_distributed_optimizer_but_no_groups(tmp_path, no_save_optim):
    """torch format, --use-distributed-optimizer, and no optimizer in model_optim_rng.pt:
    LRD111 unless the run said --no-save-optim (then a note: nothing was saved)."""
    import torch

    truth_run = megatron_run(tmp_path / "ck", save_at=(5,), train_iters=10,
                             use_distributed_optimizer=True)
    f = truth_run.last.path / "mp_rank_00" / "model_optim_rng.pt"
    sd = torch.load(f, weights_only=False)
    del sd["optimizer"]
    sd["args"].no_save_optim = no_save_optim
    torch.save(sd, f)
    st = megatron.read(truth_run.last.path)
    lrd111 = [x for x in diagnose(st) if x.code == "LRD111"]
    if no_save_optim:
        assert not lrd111 and any("--no-save-optim" in n for n in st.notes)
    else:
        (x,) = lrd111
        assert "use_distributed_optimizer" in x.message and x.severity is Severity.WARNING


def test_torch_dcp_chained_state_dict_flattened():
    """--ckpt-format torch_dcp: optimizer.state_dict() of a ChainedOptimizer of two
    DistributedOptimizers is a list, flattened by DCP (optimizer.0.optimizer.param_groups.0.lr)."""
    t = truth("distopt_torch_dcp")
    st = megatron.read(MCORE_019 / "distopt_torch_dcp")
    assert t["chained"] == 2 and st.optimizer_lrs == t["lrs"]
    assert st.counter("optimizer.step").value == 5
    assert st.facts.storage is Storage.DCP and not warnings_of(st)


def test_unknown_class_in_the_expert_param_groups_is_opaque_and_said():
    """Dense + expert optimizers, the expert one's param-group item also holding a
    ``fractions.Fraction``: kept opaque with a note, every group's LR read and checked."""
    t = truth("distopt_partly_unreadable")
    st = megatron.read(MCORE_019 / "distopt_partly_unreadable")
    assert st.optimizer_lrs == t["lrs"]
    assert st.extras["distributed_optimizer_items"] == ["chained_0." + ITEM, "chained_1." + ITEM]
    assert st.facts.optimizer_lrs_unread is None
    assert any("fractions.Fraction" in n and "opaque" in n for n in st.notes)
    findings = diagnose(st)
    assert not [f for f in findings if f.code in ("LRD105", "LRD111")]


def test_installed_megatron_core_writes_what_is_read(tmp_path):
    """The fixture generator run with the megatron-core the test extra installs (0.16 here:
    torch_dist with common.pt, the param-group objects in the .distcp files), in a
    subprocess because its CPU shims patch torch process-wide."""
    import os

    from tests.helpers.paths import REPO

    script = MCORE_019 / "make_distopt_fixtures.py"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [str(REPO), os.environ.get("PYTHONPATH", "")])}
    p = subprocess.run([sys.executable, str(script), "--out", str(tmp_path),
                        "distopt_chained"], capture_output=True, text=True, timeout=300,
                       cwd=REPO, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    run = tmp_path / "distopt_chained"
    t = json.loads((run / "truth.json").read_text())
    st = megatron.read(run)
    assert st.optimizer_lrs == t["lrs"] and len(t["lrs"]) == 3
    assert st.extras["distributed_optimizer_items"] == ["chained_0." + ITEM, "chained_1." + ITEM]
    assert st.counter("optimizer.step").value == t["step"][0] == 5
    assert st.scheduler_progress.value == t["num_steps"] == 80
    assert not warnings_of(st)


def test_common_pt_with_broken_dcp_metadata_still_reads_and_says_so(tmp_path):
    """common.pt is read; the param groups' .metadata beside it is not a DCP pickle: the
    scheduler is still judged, and LRD111 says the LRs were not read (not exit 2)."""
    import shutil

    import torch

    src = MCORE_019 / "distopt_dp_reshardable"
    shutil.copytree(src, tmp_path / "run")
    ckpt = tmp_path / "run" / "iter_0000005"
    from lrdoctor.read.bytes import dcp

    common = dcp.load(ckpt, prefixes=["common_state/"]).flat["common_state/shard_0_1"][0]
    import argparse

    common = {**common, "args": argparse.Namespace(**common["args"].state)}
    torch.save(common, ckpt / "common.pt")  # what TorchCommonSaveStrategy writes
    (ckpt / ".metadata").write_bytes(b"\x80\x04K\x01.")  # a pickle of the int 1
    st = megatron.read(tmp_path / "run")
    assert st.scheduler_progress.value == 80 and st.optimizer_lrs == []
    assert ".metadata" in st.facts.optimizer_lrs_unread.reason
    (f,) = [f for f in diagnose(st) if f.code == "LRD111"]
    assert "could not be read" in f.message
