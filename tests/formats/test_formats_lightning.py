"""Lightning .ckpt files written by a real Trainer on the CPU, read back metadata-only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.state import Unit
from lrdoctor.read.layouts import lightning as pl_fmt
from lrdoctor.schedules import lr_at

pytestmark = pytest.mark.frameworks

GEN = textwrap.dedent("""
    import json, sys, warnings, torch, pytorch_lightning as pl
    from pathlib import Path
    from torch.utils.data import DataLoader, TensorDataset
    import torch.optim.lr_scheduler as L
    warnings.filterwarnings("ignore")
    out = Path(sys.argv[1])
    torch.manual_seed(0)

    class M(pl.LightningModule):
        def __init__(self, sched, interval, frequency, extra_step):
            super().__init__()
            self.l = torch.nn.Linear(4, 1)
            self.cfg = (sched, interval, frequency, extra_step)

        def training_step(self, batch, i):
            if self.cfg[3]:  # the bug: stepping the scheduler by hand as well
                self.lr_schedulers().step()
            return self.l(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            sched, interval, frequency, _ = self.cfg
            o = torch.optim.AdamW(self.parameters(), lr=1e-3)
            s = {"onecycle": lambda: L.OneCycleLR(o, max_lr=1e-3, total_steps=50),
                 "cosine": lambda: L.CosineAnnealingLR(o, T_max=50),
                 "lambda": lambda: L.LambdaLR(o, lambda n: 1 / (n + 1))}[sched]()
            return {"optimizer": o, "lr_scheduler": {"scheduler": s, "interval": interval,
                                                     "frequency": frequency}}

    class Manual(pl.LightningModule):
        def __init__(self, total_steps=40):
            super().__init__()
            self.save_hyperparameters()
            self.automatic_optimization = False
            self.l = torch.nn.Linear(4, 1)

        def training_step(self, batch, i):
            o = self.optimizers()
            loss = self.l(batch[0]).pow(2).mean()
            o.zero_grad(); self.manual_backward(loss); o.step()
            self.lr_schedulers().step()

        def configure_optimizers(self):
            o = torch.optim.AdamW(self.parameters(), lr=1e-3)
            return [o], [L.CosineAnnealingLR(o, T_max=self.hparams.total_steps)]

    def run(name, sched="cosine", interval="step", frequency=1, accum=1, max_steps=-1,
            max_epochs=None, extra_step=False, every=0):
        dl = DataLoader(TensorDataset(torch.randn(20, 4)), batch_size=2)  # 10 batches/epoch
        cbs = []
        if every:  # what a real run keeps: saves every n steps and at every epoch end
            from pytorch_lightning.callbacks import ModelCheckpoint
            cbs = [ModelCheckpoint(dirpath=out / name, every_n_train_steps=every, save_top_k=-1,
                                   filename="{epoch}-{step}"),
                   ModelCheckpoint(dirpath=out / name, save_top_k=-1,
                                   filename="end-{epoch}-{step}")]
        t = pl.Trainer(logger=False, enable_checkpointing=bool(every), callbacks=cbs,
                       enable_progress_bar=False, enable_model_summary=False,
                       accelerator="cpu", max_steps=max_steps, max_epochs=max_epochs,
                       accumulate_grad_batches=accum)
        t.fit(Manual() if sched == "manual" else M(sched, interval, frequency, extra_step), dl)
        t.save_checkpoint(out / f"{name}.ckpt")
        s = t.lr_scheduler_configs[0].scheduler
        o = t.optimizers[0]
        (out / f"{name}.json").write_text(json.dumps({
            "last_epoch": s.last_epoch, "global_step": t.global_step,
            "opt_step": max(float(v["step"]) for v in o.state.values()),
            "lr": [g["lr"] for g in o.param_groups], "current_epoch": t.current_epoch}))

    run("step", sched="onecycle", max_steps=7)
    run("accum4", accum=4, max_steps=6)
    run("epoch", interval="epoch", max_epochs=3)
    run("epoch_cut", interval="epoch", max_steps=25)
    run("freq2", frequency=2, max_steps=6)
    run("freq2_accum4", frequency=2, accum=4, max_steps=6)
    run("manual_extra", max_steps=5, extra_step=True)
    run("lambda", sched="lambda", max_steps=4)
    run("manual", sched="manual", max_steps=6)
    run("ckpts_epoch", interval="epoch", max_epochs=3, every=3)
    run("ckpts_step", accum=2, max_epochs=2, every=2)
""")


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("lightning")
    (out / "gen.py").write_text(GEN)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PL_DISABLE_FORK="1")
    r = subprocess.run([sys.executable, str(out / "gen.py"), str(out)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


def load(saved: Path, name: str):
    return pl_fmt.read(saved / f"{name}.ckpt"), json.loads((saved / f"{name}.json").read_text())


def test_step_interval_healthy(saved):
    st, t = load(saved, "step")
    assert pl_fmt.detect(saved / "step.ckpt")
    assert st.counter("trainer.global_step").value == t["global_step"] == 7
    assert st.counter("lightning.optimizer_steps").value == 7
    assert st.counter("lightning.scheduler_progress").value == 7
    assert st.counter("optimizer.step").value == t["opt_step"] == 7
    assert st.scheduler_progress.value == t["last_epoch"] == 7
    assert st.scheduler_progress.value == st.nominal_progress.value
    assert st.extras["lightning.interval"] == "step"
    assert st.optimizer_lrs == pytest.approx(t["lr"])
    s = st.schedule
    assert (s.family, s.kind, s.max_lr, s.horizon, s.unit) == (
        "torch", "OneCycleLR", 1e-3, 50, Unit.UPDATES)
    assert st.planned_end is None
    assert lr_at(s, st.scheduler_progress.value) == pytest.approx(t["lr"][0], rel=1e-9)


def test_accumulation_counts(saved):
    st, t = load(saved, "accum4")
    assert st.scheduler_progress.value == t["last_epoch"] == t["global_step"] == 6
    assert st.nominal_progress.value == 6
    # 10 batches per epoch, 4 per update, the epoch's last batch closes a short window:
    # 3 updates per epoch -> 6 updates = 2 epochs = 20 batches.
    assert st.counter("lightning.batches").value == 20
    assert st.extras["lightning.batches_per_update"] == pytest.approx(20 / 6)


def test_epoch_interval_is_inferred(saved):
    st, t = load(saved, "epoch")
    assert st.extras["lightning.interval"] == "epoch"
    assert st.schedule.unit is Unit.EPOCHS
    assert st.scheduler_progress.value == t["last_epoch"] == 3
    assert st.nominal_progress.value == 3 and st.nominal_progress.unit is Unit.EPOCHS
    assert st.counter("trainer.global_step").value == 30


def test_epoch_interval_stopped_mid_epoch(saved):
    """max_steps=25 stops in the third epoch: Lightning counts it completed, the scheduler does not."""
    st, t = load(saved, "epoch_cut")
    assert t["last_epoch"] == 2 and t["global_step"] == 25
    assert st.extras["lightning.interval"] == "epoch"
    assert st.counter("lightning.epochs_done").value == 2
    assert st.scheduler_progress.value == st.nominal_progress.value == 2


def test_frequency_two_is_inferred_when_lightning_made_every_call(saved):
    st, t = load(saved, "freq2")
    assert t["last_epoch"] == 3 and t["global_step"] == 6
    assert st.extras["lightning.frequency"] == 2
    assert st.scheduler_progress.value == st.nominal_progress.value == 3


def test_frequency_in_batches_under_accumulation(saved):
    """frequency=2 with accumulate_grad_batches=4: Lightning steps on every update."""
    st, t = load(saved, "freq2_accum4")
    assert t["last_epoch"] == t["global_step"] == 6
    assert st.scheduler_progress.value == 6
    assert any("counts a scheduler's `frequency` in batches" in n for n in st.notes)


def test_extra_manual_scheduler_calls_show(saved):
    st, t = load(saved, "manual_extra")
    # One call per batch from training_step plus Lightning's own per update.
    assert t["last_epoch"] == 10 and t["global_step"] == 5
    assert st.scheduler_progress.value == 10
    assert st.nominal_progress.value == 5
    assert st.facts.extra_scheduler_calls == 5
    assert any("stepped 5 times more" in n for n in st.notes)


def test_lambda_schedule_unrecoverable(saved):
    st, t = load(saved, "lambda")
    assert st.schedule is None and st.scheduler_progress.value == t["last_epoch"] == 4
    assert any("LambdaLR" in n for n in st.notes)


def test_run_dir(saved, tmp_path):
    ck = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    ck.mkdir(parents=True)
    a, b = ck / "epoch=0-step=3.ckpt", ck / "epoch=0-step=7.ckpt"
    a.write_bytes((saved / "accum4.ckpt").read_bytes())
    b.write_bytes((saved / "step.ckpt").read_bytes())
    os.utime(b, (1, 1))  # a copy that lost its mtimes: the step in the name wins
    assert pl_fmt.detect(tmp_path)
    assert pl_fmt.find_checkpoints(tmp_path) == [a, b]
    assert pl_fmt.read(tmp_path).path == str(b)
    last = ck / "last.ckpt"  # without step=N everywhere, modification time decides
    last.write_bytes(b.read_bytes())
    os.utime(a, (2, 2))
    assert pl_fmt.find_checkpoints(tmp_path) == [b, a, last]


def test_bad_inputs(tmp_path):
    assert not pl_fmt.detect(tmp_path)
    with pytest.raises(UnusableInput, match="no Lightning"):
        pl_fmt.read(tmp_path)
    f = tmp_path / "x.ckpt"
    f.write_bytes(b"\x80\x04garbage")
    with pytest.raises(UnusableInput) as e:
        pl_fmt.read(f)
    assert "x.ckpt" in str(e.value) and "\n" not in str(e.value)


def test_a_plain_torch_dict_named_ckpt_is_read_as_torchsave(tmp_path):
    import torch

    p = torch.nn.Parameter(torch.zeros(2))
    opt = torch.optim.AdamW([p], lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=10)
    for _ in range(3):
        p.grad = torch.ones(2)
        opt.step()
        sched.step()
    f = tmp_path / "loop.ckpt"
    torch.save({"model": {"p": p.detach()}, "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict()}, f)
    st = pl_fmt.read(f)
    assert st.format != "lightning"
    assert st.scheduler_progress.value == 3 and st.schedule.kind == "CosineAnnealingLR"
    assert any("not a Lightning checkpoint" in n for n in st.notes)
    bare = tmp_path / "bare.ckpt"
    torch.save({"state_dict": {}}, bare)
    # Issue 19: a file with no training state at all is unusable input (exit 2), not a
    # state with nothing in it that a gate would let through as checked.
    with pytest.raises(UnusableInput, match="no training state"):
        pl_fmt.read(bare)


@pytest.mark.parametrize("name", ["ckpts_epoch", "ckpts_step"])
def test_every_modelcheckpoint_save_of_a_healthy_run_is_consistent(saved, name):
    """ModelCheckpoint saves mid-epoch and at epoch ends; all of them must agree."""
    import torch

    files = pl_fmt.find_checkpoints(saved / name)
    assert len(files) >= 6
    interval = "epoch" if name == "ckpts_epoch" else "step"
    for f in files:
        st = pl_fmt.read(f)
        real = torch.load(f, weights_only=False, map_location="cpu")  # our own file
        assert st.scheduler_progress.value == real["lr_schedulers"][0]["last_epoch"], f.name
        assert st.counter("trainer.global_step").value == real["global_step"], f.name
        assert st.scheduler_progress.value == st.nominal_progress.value, f.name
        if st.scheduler_progress.value > 0 or interval == "step":
            assert st.extras["lightning.interval"] == interval, f.name
    assert pl_fmt.read(saved / name).path == str(files[-1])


def test_manual_optimization_with_a_saved_budget(saved):
    st, t = load(saved, "manual")
    assert t["global_step"] == t["last_epoch"] == 6
    assert st.counter("lightning.manual_optimizer_steps").value == 6
    assert st.scheduler_progress.value == st.nominal_progress.value == 6
    assert st.facts.extra_scheduler_calls == 0  # the user steps it by design
    # save_hyperparameters(total_steps=40) is the only budget a .ckpt can hold.
    assert st.planned_end.name == "hyper_parameters.total_steps" and st.planned_end.value == 40
    assert st.trainer_progress.value == 6


def test_reading_never_imports_torch(saved):
    code = ("import sys; from pathlib import Path; from lrdoctor.read.layouts import lightning as M; "
            "st = M.read(Path(sys.argv[1])); assert st.scheduler_progress is not None; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code, str(saved / "step.ckpt")], check=True, timeout=60)


# ---------------------------------------------------------------- the whole diagnosis

HEALTHY = ("step", "accum4", "epoch", "epoch_cut", "freq2", "freq2_accum4", "manual")


def test_inspect_healthy_runs_are_silent(saved):
    """Step and epoch intervals, accumulation, frequency, manual optimization and every
    ModelCheckpoint save of two runs: no finding at all."""
    from lrdoctor.inspect_api import inspect_path

    reps = [r for n in HEALTHY for r in inspect_path(saved / f"{n}.ckpt")]
    reps += [r for n in ("ckpts_epoch", "ckpts_step") for r in inspect_path(saved / n, all=True)]
    assert len(reps) == len(HEALTHY) + len(pl_fmt.find_checkpoints(saved / "ckpts_epoch")) + len(
        pl_fmt.find_checkpoints(saved / "ckpts_step"))
    for r in reps:
        assert r.findings == [], (r.target, [(f.code, f.message) for f in r.findings])
        assert r.exit_code("warning") == 0


def test_inspect_lambda_without_a_budget_says_what_it_could_not_check(saved):
    """A LambdaLR (its lambda is code) has moved the LR to 1/5 of the peak and the
    checkpoint holds no horizon or planned end: no error, and a warning (issue 27: never
    silent) that names the numbers that would decide it, besides LRD107's info."""
    from lrdoctor.inspect_api import inspect_path

    (r,) = inspect_path(saved / "lambda.ckpt")
    assert [f.code for f in r.findings] == ["LRD107", "LRD111"] and r.exit_code("error") == 0
    ev = r.findings[1].evidence
    assert ev["scheduler_progress"] == 4 and "num_training_steps" in ev["missing"][0]
    assert "could not be checked" in r.findings[1].message


def test_inspect_extra_manual_scheduler_steps(saved):
    from lrdoctor.inspect_api import inspect_path

    (r,) = inspect_path(saved / "manual_extra.ckpt")
    assert [f.code for f in r.findings] == ["LRD103"]
    f = r.findings[0]
    assert (f.evidence["scheduler_progress"], f.evidence["nominal_progress"],
            f.evidence["k"]) == (10, 5, 2)
    assert "by hand" in f.message and "accelerate" not in f.message
    assert "--k 2" in f.fix
