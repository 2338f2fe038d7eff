"""Run-level diagnosis: checkpoints of one run compared with each other.

Every buggy run is written by the framework's own classes and resumed for real (a
``transformers.Trainer`` resumed from its checkpoint, megatron-core's
``OptimizerParamScheduler`` rebuilt and loaded the way Megatron-LM/slime do);
each has a healthy twin resumed the right way, which must stay silent.
"""

from __future__ import annotations

import textwrap

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.inspect_api import inspect_path
from tests.helpers.factories import _quiet_megatron, hf_run, megatron_run

pytestmark = pytest.mark.frameworks


def run_codes(report) -> list[str]:
    return sorted(f.code for f in report.findings if f.code in RUN_CODES)


RUN_CODES = {"LRD112", "LRD113", "LRD114", "LRD115", "LRD116"}


def the(report, code):
    (f,) = [f for f in report.findings if f.code == code]
    return f


def silent(reports):
    for r in reports:
        bad = [(f.code, f.message) for f in r.findings if f.severity >= Severity.WARNING]
        assert not bad, (r.target, bad)


# ---------------------------------------------------------------- HF Trainer, resumed

def _stop_at(step):
    from transformers import TrainerCallback

    class Preempt(TrainerCallback):
        """The job is killed right after the checkpoint at ``step`` is written."""

        def on_step_end(self, args, state, control, **kw):
            if state.global_step == step:
                control.should_training_stop = True

    return Preempt()


def _drop_scheduler_at(step):
    from transformers import TrainerCallback

    class DropScheduler(TrainerCallback):
        """scheduler.pt never reaches storage for this checkpoint (a copy filter, a
        failed upload): the Trainer wrote it, the resume does not find it."""

        def on_save(self, args, state, control, **kw):
            if state.global_step == step:
                (__import__("pathlib").Path(args.output_dir)
                 / f"checkpoint-{step}" / "scheduler.pt").unlink()

    return DropScheduler()


@pytest.fixture(scope="module")
def hf_restart(tmp_path_factory):
    """Trainer to step 8 (saves 4, 8; scheduler.pt of checkpoint-8 lost), resumed to 16:
    HF then loads neither optimizer nor scheduler, global_step continues from 8."""
    out = tmp_path_factory.mktemp("hfr") / "out"
    kw = dict(max_steps=16, save_steps=4, warmup_steps=2, save_state=False)
    hf_run(out, callbacks=[_stop_at(8), _drop_scheduler_at(8)], **kw)
    hf_run(out, resume_from=str(out / "checkpoint-8"), **kw)
    return out


@pytest.fixture(scope="module")
def hf_restart_twin(tmp_path_factory):
    out = tmp_path_factory.mktemp("hfr_twin") / "out"
    kw = dict(max_steps=16, save_steps=4, warmup_steps=2, save_state=False)
    hf_run(out, callbacks=[_stop_at(8)], **kw)
    hf_run(out, resume_from=str(out / "checkpoint-8"), **kw)
    return out


def test_hf_scheduler_restarted_on_resume(hf_restart):
    (r,) = inspect_path(hf_restart)  # a run folder is judged as a run without --all
    assert run_codes(r) == ["LRD112", "LRD115"]
    f = the(r, "LRD112")
    ev = f.evidence
    assert ev["from_checkpoint"].endswith("checkpoint-4")
    assert ev["to_checkpoint"].endswith("checkpoint-12")
    assert ev["resumed_from"].endswith("checkpoint-8")
    assert (ev["updates"]["from"], ev["updates"]["to"], ev["updates"]["delta"]) == (4, 12, 8)
    assert (ev["scheduler"]["from"], ev["scheduler"]["to"], ev["scheduler"]["delta"]) == (4, 4, 0)
    assert "checkpoint-4 -> checkpoint-12" in f.message and "since checkpoint-8" in f.message
    # each counter by what it counts (issue 29 item 4): HF's scheduler.last_epoch counts
    # scheduler calls, global_step optimizer updates, in the message and the evidence
    assert (ev["scheduler"]["unit"], ev["updates"]["unit"]) == ("scheduler calls",
                                                              "optimizer updates")
    assert "4 -> 4 (+0) scheduler calls" in f.message, f.message
    m = the(r, "LRD115")
    assert m.evidence["checkpoint"].endswith("checkpoint-8")
    assert m.evidence["peak_lr"] == 1e-3 and m.evidence["optimizer_lrs"][0] < 1e-3
    # The trend rows name the codes at the checkpoint where the interval ends.
    rows = {row["checkpoint"]: row for row in r.extra["run"]["checkpoints"]}
    assert rows["checkpoint-12"]["codes"] == ["LRD112"]
    assert rows["checkpoint-8"]["scheduler"] is None
    assert rows["checkpoint-16"]["scheduler_delta"] == 4 and rows["checkpoint-16"]["codes"] == []


