"""DCP-based layouts of today's frameworks: torchtitan, NeMo-RL, HF/accelerate FSDP sharded
optimizer, and a generic DCP loop checkpoint. Each folder is written with torch's own
``torch.distributed.checkpoint.save`` (single process, CPU) in the framework's layout as
read from its source (named in each test); each layout has a healthy twin that is silent
at warning level and a buggy one whose finding carries the numbers that prove it."""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from lrdoctor.core.facts import Storage
from lrdoctor.core.findings import Severity
from lrdoctor.inspect_api import inspect_path, read_state


def _save(state: dict, path: Path) -> None:
    import torch.distributed.checkpoint as tdcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        tdcp.save(state, checkpoint_id=str(path))


def _train(updates: int, sched_per_update: int, make_sched, ga: int = 1):
    """A real AdamW loop over a tiny model; the scheduler is stepped
    ``sched_per_update`` times per optimizer update (1 = healthy)."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Linear(8, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = make_sched(opt)
    for _ in range(updates):
        for _ in range(ga):
            model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        for _ in range(sched_per_update):
            sched.step()
    return model, opt, sched


def _loud(report) -> list:
    return [f for f in report.findings if f.severity >= Severity.WARNING]


def _one(report, code: str):
    (f,) = [f for f in report.findings if f.code == code]
    return f


def _cli_inspect(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lrdoctor", "inspect", str(path), "--json"],
                          capture_output=True, text=True, timeout=120)


# ---------------------------------------------------------------- torchtitan

def _torchtitan_lambda(warmup: int, steps: int):
    """torchtitan's linear_warmup_stable_decay (components/optimizer/lr_scheduler.py),
    decay_ratio None: decay over steps - warmup, cosine, lr_min 0."""
    import functools
    import math

    def f(current_step, warmup_steps, decay_steps):
        if current_step < warmup_steps:
            return (current_step + 1) / (warmup_steps + 1)
        progress = (current_step + 1 - warmup_steps) / (decay_steps + 1)
        return 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))

    return functools.partial(f, warmup_steps=warmup, decay_steps=steps - warmup)


def torchtitan_run(root: Path, *, steps_done: int, sched_per_step: int) -> Path:
    """``checkpoint/step-N/`` as torchtitan's DCP checkpointer writes it
    (components/checkpointer/dcp.py: model flattened at the top level, then
    ``optimizer`` = get_flat_optim_state_dict (components/optimizer/utils.py:
    ``state.{fqn}.{name}``, ``param_groups.{fqn}.{key}``), ``lr_scheduler`` =
    LRSchedulersContainer.state_dict() = ``{"last_epoch": ...}``, ``train_state`` =
    Trainer.state_dict() = ``{"step", "ntokens_seen"}`` (trainer.py))."""
    import torch

    model, opt, sched = _train(steps_done, sched_per_step, lambda o: torch.optim.lr_scheduler
                               .LambdaLR(o, _torchtitan_lambda(2, 100)))
    names = {id(p): n for n, p in model.named_parameters()}
    osd = opt.state_dict()
    params = [p for g in opt.param_groups for p in g["params"]]
    flat = {}
    for i, s in osd["state"].items():
        for k, v in s.items():
            flat[f"state.{names[id(params[i])]}.{k}"] = v
    for g, live in zip(osd["param_groups"], opt.param_groups, strict=True):
        for p in live["params"]:
            for k, v in g.items():
                if k != "params":
                    flat[f"param_groups.{names[id(p)]}.{k}"] = v
    state = {**model.state_dict(), "optimizer": flat,
             "lr_scheduler": {"last_epoch": sched.last_epoch},
             "train_state": {"step": steps_done, "ntokens_seen": steps_done * 2048},
             "dataloader": {"sample_idx": steps_done * 8}}
    ckpt = root / "checkpoint" / f"step-{steps_done}"
    _save(state, ckpt)
    return ckpt


def test_torchtitan_healthy_is_silent(tmp_path):
    ckpt = torchtitan_run(tmp_path / "run", steps_done=10, sched_per_step=1)
    (rep,) = inspect_path(tmp_path / "run")
    assert rep.format == "torchtitan" and rep.target == str(ckpt)
    st = read_state(tmp_path / "run")
    assert st.scheduler_progress.value == 10 == st.nominal_progress.value
    assert st.counter("optimizer.step").value == 10
    assert st.scheduler_progress.source.endswith("step-10:lr_scheduler.last_epoch")
    assert st.extras["ntokens_seen"] == 20480
    assert not _loud(rep)


def test_torchtitan_scheduler_per_micro_batch_is_lrd103(tmp_path):
    torchtitan_run(tmp_path / "run", steps_done=10, sched_per_step=4)
    (rep,) = inspect_path(tmp_path / "run")
    f = _one(rep, "LRD103")
    assert f.severity == Severity.ERROR
    assert (f.evidence["scheduler_progress"], f.evidence["nominal_progress"],
            f.evidence["k"]) == (40, 10, 4)
    assert "train_state.step" in f.message
    p = _cli_inspect(tmp_path / "run")
    assert p.returncode == 1 and "LRD103" in p.stdout


# ---------------------------------------------------------------- NeMo-RL

def nemo_rl_run(root: Path, *, grpo_steps: int, sched_per_step: int,
                updates_per_step: int = 3) -> Path:
    """``step_N/`` as NeMo-RL writes it (utils/checkpoint.py: training_info.json from
    GRPOSaveState with total_steps = N; utils/native_checkpoint.py: policy/optimizer is
    DCP ``{"optim": {"optim": get_optimizer_state_dict(...), "sched": ...}}``). The DTensor
    worker steps the scheduler once per train() call = once per GRPO step
    (dtensor_policy_worker.py), with several optimizer updates per step; its default
    scheduler config is LinearLR warmup + ConstantLR via SequentialLR."""
    import torch
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    def make(o):
        warm = torch.optim.lr_scheduler.LinearLR(o, start_factor=0.1, end_factor=1.0,
                                                 total_iters=5)
        const = torch.optim.lr_scheduler.ConstantLR(o, factor=1.0, total_iters=10**9)
        return torch.optim.lr_scheduler.SequentialLR(o, [warm, const], milestones=[5])

    import torch as _t

    _t.manual_seed(0)
    model = _t.nn.Sequential(_t.nn.Linear(4, 8), _t.nn.Linear(8, 1))
    opt = _t.optim.AdamW(model.parameters(), lr=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = make(opt)
        for _ in range(grpo_steps):
            for _ in range(updates_per_step):
                model(_t.ones(2, 4)).sum().backward()
                opt.step()
                opt.zero_grad()
                if sched_per_step > 1:  # the bug: stepped per optimizer update
                    sched.step()
            if sched_per_step == 1:
                sched.step()
    ckpt = root / f"step_{grpo_steps}"
    (ckpt / "policy").mkdir(parents=True)
    info = {"consumed_samples": grpo_steps * 64, "current_step": grpo_steps,
            "current_epoch": 0, "total_steps": grpo_steps, "total_valid_tokens": 12345,
            "val_reward": -99999999.0}
    (ckpt / "training_info.json").write_text(json.dumps(info))
    (ckpt / "config.yaml").write_text("grpo:\n  max_num_steps: 100\n")
    _save({"model": model.state_dict()}, ckpt / "policy" / "weights")
    _save({"optim": {"optim": get_optimizer_state_dict(model, opt), "sched": sched.state_dict()}},
          ckpt / "policy" / "optimizer")
    return ckpt


def test_nemo_rl_healthy_is_silent(tmp_path):
    nemo_rl_run(tmp_path / "results", grpo_steps=4, sched_per_step=1)
    (rep,) = inspect_path(tmp_path / "results")
    assert rep.format == "nemo_rl"
    st = read_state(tmp_path / "results")
    assert st.scheduler_progress.value == 4 == st.nominal_progress.value
    assert st.scheduler_progress.unit.value == "rollout steps"
    assert st.counter("optimizer.step").value == 12  # 3 updates per GRPO step, by design
    assert st.schedule is not None and st.schedule.kind == "SequentialLR"
    assert any(f.endswith("training_info.json") for f in st.files)
    assert any(f.endswith("optimizer/.metadata") for f in st.files)
    assert not _loud(rep)


def test_nemo_rl_scheduler_per_update_is_lrd103(tmp_path):
    nemo_rl_run(tmp_path / "results", grpo_steps=4, sched_per_step=3)
    (rep,) = inspect_path(tmp_path / "results")
    f = _one(rep, "LRD103")
    assert (f.evidence["scheduler_progress"], f.evidence["nominal_progress"],
            f.evidence["k"]) == (12, 4, 3)
    assert "total_steps" in f.message


# ---------------------------------------------------------------- HF Trainer, FSDP sharded

def _fsdp_sharded_optimizer():
    """What accelerate's save_fsdp_optimizer does with SHARDED_STATE_DICT (utils/fsdp_utils.py):
    ``dist_cp.save({"optimizer": get_optimizer_state_dict(model, optimizer)}, optimizer_0/)``;
    the HF Trainer then has no optimizer.pt."""
    from transformers import TrainerCallback

    class FsdpSharded(TrainerCallback):
        def on_save(self, args, state, control, **kw):
            from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

            ckpt = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            _save({"optimizer": get_optimizer_state_dict(kw["model"], kw["optimizer"])},
                  ckpt / "optimizer_0")
            (ckpt / "optimizer.pt").unlink()

    return FsdpSharded()


def _extra_steps(n: int):
    from transformers import TrainerCallback

    class StepsAgain(TrainerCallback):
        def on_step_end(self, args, state, control, **kw):
            for _ in range(n):
                kw["lr_scheduler"].step()

    return StepsAgain()


@pytest.mark.parametrize("extra", [0, 2])
def test_hf_fsdp_sharded_optimizer(tmp_path, extra):
    from tests.helpers.factories import hf_run

    truth = hf_run(tmp_path / "out", max_steps=6, save_steps=6, save_state=False,
                   callbacks=[_fsdp_sharded_optimizer()] + ([_extra_steps(extra)] if extra
                                                            else []))
    ckpt = truth.last.path
    assert not (ckpt / "optimizer.pt").exists() and (ckpt / "optimizer_0" / ".metadata").is_file()
    (rep,) = inspect_path(ckpt)
    st = read_state(ckpt)
    assert rep.format == "hf"
    assert st.counter("optimizer.step").value == 6 == truth.last.optimizer_step
    assert st.optimizer_lrs == truth.last.lrs
    assert str(ckpt / "optimizer_0" / "__0_0.distcp") in st.files
    if not extra:
        assert not _loud(rep)
    else:
        f = _one(rep, "LRD103")
        assert (f.evidence["scheduler_progress"], f.evidence["nominal_progress"],
                f.evidence["k"]) == (18, 6, 3)
        # fix repairs it (issue 20): scheduler.pt by torchzip, the FSDP optimizer_0/ DCP
        # folder's param-group items into a new storage file, its tensors hard-linked.
        out = tmp_path / "fixed"
        p = subprocess.run([sys.executable, "-m", "lrdoctor", "fix", str(ckpt), "--out",
                            str(out)], capture_output=True, text=True, timeout=120)
        assert p.returncode == 0, p.stderr
        assert "verified by inspecting it again" in " ".join(p.stdout.split())
        assert read_state(out).scheduler_progress.value == 6
        assert not {f.code for f in _loud(inspect_path(out)[0])} & {"LRD103", "LRD105"}


# ---------------------------------------------------------------- generic DCP loop

@pytest.mark.parametrize("per_update", [1, 4])
def test_generic_dcp_loop_checkpoint(tmp_path, per_update):
    """A hand-written loop saving its state with dcp.save (torch's recipe in the DCP
    tutorial: model/optimizer/scheduler plus the loop's step) in ckpts/step_N/."""
    import torch

    model, opt, sched = _train(8, per_update, lambda o: torch.optim.lr_scheduler.LinearLR(
        o, start_factor=0.1, total_iters=100))
    ck = tmp_path / "ckpts" / "step_8"
    _save({"model": model.state_dict(), "optimizer": opt.state_dict(),
           "scheduler": sched.state_dict(), "step": 8}, ck)
    _check_generic_loop(tmp_path, per_update)


@pytest.mark.parametrize("per_update", [1, 4])
def test_generic_dcp_loop_in_a_torchtitan_named_folder(tmp_path, per_update):
    """The same loop state in ckpts/step-8/ (torchtitan's folder name, not its items):
    the name is a hint, the content decides: found by shape, with a note saying so."""
    import torch

    model, opt, sched = _train(8, per_update, lambda o: torch.optim.lr_scheduler.LinearLR(
        o, start_factor=0.1, total_iters=100))
    _save({"model": model.state_dict(), "optimizer": opt.state_dict(),
           "scheduler": sched.state_dict(), "step": 8}, tmp_path / "ckpts" / "step-8")
    st = _check_generic_loop(tmp_path, per_update)
    assert any("without torchtitan's lr_scheduler" in n for n in st.notes)


def _check_generic_loop(tmp_path, per_update):
    (rep,) = inspect_path(tmp_path / "ckpts")
    st = read_state(tmp_path / "ckpts")
    assert rep.format == "dcp" and st.facts.storage is Storage.DCP
    assert st.counter("optimizer.step").value == 8
    assert st.schedule.kind == "LinearLR" and st.schedule.horizon == 100
    assert st.scheduler_progress.value == 8 * per_update
    if per_update == 1:
        assert not _loud(rep)
    else:
        f = _one(rep, "LRD103")
        assert (f.evidence["scheduler_progress"], f.evidence["nominal_progress"],
                f.evidence["k"]) == (32, 8, 4)
    return st


# ---------------------------------------------------------------- accelerate, FSDP sharded

ACCEL_GEN = """
import json, os, sys, warnings, torch
from pathlib import Path
from accelerate import Accelerator
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict
warnings.simplefilter("ignore")
out, calls = Path(sys.argv[1]), int(sys.argv[2])
torch.manual_seed(0)
acc = Accelerator(cpu=True)
m = torch.nn.Linear(4, 1)
o = torch.optim.AdamW(m.parameters(), lr=1e-3)
m, o, s = acc.prepare(m, o, torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=40))
for i in range(5):
    acc.backward(m(torch.randn(2, 4)).pow(2).mean()); o.step(); o.zero_grad()
    for _ in range(calls):
        s.step()
acc.save_state(str(out))
# save_fsdp_optimizer with SHARDED_STATE_DICT (accelerate/utils/fsdp_utils.py): a DCP folder
# optimizer_0/ holding {"optimizer": get_optimizer_state_dict(model, optimizer)}, no .bin
(out / "optimizer.bin").unlink()
dcp.save({"optimizer": get_optimizer_state_dict(m, o.optimizer)},
         storage_writer=dcp.FileSystemWriter(str(out / "optimizer_0")))
print(json.dumps({"lr": [g["lr"] for g in o.param_groups], "last_epoch": s.scheduler.last_epoch}))
"""


@pytest.mark.parametrize("calls", [1, 2])
def test_accelerate_fsdp_sharded_optimizer(tmp_path, calls):
    import os

    out = tmp_path / "state"
    p = subprocess.run([sys.executable, "-c", ACCEL_GEN, str(out), str(calls)], check=True,
                       capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))
    live = json.loads(p.stdout.strip().splitlines()[-1])
    (rep,) = inspect_path(out)
    st = read_state(out)
    assert rep.format == "accelerate" and st.facts.storage is Storage.DCP
    assert st.counter("optimizer.step").value == 5
    assert st.optimizer_lrs == pytest.approx(live["lr"])
    assert st.scheduler_progress.value == live["last_epoch"] == 5 * calls
    assert str(out / "optimizer_0" / ".metadata") in st.files
    if calls == 1:
        assert not _loud(rep)
    else:
        f = _one(rep, "LRD103")
        assert (f.evidence["scheduler_progress"], f.evidence["nominal_progress"],
                f.evidence["k"]) == (10, 5, 2)


def test_dcp_folder_two_levels_below_the_path_given(tmp_path):
    """A run folder holding checkpoints/<name>/ (no step number, no framework layout):
    the DCP folder is found one level further down and read the same."""
    import torch

    model, opt, sched = _train(8, 4, lambda o: torch.optim.lr_scheduler.LinearLR(
        o, start_factor=0.1, total_iters=100))
    _save({"opt_state": opt.state_dict(), "sched_state": sched.state_dict(),
           "loop": {"updates": 8}}, tmp_path / "run" / "checkpoints" / "latest")
    (rep,) = inspect_path(tmp_path / "run")
    f = _one(rep, "LRD103")
    assert (f.evidence["scheduler_progress"], f.evidence["nominal_progress"]) == (32, 8)
