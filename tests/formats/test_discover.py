"""Content-first discovery (issue 9): files found and classified by what they hold.

Fixtures are written with the real classes (megatron-core's OptimizerParamScheduler,
torch schedulers and optimizers); the CLI is run for exit codes and output.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.diagnose import diagnose
from lrdoctor.inspect_api import read_state
from lrdoctor.read.scan import grouping, listing
from tests.helpers.factories import _quiet_megatron, _tiny_model, _train_step
from tests.helpers.paths import REPO

ROOT = REPO


def lrdoctor(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), COLUMNS="120")
    return subprocess.run([sys.executable, "-m", "lrdoctor", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def loud(findings) -> list[str]:
    return [f.code for f in findings if f.severity >= Severity.WARNING]


# ---------------------------------------------------------------- ROLL, bare mcore scheduler

def roll_bare(ck: Path, *, updates: int, decay: int = 2400) -> None:
    """What ROLL's mcore_adapter leaves in ``checkpoint-N/``: a bare megatron-core
    ``OptimizerParamScheduler.state_dict()`` in ``scheduler.pt`` beside ``optimizer.pt``,
    stepped by 1 per optimizer update (no ``iter_*``, no ``mca_config.json``)."""
    import torch

    Sched = _quiet_megatron()
    model = _tiny_model(2)
    opt = torch.optim.SGD(model.parameters(), lr=1e-5, momentum=0.9)
    sched = Sched(opt, init_lr=0.0, max_lr=1e-5, min_lr=1e-6, lr_warmup_steps=10,
                  lr_decay_steps=decay, lr_decay_style="cosine", start_wd=0.0, end_wd=0.0,
                  wd_incr_steps=0, wd_incr_style="constant")
    for _ in range(updates):
        sched.step(1)
    ck.mkdir(parents=True)
    torch.save(sched.state_dict(), ck / "scheduler.pt")
    torch.save(opt.state_dict(), ck / "optimizer.pt")


def test_roll_bare_scheduler_past_its_budget(tmp_path):
    ck = tmp_path / "actor_train" / "checkpoint-199"
    roll_bare(ck, updates=8429)
    for target in (ck, ck / "scheduler.pt", tmp_path / "actor_train"):
        st = read_state(target)
        assert st.format == "roll"
        assert st.scheduler_progress.value == 8429 and st.schedule.horizon == 2400
        f = diagnose(st)
        err = [x for x in f if x.code == "LRD101"]
        assert err and err[0].severity == Severity.ERROR
        assert "8,429" in err[0].message and "2,400" in err[0].message
    st = read_state(ck)
    assert {Path(f).name for f in st.files} == {"scheduler.pt", "optimizer.pt"}
    r = lrdoctor("inspect", str(ck), "--json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert "LRD101" in {f["code"] for f in doc["findings"]}
    assert doc["state"]["scheduler_progress"]["source"].endswith("scheduler.pt:num_steps")


def test_roll_bare_at_its_horizon_is_not_judged(tmp_path):
    """Only the scheduler's own counter and horizon are saved (SGD keeps no step, no config):
    nothing independent to compare with, so "could not judge" at warning level, never the
    silent "agree" this test asserted before issue 19."""
    ck = tmp_path / "actor_train" / "checkpoint-99"
    roll_bare(ck, updates=2400)
    st = read_state(ck)
    assert st.format == "roll" and st.scheduler_progress.value == 2400
    (f,) = loud(diagnose(st))
    assert f == "LRD111"


# ---------------------------------------------------------------- loose files

def loose_folder(d: Path, *, k: int, updates: int = 25, sgd: bool = False) -> None:
    """model.pt / optimizer.pt / scheduler.pt / trainer.pt in one folder; LambdaLR stepped
    ``k`` times per update (``k`` > 1: the per-micro-batch bug)."""
    import torch

    model = _tiny_model(3)
    opt = (torch.optim.SGD(model.parameters(), lr=0.1) if sgd
           else torch.optim.AdamW(model.parameters(), lr=1e-3))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / 1000))
    for u in range(updates):
        _train_step(model, opt, u)
        for _ in range(k):
            sched.step()
    d.mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), d / "model.pt")
    torch.save(opt.state_dict(), d / "optimizer.pt")
    torch.save(sched.state_dict(), d / "scheduler.pt")
    torch.save({"global_step": updates, "epoch": 0}, d / "trainer.pt")


def test_loose_files_are_all_read_and_named(tmp_path):
    d = tmp_path / "ckpt"
    loose_folder(d, k=4)
    st = read_state(d)
    names = {Path(f).name for f in st.files}
    assert {"model.pt", "optimizer.pt", "scheduler.pt", "trainer.pt"} <= names
    assert st.scheduler_progress.value == 100
    assert st.scheduler_progress.source == f"{d / 'scheduler.pt'}:last_epoch"
    assert st.counter("optimizer.step").value == 25
    assert st.counter("loop.global_step").source == f"{d / 'trainer.pt'}:global_step"
    f = [x for x in diagnose(st) if x.code == "LRD103"]
    assert f and f[0].evidence["k"] == 4
    r = lrdoctor("inspect", str(d))
    assert r.returncode == 1
    for name in ("scheduler.pt", "optimizer.pt", "trainer.pt", "model.pt"):
        assert name in r.stdout
    assert "scheduler.pt:last_epoch" in r.stdout  # the counters of the verdict, by default
    assert "more counter(s) read: --verbose shows them" in r.stdout
    r = lrdoctor("inspect", str(d), "--verbose")  # every counter with its file and key
    assert "trainer.pt:global_step" in r.stdout


def test_sgd_without_step_uses_the_loop_counter(tmp_path):
    d = tmp_path / "sgd"
    loose_folder(d, k=4, updates=250, sgd=True)
    st = read_state(d)
    assert st.counter("optimizer.step") is None  # SGD keeps no step
    assert st.nominal_progress.name == "loop.global_step"
    f = [x for x in diagnose(st) if x.code == "LRD103"]
    assert f and f[0].evidence["scheduler_progress"] == 1000 and f[0].evidence["k"] == 4
    healthy = tmp_path / "ok"
    loose_folder(healthy, k=1, updates=250, sgd=True)
    assert loud(diagnose(read_state(healthy))) == []


def test_only_weights_is_a_warning_naming_what_was_scanned(tmp_path):
    import torch

    d = tmp_path / "w"
    d.mkdir()
    torch.save(_tiny_model().state_dict(), d / "model.pt")
    torch.save({"epoch": 3}, d / "meta.pt")
    r = lrdoctor("inspect", str(d), "--json", "--fail-on", "warning")
    assert r.returncode == 1, r.stderr
    f = [x for x in json.loads(r.stdout)["findings"] if x["code"] == "LRD111"]
    assert f and f[0]["severity"] == "warning"
    assert "model.pt" in f[0]["message"] and "meta.pt" in f[0]["message"]


# ---------------------------------------------------------------- untrusted input

def test_code_execution_primitive_anywhere_refuses(tmp_path):
    d = tmp_path / "ckpt"
    loose_folder(d, k=1)
    # A side file that names os.system (a STACK_GLOBAL, never called): hostile.
    (d / "rng_state_0.pth").write_bytes(b"\x80\x04\x8c\x02os\x8c\x06system\x93.")
    r = lrdoctor("inspect", str(d))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "rng_state_0.pth" in lines[0] and "os.system" in lines[0]
    assert "Traceback" not in r.stderr


class InertConfig:  # pickled by reference: an unknown but inert class in a side file
    def __init__(self):
        self.max_steps = 500


def test_unknown_inert_class_is_opaque_with_a_note(tmp_path):
    d = tmp_path / "ckpt"
    loose_folder(d, k=1)
    (d / "extra.pkl").write_bytes(pickle.dumps({"cfg": InertConfig()}))
    st = read_state(d)
    assert any("opaque" in n and "InertConfig" in n for n in st.notes)
    assert st.planned_end is not None and st.planned_end.value == 500
    assert st.planned_end.source.endswith("extra.pkl:cfg.max_steps")


# ---------------------------------------------------------------- grouping

def test_run_checkpoints_groups_step_folders_and_numbered_files(tmp_path):
    run = tmp_path / "run"
    for n in (10, 2):
        (run / f"global_step_{n}" / "actor").mkdir(parents=True)
        for r in range(2):
            (run / f"global_step_{n}" / "actor" / f"extra_state_world_size_2_rank_{r}.pt") \
                .write_bytes(b"")
    (run / "latest_checkpointed_iteration.txt").write_text("10")
    ck = grouping.run_checkpoints(run)
    assert [c.step for c in ck] == [2, 10]
    assert len(ck[1].files) == 2 and all(f.parent.name == "actor" for f in ck[1].files)
    files = tmp_path / "files"
    files.mkdir()
    for n in (3, 10, 1):
        (files / f"ckpt_{n}.pt").write_bytes(b"")
    assert [c.step for c in grouping.run_checkpoints(files)] == [1, 3, 10]
    ranks = tmp_path / "ranks"
    ranks.mkdir()
    for r in range(4):
        (ranks / f"ep0-ba200-rank{r}.pt").write_bytes(b"")
    ck = grouping.run_checkpoints(ranks)
    assert len(ck) == 1 and ck[0].step == 200 and len(ck[0].files) == 4


def test_symlinks_out_of_the_tree_are_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.pt").write_bytes(b"")
    d = tmp_path / "ckpt"
    d.mkdir()
    (d / "a.pt").write_bytes(b"")
    (d / "link.pt").symlink_to(outside / "secret.pt")
    (d / "dirlink").symlink_to(outside, target_is_directory=True)
    assert [p.name for p in listing.candidate_files(d)] == ["a.pt"]


def test_too_many_files_is_refused(tmp_path):
    d = tmp_path / "many"
    d.mkdir()
    for i in range(12):
        (d / f"f{i}.pt").write_bytes(b"")
    with pytest.raises(Exception, match="more than 10"):
        listing.candidate_files(d, max_files=10)


# ---------------------------------------------------------------- horizons and units

def test_linear_lr_ending_mid_run_without_a_planned_end_is_not_an_error(tmp_path):
    import torch

    model = _tiny_model(4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.1,
                                              total_iters=6)
    for u in range(12):  # the decay ends at half the run, by the author's choice
        _train_step(model, opt, u)
        sched.step()
    f = tmp_path / "l.pt"
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "step": 12}, f)
    found = diagnose(read_state(f))
    assert loud(found) == []
    assert [x for x in found if x.code == "LRD110" and "not saved" in x.message]
    # With the planned end saved, the same state past the horizon is an LRD102 tail, not 101.
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict(), "step": 12,
                "total_steps": 12}, f)
    assert "LRD101" not in [x.code for x in diagnose(read_state(f))]


def test_megatron_scheduler_counting_updates_is_not_lrd104(tmp_path):
    """verl's/ROLL's Megatron paths step megatron-core's scheduler by 1 per update: its
    num_steps equals iteration, not consumed samples. The unit is inferred from that
    invariant instead of a "0.06x" LRD104 on a healthy run."""
    import torch

    from tests.helpers.factories import megatron_args

    Sched = _quiet_megatron()
    model = _tiny_model(8)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    sched = Sched(opt, init_lr=0.0, max_lr=3e-4, min_lr=3e-5, lr_warmup_steps=4,
                  lr_decay_steps=40, lr_decay_style="cosine", start_wd=0.0, end_wd=0.0,
                  wd_incr_steps=40, wd_incr_style="constant")
    for i in range(30):
        _train_step(model, opt, i)
        sched.step(1)
    rank = tmp_path / "iter_0000030" / "mp_rank_00"
    rank.mkdir(parents=True)
    args = megatron_args(train_iters=40, consumed_train_samples=30 * 16)
    torch.save({"args": args, "iteration": 30, "checkpoint_version": 3.0,
                "opt_param_scheduler": sched.state_dict(),
                "optimizer": {"optimizer": opt.state_dict()}, "model": model.state_dict()},
               rank / "model_optim_rng.pt")
    (tmp_path / "latest_checkpointed_iteration.txt").write_text("30")
    st = read_state(tmp_path)
    assert st.format == "megatron"
    assert st.scheduler_progress.unit.value == "optimizer updates"
    assert st.nominal_progress.name == "megatron.iteration"
    assert any("stepped by 1 per update" in n for n in st.notes)
    f = diagnose(st)
    assert "LRD104" not in [x.code for x in f] and loud(f) == []


def test_hostile_side_file_beside_a_framework_checkpoint_refuses(hf_run_dir, tmp_path):
    """The HF reader never opens rng_state.pth; the folder is still checked, because the
    run would torch.load it on resume."""
    import shutil

    ck = tmp_path / "checkpoint-4"
    shutil.copytree(hf_run_dir.root / "checkpoint-4", ck)
    (ck / "rng_state.pth").write_bytes(b"\x80\x04\x8c\x05posix\x8c\x06system\x93.")
    r = lrdoctor("inspect", str(ck))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "rng_state.pth" in lines[0] and "posix.system" in lines[0]


def test_real_lightning_linear_lr_ending_at_half_the_run_is_silent(tmp_path):
    """A healthy Lightning run whose LinearLR reaches its end at half the run: Lightning
    saves no max_steps, so the horizon rule must not claim an error (issue 9)."""
    import pytorch_lightning as pl
    import torch

    class M(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch, i):
            return self.lin(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            o = torch.optim.AdamW(self.parameters(), lr=1e-3)
            s = torch.optim.lr_scheduler.LinearLR(o, start_factor=1.0, end_factor=0.1,
                                                  total_iters=10)
            return {"optimizer": o, "lr_scheduler": {"scheduler": s, "interval": "step"}}

    t = pl.Trainer(max_steps=20, logger=False, enable_progress_bar=False,
                   enable_model_summary=False, enable_checkpointing=False,
                   default_root_dir=str(tmp_path), accelerator="cpu")
    t.fit(M(), torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
        torch.randn(64, 4)), batch_size=4))
    t.save_checkpoint(tmp_path / "last.ckpt")
    st = read_state(tmp_path / "last.ckpt")
    assert st.format == "lightning" and st.scheduler_progress.value == 20
    f = diagnose(st)
    assert loud(f) == [] and [x.code for x in f if x.code == "LRD110"]


def test_files_are_read_by_content_whatever_their_names(tmp_path):
    """A torch.save file named without a known suffix (``fixed``, ``state.latest``) is a
    checkpoint all the same; a text file with a .pt-free name is not."""
    import shutil

    src = ROOT / "sample_checkpoints" / "torch-microstep" / "checkpoint_60.pt"
    d = tmp_path / "run"
    d.mkdir()
    for name in ("state.latest", "fixed"):
        shutil.copy(src, d / name)
        assert listing.is_pickle(d / name)
        p = lrdoctor("inspect", str(d / name), "--json")
        assert p.returncode == 1, p.stderr
        doc = json.loads(p.stdout)
        assert {f["code"] for f in doc["findings"]} >= {"LRD103"}
    (d / "notes").write_text("just text\n")
    assert not listing.is_pickle(d / "notes")
    assert sorted(f.name for f in listing.candidate_files(d)) == ["fixed", "state.latest"]