def test_hf_resume_twin_is_silent(hf_restart_twin):
    reps = inspect_path(hf_restart_twin, all=True)
    assert [r.target.rsplit("/", 1)[-1] for r in reps] == [
        "checkpoint-4", "checkpoint-8", "checkpoint-12", "checkpoint-16"]
    silent(reps)
    assert "run" in reps[-1].extra and all("run" not in r.extra for r in reps[:-1])


@pytest.fixture(scope="module")
def hf_horizon(tmp_path_factory):
    """3 epochs of 64 samples, batch 4: GA 4 gives max_steps 12; stopped at 4 and resumed
    with GA 1, the Trainer recomputes max_steps = 48 and rebuilds the cosine on it."""
    def make(ga_after):
        out = tmp_path_factory.mktemp(f"hfh{ga_after}") / "out"
        kw = dict(max_steps=-1, save_steps=4, warmup_steps=2, save_state=False)
        hf_run(out, grad_accum=4, callbacks=[_stop_at(4)],
               args_over={"num_train_epochs": 3}, **kw)
        hf_run(out, grad_accum=ga_after, resume_from=str(out / "checkpoint-4"),
               args_over={"num_train_epochs": 3, "save_steps": 8 if ga_after == 1 else 4},
               **kw)
        return out
    return make


def test_hf_horizon_recomputed_on_resume(hf_horizon):
    out = hf_horizon(1)
    reps = inspect_path(out, all=True)
    assert reps[0].target.endswith("checkpoint-4") and reps[1].target.endswith("checkpoint-8")
    r = reps[-1]
    assert run_codes(r) == ["LRD114"]
    f = the(r, "LRD114")
    assert f.evidence["from_checkpoint"].endswith("checkpoint-4")
    assert f.evidence["to_checkpoint"].endswith("checkpoint-8")
    changes = {c["what"]: (c["from"], c["to"]) for c in f.evidence["changes"]}
    assert changes == {"decay horizon": (12, 48)}
    assert f.evidence["lr_at_resume_new_schedule"] > f.evidence["lr_at_resume_old_schedule"]
    assert "decay horizon 12 -> 48" in f.message


def test_hf_horizon_twin_is_silent(hf_horizon):
    silent(inspect_path(hf_horizon(4), all=True))


# ---------------------------------------------------------------- megatron-core, resumed

def test_megatron_double_counted_on_every_resume(tmp_path):
    truth = megatron_run(tmp_path / "ck", save_at=(10, 20, 30), resume_at=(10, 20),
                         double_count_on_resume=True)
    saved = [s.scheduler["num_steps"] for s in truth.saves]
    assert saved == [160, 160 + 160 + 160, 480 + 320 + 160]  # megatron-core's own counter
    (r,) = inspect_path(truth.root)
    found = [f for f in r.findings if f.code == "LRD113"]
    assert len(found) == 2
    first, second = found
    assert first.evidence["scheduler"]["delta"] == 320
    assert first.evidence["updates"]["delta"] == 160
    assert first.evidence["excess"] == 160
    assert first.evidence["excess_matches"]["multiple"] == 1
    assert second.evidence["scheduler"]["from"] == 480
    assert second.evidence["scheduler"]["delta"] == 480  # +160 updates, +320 re-added
    assert second.evidence["excess_matches"]["value"] == 320  # iteration 20 x gbs 16
    assert "iter_0000010 -> iter_0000020" in first.message
    assert "LRD116" not in run_codes(r) and "LRD112" not in run_codes(r)


