"""The whole diagnosis (``inspect_path``: read -> diagnose -> Report) on real checkpoints.

Healthy runs written by the frameworks' own classes must give no warning or error
(false alarms are bugs); buggy runs must give exactly their codes and numbers.
DeepSpeed, Lightning and accelerate are covered next to their module fixtures in
``test_formats_<fmt>.py``.
"""

from __future__ import annotations

import math
import shutil

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.inspect_api import inspect_path
from tests.helpers.factories import hf_run, megatron_run, roll_run, torch_loop


def quiet(reports, *, allowed=()) -> None:
    """No warning/error, exit 0 under --fail-on warning, and only ``allowed`` info codes."""
    assert reports
    for r in reports:
        got = [(f.code, f.message) for f in r.findings]
        assert all(f.severity < Severity.WARNING for f in r.findings), (r.target, got)
        assert r.exit_code("warning") == 0, (r.target, got)
        assert {f.code for f in r.findings} <= set(allowed), (r.target, got)


def codes(report) -> list[str]:
    return sorted(f.code for f in report.findings)


def ev(report, code: str) -> dict:
    return next(f for f in report.findings if f.code == code).evidence


# ---------------------------------------------------------------- Megatron-LM

def test_megatron_healthy_every_checkpoint(megatron_run_dir):
    reps = inspect_path(megatron_run_dir.root, all=True)
    assert [r.target.rsplit("/", 1)[-1] for r in reps] == ["iter_0000010", "iter_0000020"]
    quiet(reps)
    assert [r.state["derived"]["progress_ratio"] for r in reps] == [1.0, 1.0]


def test_megatron_tp2_healthy(tmp_path):
    quiet(inspect_path(megatron_run(tmp_path / "ck", tp=2, save_at=(5, 10), train_iters=20).root,
                       all=True))


def test_megatron_min_lr_tail_is_info_only(tmp_path):
    """lr_decay_iters 30 < train_iters 40: the last quarter at min_lr by configuration."""
    truth = megatron_run(tmp_path / "ck", lr_decay_iters=30, train_iters=40, save_at=(10, 35))
    reps = inspect_path(truth.root, all=True)
    quiet(reps, allowed={"LRD102"})
    for r in reps:  # also at iteration 35, past the horizon as configured
        assert codes(r) == ["LRD102"]
        assert ev(r, "LRD102") == {"horizon": 30 * 16, "planned_end": 40 * 16,
                                   "tail_fraction": 0.25}


def test_megatron_fp16_overflow_is_not_a_mismatch(tmp_path):
    """An overflowed fp16 update steps neither optimizer nor scheduler but counts samples."""
    truth = megatron_run(tmp_path / "ck", save_at=(6,), tp=2, pp=2, overflow_iters=(3,),
                         fp16_wrapper=True, train_iters=12, lr_decay_style="linear",
                         global_batch_size=8)
    (r,) = inspect_path(truth.root)
    quiet([r])
    assert r.state["derived"]["progress_ratio"] == 1.0
    assert any("overflowed" in n for n in r.state["notes"])


def test_megatron_wsd_sample_based_healthy(tmp_path):
    truth = megatron_run(tmp_path / "ck", save_at=(5,), train_iters=None, train_samples=320,
                         lr_decay_style="WSD", lr_wsd_decay_samples=96,
                         lr_wsd_decay_style="minus_sqrt", lr_warmup_samples=32)
    quiet(inspect_path(truth.root))


def test_megatron_scheduler_stepped_per_micro_batch(tmp_path):
    """num_microbatches = 16 / (2 x 2) = 4 scheduler steps per iteration: num_steps = 4 x consumed."""
    truth = megatron_run(tmp_path / "ck", sched_per_micro=True)
    early, late = inspect_path(truth.root, all=True)
    assert codes(early) == ["LRD104"]
    e = ev(early, "LRD104")
    assert (e["scheduler_progress"], e["nominal_progress"], e["ratio"]) == (640, 160, 4.0)
    assert e["unit"] == "samples" and e["k"] == 4
    assert "4 micro-batches per iteration" in early.findings[0].message
    assert early.exit_code("error") == 1
    assert codes(late) == ["LRD101", "LRD104"]
    assert ev(late, "LRD104")["ratio"] == 4.0
    e = ev(late, "LRD101")
    assert (e["scheduler_progress"], e["horizon"]) == (1280, 640)
    assert e["fraction_of_progress_at_min_lr"] == 0.5
    assert e["floor_reached_at_training_fraction"] == 0.25


