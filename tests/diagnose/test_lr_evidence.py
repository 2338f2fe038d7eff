"""The LR as evidence (issue 19, item 4): the LR the run used -- logged, saved per
checkpoint -- is judged. LR 0 while training went on is LRD131 (error, with the share of
the run), a log the configured scheduler type cannot give is LRD132 (error when it
cycles). Fixtures come from transformers' Trainer, torch's schedulers and Lightning."""

from __future__ import annotations

from pathlib import Path

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.inspect_api import inspect_path
from tests.helpers.factories import hf_run

pytestmark = pytest.mark.frameworks


def _loud(rep):
    return [f for f in rep.findings if f.severity >= Severity.WARNING]


def _cosine_callback(t_max: int, make=None):
    """Hand the Trainer another scheduler than its arguments name: ``optimizers=`` is not
    reachable through hf_run, so a callback swaps the trainer's scheduler for a torch
    CosineAnnealingLR(T_max) (or ``make(opt)``) at the start of training, what a user
    passing ``optimizers=(opt, CosineAnnealingLR(opt, T_max=steps_per_epoch))`` gets."""
    from transformers import TrainerCallback

    class Swap(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            import torch

            sched = kw["lr_scheduler"]
            opt = kw["optimizer"]
            for g in opt.param_groups:
                g["lr"] = g["initial_lr"]
            cos = make(opt) if make else torch.optim.lr_scheduler.CosineAnnealingLR(
                opt, T_max=t_max)
            sched.__dict__.clear()
            sched.__dict__.update(cos.__dict__)
            sched.__class__ = type(cos)

    return Swap()


def test_hf_log_that_cycles_while_args_say_linear(tmp_path):
    """args: linear over 16 steps (no warmup); the scheduler actually driving the run is
    a cosine with T_max 5: the logged LR is 0 at step 6 and climbs back to the peak."""
    hf_run(tmp_path / "out", max_steps=16, save_steps=16, scheduler="linear", warmup_steps=0,
           callbacks=[_cosine_callback(5)])
    (rep,) = inspect_path(tmp_path / "out" / "checkpoint-16")
    by = {f.code: f for f in rep.findings}
    f = by["LRD132"]
    assert f.severity is Severity.ERROR
    ev = f.evidence
    assert ev["configured"].startswith("hf linear (training_args.bin)")
    assert ev["low_lr"] == 0 and ev["low_step"] == 6
    assert ev["back_step"] > ev["low_step"] and ev["back_lr"] >= 0.9 * ev["peak_lr"]
    # One logged 0 at the bottom of each cycle: the cycle is the finding, not "stuck at 0".
    assert "LRD131" not in by


def stuck_at_zero_report(tmp_path):
    """transformers' Trainer whose driving scheduler decays to 0 over 10 of 16 steps (its
    horizon sized for another unit): the report of its last checkpoint."""
    import torch

    def linear10(opt):
        return torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.0,
                                                 total_iters=10)

    hf_run(tmp_path / "out", max_steps=16, save_steps=16, scheduler="linear", warmup_steps=0,
           callbacks=[_cosine_callback(0, make=linear10)])
    (rep,) = inspect_path(tmp_path / "out" / "checkpoint-16")
    return rep


def test_hf_log_stuck_at_zero_while_training_went_on(tmp_path):
    """The scheduler driving the run decays to 0 over 10 of 16 steps (its horizon sized
    for another unit): the logged LR stays 0 for the last 6 updates."""
    rep = stuck_at_zero_report(tmp_path)
    (z,) = [f for f in rep.findings if f.code == "LRD131"]
    assert z.severity is Severity.ERROR and z.evidence["source"] == "log"
    assert z.evidence["zero_from"] == 11 and z.evidence["end"] == 16
    assert z.evidence["steps_at_zero"] == 6 and z.evidence["share_at_zero"] == 6 / 16