def test_megatron_resume_twin_is_silent(tmp_path):
    truth = megatron_run(tmp_path / "ck", save_at=(10, 20, 30), resume_at=(10, 20))
    assert [s.scheduler["num_steps"] for s in truth.saves] == [160, 320, 480]
    silent(inspect_path(truth.root, all=True))


def test_megatron_rate_changed_after_resume(tmp_path):
    """The resumed job steps the scheduler per micro-batch (4 per iteration): every later
    interval runs 4x, a changed rate and not a one-off jump."""
    truth = megatron_run(tmp_path / "ck", save_at=(10, 20, 30), resume_at=(10,),
                         per_micro_from=11)
    assert [s.scheduler["num_steps"] for s in truth.saves] == [160, 160 + 640, 800 + 640]
    (r,) = inspect_path(truth.root)
    assert run_codes(r) == ["LRD116"]
    f = the(r, "LRD116")
    assert f.evidence["ratio_before"] == 1.0 and f.evidence["ratio_in_interval"] == 4.0
    assert [i["ratio"] for i in f.evidence["interval_ratios"]] == [4.0, 4.0]
    assert f.evidence["scheduler"]["delta"] == 640 and f.evidence["updates"]["delta"] == 160
    assert "iter_0000010 -> iter_0000020" in f.message and "1 more interval" in f.message


def test_trend_table_and_plot_of_a_run(hf_restart, monkeypatch):
    from rich.console import Console

    from lrdoctor.render import plots
    from lrdoctor.render.text import render_trend

    reps = inspect_path(hf_restart)
    con = Console(record=True, width=80, highlight=False)
    render_trend(reps, con)
    rows: dict[str, str] = {}
    name = None
    for ln in con.export_text().splitlines():
        if "│" in ln:  # a wrapped cell continues on a line whose first cell is empty
            name = ln.split("│")[0].strip() or name
            rows[name] = rows.get(name, "") + " " + "".join(ln.split("│")[1:])
    assert "none" in rows["checkpoint-8"] and "LRD115" in rows["checkpoint-8"]
    assert "LRD112" in rows["checkpoint-12"] and "12 (+4)" in rows["checkpoint-12"]
    assert "8 (+4)" in rows["checkpoint-16"] and "LRD108" in rows["checkpoint-16"]

    figs = []
    monkeypatch.setattr(plots, "_save_plot", lambda fig, out: figs.append(fig) or out)
    plots.plot_inspect(reps, hf_restart / "run.png")
    (fig,) = figs
    top, bot = fig.axes[:2]
    # each line by what it counts: HF's scheduler.last_epoch counts scheduler calls
    assert top.get_ylabel() == "progress (optimizer updates; scheduler: scheduler calls)"
    assert bot.get_ylabel() == "learning rate (param group 0)"
    assert bot.get_xlabel().startswith("nominal progress (optimizer updates)")
    series = {ln.get_label(): (list(ln.get_xdata()), list(ln.get_ydata())) for ln in top.lines}
    assert series["scheduler's progress"] == ([4, 12, 16], [4, 4, 8])
    assert series["nominal (trainer's counters)"] == ([4, 8, 12, 16], [4, 8, 12, 16])
    assert series["resume (from the findings)"][0] == [8, 8]  # the restart at checkpoint-8


# ---------------------------------------------------------------- DeepSpeed engine, resumed