def test_megatron_wsd_anneal_inside_warmup_is_impossible(tmp_path):
    """megatron-core accepts wsd_decay_steps > lr_decay_steps - lr_warmup_steps; it cannot work."""
    truth = megatron_run(tmp_path / "ck", train_iters=20, lr_decay_style="WSD",
                         lr_wsd_decay_iters=18, save_at=(5,))
    (r,) = inspect_path(truth.root)
    assert codes(r) == ["LRD106"]
    f = r.findings[0]
    assert f.severity is Severity.ERROR
    assert "wsd_decay_steps=288" in f.message and "256" in f.message


# ---------------------------------------------------------------- ROLL

def test_roll_healthy_every_checkpoint(roll_run_dir):
    reps = inspect_path(roll_run_dir.root, all=True)
    assert len(reps) == 2
    quiet(reps)


def test_roll_healthy_with_min_lr_and_without_config(tmp_path):
    quiet(inspect_path(roll_run(tmp_path / "a", min_lr=1e-7, style="linear").root, all=True))
    quiet(inspect_path(roll_run(tmp_path / "b", save_at=(3,), write_config=False).root))


def test_roll_dynamic_batching_overshoot(tmp_path):
    truth = roll_run(tmp_path / "out", updates_per_step=lambda s: 9 + s % 3, save_at=(7,))
    (r,) = inspect_path(truth.root)
    real = sum(9 + s % 3 for s in range(8))  # 79 updates against a nominal 8 x 4 = 32
    assert codes(r) == ["LRD101", "LRD103"]
    e = ev(r, "LRD103")
    assert (e["scheduler_progress"], e["nominal_progress"]) == (real, 32)
    assert e["ratio"] == pytest.approx(real / 32, abs=1e-6)
    e = ev(r, "LRD101")
    assert e["horizon"] == 40 and e["min_lr"] == 0.0
    assert e["fraction_of_progress_at_min_lr"] == pytest.approx((real - 40) / real, abs=1e-6)
    assert e["lr_at_scheduler_progress"] == 0.0 == truth.last.lrs[0]  # Megatron holds min_lr
    assert e["training_fraction_done"] == pytest.approx(0.8)


# ---------------------------------------------------------------- HF Trainer

def test_hf_healthy_every_checkpoint(hf_run_dir):
    reps = inspect_path(hf_run_dir.root, all=True)
    assert len(reps) == 3
    quiet(reps)


@pytest.mark.parametrize("kw", [
    dict(scheduler="linear", warmup_steps=2, lr=5e-4),
    dict(scheduler="cosine", warmup_steps=0.2),  # a warmup ratio
    dict(scheduler="constant_with_warmup", warmup_steps=2),
    dict(scheduler="cosine_with_min_lr", scheduler_kwargs={"min_lr": 1e-5}),
    dict(scheduler="linear", grad_accum=2),
    dict(scheduler="polynomial", warmup_steps=2),
    dict(scheduler="inverse_sqrt", warmup_steps=2),
    dict(scheduler="cosine_with_restarts", scheduler_kwargs={"num_cycles": 2}),
    dict(scheduler="warmup_stable_decay", scheduler_kwargs={"num_decay_steps": 4}),
], ids=lambda kw: kw["scheduler"] + "".join(f"-{k}" for k in kw if k not in ("scheduler",)))
def test_hf_healthy_schedule_types(kw, tmp_path):
    truth = hf_run(tmp_path / "out", max_steps=8, save_steps=4, save_state=False, **kw)
    reps = inspect_path(truth.root, all=True)
    assert len(reps) == 2
    quiet(reps)


