"""OpenRLHF's DPO checkpoint (issue 27): what ``DeepspeedStrategy.save_ckpt`` leaves is a
DeepSpeed engine checkpoint (``global_stepN/mp_rank_00_model_states.pt``) holding the
LambdaLR that ``train_dpo`` builds with transformers' ``get_scheduler("cosine_with_min_lr",
num_training_steps=len(dataset) // batch_size x epochs)`` and ``client_states =
{"consumed_samples"}``; no args, no dataset size. OpenRLHF PR 1351's bug (the budget
undercounts the updates) cannot be seen in these files: the reader must say the horizon
could not be checked (a warning naming the numbers that would decide it), never an error
and never "healthy". Written by DeepSpeed's own engine with transformers' own builder (the
openrlhf package itself needs dependencies the test extra lacks)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.inspect_api import inspect_path
from tests.helpers.factories import run_deepspeed
from tests.helpers.verdicts import the

pytestmark = pytest.mark.frameworks

GEN = """
import json, sys, torch, deepspeed
from pathlib import Path
from transformers import get_scheduler

out, budgets = Path(sys.argv[1]), json.loads(sys.argv[2])
deepspeed.init_distributed(dist_backend="gloo", verbose=False)
for name, budget in budgets.items():
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = get_scheduler("cosine_with_min_lr", opt, num_warmup_steps=1,
                          num_training_steps=budget, scheduler_specific_kwargs={"min_lr": 1e-4})
    cfg = {"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
           "zero_optimization": {"stage": 0}, "steps_per_print": 10 ** 9}
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, lr_scheduler=sched,
                                           config=cfg)
    for _ in range(22 * 2):  # 22 updates of 2 micro-batches
        loss = engine(torch.randn(2, 4)).pow(2).mean()
        engine.backward(loss)
        engine.step()
    engine.save_checkpoint(str(out / name), tag=f"global_step{engine.global_steps}",
                           client_state={"consumed_samples": engine.global_steps * 4})
"""


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("openrlhf")
    # PR 1351: the CLI budgets 20 updates where the trainer takes 22; the fix budgets 22.
    run_deepspeed(out, GEN, str(out), json.dumps({"floor": 20, "fixed": 22}))
    return out


@pytest.mark.parametrize("name", ["floor", "fixed"])
def test_openrlhf_budget_cannot_be_checked_and_says_so(saved, name):
    (rep,) = inspect_path(saved / name / "global_step22")
    assert not [f for f in rep.findings if f.severity is Severity.ERROR], rep.findings
    f = the(rep, "LRD111")
    assert f.severity is Severity.WARNING
    assert f.evidence["scheduler_progress"] == 22
    assert "could not be checked" in f.message
    assert any("num_training_steps" in m for m in f.evidence["missing"])
