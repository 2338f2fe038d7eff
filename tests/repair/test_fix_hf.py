"""lrdoctor fix on a real HF Trainer checkpoint, resumed by a real Trainer."""

from __future__ import annotations

import math
import shutil

import pytest
import torch

from lrdoctor.core.findings import Severity
from lrdoctor.repair import Refusal, plan_fix, write_fix
from tests.helpers.fix_support import diff, load, tree_hash

pytestmark = pytest.mark.frameworks
K, MAX, SAVE = 4, 8, 4


class Tiny(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 1)

    def forward(self, x, labels=None):
        out = self.lin(x).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


class Data(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return {"x": torch.randn(4, generator=g), "labels": torch.randn((), generator=g)}


def trainer(out_dir):
    import transformers

    lrs = []

    class Record(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, optimizer=None, **kw):
            lrs.append((state.global_step + 1, optimizer.param_groups[0]["lr"]))

    args = transformers.TrainingArguments(
        output_dir=str(out_dir), max_steps=MAX, save_steps=SAVE, save_strategy="steps",
        logging_steps=1, learning_rate=1e-3, lr_scheduler_type="linear", warmup_steps=2,
        per_device_train_batch_size=2, use_cpu=True, report_to=[], seed=0,
        disable_tqdm=True)
    torch.manual_seed(0)
    t = transformers.Trainer(model=Tiny(), args=args, train_dataset=Data(),
                             callbacks=[Record()])
    return t, lrs


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    root = tmp_path_factory.mktemp("hf")
    t, lrs = trainer(root / "run")
    t.train()
    return root, dict(lrs)


def make_bad(root, healthy_ckpt):
    """The same checkpoint as if an AcceleratedScheduler had stepped K times per update."""
    bad = root / "bad" / healthy_ckpt.name
    shutil.copytree(healthy_ckpt, bad)
    s = torch.load(bad / "scheduler.pt", weights_only=True)
    s["last_epoch"] *= K
    s["_step_count"] = s["last_epoch"] + 1
    s["_last_lr"] = [0.0] * len(s["_last_lr"])
    torch.save(s, bad / "scheduler.pt")
    o = torch.load(bad / "optimizer.pt", weights_only=True)
    for g in o["param_groups"]:
        g["lr"] = 0.0
    torch.save(o, bad / "optimizer.pt")
    return bad


def test_trainer_resumes_from_the_fixed_checkpoint_at_the_right_lr(healthy, tmp_path):
    root, want = healthy
    bad = make_bad(tmp_path, root / "run" / f"checkpoint-{SAVE}")
    before = tree_hash(bad)
    plan = plan_fix(bad)
    assert plan.target.policy == "rescale" and plan.target.k == K
    assert plan.target.progress == SAVE
    out = tmp_path / "fixed" / f"checkpoint-{SAVE}"
    out.parent.mkdir()
    res = write_fix(plan, out)
    assert tree_hash(bad) == before
    assert [f.code for f in res.after_findings if f.severity >= Severity.WARNING] == []
    # training_args.bin and trainer_state.json are byte-for-byte copies.
    for name in ("training_args.bin", "trainer_state.json", "rng_state.pth"):
        if (bad / name).exists():
            assert (bad / name).read_bytes() == (out / name).read_bytes()
    groups = range(len(load(bad / "optimizer.pt")["param_groups"]))
    assert set(diff(load(bad / "scheduler.pt"), load(out / "scheduler.pt"))) == {
        ("last_epoch",), ("_step_count",)} | {("_last_lr", i) for i in groups}
    assert set(diff(load(bad / "optimizer.pt"), load(out / "optimizer.pt"))) == {
        ("param_groups", i, "lr") for i in groups}

    t, got = trainer(tmp_path / "resumed")
    t.train(resume_from_checkpoint=str(out))
    got = dict(got)
    assert sorted(got) == list(range(SAVE + 1, MAX + 1))
    for step, lr in got.items():
        assert math.isclose(lr, want[step], rel_tol=1e-12), (step, lr, want[step])

    # The unfixed checkpoint resumes at the wrong LR (the test can fail).
    t, wrong = trainer(tmp_path / "resumed-bad")
    t.train(resume_from_checkpoint=str(bad))
    assert dict(wrong)[SAVE + 1] != want[SAVE + 1]


def test_extend_horizon_is_refused_for_hf(healthy, tmp_path):
    root, _ = healthy
    bad = make_bad(tmp_path, root / "run" / f"checkpoint-{SAVE}")
    with pytest.raises(Refusal, match="training_args.bin"):
        plan_fix(bad, policy="extend-horizon")
