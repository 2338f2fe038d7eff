"""The runtime guard and the trainer callbacks catch the resume shapes live: on the first
update after a resume, the scheduler must continue from the restored progress.

Real frameworks: a transformers.Trainer resumed from its checkpoint (one with its
scheduler.pt lost, one intact), megatron-core's OptimizerParamScheduler reloaded the way
Megatron-LM does (and with slime's extra step), a Lightning fit resumed from ckpt_path.
"""

from __future__ import annotations

import warnings

import pytest

from lrdoctor.runtime.callbacks import hf_callback
from lrdoctor.runtime.guard import LRDoctorWarning, SchedulerStepError, StepGuard
from tests.helpers.factories import _quiet_megatron, _tiny_model, hf_run

pytestmark = pytest.mark.frameworks


def _codes(cb):
    return sorted(f.code for f in cb.findings)


def _first_job(out, drop_scheduler: bool):
    from tests.diagnose.test_diagnose_run import _drop_scheduler_at, _stop_at

    cbs = [_stop_at(8)] + ([_drop_scheduler_at(8)] if drop_scheduler else [])
    hf_run(out, max_steps=16, save_steps=4, warmup_steps=2, save_state=False, callbacks=cbs)


@pytest.mark.parametrize("lost", [True, False])
def test_hf_callback_checks_the_first_step_after_resume(tmp_path, lost):
    out = tmp_path / "out"
    _first_job(out, drop_scheduler=lost)
    cb = hf_callback()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", LRDoctorWarning)
        hf_run(out, max_steps=16, save_steps=4, warmup_steps=2, save_state=False,
               callbacks=[cb], resume_from=str(out / "checkpoint-8"))
    if not lost:
        assert _codes(cb) == [], [f.message for f in cb.findings]
        return
    assert _codes(cb) == ["LRD112"]
    ev = cb.findings[0].evidence
    assert ev["restored_updates"] == 8 and ev["scheduler_progress"] == 0
    assert ev["expected_progress"] == 8
    assert any("LRD112" in str(w.message) for w in caught)


def _megatron_resume(extra_step: bool, **guard):
    """Megatron-LM's resume: fresh optimizer and scheduler, load_state_dict of both; slime
    then steps the scheduler by iteration x global batch again."""
    import torch

    Sched = _quiet_megatron()
    gbs, it = 16, 10
    model = _tiny_model()

    def build():
        opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
        return opt, Sched(opt, init_lr=0.0, max_lr=3e-4, min_lr=3e-5, lr_warmup_steps=64,
                          lr_decay_steps=640, lr_decay_style="cosine", start_wd=0.0,
                          end_wd=0.0, wd_incr_steps=640, wd_incr_style="constant")

    opt, sched = build()
    for _ in range(it):
        model(torch.randn(2, 4)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        sched.step(increment=gbs)
    saved_opt, saved_sched = opt.state_dict(), sched.state_dict()
    opt, sched = build()
    opt.load_state_dict(saved_opt)
    sched.load_state_dict(saved_sched)
    if extra_step:
        sched.step(increment=it * gbs)
    with StepGuard(opt, sched, resumed_updates=it, progress_per_update=gbs, **guard) as g:
        model(torch.randn(2, 4)).pow(2).mean().backward()
        opt.step()
        sched.step(increment=gbs)
    return g


def test_guard_catches_slime_double_count_on_resume():
    with pytest.raises(SchedulerStepError, match="LRD113.*resumed at 10 .* 320 .*expected 160"):
        _megatron_resume(extra_step=True)
    g = _megatron_resume(extra_step=True, action="warn")
    (f,) = g.findings
    assert f.code == "LRD113" and f.evidence["difference"] == 160


def test_guard_silent_on_megatron_resume():
    assert _megatron_resume(extra_step=False).findings == []


PL = """
import sys, warnings, torch, pytorch_lightning as pl
from pathlib import Path
from torch.utils.data import DataLoader, TensorDataset
from lrdoctor.runtime.callbacks import lightning_callback
warnings.filterwarnings("ignore")
out, fast_forward = Path(sys.argv[1]), sys.argv[2] == "1"

class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 1)
    def training_step(self, batch, i):
        return self.l(batch[0]).pow(2).mean()
    def on_train_start(self):
        if fast_forward and self.trainer.global_step:  # "catch the schedule up" after resume
            for _ in range(self.trainer.global_step):
                self.lr_schedulers().step()
    def configure_optimizers(self):
        o = torch.optim.AdamW(self.parameters(), lr=1e-3)
        s = torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=20)
        return {"optimizer": o, "lr_scheduler": {"scheduler": s, "interval": "step"}}

def fit(max_steps, ckpt):
    torch.manual_seed(0)
    cb = lightning_callback()
    t = pl.Trainer(logger=False, enable_progress_bar=False, enable_model_summary=False,
                   accelerator="cpu", max_steps=max_steps, callbacks=[cb],
                   default_root_dir=str(out))
    t.fit(M(), DataLoader(TensorDataset(torch.randn(40, 4)), batch_size=2), ckpt_path=ckpt)
    return t, cb

t, _ = fit(4, None)
t.save_checkpoint(out / "four.ckpt")
_, cb = fit(10, str(out / "four.ckpt"))
print("CODES", sorted(f.code for f in cb.findings),
      [f.evidence.get("scheduler_progress") for f in cb.findings])
"""


@pytest.mark.parametrize("fast_forward,codes", [("1", "['LRD113'] [8.0]"), ("0", "[] []")])
def test_lightning_callback_checks_the_resume(tmp_path, fast_forward, codes):
    import os
    import subprocess
    import sys

    (tmp_path / "gen.py").write_text(PL)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    r = subprocess.run([sys.executable, str(tmp_path / "gen.py"), str(tmp_path), fast_forward],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("CODES"))
    assert line == f"CODES {codes}"
