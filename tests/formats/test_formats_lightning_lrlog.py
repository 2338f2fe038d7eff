"""A Lightning LambdaLR's schedule fitted to LearningRateMonitor's CSVLogger metrics.csv.

The runs are real: a LightningModule trained a few steps on the CPU with
LearningRateMonitor + CSVLogger + ModelCheckpoint and a transformers-style
linear-warmup LambdaLR, so the file layout (``lightning_logs/version_0/
checkpoints/*.ckpt`` beside ``metrics.csv``) and the column names are Lightning's own.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lrdoctor.core.errors import LimitExceeded, UnusableInput
from lrdoctor.core.facts import LrLog
from lrdoctor.inspect_api import inspect_path
from lrdoctor.read.bytes import safetext
from lrdoctor.read.layouts import lightning as pl_fmt
from lrdoctor.schedules import lr_at

pytestmark = pytest.mark.frameworks

GEN = textwrap.dedent('''
import json, math, sys, warnings, torch, pytorch_lightning as pl
from pathlib import Path
from torch.utils.data import DataLoader, TensorDataset
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger
warnings.filterwarnings("ignore")
out = Path(sys.argv[1])
torch.manual_seed(0)

def lam(kind, warmup, total):  # transformers' linear / cosine lambdas, written by hand
    def f(n):
        if n < warmup:
            return n / max(1, warmup)
        if kind == "cosine":
            return max(0.0, 0.5 * (1 + math.cos(math.pi * (n - warmup) / max(1, total - warmup))))
        return max(0.0, (total - n) / max(1, total - warmup))
    return f

class M(pl.LightningModule):
    def __init__(self, max_steps=12, warmup=3, step_every_batch=False, kind="linear",
                 save=True):
        super().__init__()
        self.cfg = dict(max_steps=max_steps, warmup=warmup, kind=kind,
                        step_every_batch=step_every_batch)
        if save:  # the only way a budget reaches a .ckpt
            self.save_hyperparameters()
        self.l = torch.nn.Linear(4, 1)

    def training_step(self, batch, i):
        if self.cfg["step_every_batch"]:  # the bug: a per-batch step under accumulation
            self.lr_schedulers().step()
        loss = self.l(batch[0]).pow(2).mean()
        self.log("train_loss", loss)
        return loss

    def configure_optimizers(self):
        o = torch.optim.AdamW(self.parameters(), lr=1e-3)
        c = self.cfg
        s = torch.optim.lr_scheduler.LambdaLR(o, lam(c["kind"], c["warmup"], c["max_steps"]))
        return {"optimizer": o, "lr_scheduler": {"scheduler": s, "interval": "step"}}

def run(name, steps, accum=1, **kw):
    dl = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=2)  # 8 batches/epoch
    t = pl.Trainer(default_root_dir=out / name, logger=CSVLogger(out / name),
                   callbacks=[LearningRateMonitor(logging_interval="step"),
                              ModelCheckpoint(save_top_k=-1, every_n_train_steps=steps)],
                   log_every_n_steps=1, enable_progress_bar=False,
                   enable_model_summary=False, accelerator="cpu", max_steps=steps,
                   accumulate_grad_batches=accum)
    t.fit(M(**kw), dl)
    s = t.lr_scheduler_configs[0].scheduler
    (out / f"{name}.json").write_text(json.dumps({
        "last_epoch": s.last_epoch, "global_step": t.global_step,
        "lr": [g["lr"] for g in t.optimizers[0].param_groups], "log_dir": t.log_dir}))

run("healthy", 8)
run("per_batch", 6, accum=2, step_every_batch=True)
run("cosine_nobudget", 8, kind="cosine", max_steps=10, warmup=2, save=False)
''')


def generate(tmp_path_factory, name: str, gen: str) -> Path:
    """Run a fixture script (Lightning's own trainer on CPU) in a fresh folder; the
    TensorBoard tests run this script with their logger swapped in."""
    out = tmp_path_factory.mktemp(name)
    (out / "gen.py").write_text(gen)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PL_DISABLE_FORK="1")
    r = subprocess.run([sys.executable, str(out / "gen.py"), str(out)], env=env,
                       capture_output=True, text=True, timeout=600, cwd=out)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return generate(tmp_path_factory, "lightning_lrlog", GEN)


def truth(runs: Path, name: str) -> dict:
    return json.loads((runs / f"{name}.json").read_text())


def version_dir(runs: Path, name: str) -> Path:
    return runs / name / "lightning_logs" / "version_0"


def the_ckpt(runs: Path, name: str) -> Path:
    (f,) = (version_dir(runs, name) / "checkpoints").glob("*.ckpt")
    return f


def codes(report) -> list[str]:
    return [f.code for f in report.findings]


def test_the_fixture_is_lightnings_own_layout(runs):
    """What the test rests on: Lightning wrote metrics.csv beside checkpoints/, with a
    'step' and an 'lr-AdamW' column, and logged each step's LR (healthy: once per step)."""
    csv = version_dir(runs, "healthy") / "metrics.csv"
    header, rows = safetext.read_csv(csv)
    assert {"step", "lr-AdamW", "epoch", "train_loss"} <= set(header)
    history, col, why = pl_fmt.read_lr_log(csv)
    assert (col, why) == ("lr-AdamW", "")
    lam = [n / 3 if n < 3 else (12 - n) / 9 for n in range(8)]
    assert [p.point for p in history] == pytest.approx([(s, 1e-3 * lam[s]) for s in range(8)],
                                                       rel=1e-12)


def test_healthy_lambda_is_fitted_from_metrics_csv(runs):
    t = truth(runs, "healthy")
    st = pl_fmt.read(runs / "healthy")  # the run dir, as a user would give it
    csv = str(version_dir(runs, "healthy") / "metrics.csv")
    s = st.schedule
    assert (s.family, s.kind, s.max_lr, s.warmup, s.horizon) == ("hf", "linear", 1e-3, 3, 12)
    assert csv in s.source and "column 'lr-AdamW'" in s.source
    assert "8 points logged as lambda(step)" in s.source
    assert st.facts.lr_log == LrLog(file=csv, column="lr-AdamW", points=8)
    assert csv in st.files
    assert st.scheduler_progress.value == t["last_epoch"] == 8
    assert lr_at(s, st.scheduler_progress.value) == pytest.approx(t["lr"][0], rel=1e-12)
    (r,) = inspect_path(runs / "healthy")
    assert codes(r) == ["LRD107"] and r.exit_code("warning") == 0
    assert csv in r.findings[0].message  # never silent: which file the fit came from


def test_per_batch_step_under_accumulation(runs):
    """accumulate_grad_batches=2 and a scheduler.step() in training_step on top of
    Lightning's: 3 calls per update. The log is fitted at 3 x step, so the schedule is
    known and lrdoctor can say the LR hit its floor a third of the way in (LRD101)."""
    assert_per_batch_findings(runs, "metrics.csv")


def assert_per_batch_findings(runs: Path, log_name: str) -> None:
    """The per-batch run's fitted schedule (named after ``log_name``) and findings."""
    t = truth(runs, "per_batch")
    assert (t["last_epoch"], t["global_step"]) == (18, 6)
    ckpt = the_ckpt(runs, "per_batch")
    s = pl_fmt.read(ckpt).schedule
    assert (s.kind, s.warmup, s.horizon) == ("linear", 3, 12)
    assert "lambda(3 x step)" in s.source and log_name in s.source
    (r,) = inspect_path(ckpt)
    assert codes(r) == ["LRD107", "LRD103", "LRD101"]
    k3, past = r.findings[1], r.findings[2]
    assert (k3.evidence["scheduler_progress"], k3.evidence["nominal_progress"],
            k3.evidence["k"]) == (18, 6, 3)
    assert past.evidence["training_fraction_done"] == 0.5
    assert past.evidence["floor_reached_at_training_fraction"] == pytest.approx(1 / 3, abs=1e-6)
    assert r.exit_code("error") == 1


def test_no_budget_saved_the_horizon_is_fitted_too(runs):
    """Lightning saves no max_steps: a module without save_hyperparameters() has no
    budget, so the fit solves the horizon from a logged point in the decay as well."""
    t = truth(runs, "cosine_nobudget")
    st = pl_fmt.read(runs / "cosine_nobudget")
    s = st.schedule
    assert st.planned_end is None
    assert (s.kind, s.warmup, s.horizon) == ("cosine", 2, 10)
    assert "the horizon is fitted too" in s.source
    assert lr_at(s, t["last_epoch"]) == pytest.approx(t["lr"][0], rel=1e-12)
    (r,) = inspect_path(runs / "cosine_nobudget")
    assert codes(r) == ["LRD107"] and "horizon is fitted too" in r.findings[0].message


def test_without_the_log_the_lambda_is_recognised_from_the_saved_lr(runs, tmp_path):
    """The same checkpoint away from its metrics.csv: the layout alone knows progress
    only, and the saved LR at the saved position, with the warmup and the training steps
    the hyper-parameters hold, is transformers' linear helper and no other
    (schedules.recognise, issue 27): the schedule, and with it LRD101, come back."""
    f = tmp_path / "a" / "b" / "c" / "x.ckpt"
    f.parent.mkdir(parents=True)
    shutil.copy(the_ckpt(runs, "per_batch"), f)
    st = pl_fmt.read(f)
    assert st.schedule is None and st.facts.lr_log is None
    assert any("no LearningRateMonitor metrics.csv" in n for n in st.notes)
    (r,) = inspect_path(f)
    assert codes(r) == ["LRD103", "LRD101"]
    (note,) = [n for n in r.state["notes"] if n.startswith("schedule recognised from the saved LR")]
    assert "hyper_parameters.warmup" in note and "hyper_parameters.max_steps" in note


def test_a_log_above_the_search_bound_is_not_used(runs, tmp_path):
    """Found only in the checkpoint's folder and two above it, never above the path given."""
    vd = tmp_path / "v"
    (vd / "deeper" / "checkpoints").mkdir(parents=True)
    shutil.copy(the_ckpt(runs, "healthy"), vd / "deeper" / "checkpoints" / "x.ckpt")
    shutil.copy(version_dir(runs, "healthy") / "metrics.csv", tmp_path / "metrics.csv")
    assert pl_fmt.read(vd / "deeper" / "checkpoints" / "x.ckpt").schedule is None  # 3 up
    # ... and a folder given as the run root bounds the search from above too.
    shutil.copy(version_dir(runs, "healthy") / "metrics.csv", vd / "metrics.csv")
    assert pl_fmt.read(vd / "deeper" / "checkpoints" / "x.ckpt").schedule is not None
    assert pl_fmt.read(vd / "deeper").schedule is None


def test_found_by_content_not_by_name(runs, tmp_path):
    vd = tmp_path / "v"
    (vd / "checkpoints").mkdir(parents=True)
    shutil.copy(the_ckpt(runs, "healthy"), vd / "checkpoints" / "x.ckpt")
    (vd / "data.csv").write_text("a,b\n1,2\n")  # not a metrics log: ignored
    (vd / "blob.csv").write_bytes(b"\x80\x81")  # unreadable, and not by its name a log: a note
    shutil.copy(version_dir(runs, "healthy") / "metrics.csv", vd / "lr_log.csv")
    st = pl_fmt.read(vd / "checkpoints" / "x.ckpt")
    assert st.schedule.kind == "linear" and st.facts.lr_log.file == str(vd / "lr_log.csv")
    assert not st.facts.lr_log_unused
    assert any(n.startswith(f"{vd / 'blob.csv'}: not read (not a UTF-8") for n in st.notes)
    (r,) = inspect_path(vd / "checkpoints" / "x.ckpt")
    assert codes(r) == ["LRD107"]


BAD = {
    "no_lr_column": ("epoch,step,train_loss\n0,0,0.5\n0,1,0.4\n",
                     "no LearningRateMonitor 'lr-<Optimizer>' column"),
    "bad_quoting": ('step,lr-AdamW\n0,"0.001\n', "not valid CSV"),
    "binary": (b"\x80\x81\x00step,lr-AdamW\n", "not a UTF-8 text file"),
    "no_values": ("epoch,lr-AdamW,step\n0,,0\n0,,1\n", "holds no logged LR values"),
    "no_step": ("epoch,lr-AdamW\n0,0.001\n", "no 'step' column"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_metrics_csv_is_reported_not_skipped(runs, tmp_path, case):
    content, why = BAD[case]
    vd = tmp_path / "version_0"
    (vd / "checkpoints").mkdir(parents=True)
    ckpt = vd / "checkpoints" / "x.ckpt"
    shutil.copy(the_ckpt(runs, "healthy"), ckpt)
    csv = vd / "metrics.csv"
    csv.write_bytes(content if isinstance(content, bytes) else content.encode())
    st = pl_fmt.read(ckpt)  # never an error: the checkpoint itself is fine
    assert st.schedule is None
    (unused,) = st.facts.lr_log_unused
    assert unused["file"] == str(csv) and why in unused["reason"]
    assert str(csv) not in unused["reason"]  # the file is named once, in the finding
    (r,) = inspect_path(ckpt)
    # (the LambdaLR itself is recognised from the saved LR, so no LRD107 beside it)
    assert codes(r) == ["LRD111"]
    f = r.findings[0]
    assert str(csv) in f.message and why in f.message and str(f.severity) == "warning"
    assert r.exit_code("warning") == 1  # a CI gate at warning sees it


def test_a_good_log_nearer_wins_over_a_bad_one_and_the_bad_one_is_still_said(runs, tmp_path):
    vd = tmp_path / "version_0"
    (vd / "checkpoints").mkdir(parents=True)
    ckpt = vd / "checkpoints" / "x.ckpt"
    shutil.copy(the_ckpt(runs, "healthy"), ckpt)
    (vd / "checkpoints" / "metrics.csv").write_text("epoch,step\n0,0\n")
    shutil.copy(version_dir(runs, "healthy") / "metrics.csv", vd / "metrics.csv")
    st = pl_fmt.read(ckpt)
    assert st.schedule.kind == "linear" and st.facts.lr_log.file == str(vd / "metrics.csv")
    (r,) = inspect_path(ckpt)
    assert codes(r) == ["LRD107", "LRD111"]
    assert "was used instead" in r.findings[1].message


def test_csv_reader_limits(tmp_path, monkeypatch):
    f = tmp_path / "m.csv"
    f.write_text("step,lr-AdamW\n" + "".join(f"{i},0.001\n" for i in range(100)))
    assert len(safetext.read_csv(f)[1]) == 100
    monkeypatch.setenv("LRDOCTOR_MAX_ITEMS", "50")
    with pytest.raises(LimitExceeded, match="LRDOCTOR_MAX_ITEMS"):
        safetext.read_csv(f)
    monkeypatch.delenv("LRDOCTOR_MAX_ITEMS")
    monkeypatch.setenv("LRDOCTOR_MAX_CSV_BYTES", "100")
    with pytest.raises(LimitExceeded, match="LRDOCTOR_MAX_CSV_BYTES"):
        safetext.read_csv(f)
    monkeypatch.delenv("LRDOCTOR_MAX_CSV_BYTES")
    (tmp_path / "e.csv").write_text("")
    with pytest.raises(UnusableInput, match="no header row"):
        safetext.read_csv(tmp_path / "e.csv")


def test_the_shared_fit_solves_a_horizon_it_was_not_given():
    """formats._logfit without a budget: linear and cosine horizons solved from the log
    (HF's max_steps path is unchanged: the same points with the budget give the same spec)."""
    from lrdoctor.core.state import ScheduleSpec, Unit
    from lrdoctor.read.layouts import _logfit
    from lrdoctor.schedules import hf as hf_sched

    for kind, w, t in (("linear", 5, 100), ("cosine", 7, 333)):
        truth = ScheduleSpec(family="hf", kind=kind, max_lr=3e-4, unit=Unit.UPDATES,
                             warmup=w, horizon=t)
        log = [(s, 3e-4 * hf_sched.factor(truth, s)) for s in range(0, 200, 10)]
        spec = _logfit.fit_schedule(log, 3e-4, None)
        assert (spec.kind, spec.warmup, spec.horizon) == (kind, w, t), kind
        same = _logfit.fit_schedule(log, 3e-4, t)
        assert (same.kind, same.warmup, same.horizon) == (kind, w, t)
        assert "horizon is fitted too" in spec.source and "fitted too" not in same.source
    # Still in warmup: nothing to solve a horizon from, and the source says so.
    ramp = [(s, 1e-3 * min(1.0, s / 25)) for s in range(0, 30, 5)]
    spec = _logfit.fit_schedule(ramp, 1e-3, None)
    assert (spec.kind, spec.horizon) == ("constant_with_warmup", None)
    assert "a decay that starts later would look the same" in spec.source
    # A log no schedule explains is not fitted.
    assert _logfit.fit_schedule([(0, 1e-3), (1, 5e-4), (2, 1e-3)], 1e-3, None) is None


def test_fix_uses_the_fitted_schedule(runs, tmp_path):
    """The per-batch run repaired: the scheduler counter divided by 3 and the LR set from
    the schedule fitted to metrics.csv, what the lambda gives at 6 updates (read back
    with torch.load, the way Lightning's own loader reads a .ckpt)."""
    import math

    import torch

    from lrdoctor.repair import plan_fix, write_fix

    plan = plan_fix(the_ckpt(runs, "per_batch"))
    assert plan.target.policy == "rescale" and plan.target.progress == 6
    want = 1e-3 * (12 - 6) / 9
    assert math.isclose(plan.target.lr, want, rel_tol=1e-12)
    f = tmp_path / "fixed.ckpt"  # a file given: a file written
    write_fix(plan, f)
    sd = torch.load(f, weights_only=False, map_location="cpu")  # lrdoctor's own output
    assert sd["lr_schedulers"][0]["last_epoch"] == 6
    assert math.isclose(sd["optimizer_states"][0]["param_groups"][0]["lr"], want, rel_tol=1e-12)
    assert sd["global_step"] == 6
