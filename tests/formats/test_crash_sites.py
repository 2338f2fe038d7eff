"""One test per crash site the fuzz harness of issue 12 found: a value of the wrong type
or size in a real checkpoint, sidecar or config is a one-line error naming the file and
key (or, for a side value, a note and the value ignored), never a traceback."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.findings import jsonable as _jsonable
from lrdoctor.core.state import Counter, RunState, ScheduleSpec, Unit
from lrdoctor.inspect_api import inspect_path, read_state
from lrdoctor.schedules import lr_at


def _edit_pickle(path: Path, fn) -> None:
    """Rewrite a checkpoint the test itself made (so a full torch.load is fine here)."""
    import torch

    obj = torch.load(path, weights_only=False)
    fn(obj)
    torch.save(obj, path)


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# ---------------------------------------------------------------- megatron.py:216-225

@pytest.mark.parametrize("key,value", [("max_lr", "abc"), ("lr_decay_steps", float("nan")),
                                       ("num_steps", 10**200), ("min_lr", [1, 2])])
def test_megatron_scheduler_field_of_the_wrong_type(megatron_run_dir, tmp_path, key, value):
    run = _copy(megatron_run_dir.root, tmp_path / "ckpt")
    rank = sorted(run.rglob("model_optim_rng.pt"))[-1]
    _edit_pickle(rank, lambda sd: sd["opt_param_scheduler"].__setitem__(key, value))
    with pytest.raises(UnusableInput) as info:
        read_state(run)
    msg = str(info.value)
    assert str(rank) in msg and f"opt_param_scheduler.{key}" in msg and "\n" not in msg


def test_megatron_side_counter_of_the_wrong_type_is_noted(megatron_run_dir, tmp_path):
    run = _copy(megatron_run_dir.root, tmp_path / "ckpt")
    rank = sorted(run.rglob("model_optim_rng.pt"))[-1]

    def poison(sd):
        sd["args"].consumed_train_samples = "lots"
        sd["args"].global_batch_size = 10**30
        sd["iteration"] = 10**200

    _edit_pickle(rank, poison)
    st = read_state(run)
    # (a 10**400 integer does not even reach the reader: the pickle's integer limit refuses it)
    assert st.counter("consumed_train_samples") is None
    assert st.counter("megatron.iteration") is None and st.samples_per_update is None
    notes = " | ".join(st.notes)
    assert "args.consumed_train_samples ignored" in notes
    assert "args.global_batch_size ignored" in notes and "iteration ignored" in notes


# ---------------------------------------------------------------- roll.py:209-216

def test_roll_scheduler_field_of_the_wrong_type(roll_run_dir, tmp_path):
    run = _copy(roll_run_dir.root, tmp_path / "output")
    sched = sorted(run.rglob("scheduler.pt"))
    assert sched
    for f in sched:
        _edit_pickle(f, lambda sd: sd.__setitem__("max_lr", "0.001x"))
    with pytest.raises(UnusableInput, match="max_lr: expected a number"):
        read_state(run)


def test_roll_find_config_skips_a_hostile_yaml(roll_run_dir, tmp_path):
    from lrdoctor.read.layouts import roll

    run = _copy(roll_run_dir.root, tmp_path / "output")
    ckpt = sorted(p.parent for p in run.rglob("scheduler.pt"))[-1]
    (ckpt / "evil.yaml").write_text("max_steps: " + "[" * 20000 + "]" * 20000 + "\n")
    found = roll.find_config(ckpt)  # not a RecursionError: the hostile one is skipped
    assert found is not None and found.name != "evil.yaml"


# ---------------------------------------------------------------- deepspeed.py:350

@pytest.mark.parametrize("params,key", [
    ({"warmup_num_steps": "abc", "total_num_steps": 100}, "warmup_num_steps"),
    ({"warmup_num_steps": 10, "total_num_steps": 1e400}, "total_num_steps"),
    ({"warmup_max_lr": "0.1", "total_num_steps": 100}, "warmup_max_lr"),
])
def test_deepspeed_scheduler_params_of_the_wrong_type(params, key):
    from lrdoctor.read.layouts import deepspeed

    st = RunState(format="deepspeed", path="ckpt")
    cfg = {"scheduler": {"type": "WarmupDecayLR", "params": params}}
    with pytest.raises(UnusableInput) as info:
        deepspeed._read_scheduler(st, {"last_batch_iteration": 5}, cfg, "ds_config.json",
                                  "mp_rank_00_model_states.pt", None)
    assert str(info.value).startswith("ds_config.json: ") and key in str(info.value)


# ---------------------------------------------------------------- hf.py:95,155,245

def test_hf_training_args_of_the_wrong_type(hf_run_dir, tmp_path):
    run = _copy(hf_run_dir.root, tmp_path / "out")
    last = sorted(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))[-1]
    _edit_pickle(last / "training_args.bin", lambda a: setattr(a, "warmup_steps", "three"))
    with pytest.raises(UnusableInput, match="training_args.bin: warmup_steps: expected a number"):
        read_state(last)


def test_hf_scheduler_and_history_values_of_the_wrong_type(hf_run_dir, tmp_path):
    run = _copy(hf_run_dir.root, tmp_path / "out")
    last = sorted(run.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[1]))[-1]

    def poison(sd):
        sd["base_lrs"] = ["x"]
        sd["_last_lr"] = [float("nan"), "y"]

    _edit_pickle(last / "scheduler.pt", poison)
    ts = json.loads((last / "trainer_state.json").read_text())
    ts["log_history"] += [{"step": "7", "learning_rate": 1e-3}, {"step": 3, "learning_rate": "x"},
                          {"step": 10**400, "learning_rate": 1e-3}]
    (last / "trainer_state.json").write_text(json.dumps(ts))
    st = read_state(last)  # the bad entries are ignored, the rest still read
    assert st.schedule is not None
    assert any("base_lrs[0] ignored" in n for n in st.notes)


# ---------------------------------------------------------------- torch_builtin.py:222

@pytest.mark.parametrize("total_iters", ["x", [1, 2], {"a": 1}])
def test_torch_schedule_params_of_the_wrong_type_mean_lr_unknown(total_iters):
    from lrdoctor.diagnose import diagnose

    spec = ScheduleSpec(family="torch", kind="LinearLR", max_lr=1e-3, unit=Unit.UPDATES,
                        params={"total_iters": total_iters, "start_factor": 0.1,
                                "end_factor": 1.0}, source="sched.pt")
    with pytest.raises(ValueError):  # what every caller reads as "LR unknown"
        lr_at(spec, 5)
    st = RunState(format="torch", path="x.pt", schedule=spec,
                  scheduler_progress=Counter("scheduler.last_epoch", 5, Unit.UPDATES, "x.pt"))
    diagnose(st)  # no TypeError


def test_cosine_restarts_of_a_huge_progress_do_not_loop_forever():
    from lrdoctor.schedules import torch_builtin

    spec = ScheduleSpec(family="torch", kind="CosineAnnealingLR", max_lr=1e-3, unit=Unit.UPDATES,
                        params={"T_max": 1, "eta_min": 0.0, "base_lrs": [1e-3]}, source="s.pt")
    with pytest.raises(ValueError):
        torch_builtin.lr_at(spec, 1e14)


# ---------------------------------------------------------------- _common.py:150-153

def test_optimizer_lr_of_a_huge_integer_is_ignored():
    from lrdoctor.read.layouts._common import optimizer_summary

    got = optimizer_summary({"param_groups": [{"lr": 10**400, "step": "x"}, {"lr": 1e-3}],
                             "state": {0: {"step": float("inf")}, 1: {"step": 4}}})
    assert got["lrs"] == [1e-3] and got["step"] == 4.0


def test_zero_dim_tensor_lr_is_a_number(tmp_path):
    """AdamW(lr=torch.tensor(1e-3)) saves its LR (and the scheduler's base_lrs) as 0-d tensors."""
    import torch

    m = torch.nn.Linear(2, 2)
    opt = torch.optim.AdamW(m.parameters(), lr=torch.tensor(1e-3))
    sch = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
    for _ in range(3):
        m(torch.ones(1, 2)).sum().backward()
        opt.step()
        sch.step()
    path = tmp_path / "ckpt.pt"
    torch.save({"model": m.state_dict(), "optimizer": opt.state_dict(),
                "lr_scheduler": sch.state_dict()}, path)
    [rep] = inspect_path(path)
    state = rep.state
    assert math.isclose(state["schedule"]["max_lr"], 1e-3, rel_tol=1e-6)
    assert state["scheduler_progress"]["value"] == 3
    assert all(isinstance(x, float) for x in state["optimizer_lrs"])
    json.dumps(rep.to_dict(), allow_nan=False)


# ---------------------------------------------------------------- diagnose.py:46, schedules/hf.py:85

def test_validation_boundary_refuses_non_finite_and_huge_schedule_values():
    spec = ScheduleSpec(family="hf", kind="linear", max_lr=1e-3, unit=Unit.UPDATES,
                        horizon=float(10**300), source="training_args.bin")
    st = RunState(format="hf", path="ckpt", schedule=spec)
    with pytest.raises(UnusableInput, match="^ckpt: schedule horizon .*out of range"):
        st.validate()
    spec.horizon, spec.params = 100.0, {"power": float("nan")}
    with pytest.raises(UnusableInput, match="schedule parameter power"):
        st.validate()
    spec.params = {}
    st.scheduler_progress = Counter("scheduler.last_epoch", float("inf"), Unit.UPDATES, "s.pt")
    with pytest.raises(UnusableInput, match="scheduler.last_epoch \\(s.pt\\): inf"):
        st.validate()
    st.scheduler_progress = Counter("scheduler.last_epoch", 3, Unit.UPDATES, "s.pt")
    st.planned_end = Counter("max_steps", 10**400, Unit.UPDATES, "trainer_state.json:max_steps")
    st.samples_per_update = float("nan")
    st.optimizer_lrs = [1e-3, float("inf")]
    st.validate()
    assert st.planned_end is None and st.samples_per_update is None
    assert st.optimizer_lrs == [1e-3]
    assert any("trainer_state.json:max_steps" in n for n in st.notes)


# ---------------------------------------------------------------- model._jsonable, emit

def test_inf_and_nan_never_break_json():
    st = RunState(format="torch", path="x", extras={"a": float("inf"), "b": [float("-inf"),
                                                                         float("nan")]})
    doc = st.to_dict()
    assert doc["extras"] == {"a": None, "b": [None, None]}
    json.dumps(doc, allow_nan=False)
    assert _jsonable(float("inf")) is None


def test_disk_full_while_rewriting_is_an_oserror(tmp_path, monkeypatch):
    """torch's zip writer raises RuntimeError on a full disk; the writer makes it an OSError
    (which ``write_fix`` turns into exit 2 with one line)."""
    import torch

    from lrdoctor.repair import writer

    def full(*_a, **_k):
        raise RuntimeError("[enforce fail at inline_container.cc:778] . PytorchStreamWriter "
                           "failed writing file data/0: file write failed")

    monkeypatch.setattr(torch, "save", full)
    with pytest.raises(OSError, match="file write failed") as info:
        writer.write_pickle({"x": 1}, tmp_path / "o.pt")
    assert info.value.filename == str(tmp_path / "o.pt")