def test_hf_healthy_twin_cosine_over_the_whole_run_is_quiet(tmp_path):
    """Twin: the swapped-in cosine spans all 16 steps. Args still say linear, so the log
    contradicts the type (info), but nothing cycles and no step trained at 0."""
    hf_run(tmp_path / "out", max_steps=16, save_steps=16, scheduler="linear", warmup_steps=0,
           callbacks=[_cosine_callback(16)])
    (rep,) = inspect_path(tmp_path / "out" / "checkpoint-16")
    assert not [f for f in _loud(rep) if f.code in ("LRD131", "LRD132")], rep.findings
    info = [f for f in rep.findings if f.code == "LRD132"]
    assert info and info[0].severity is Severity.INFO


def test_hf_plain_linear_run_has_no_lr_findings(tmp_path):
    """A run whose log is exactly its configured linear schedule, which ends at 0 at the
    planned end: no contradiction, no 'LR 0'."""
    hf_run(tmp_path / "out", max_steps=12, save_steps=6, scheduler="linear", warmup_steps=2)
    for rep in inspect_path(tmp_path / "out", all=True):
        assert not [f for f in rep.findings if f.code in ("LRD131", "LRD132")], rep.findings


def _lambda_loop(root: Path, horizon: int, total: int = 24, every: int = 6,
                 warmup: int = 2) -> list[float]:
    """A torch loop with a LambdaLR (linear warmup, linear decay to 0 at ``horizon``,
    clamped: HF's linear lambda), saving {optimizer, scheduler, step} every ``every``
    updates: the lambda is not saved, so only the LRs tell the schedule."""
    import torch

    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def lam(s):
        if s < warmup:
            return s / max(1, warmup)
        return max(0.0, (horizon - s) / max(1, horizon - warmup))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lam)
    lrs = []
    for u in range(1, total + 1):
        model(torch.randn(2, 4)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        if u % every == 0:
            lrs.append(opt.param_groups[0]["lr"])
            root.mkdir(parents=True, exist_ok=True)
            torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                        "step": u, "total_steps": total}, root / f"ckpt_{u}.pt")
    return lrs


def test_run_lr_trend_reaching_zero_early(tmp_path):
    lrs = _lambda_loop(tmp_path / "run", horizon=20)
    assert [round(x, 6) for x in lrs] == [0.000778, 0.000444, 0.000111, 0.0]
    reps = inspect_path(tmp_path / "run")
    (f,) = [x for x in reps[-1].findings if x.code == "LRD131"]
    assert f.severity is Severity.ERROR and f.evidence["source"] == "checkpoints"
    assert f.evidence["zero_from"] == pytest.approx(20)
    assert f.evidence["end"] == 24 and f.evidence["steps_at_zero"] == pytest.approx(4)
    assert "reaches 0 at loop.step 20 of 24: 4 updates (17% of the run)" in f.message \
        or "reaches 0 at optimizer.step 20 of 24: 4 updates (17% of the run)" in f.message


def test_run_lr_trend_healthy_twin_ends_at_zero_at_the_end(tmp_path):
    lrs = _lambda_loop(tmp_path / "run", horizon=24)
    assert lrs[-1] == 0
    reps = inspect_path(tmp_path / "run")
    assert not [x for x in reps[-1].findings if x.code == "LRD131"], reps[-1].findings


def test_optimizer_lr_zero_before_the_planned_end(tmp_path):
    """One checkpoint: LinearLR to 0 over 5 updates (the horizon sized in epochs of 5
    batches) in a 20-update run, saved at update 10: 10 more updates will train at 0."""
    import torch

    for name, total_iters in (("bug", 5), ("ok", 20)):
        model = torch.nn.Linear(4, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=1.0, end_factor=0.0,
                                                  total_iters=total_iters)
        for _ in range(10):
            opt.step()
            sched.step()
        torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                    "global_step": 10, "max_steps": 20}, tmp_path / f"{name}.pt")
    (rep,) = inspect_path(tmp_path / "bug.pt")
    (f,) = [x for x in rep.findings if x.code == "LRD131"]
    assert f.severity is Severity.ERROR and f.evidence["steps_at_zero"] == 10
    assert f.evidence["share_at_zero"] == 0.5
    (rep,) = inspect_path(tmp_path / "ok.pt")
    assert not [x for x in rep.findings if x.code == "LRD131"], rep.findings