def test_hf_healthy_epochs_partial_accumulation_and_epoch_saves(tmp_path):
    """num_train_epochs with GA 3 over 16 batches (a short last window), and epoch saves."""
    truth = hf_run(tmp_path / "a", max_steps=-1, grad_accum=3, warmup_steps=0.1,
                   save_state=False, args_over={"num_train_epochs": 2})
    reps = inspect_path(truth.root, all=True)
    assert len(reps) == len(truth.saves) >= 3
    quiet(reps)
    truth = hf_run(tmp_path / "b", max_steps=-1, grad_accum=2, save_state=False,
                   args_over={"num_train_epochs": 3, "save_strategy": "epoch"})
    reps = inspect_path(truth.root, all=True)
    assert [r.target.rsplit("-", 1)[-1] for r in reps] == ["8", "16", "24"]
    quiet(reps)


def test_hf_resumed_run_healthy(tmp_path):
    out = tmp_path / "out"
    first = hf_run(out, max_steps=12, save_steps=4, save_state=False)
    for s in first.saves[1:]:
        shutil.rmtree(s.path)
    hf_run(out, max_steps=12, save_steps=4, resume_from=str(first.saves[0].path))
    reps = inspect_path(out, all=True)
    assert len(reps) == 3
    quiet(reps)


@pytest.mark.parametrize("fp16", [True, False])
def test_hf_fp16_overflowed_steps_are_not_a_lag(fp16, tmp_path):
    """On a GPU, an fp16 overflow skips optimizer.step() and accelerate skips the scheduler,
    while global_step counts the step. Constructed from a real (CPU, no GradScaler) run:
    checkpoint-10 carrying checkpoint-8's optimizer and scheduler is what two overflowed
    steps leave. Without fp16 nothing skips steps, so the lag stays a finding."""
    truth = hf_run(tmp_path / "out", max_steps=12, save_steps=2, save_state=False,
                   args_over={"fp16": fp16})
    ck = tmp_path / "checkpoint-10"
    shutil.copytree(truth.root / "checkpoint-10", ck)
    for f in ("scheduler.pt", "optimizer.pt"):
        shutil.copy(truth.root / "checkpoint-8" / f, ck / f)
    (r,) = inspect_path(ck)
    if fp16:
        quiet([r])
        assert r.findings == []
        counters = {c["name"]: c["value"] for c in r.state["counters"]}
        assert counters["trainer.overflowed_steps"] == 2
        assert r.state["nominal_progress"]["value"] == 8
    else:
        assert codes(r) == ["LRD108"]
        assert (ev(r, "LRD108")["scheduler_progress"], ev(r, "LRD108")["nominal_progress"]) == (
            8, 10)


def test_hf_fitted_from_log_history_is_info_only(hf_run_dir, tmp_path):
    for saved in hf_run_dir.saves:
        ck = tmp_path / saved.path.name
        shutil.copytree(saved.path, ck)
        (ck / "training_args.bin").unlink()
        (r,) = inspect_path(ck)
        quiet([r], allowed={"LRD107"})
        assert codes(r) == ["LRD107"] and "fitted" in ev(r, "LRD107")["source"]


def _extra_scheduler_steps(n: int):
    from transformers import TrainerCallback

    class StepsAgain(TrainerCallback):
        """A user's callback that steps the scheduler again after each update."""

        def on_step_end(self, args, state, control, **kw):
            for _ in range(n):
                kw["lr_scheduler"].step()

    return StepsAgain()


def test_hf_scheduler_run_four_times_per_update(tmp_path):
    truth = hf_run(tmp_path / "out", max_steps=12, save_steps=2, save_state=False,
                   callbacks=[_extra_scheduler_steps(3)])
    first, *_, last = inspect_path(truth.root, all=True)
    assert truth.saves[0].scheduler["last_epoch"] == 8  # the live scheduler, 4 x 2
    assert codes(first) == ["LRD103"]
    e = ev(first, "LRD103")
    assert (e["scheduler_progress"], e["nominal_progress"], e["k"]) == (8, 2, 4)
    assert "--k 4" in first.findings[0].fix
    assert codes(last) == ["LRD101", "LRD103"]
    assert ev(last, "LRD101")["scheduler_progress"] == 48 and ev(last, "LRD101")["horizon"] == 12