DS_GEN = textwrap.dedent("""
    import sys, torch, deepspeed
    from pathlib import Path
    out = Path(sys.argv[1])
    cfg = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2}

    def job(name, steps, passed, resume):
        torch.manual_seed(0)
        m = torch.nn.Linear(4, 2)
        opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
        sch = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=12)
        kw = dict(lr_scheduler=sch) if passed else {}
        eng, opt, _, ds_sch = deepspeed.initialize(model=m, optimizer=opt, config=cfg, **kw)
        if resume:
            eng.load_checkpoint(str(out / name))
        for _ in range(steps):
            eng.backward(eng(torch.randn(2, 4)).pow(2).mean())
            eng.step()  # steps ds_sch when the scheduler was passed to initialize
            if not passed:
                sch.step()  # the user's own scheduler, outside DeepSpeed (issue 3875)
        eng.save_checkpoint(str(out / name))

    for name, passed in (("client_outside", False), ("client_passed", True)):
        job(name, 4, passed, resume=False)
        job(name, 4, passed, resume=True)
""")


@pytest.fixture(scope="module")
def ds_runs(tmp_path_factory):
    from tests.helpers.factories import run_deepspeed

    out = tmp_path_factory.mktemp("ds_resume")
    run_deepspeed(out, DS_GEN, str(out))
    return out


def test_deepspeed_scheduler_outside_the_engine_is_not_saved(ds_runs):
    """DeepSpeed issue 3875: a scheduler stepped by the user and not given to
    deepspeed.initialize is not in the checkpoint; the resumed job's fresh scheduler
    started over at global_step 4."""
    (r,) = inspect_path(ds_runs / "client_outside")
    found = [f for f in r.findings if f.code == "LRD115"]
    assert [f.evidence["checkpoint"].rsplit("/", 1)[-1] for f in found] == [
        "global_step4", "global_step8"]
    first = found[0].evidence
    assert first["peak_lr"] == 1e-3 and "initial_lr" in first["peak_from"]
    import math
    assert math.isclose(first["optimizer_lrs"][0], 1e-3 * (1 + math.cos(math.pi * 4 / 12)) / 2,
                        rel_tol=1e-6)
    assert first["updates"]["value"] == 4
    rows = r.extra["run"]["checkpoints"]
    assert [row["scheduler"] for row in rows] == [None, None]


def test_deepspeed_scheduler_passed_to_the_engine_is_silent(ds_runs):
    reps = inspect_path(ds_runs / "client_passed", all=True)
    silent(reps)
    rows = reps[-1].extra["run"]["checkpoints"]
    assert [row["scheduler"]["value"] for row in rows] == [4, 8]


# ---------------------------------------------------------------- Lightning, resumed

PL_GEN = textwrap.dedent("""
    import sys, warnings, torch, pytorch_lightning as pl
    from pathlib import Path
    from torch.utils.data import DataLoader, TensorDataset
    warnings.filterwarnings("ignore")
    out = Path(sys.argv[1])

    class M(pl.LightningModule):
        def __init__(self, returned):
            super().__init__()
            self.l = torch.nn.Linear(4, 1)
            self.returned = returned

        def training_step(self, batch, i):
            return self.l(batch[0]).pow(2).mean()

        def on_train_batch_end(self, *a):
            if not self.returned:  # stepped by hand, never handed to Lightning (issue 11188)
                self.sched.step()

        def configure_optimizers(self):
            o = torch.optim.AdamW(self.parameters(), lr=1e-3)
            self.sched = torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=20)
            if self.returned:
                return {"optimizer": o, "lr_scheduler": {"scheduler": self.sched,
                                                         "interval": "step"}}
            return o

    def fit(name, returned, max_steps, resume):
        torch.manual_seed(0)
        dl = DataLoader(TensorDataset(torch.randn(40, 4)), batch_size=2)
        from pytorch_lightning.callbacks import ModelCheckpoint
        ck = ModelCheckpoint(dirpath=out / name, every_n_train_steps=4, save_top_k=-1,
                             filename="{step}")
        t = pl.Trainer(logger=False, callbacks=[ck], enable_progress_bar=False,
                       enable_model_summary=False, accelerator="cpu", max_steps=max_steps)
        t.fit(M(returned), dl, ckpt_path=str(out / name / "step=4.ckpt") if resume else None)

    for name, returned in (("by_hand", False), ("returned", True)):
        fit(name, returned, 4, resume=False)   # the job ends (preempted) at step 4
        fit(name, returned, 12, resume=True)   # resumed from step=4.ckpt
""")