def _lightning_run(root: Path, horizon: int, steps: int = 15, every: int = 3) -> None:
    """A real Lightning run: a LambdaLR decaying linearly to 0 at ``horizon`` (clamped),
    stepped per batch, ModelCheckpoint every ``every`` steps, no logger: the lambda is
    not saved and no LR was logged, so only the checkpoints' LRs tell the schedule."""
    import warnings

    import pytorch_lightning as pl
    import torch
    from pytorch_lightning.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset

    warnings.filterwarnings("ignore")

    class M(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.save_hyperparameters({"max_steps": steps})
            self.lin = torch.nn.Linear(4, 1)

        def training_step(self, batch, i):
            return self.lin(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            o = torch.optim.AdamW(self.parameters(), lr=1e-3)
            s = torch.optim.lr_scheduler.LambdaLR(o, lambda n: max(0.0, (horizon - n) / horizon))
            return {"optimizer": o, "lr_scheduler": {"scheduler": s, "interval": "step"}}

    torch.manual_seed(0)
    dl = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=2)
    t = pl.Trainer(default_root_dir=root, logger=False, max_steps=steps,
                   callbacks=[ModelCheckpoint(dirpath=root / "ckpts", save_top_k=-1,
                                              every_n_train_steps=every)],
                   enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    t.fit(M(), dl)


def test_lightning_checkpoint_trend_reaching_zero_early(tmp_path):
    """Generality: the checkpoint-trend rule (written against a plain torch loop's
    ckpt_N.pt files) on Lightning ModelCheckpoint .ckpt files read by the Lightning layout."""
    _lightning_run(tmp_path / "bug", horizon=12)
    reps = inspect_path(tmp_path / "bug" / "ckpts")
    (f,) = [x for x in reps[-1].findings if x.code == "LRD131"]
    assert f.severity is Severity.ERROR and f.evidence["source"] == "checkpoints"
    assert f.evidence["zero_from"] == pytest.approx(12) and f.evidence["end"] == 15
    assert f.evidence["steps_at_zero"] == pytest.approx(3)
    _lightning_run(tmp_path / "ok", horizon=15)
    reps = inspect_path(tmp_path / "ok" / "ckpts")
    assert not [x for x in reps[-1].findings if x.code == "LRD131"], reps[-1].findings


def test_log_fitted_at_the_schedulers_own_counter_when_stepped_k_times(tmp_path):
    """A run whose scheduler steps 4 times per update (what accelerate's
    AcceleratedScheduler does with num_processes=4 and a budget in updates), with no
    training_args.bin: the schedule is fitted to log_history as a function of the
    scheduler's counter (4 x step, the logged LR sitting at a call offset inside the
    window), recovers the real cosine (warmup 3, horizon 12), and the run is LRD103 k=4."""
    from transformers import TrainerCallback

    class StepsAgain(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            for _ in range(3):
                kw["lr_scheduler"].step()

    truth = hf_run(tmp_path / "out", max_steps=12, save_steps=3, save_state=False,
                   callbacks=[StepsAgain()])
    ck = tmp_path / "out" / "checkpoint-3"
    (ck / "training_args.bin").unlink()
    (rep,) = inspect_path(ck)
    s = rep.state["schedule"]
    assert (s["kind"], s["warmup"], s["horizon"]) == ("cosine", 3.0, 12.0), s
    assert "4 x" in s["source"] and "fitted from log_history" in s["source"]
    f = next(x for x in rep.findings if x.code == "LRD103")
    assert f.evidence["k"] == 4 and truth.saves[0].scheduler["last_epoch"] == 12
