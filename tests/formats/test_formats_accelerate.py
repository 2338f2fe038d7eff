"""accelerate save_state folders written by the real Accelerator, read back metadata-only."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.state import Unit
from lrdoctor.read.layouts import _torchstate
from lrdoctor.read.layouts import accelerate as acc_fmt
from lrdoctor.schedules import lr_at
from tests.helpers.factories import free_port, run_job

pytestmark = pytest.mark.frameworks

# One process writes several save_state folders; the truth comes from the live objects.
GEN = textwrap.dedent("""
    import json, sys, torch
    from pathlib import Path
    from accelerate import Accelerator
    import torch.optim.lr_scheduler as L
    out = Path(sys.argv[1]); scenarios = sys.argv[2].split(",")
    torch.manual_seed(0)

    def make(name, o):
        if name == "cosine":
            return L.CosineAnnealingLR(o, T_max=20, eta_min=1e-5)
        if name == "onecycle":
            return L.OneCycleLR(o, max_lr=2e-3, total_steps=30)
        if name == "lambda":
            return L.LambdaLR(o, lambda s: min(1.0, (s + 1) / 4))
        if name == "sequential":
            return L.SequentialLR(o, [L.LinearLR(o, 0.1, total_iters=3),
                                      L.CosineAnnealingLR(o, T_max=17)], milestones=[3])
        raise SystemExit(name)

    for name in scenarios:
        acc = Accelerator(cpu=True, gradient_accumulation_steps=2)
        m = torch.nn.Linear(4, 1)
        o = torch.optim.AdamW(m.parameters(), lr=1e-3)
        m, o, s = acc.prepare(m, o, make(name, o))
        for i in range(11):  # 11 micro-batches, accumulation 2 -> 5 optimizer steps
            with acc.accumulate(m):
                loss = m(torch.randn(2, 4)).pow(2).mean()
                acc.backward(loss); o.step(); s.step(); o.zero_grad()
        acc.save_state(str(out / name))
        if acc.is_main_process:
            (out / name / "truth.json").write_text(json.dumps({
                "last_epoch": s.scheduler.state_dict().get("last_epoch"),
                "opt_step": max(float(st["step"]) for st in o.optimizer.state.values()),
                "lr": [g["lr"] for g in o.param_groups],
                "num_processes": acc.num_processes, "acc_step": acc.step}))
