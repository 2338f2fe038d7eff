"""lrdoctor fix on a real Lightning .ckpt, resumed by a real Lightning Trainer."""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from lrdoctor.core.findings import Severity
from lrdoctor.repair import plan_fix, write_fix
from tests.helpers.fix_support import diff, load, tree_hash

pytestmark = pytest.mark.frameworks
BAD_STEPS, TOTAL = 10, 20


def module(extra_step: bool):
    import pytorch_lightning as pl

    class M(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 1)
            self.lrs = {}

        def training_step(self, batch, i):
            self.lrs[self.trainer.global_step + 1] = self.optimizers().param_groups[0]["lr"]
            if extra_step:  # the bug: one more scheduler step per batch by hand
                self.lr_schedulers().step()
            return self.lin(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=1e-3)
            sch = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=TOTAL, eta_min=1e-5)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sch, "interval": "step"}}

    return M()


def fit(m, max_steps, ckpt_path=None):
    import pytorch_lightning as pl

    data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(64, 4)), batch_size=2)
    t = pl.Trainer(max_steps=max_steps, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t.fit(m, data, ckpt_path=ckpt_path)
    return t


def test_rescaled_ckpt_resumes_like_a_healthy_run(tmp_path):
    torch.manual_seed(0)
    t = fit(module(extra_step=True), BAD_STEPS)
    bad = tmp_path / "bad.ckpt"
    t.save_checkpoint(bad)
    before = tree_hash(bad)
    plan = plan_fix(bad)
    assert plan.target.policy == "rescale" and plan.target.k == 2
    out = tmp_path / "fixed.ckpt"
    res = write_fix(plan, out)
    assert tree_hash(bad) == before
    assert [f.code for f in res.after_findings if f.severity >= Severity.WARNING] == []
    assert set(diff(load(bad), load(out))) == {
        ("lr_schedulers", 0, "last_epoch"), ("lr_schedulers", 0, "_step_count"),
        ("lr_schedulers", 0, "_last_lr", 0), ("optimizer_states", 0, "param_groups", 0, "lr")}

    torch.manual_seed(0)
    healthy = module(extra_step=False)
    fit(healthy, TOTAL)
    resumed = module(extra_step=False)
    fit(resumed, TOTAL, ckpt_path=str(out))
    assert sorted(resumed.lrs) == list(range(BAD_STEPS + 1, TOTAL + 1))
    for step, lr in resumed.lrs.items():
        assert math.isclose(lr, healthy.lrs[step], rel_tol=1e-9), step