def test_hf_optimizer_lr_set_by_hand(tmp_path):
    from transformers import TrainerCallback

    class Pin(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            for g in kw["optimizer"].param_groups:
                g["lr"] = 1.25e-4

    truth = hf_run(tmp_path / "out", max_steps=8, save_steps=8, save_state=False,
                   callbacks=[Pin()])
    (r,) = inspect_path(truth.root)
    assert codes(r) == ["LRD105"]
    e = ev(r, "LRD105")
    assert set(e["optimizer_lrs"]) == {1.25e-4} == set(truth.last.lrs)
    assert e["scheduler_progress"] == 8
    # What the live scheduler itself computed for that step.
    assert math.isclose(e["schedule_lr"], truth.last.scheduler["_last_lr"][0], rel_tol=1e-9,
                        abs_tol=1e-15)
    assert r.exit_code("warning") == 1 and r.exit_code("error") == 0


# ---------------------------------------------------------------- torch loops

@pytest.mark.parametrize("sched", ["linear", "cosine", "onecycle", "sequential"])
def test_torch_loop_healthy(sched, tmp_path):
    quiet(inspect_path(torch_loop(tmp_path / "ckpt.pt", scheduler=sched, updates=10).last.path))
    # Mid-run, and without a saved budget.
    quiet(inspect_path(torch_loop(tmp_path / "mid.pt", scheduler=sched, updates=6,
                                  total_steps=20).last.path))
    quiet(inspect_path(torch_loop(tmp_path / "nt" / "x.pt", scheduler=sched, updates=4,
                                  save_total=False).last.path))


@pytest.mark.parametrize("layout", ["nested", "names"])
def test_torch_loop_layouts_healthy(layout, tmp_path):
    quiet(inspect_path(torch_loop(tmp_path / "x.pth", updates=7, layout=layout).last.path))


def test_torch_lambda_is_info_only(tmp_path):
    (r,) = inspect_path(torch_loop(tmp_path / "l.pt", scheduler="lambda", updates=5).last.path)
    quiet([r], allowed={"LRD107"})
    assert codes(r) == ["LRD107"]


def test_torch_scheduler_stepped_per_micro_batch(tmp_path):
    truth = torch_loop(tmp_path / "bug.pt", scheduler="cosine", updates=9, ga=4,
                       step_per_micro=True)
    (r,) = inspect_path(truth.last.path)
    assert codes(r) == ["LRD101", "LRD103"]
    e = ev(r, "LRD103")
    assert (e["scheduler_progress"], e["nominal_progress"], e["k"], e["ratio"]) == (36, 9, 4, 4.0)
    assert "gradient-accumulation window of 4" in next(
        f.message for f in r.findings if f.code == "LRD103")
    e = ev(r, "LRD101")
    assert (e["horizon"], e["progress_over_horizon"]) == (9, 4.0)
    assert e["fraction_of_progress_at_min_lr"] == 0.75
    # Past T_max torch's cosine climbs back: at 4 x T_max it is at its peak again.
    assert e["lr_at_scheduler_progress"] == pytest.approx(truth.last.lrs[0], rel=1e-9)
    assert e["lr_at_scheduler_progress"] == pytest.approx(1e-3)
    assert "does not hold min_lr" in next(f.message for f in r.findings if f.code == "LRD101")


def _loop_with(tmp_path, name, make, updates=20, total=20):
    """A real loop stepping ``make(opt)`` once per update, saved with its budget."""
    import torch

    torch.manual_seed(0)
    m = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    sched = make(opt)
    for _ in range(updates):
        m(torch.randn(2, 4)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    p = tmp_path / f"{name}.pt"
    torch.save({"model": m.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "step": updates, "epoch": 0,
                "total_steps": total}, p)
    return p


def _makers():
    from torch.optim import lr_scheduler as L

    return {
        # warmup-only and constant phases end at the peak: no decay horizon to run past
        "warmup_only_LinearLR": lambda o: L.LinearLR(o, start_factor=0.01, total_iters=5),
        "ConstantLR": lambda o: L.ConstantLR(o, factor=0.5, total_iters=5),
        "ExponentialLR": lambda o: L.ExponentialLR(o, 0.95),
        "PolynomialLR": lambda o: L.PolynomialLR(o, total_iters=20, power=2.0),
        "StepLR": lambda o: L.StepLR(o, 5, 0.5),
        "MultiStepLR": lambda o: L.MultiStepLR(o, [8, 16], 0.1),
        "SequentialLR": lambda o: L.SequentialLR(
            o, [L.LinearLR(o, 0.01, total_iters=4), L.CosineAnnealingLR(o, T_max=16)],
            milestones=[4]),
        "CosineAnnealingLR_at_T_max": lambda o: L.CosineAnnealingLR(o, T_max=20),
        # modelled since issue 19 (its restarts: no single horizon)
        "CosineAnnealingWarmRestarts": lambda o: L.CosineAnnealingWarmRestarts(o, 5, T_mult=2),
        # modelled since issue 27 (cycles: no single horizon)
        "CyclicLR": lambda o: L.CyclicLR(o, 1e-4, 1e-3, step_size_up=4),
        "ChainedScheduler": lambda o: L.ChainedScheduler(
            [L.LinearLR(o, 0.1, total_iters=4), L.ExponentialLR(o, 0.97)], optimizer=o),
    }


@pytest.mark.parametrize("name", list(_makers()))
def test_torch_scheduler_classes_healthy(name, tmp_path):
    (r,) = inspect_path(_loop_with(tmp_path, name, _makers()[name]))
    assert r.findings == [], [(f.code, f.message) for f in r.findings]
    assert r.state["derived"]["progress_ratio"] == 1.0


def test_torch_unmodelled_classes_are_info_only(tmp_path):
    from torch.optim import lr_scheduler as L

    for name, make in {
        "MultiplicativeLR": lambda o: L.MultiplicativeLR(o, lambda s: 0.97),
    }.items():
        (r,) = inspect_path(_loop_with(tmp_path, name, make))
        quiet([r], allowed={"LRD107"})
        # (MultiplicativeLR saves no lambda and reads as LambdaLR)
        assert codes(r) == ["LRD107"] and "LambdaLR" in r.findings[0].message


def test_text_report_labels_units_and_checkpoint_names(tmp_path):
    """What a user reads: roles, units on every count, the checkpoints' own names."""
    from rich.console import Console

    from lrdoctor.render.text import render_inspect, render_trend

    truth = roll_run(tmp_path / "out", updates_per_step=lambda s: 9 + s % 3, save_at=(3, 7))
    reps = inspect_path(truth.root, all=True)
    con = Console(record=True, width=240, highlight=False)
    render_inspect(reps[-1], con)
    render_trend(reps, con)
    text = con.export_text()
    lines = text.splitlines()
    row = next(ln for ln in lines if "scheduler.num_steps" in ln and "│" in ln)
    # labelled by what it counts (issue 29 item 4): ROLL's num_steps counts scheduler calls
    assert row.split("│")[0].strip() == "scheduler" and "79" in row and "scheduler calls" in row
    assert next(ln for ln in lines if ln.startswith(" nominal ")).count("32") == 1
    assert "warmup 2 scheduler calls, decay horizon 40 scheduler calls" in text
    assert "scheduler/nominal progress 2.469x" in text
    # the trend table's columns by what their numbers count, as the counter table says
    assert ("nominal in optimizer updates; scheduler in scheduler calls; horizon in "
            "scheduler calls") in " ".join(text.split())
    assert "progress and horizon in optimizer updates" not in text
    names = [ln.split("│")[0].strip() for ln in lines if "│" in ln and "checkpoint-" in ln]
    assert names[-2:] == ["checkpoint-3", "checkpoint-7"]


def test_torch_cosine_shorter_than_the_plan_says_it_climbs_back(tmp_path):
    """T_max 10 of 15 planned updates: info only, and not 'runs at min_lr' (torch's cosine
    rises again past T_max)."""
    from torch.optim import lr_scheduler as L

    p = _loop_with(tmp_path, "short", lambda o: L.CosineAnnealingLR(o, T_max=10),
                   updates=4, total=15)
    (r,) = inspect_path(p)
    quiet([r], allowed={"LRD102"})
    assert codes(r) == ["LRD102"]
    e = ev(r, "LRD102")
    assert (e["horizon"], e["planned_end"]) == (10, 15)
    assert e["lr_at_planned_end"] == pytest.approx(5e-4)  # 1e-3 x (1 + cos(1.5 pi)) / 2
    assert "does not hold min_lr" in r.findings[0].message