""")

SCENARIOS = ["cosine", "onecycle", "lambda", "sequential"]


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("accelerate")
    script = out / "gen.py"
    script.write_text(GEN)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    subprocess.run([sys.executable, str(script), str(out), ",".join(SCENARIOS)], check=True,
                   env=env, capture_output=True, timeout=300)
    return out


def truth(d: Path) -> dict:
    return json.loads((d / "truth.json").read_text())


@pytest.mark.parametrize("name", SCENARIOS)
def test_counters_match_the_live_objects(saved, name):
    d = saved / name
    t = truth(d)
    assert acc_fmt.detect(d)
    st = acc_fmt.read(d)
    assert st.format == "accelerate"
    assert st.scheduler_progress.value == t["last_epoch"] == 5  # prepared scheduler skips non-sync
    assert st.counter("optimizer.step").value == t["opt_step"] == 5
    assert st.nominal_progress.value == t["opt_step"]
    # A healthy single-process run: the scheduler is exactly where the optimizer is.
    assert st.scheduler_progress.value == st.nominal_progress.value
    assert st.optimizer_lrs == pytest.approx(t["lr"])
    assert st.facts.processes == t["num_processes"] == 1
    assert st.counter("accelerate.step").value == t["acc_step"]
    assert st.counter("accelerate.step").unit is Unit.MICRO_STEPS
    if st.schedule is not None:  # the rebuilt schedule gives the LR the optimizer holds
        assert lr_at(st.schedule, st.scheduler_progress.value) == pytest.approx(t["lr"][0],
                                                                               rel=1e-9)


def test_cosine_schedule_fields(saved):
    st = acc_fmt.read(saved / "cosine")
    s = st.schedule
    assert (s.family, s.kind, s.unit) == ("torch", "CosineAnnealingLR", Unit.UPDATES)
    assert s.horizon == 20 and s.max_lr == 1e-3 and s.min_lr == 1e-5
    assert s.params["T_max"] == 20 and s.params["base_lrs"] == [1e-3]
    assert "last_epoch" not in s.params


def test_onecycle_peak_comes_from_the_param_groups(saved):
    s = acc_fmt.read(saved / "onecycle").schedule
    assert s.kind == "OneCycleLR"
    assert s.max_lr == 2e-3 and s.init_lr == pytest.approx(2e-3 / 25)  # default div_factor
    assert s.horizon == 30 and s.warmup == pytest.approx(0.3 * 30 - 1)


def test_lambda_is_unrecoverable_but_progress_is_known(saved):
    st = acc_fmt.read(saved / "lambda")
    assert st.schedule is None
    assert any("LambdaLR" in n for n in st.notes)
    assert st.scheduler_progress.value == 5


def test_sequential_children_are_kept(saved):
    s = acc_fmt.read(saved / "sequential").schedule
    assert s.kind == "SequentialLR"
    assert [c["kind"] for c in s.params["_schedulers"]] == ["LinearLR", "CosineAnnealingLR"]
    assert s.horizon == 3 + 17
    assert s.init_lr == pytest.approx(1e-4)


def test_run_dir_lists_checkpoints_and_reads_the_newest(saved, tmp_path):
    run = tmp_path / "proj" / "checkpoints"
    run.mkdir(parents=True)
    for n in (2, 10):  # numeric, not lexical, order
        (run / f"checkpoint_{n}").mkdir()
        (run / f"checkpoint_{n}" / "scheduler.bin").write_bytes(
            (saved / "cosine" / "scheduler.bin").read_bytes())
    assert acc_fmt.detect(tmp_path / "proj")
    found = acc_fmt.find_checkpoints(tmp_path / "proj")
    assert [p.name for p in found] == ["checkpoint_2", "checkpoint_10"]
    st = acc_fmt.read(tmp_path / "proj")
    assert st.path.endswith("checkpoint_10")
    assert st.nominal_progress is None and st.schedule.kind == "CosineAnnealingLR"


def test_not_accelerate(tmp_path):
    (tmp_path / "scheduler.pt").write_bytes(b"x")  # HF Trainer's name
    assert not acc_fmt.detect(tmp_path)
    with pytest.raises(UnusableInput, match="no accelerate"):
        acc_fmt.find_checkpoints(tmp_path)


def test_corrupt_scheduler_is_one_line_naming_the_file(tmp_path):
    (tmp_path / "scheduler.bin").write_bytes(b"not a checkpoint")
    with pytest.raises(UnusableInput) as e:
        acc_fmt.read(tmp_path)
    assert "scheduler.bin" in str(e.value) and "\n" not in str(e.value)


class _Evil:
    def __reduce__(self):
        return (os.system, ("echo pwned > /dev/null",))


def test_malicious_pickle_is_refused(tmp_path):
    (tmp_path / "scheduler.bin").write_bytes(pickle.dumps({"last_epoch": _Evil()}))
    with pytest.raises(UnusableInput, match="scheduler.bin"):
        acc_fmt.read(tmp_path)


@pytest.mark.slow
def test_two_processes_step_the_scheduler_twice_per_update(tmp_path):
    """The AcceleratedScheduler multiplier, with a real 2-process gloo run."""
    script = tmp_path / "gen.py"
    script.write_text(GEN)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    torchrun = Path(sys.executable).with_name("torchrun")
    run_job([str(torchrun), "--nproc_per_node", "2", "--master_port", str(free_port()),
             str(script), str(tmp_path), "cosine"], env=env, timeout=300)
    t = truth(tmp_path / "cosine")
    st = acc_fmt.read(tmp_path / "cosine")
    assert st.facts.processes == t["num_processes"] == 2
    assert st.scheduler_progress.value == t["last_epoch"] == 2 * t["opt_step"] == 10
    assert st.nominal_progress.value == 5
    assert any("2 times per optimizer step" in n for n in st.notes)
    from lrdoctor.inspect_api import inspect_path

    (r,) = inspect_path(tmp_path / "cosine")
    # Intended when the budget was multiplied by num_processes too: a warning, not an error.
    assert [f.code for f in r.findings] == ["LRD103"]
    assert r.exit_code("error") == 0 and r.exit_code("warning") == 1
    f = r.findings[0]
    assert (f.evidence["scheduler_progress"], f.evidence["nominal_progress"],
            f.evidence["k"]) == (10, 5, 2)
    assert "AcceleratedScheduler" in f.message and "num_processes=2" in f.message


def _torch_schedulers():
    import torch
    import torch.optim.lr_scheduler as L

    def opt():
        return torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=0.1)

    return {
        "LambdaLR": lambda: L.LambdaLR(opt(), lambda s: 1.0),
        "MultiplicativeLR": lambda: L.MultiplicativeLR(opt(), lambda s: 0.9),
        "StepLR": lambda: L.StepLR(opt(), 3),
        "MultiStepLR": lambda: L.MultiStepLR(opt(), [2, 4]),
        "ConstantLR": lambda: L.ConstantLR(opt()),
        "LinearLR": lambda: L.LinearLR(opt(), total_iters=10),
        "ExponentialLR": lambda: L.ExponentialLR(opt(), 0.9),
        "PolynomialLR": lambda: L.PolynomialLR(opt(), total_iters=10),
        "CosineAnnealingLR": lambda: L.CosineAnnealingLR(opt(), 10),
        "CosineAnnealingWarmRestarts": lambda: L.CosineAnnealingWarmRestarts(opt(), 5),
        "CyclicLR": lambda: L.CyclicLR(opt(), 0.01, 0.1),
        "OneCycleLR": lambda: L.OneCycleLR(opt(), 0.1, total_steps=10),
        "ReduceLROnPlateau": lambda: L.ReduceLROnPlateau(opt()),
    }


@pytest.mark.filterwarnings("ignore:Detected call of")
@pytest.mark.parametrize("cls", sorted(_torch_schedulers()))
def test_every_torch_scheduler_class_is_identified(cls):
    sched = _torch_schedulers()[cls]()
    for _ in range(3):
        sched.step(1.0) if cls == "ReduceLROnPlateau" else sched.step()
    sd = sched.state_dict()
    expected = "LambdaLR" if cls == "MultiplicativeLR" else cls
    assert _torchstate.torch_scheduler_kind(sd) == expected
    spec, prog, notes = _torchstate.torch_scheduler(sd, unit=Unit.UPDATES, source="s")
    assert prog.value == sched.last_epoch == 3
    modelled = cls not in ("LambdaLR", "MultiplicativeLR", "ReduceLROnPlateau", "OneCycleLR")
    # OneCycleLR needs the optimizer's param groups for its peak (not passed here).
    assert (spec is not None) == modelled, notes
    if spec is not None:
        assert spec.kind == cls and spec.max_lr == 0.1  # (CyclicLR: max_lr 0.1, base 0.01)
        # The rebuilt schedule gives the LR the live scheduler has.
        assert lr_at(spec, prog.value) == pytest.approx(sched.get_last_lr()[0], rel=1e-9)
    else:
        assert notes


def test_reading_never_imports_torch(saved):
    code = ("import sys; from pathlib import Path; from lrdoctor.read.layouts import accelerate as M; "
            "st = M.read(Path(sys.argv[1])); assert st.scheduler_progress is not None; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code, str(saved / "cosine")], check=True, timeout=60)


# ---------------------------------------------------------------- the whole diagnosis

def test_inspect_single_process_runs_are_silent(saved):
    from lrdoctor.inspect_api import inspect_path

    for name in SCENARIOS:
        (r,) = inspect_path(saved / name)
        allowed = ["LRD107"] if name == "lambda" else []  # info: the lambda is not saved
        assert [f.code for f in r.findings] == allowed, (name, [f.message for f in r.findings])
        assert r.exit_code("warning") == 0
