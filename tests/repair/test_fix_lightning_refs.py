"""Lightning's repair writes through the reader's refs (issue 18 item 2), not every
scheduler/optimizer it finds by shape.

A real Lightning Trainer (manual optimization, as a GAN loop is written) saves TWO
(optimizer, scheduler) pairs whose schedulers are at the same progress: the generator's
CosineAnnealingLR (the schedule the reader reads: ``lr_schedulers[0]``) and the
discriminator's StepLR, both stepped twice per batch. The fix must edit exactly the fields
the refs name (the pickles' differing key paths), leave the discriminator's state as it
was (a by-shape repair would set its LR from the generator's cosine), and
``Trainer.fit(ckpt_path=...)`` must resume the generator on the healthy run's LRs.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch

from lrdoctor.repair import plan_fix, write_fix
from lrdoctor.repair.engine import read_state
from tests.helpers.fix_support import diff, load

pytestmark = pytest.mark.frameworks
BAD_STEPS, TOTAL = 8, 16


def module(steps_per_batch: int):
    import pytorch_lightning as pl

    class GAN(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.automatic_optimization = False
            self.g, self.d = torch.nn.Linear(4, 4), torch.nn.Linear(4, 1)
            self.lrs: dict[int, float] = {}

        def training_step(self, batch, i):
            og, _ = self.optimizers()
            _, od = self.optimizers(use_pl_optimizer=False)  # its steps are not global steps
            sg, sd = self.lr_schedulers()
            self.lrs[self.trainer.global_step + 1] = og.param_groups[0]["lr"]
            for opt, loss in ((og, self.d(self.g(batch[0])).mean()),
                              (od, self.d(batch[0]).pow(2).mean())):
                opt.zero_grad()
                self.manual_backward(loss)
                opt.step()
            for _ in range(steps_per_batch):  # 2: the bug, an extra step of each
                sg.step()
                sd.step()

        def configure_optimizers(self):
            og = torch.optim.AdamW(self.g.parameters(), lr=1e-3)
            od = torch.optim.SGD(self.d.parameters(), lr=5e-2)
            return [og, od], [torch.optim.lr_scheduler.CosineAnnealingLR(og, T_max=TOTAL,
                                                                         eta_min=1e-5),
                              torch.optim.lr_scheduler.StepLR(od, step_size=5, gamma=0.5)]

    return GAN()


def fit(m, batches, ckpt_path=None):
    import pytorch_lightning as pl

    data = torch.utils.data.DataLoader(
        torch.utils.data.TensorDataset(torch.randn(64, 4)), batch_size=2)
    t = pl.Trainer(max_steps=batches, logger=False, enable_checkpointing=False,
                   enable_progress_bar=False, enable_model_summary=False, accelerator="cpu")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t.fit(m, data, ckpt_path=ckpt_path)
    return t


def test_two_pairs_the_fix_edits_the_refd_pair_and_the_trainer_resumes(tmp_path):
    torch.manual_seed(0)
    bad = tmp_path / "bad.ckpt"
    fit(module(2), BAD_STEPS).save_checkpoint(bad)
    _, st, _ = read_state(bad)
    assert st.scheduler_progress.ref.key == ("lr_schedulers", 0, "last_epoch")
    lr_keys = {r.key for r in st.optimizer_lr_refs}
    assert lr_keys == {("optimizer_states", 0, "param_groups", 0, "lr")}

    plan = plan_fix(bad)
    assert plan.target.progress_before == 2 * BAD_STEPS
    out = tmp_path / "fixed.ckpt"
    write_fix(plan, out)
    before, after = load(bad), load(out)
    changed = set(diff(before, after))
    assert changed == {("lr_schedulers", 0, "last_epoch"), ("lr_schedulers", 0, "_step_count"),
                       ("lr_schedulers", 0, "_last_lr", 0)} | lr_keys
    assert changed == {c.key if c.key[-1] != "_last_lr" else c.key + (0,) for c in plan.changes}
    assert after["lr_schedulers"][1] == before["lr_schedulers"][1]  # discriminator's, as was
    assert after["optimizer_states"][1]["param_groups"] == before["optimizer_states"][1][
        "param_groups"]

    torch.manual_seed(0)
    healthy = module(1)
    fit(healthy, TOTAL)
    resumed = module(1)
    fit(resumed, TOTAL, ckpt_path=str(out))
    assert sorted(resumed.lrs) == list(range(BAD_STEPS + 1, TOTAL + 1))
    for step, lr in resumed.lrs.items():
        assert math.isclose(lr, healthy.lrs[step], rel_tol=1e-9), step