@pytest.fixture(scope="module")
def pl_runs(tmp_path_factory):
    import subprocess
    import sys

    out = tmp_path_factory.mktemp("pl_resume")
    (out / "gen.py").write_text(PL_GEN)
    r = subprocess.run([sys.executable, str(out / "gen.py"), str(out)], capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def test_lightning_scheduler_stepped_by_hand_is_not_saved(pl_runs):
    (r,) = inspect_path(pl_runs / "by_hand")
    found = [f for f in r.findings if f.code == "LRD115"]
    names = [f.evidence["checkpoint"].rsplit("/", 1)[-1] for f in found]
    assert names == ["step=4.ckpt", "step=8.ckpt", "step=12.ckpt"]
    assert all(f.evidence["peak_lr"] == 1e-3 for f in found)
    # ModelCheckpoint saves before the module's on_train_batch_end: 3 scheduler steps at
    # step=4. The resumed job's fresh scheduler started over: step=8 is far above the 7
    # steps' cosine a continued schedule gives.
    import math
    lr4, lr8 = (f.evidence["optimizer_lrs"][0] for f in found[:2])
    assert math.isclose(lr4, 1e-3 * (1 + math.cos(math.pi * 3 / 20)) / 2, rel_tol=1e-6)
    assert lr8 > 1e-3 * (1 + math.cos(math.pi * 7 / 20)) / 2 * 1.2


def test_lightning_scheduler_returned_is_silent(pl_runs):
    reps = inspect_path(pl_runs / "returned", all=True)
    silent(reps)
    rows = reps[-1].extra["run"]["checkpoints"]
    assert [row["scheduler"]["value"] for row in rows] == [4, 8, 12]


# ---------------------------------------------------------------- megatron-core ramp-up

def test_megatron_rampup_iteration_horizon_is_named(tmp_path):
    """Megatron-Bridge 2609: iteration-based training under --rampup-batch-size sizes the
    horizon as lr_decay_iters x the final global batch; megatron-core's own calculator
    gives the batches, and lrdoctor's ramp arithmetic must agree with it."""
    truth = megatron_run(tmp_path / "ck", rampup_batch_size=[4, 4, 96], train_iters=40,
                         save_at=(20, 40))
    consumed = [s.counters["consumed_train_samples"] for s in truth.saves]
    assert consumed == [8 * 4 + 4 * 8 + 3 * 12 + 5 * 16, 500]
    reps = inspect_path(truth.root, all=True)
    for r, real in zip(reps, consumed, strict=True):
        ramp = r.state["facts"]["rampup"]
        assert ramp["samples_at_iteration"] == real  # lrdoctor's ramp == megatron-core's
        assert r.state["planned_end"]["value"] == 500
    f = the(reps[-1], "LRD118")
    ev = f.evidence
    assert ev["horizon"] == 640 and ev["planned_end"] == 500
    assert ev["rampup"]["segments"] == [
        {"first_iteration": 1, "last_iteration": 8, "global_batch": 4},
        {"first_iteration": 9, "last_iteration": 12, "global_batch": 8},
        {"first_iteration": 13, "last_iteration": 15, "global_batch": 12},
        {"first_iteration": 16, "last_iteration": 40, "global_batch": 16}]
    assert ev["lr_at_planned_end"] == pytest.approx(truth.last.lrs[0], rel=1e-9)
    assert ev["decay_left_fraction"] > 0.1
    assert "--train-samples" in f.fix
    assert not [x for x in reps[-1].findings if x.code in ("LRD101", "LRD104", "LRD113")]


def test_megatron_rampup_sample_based_is_silent(tmp_path):
    truth = megatron_run(tmp_path / "ck", rampup_batch_size=[4, 4, 96], train_iters=None,
                         train_samples=500, lr_warmup_samples=64, save_at=(20, 40))
    assert truth.last.counters["consumed_train_samples"] == 500
    reps = inspect_path(truth.root, all=True)
    silent(reps)
    assert not [f for r in reps for f in r.findings]


# ---------------------------------------------------------------- fix on a run

def test_fix_restores_continuity_after_a_restart(hf_restart, tmp_path):
    """fix on the run folder: the latest checkpoint's scheduler goes back to global_step,
    and the written scheduler.pt loads into transformers' own scheduler."""
    import torch
    from transformers import get_scheduler

    from lrdoctor.repair.engine import plan_fix, write_fix

    plan = plan_fix(hf_restart)
    assert plan.target.policy == "nominal" and "LRD112" in plan.target.motivated_by
    res = write_fix(plan, tmp_path / "fixed")
    assert not [f for f in res.after_findings if f.severity >= Severity.WARNING]
    sd = torch.load(tmp_path / "fixed" / "scheduler.pt", weights_only=True)
    assert sd["last_epoch"] == 16
    lin = torch.nn.Linear(2, 1)  # the Trainer's two param groups (decay / no decay)
    opt = torch.optim.AdamW([{"params": [lin.weight]}, {"params": [lin.bias]}], lr=1e-3)
    sched = get_scheduler("cosine", opt, num_warmup_steps=2, num_training_steps=16)
    sched.load_state_dict(sd)
    assert sched.last_epoch == 16
    assert (hf_restart / "checkpoint-16" / "scheduler.pt").is_file()  # input untouched
    assert torch.load(hf_restart / "checkpoint-16" / "scheduler.pt",
                      weights_only=True)["last_epoch"] == 8


def test_fix_undoes_the_double_count(tmp_path):
    import torch

    from lrdoctor.repair.engine import plan_fix, write_fix

    truth = megatron_run(tmp_path / "ck", save_at=(10, 20), resume_at=(10,),
                         double_count_on_resume=True)
    write_fix(plan_fix(truth.root), tmp_path / "fixed")
    (f,) = (tmp_path / "fixed").rglob("model_optim_rng.pt")
    sd = torch.load(f, weights_only=False)
    sched = _quiet_megatron()(
        torch.optim.AdamW(torch.nn.Linear(2, 1).parameters(), lr=3e-4), init_lr=0.0,
        max_lr=3e-4, min_lr=3e-5, lr_warmup_steps=64, lr_decay_steps=640,
        lr_decay_style="cosine", start_wd=0.01, end_wd=0.01, wd_incr_steps=640,
        wd_incr_style="constant")
    sched.load_state_dict(sd["opt_param_scheduler"])
    assert sched.num_steps == 320 == sd["args"].consumed_train_samples


def _cli(*args):
    import os
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "lrdoctor", *map(str, args)],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "120"})


def test_fix_refuses_a_checkpoint_without_scheduler_state(hf_restart, tmp_path):
    p = _cli("fix", hf_restart / "checkpoint-8", "--out", tmp_path / "o")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert "LRD115" in line and "checkpoint-8 saves no scheduler state" in line
    assert "last_epoch = 8" in line and not (tmp_path / "o").exists()


def test_fix_refuses_a_changed_schedule(hf_horizon, tmp_path):
    run = hf_horizon(1)
    p = _cli("fix", run, "--out", tmp_path / "o")
    assert p.returncode == 2 and "Traceback" not in p.stderr
    (line,) = p.stderr.strip().splitlines()
    assert "LRD114" in line and "decay horizon 12 -> 48" in line
    assert not (tmp_path / "o").exists()
