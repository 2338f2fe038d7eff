"""The runtime guard on real loops: a hand-written torch loop, a real HF Trainer, a real
Lightning Trainer. Buggy stepping is caught with its finding code; healthy runs are silent."""

from __future__ import annotations

import subprocess
import sys
import warnings

import pytest
import torch

from lrdoctor.replay.batchlog import read_batch_log
from lrdoctor.runtime.guard import (
    LoopWatch,
    LRDoctorWarning,
    SchedulerStepError,
    StepGuard,
    scheduler_horizon,
)
from tests.helpers.paths import REPO

ROOT = REPO


def lrd_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, LRDoctorWarning)]


# ------------------------------------------------------------------ hand-written loop

def hand_loop(*, ga: int = 4, per_micro: bool, updates: int = 6, t_max: int | None = None,
              guard_kw: dict | None = None, windows: bool = True) -> StepGuard:
    """A real model, loss and backward; the scheduler stepped per micro-batch or per update."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=t_max or updates)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(
        torch.randn(ga * updates * 2, 4), torch.randn(ga * updates * 2, 1)), batch_size=2)
    with StepGuard(opt, sched, **(guard_kw or {})) as guard:
        for i, (x, y) in enumerate(data):
            if windows:
                guard.micro_batch()
            (torch.nn.functional.mse_loss(model(x), y) / ga).backward()
            if per_micro:
                sched.step()  # the bug: outside the optimizer branch
            if (i + 1) % ga == 0:
                opt.step()
                opt.zero_grad()
                if not per_micro:
                    sched.step()
    return guard


@pytest.mark.filterwarnings("ignore:Detected call of:UserWarning")
def test_hand_loop_stepping_per_micro_batch_is_caught():
    with pytest.raises(SchedulerStepError, match="LRD103") as exc:
        hand_loop(per_micro=True, windows=False)  # plain `with StepGuard(opt, sched):`
    assert "2 times since the last optimizer step" in str(exc.value)
    # With micro_batch() calls the LR moving inside the first window is seen first.
    with pytest.raises(SchedulerStepError, match="LRD205.*micro-batch 2 of optimizer update 1"):
        hand_loop(per_micro=True)


def test_hand_loop_per_micro_batch_warn_mode_names_both_codes():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        guard = hand_loop(per_micro=True, guard_kw={"action": "warn"})
    msgs = lrd_warnings(w)
    assert any("LRD103" in m for m in msgs) and any("LRD205" in m for m in msgs)
    codes = {f.code: f.evidence["occurrences"] for f in guard.findings}
    # 6 windows of 4: 3 extra scheduler steps per window before the optimizer steps.
    assert guard.violations == 6 * 3 and guard.scheduler_steps == 24
    # the LR moves after each of a window's 4 micro-batches (the 4th: before optimizer.step)
    assert codes["LRD205"] == 6 * 4
    assert len(msgs) == len(codes)  # one warning per code


def test_correct_hand_loop_is_silent():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        guard = hand_loop(per_micro=False, guard_kw={"max_steps": 6})
    assert lrd_warnings(w) == [] and guard.findings == []
    assert guard.scheduler_steps == guard.optimizer_steps == 6


def test_hand_loop_with_a_short_horizon_is_caught():
    """Stepped correctly, but T_max sized for half the updates: LRD101 at update 3 of 6."""
    with pytest.raises(SchedulerStepError, match="LRD101.*after 3 of 6"):
        hand_loop(per_micro=False, t_max=3, guard_kw={"max_steps": 6})
    guard = hand_loop(per_micro=False, t_max=3, guard_kw={"max_steps": 6,
                                                          "ignore": ["LRD101"]})
    assert guard.findings == []


def accelerate_loop(monkeypatch=None, processes: int = 1) -> StepGuard:
    """accelerate's documented loop: every call inside ``accumulate``; its wrappers make
    the optimizer and scheduler no-ops until the window closes."""
    from accelerate import Accelerator

    acc = Accelerator(cpu=True, gradient_accumulation_steps=4)
    if processes > 1:  # what AcceleratedScheduler does on `processes` ranks
        import accelerate.scheduler as acc_sched

        monkeypatch.setattr(acc_sched, "AcceleratorState",
                            lambda: type("S", (), {"num_processes": processes})())
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=6)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(48, 4)),
                                       batch_size=2)
    model, opt, data, sched = acc.prepare(model, opt, data, sched)
    try:
        with StepGuard(opt, sched, max_steps=6, action="warn") as guard:
            for (x,) in data:
                with acc.accumulate(model):
                    guard.micro_batch()
                    acc.backward(model(x).pow(2).mean())
                    opt.step()
                    sched.step()
                    opt.zero_grad()
    finally:  # accelerate's state is process-wide: leave none for the next test
        from accelerate.state import AcceleratorState, GradientState

        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
    return guard


@pytest.mark.frameworks
def test_accelerate_accumulate_loop_is_silent():
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        guard = accelerate_loop()
    assert lrd_warnings(w) == [] and guard.findings == []
    assert guard.optimizer_steps == guard.scheduler_steps == 6  # real updates, not calls


@pytest.mark.frameworks
def test_accelerate_stepping_once_per_process_is_caught(monkeypatch):
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        guard = accelerate_loop(monkeypatch, processes=2)
    codes = {f.code: f for f in guard.findings}
    assert codes["LRD103"].evidence["since_last_update"] == 2
    assert codes["LRD101"].evidence["optimizer_updates"] == 3  # T_max 6 used up at update 3


def _opt():
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)


@pytest.mark.parametrize(("make", "horizon"), [
    (lambda o: torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=10), 10),
    (lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=10), 10),
    (lambda o: torch.optim.lr_scheduler.LinearLR(o, 1.0, 0.1, total_iters=10), 10),
    (lambda o: torch.optim.lr_scheduler.LinearLR(o, 0.1, 1.0, total_iters=10), None),  # warm-up
    (lambda o: torch.optim.lr_scheduler.PolynomialLR(o, total_iters=10), 10),
    (lambda o: torch.optim.lr_scheduler.SequentialLR(
        o, [torch.optim.lr_scheduler.LinearLR(o, 0.1, 1.0, total_iters=3),
            torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=7)], milestones=[3]), 10),
    (lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda n: 1.0), None),
], ids=["cosine", "onecycle", "linear-decay", "linear-warmup", "poly", "sequential", "lambda"])
def test_horizon_read_from_real_torch_schedulers(make, horizon):
    assert scheduler_horizon(make(_opt())) == horizon


@pytest.mark.frameworks
def test_horizon_read_from_hf_schedulers():
    import transformers as tf

    assert scheduler_horizon(tf.get_cosine_schedule_with_warmup(_opt(), 2, 10)) == 10
    assert scheduler_horizon(tf.get_scheduler("linear", _opt(), 1, 12)) == 12
    assert scheduler_horizon(tf.get_wsd_schedule(_opt(), 2, 3, num_stable_steps=4)) == 9
    assert scheduler_horizon(tf.get_constant_schedule_with_warmup(_opt(), 2)) is None


def test_one_cycle_used_to_its_last_step_is_silent():
    o = _opt()
    s = torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=6)
    with StepGuard(o, s, max_steps=6) as guard:
        for _ in range(6):
            o.step()
            s.step()
    assert guard.findings == [] and s.last_epoch == 6


@pytest.mark.frameworks
def test_loop_watch_reads_megatron_progress():
    pytest.importorskip("megatron.core")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    s = OptimizerParamScheduler(opt, init_lr=0.0, max_lr=1e-3, min_lr=0.0, lr_warmup_steps=0,
                                lr_decay_steps=64, lr_decay_style="linear", start_wd=0.0,
                                end_wd=0.0, wd_incr_steps=1, wd_incr_style="constant")
    watch = LoopWatch(strict=True, per_update=16).start(s, max_steps=4)  # samples: gbs 16
    assert watch.horizon == 64
    for _ in range(4):
        watch.before_update()
        opt.step()
        s.step(increment=16)
        watch.after_update()
    watch.before_update()
    s.step(increment=16)
    s.step(increment=16)
    with pytest.raises(SchedulerStepError, match="LRD103.*advanced 32"):
        watch.end()


# ------------------------------------------------------------------ HF Trainer

class TokenModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(16, 4)
        self.out = torch.nn.Linear(4, 1)
        self.seen: list[list[int]] = []

    def forward(self, input_ids, attention_mask, labels=None):
        if self.training:
            self.seen.append(attention_mask.sum(-1).tolist())
        m = attention_mask[..., None].float()
        h = (self.emb(input_ids) * m).sum(1) / m.sum(1)
        out = self.out(h).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


class TokenData(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        n = 3 + i % 6
        mask = (torch.arange(10) < n).long()
        return {"input_ids": torch.arange(10) % 16 * mask, "attention_mask": mask,
                "labels": torch.tensor(float(i % 3))}


def hf_train(tmp_path, callbacks, *, ga=4, max_steps=6, bs=2, twice=False):
    from transformers import Trainer, TrainingArguments

    class TwiceTrainer(Trainer):
        """A loss that runs the model a second time (an auxiliary pass)."""

        def compute_loss(self, model, inputs, **kw):
            aux = model(**inputs)["loss"]
            return super().compute_loss(model, inputs, **kw) + 0.0 * aux

    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=max_steps, learning_rate=1e-3,
        lr_scheduler_type="linear", warmup_steps=1, per_device_train_batch_size=bs,
        gradient_accumulation_steps=ga, use_cpu=True, report_to=[], save_strategy="no",
        logging_strategy="no", disable_tqdm=True, dataloader_num_workers=0, seed=0)
    model = TokenModel()
    trainer = (TwiceTrainer if twice else Trainer)(model=model, args=args,
                                                   train_dataset=TokenData(), callbacks=callbacks)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        trainer.train()
    return model, lrd_warnings(w)


def extra_stepper(hook: str):
    """A second callback that steps the scheduler again (the bug being caught)."""
    from transformers import TrainerCallback

    class Extra(TrainerCallback):
        pass

    def step(self, args, state, control, lr_scheduler=None, **kw):
        lr_scheduler.step()

    setattr(Extra, hook, step)
    return Extra()


@pytest.mark.frameworks
def test_hf_healthy_run_is_silent_and_records_the_batch_log(tmp_path):
    from lrdoctor.runtime.callbacks import HFCallback, hf_callback

    cb = hf_callback(batch_log=tmp_path / "batches.jsonl")
    assert isinstance(cb, HFCallback)
    model, msgs = hf_train(tmp_path, [cb])
    assert msgs == [] and cb.findings == []
    assert cb.watches[0].updates == 6 and cb.watches[0].horizon == 6
    df = read_batch_log(tmp_path / "batches.jsonl")
    assert len(df) == 6 * 4 * 2  # max_steps x GA x per-device batch
    assert df.groupby("step").size().tolist() == [8] * 6
    assert df["tokens"].tolist() == [t for mb in model.seen for t in mb]
    assert set(df["tokens"]) <= set(range(3, 9))


@pytest.mark.frameworks
def test_hf_batch_log_counts_a_micro_batch_once_when_the_loss_runs_the_model_twice(tmp_path):
    from lrdoctor.runtime.callbacks import hf_callback

    model, msgs = hf_train(tmp_path, [hf_callback(batch_log=tmp_path / "b.csv")], ga=2,
                           twice=True)
    assert len(model.seen) == 2 * 6 * 2  # two forwards per micro-batch
    df = read_batch_log(tmp_path / "b.csv")
    assert df.groupby("step").size().tolist() == [2 * 2] * 6
    assert df["tokens"].tolist() == [t for mb in model.seen[::2] for t in mb]


@pytest.mark.frameworks
def test_hf_scheduler_stepped_on_every_substep_is_caught(tmp_path):
    from lrdoctor.runtime.callbacks import hf_callback

    cb = hf_callback()
    _, msgs = hf_train(tmp_path, [cb, extra_stepper("on_substep_end")])
    codes = {f.code: f for f in cb.findings}
    assert set(codes) == {"LRD103", "LRD205", "LRD101"}
    # first window: 3 extra steps; later windows: 3 extra + the Trainer's own
    assert codes["LRD103"].evidence["advance"] == 3
    assert codes["LRD103"].evidence["max_advance"] == 4
    assert any(m.startswith("lrdoctor LRD103") for m in msgs) and len(msgs) == 3


@pytest.mark.frameworks
def test_hf_scheduler_stepped_again_each_step_raises_in_strict_mode(tmp_path):
    from lrdoctor.runtime.callbacks import hf_callback

    with pytest.raises(SchedulerStepError, match="LRD103.*advanced 2 steps"):
        hf_train(tmp_path, [hf_callback(strict=True), extra_stepper("on_step_end")], ga=1)


@pytest.mark.frameworks
def test_hf_short_horizon_is_caught(tmp_path):
    """A scheduler the user built for half the run (num_training_steps=3 of 6)."""
    from transformers import Trainer, TrainingArguments, get_linear_schedule_with_warmup

    from lrdoctor.runtime.callbacks import hf_callback

    model = TokenModel()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = get_linear_schedule_with_warmup(opt, 0, 3)
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=6, per_device_train_batch_size=2,
                             use_cpu=True, report_to=[], save_strategy="no",
                             logging_strategy="no", disable_tqdm=True)
    cb = hf_callback()
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        Trainer(model=model, args=args, train_dataset=TokenData(), callbacks=[cb],
                optimizers=(opt, sched)).train()
    (f,) = cb.findings
    assert f.code == "LRD101" and f.evidence["optimizer_updates"] == 3


# ------------------------------------------------------------------ Lightning

def pl_train(callback, *, extra=False, accum=1, max_steps=6):
    import pytorch_lightning as pl

    class M(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.emb = torch.nn.Embedding(16, 1)
            self.seen: list[list[int]] = []

        def training_step(self, batch, i):
            if extra:  # the bug: a manual step next to Lightning's own
                self.lr_schedulers().step()
            self.seen.append(batch["attention_mask"].sum(-1).tolist())
            out = self.emb(batch["input_ids"]).squeeze(-1) * batch["attention_mask"]
            return out.pow(2).mean()

        def configure_optimizers(self):
            o = torch.optim.AdamW(self.parameters(), lr=1e-3)
            s = torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=max_steps)
            return {"optimizer": o, "lr_scheduler": {"scheduler": s, "interval": "step"}}

    data = [{k: v for k, v in TokenData()[i].items() if k != "labels"} for i in range(40)]
    trainer = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", max_steps=max_steps,
                         accumulate_grad_batches=accum, callbacks=[callback])
    module = M()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        trainer.fit(module, torch.utils.data.DataLoader(data, batch_size=2))
    return module, lrd_warnings(w)


@pytest.mark.frameworks
@pytest.mark.parametrize("accum", [1, 3])
def test_lightning_healthy_run_is_silent_and_records(tmp_path, accum):
    from lrdoctor.runtime.callbacks import lightning_callback

    cb = lightning_callback(batch_log=tmp_path / "b.parquet")
    module, msgs = pl_train(cb, accum=accum)
    assert msgs == [] and cb.findings == []
    df = read_batch_log(tmp_path / "b.parquet")
    assert df.groupby("step").size().tolist() == [2 * accum] * 6
    assert df["tokens"].tolist() == [t for mb in module.seen for t in mb]


@pytest.mark.frameworks
@pytest.mark.parametrize("accum", [1, 3])
def test_lightning_manual_extra_step_is_caught(accum):
    from lrdoctor.runtime.callbacks import lightning_callback

    cb = lightning_callback()
    _, msgs = pl_train(cb, extra=True, accum=accum)
    codes = {f.code: f for f in cb.findings}
    assert "LRD103" in codes and codes["LRD103"].evidence["max_advance"] == accum + 1
    assert ("LRD205" in codes) == (accum > 1)  # a window of one micro-batch has no inside
    assert "LRD101" in codes  # cosine over 6 updates, used up halfway or sooner
    assert any("LRD103" in m for m in msgs)

    # strict stops at the first symptom: with windows of 3 the LR moves inside the first one
    with pytest.raises(SchedulerStepError, match="LRD103" if accum == 1 else "LRD205"):
        pl_train(lightning_callback(strict=True), extra=True, accum=accum)


# ------------------------------------------------------------------ import cost

def test_importing_the_api_pulls_in_no_framework():
    code = ("import sys, lrdoctor, lrdoctor.runtime.guard, lrdoctor.runtime.record, "
            "lrdoctor.runtime.callbacks; "
            "from lrdoctor import StepGuard, BatchLogRecorder, hf_callback; "
            "bad = [m for m in ('torch', 'transformers', 'pytorch_lightning', 'lightning', "
            "'pandas', 'pyarrow') if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_api_is_declared_for_completion_and_type_checkers():
    """``__all__`` lists every lazily resolved name (and nothing it cannot resolve),
    ``dir(lrdoctor)`` shows them before first use, and the package ships ``py.typed``."""
    import lrdoctor

    assert set(lrdoctor.__all__) == {"__version__", "replay", *lrdoctor._API}
    assert {"StepGuard", "hf_callback", "lightning_callback", "BatchLogRecorder"} <= set(dir(lrdoctor))
    for name in lrdoctor.__all__:
        assert getattr(lrdoctor, name) is not None, name
    assert (ROOT / "lrdoctor" / "py.typed").is_file()


def test_each_api_name_resolves_first_in_a_fresh_process():
    """Each lazily resolved name works as the first thing a program touches (in a test
    process the submodules are already imported, which hid a recursion once: the
    ``replay`` loader asked the package's own ``__getattr__``)."""
    code = ("import lrdoctor, sys\n"
            "name = sys.argv[1]\n"
            "assert getattr(lrdoctor, name) is not None\n"
            "print(type(getattr(lrdoctor, name)).__name__)")
    import lrdoctor

    for name in lrdoctor.__all__:
        r = subprocess.run([sys.executable, "-c", code, name], cwd=ROOT, capture_output=True,
                           text=True, timeout=120)
        assert r.returncode == 0, (name, r.stderr[-500:])
    r = subprocess.run([sys.executable, "-c", "import lrdoctor; print(lrdoctor.replay.run)"],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "function run" in r.stdout, r.stderr[-500:]
