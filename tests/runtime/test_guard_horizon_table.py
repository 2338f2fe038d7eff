"""The runtime guard and the checkpoint readers find a scheduler's horizon through one
table (:mod:`lrdoctor.schedules.horizon_fields`), so they agree by construction.

The schedulers are the frameworks' own classes: torch's, megatron-core's
``OptimizerParamScheduler`` and DeepSpeed's ``WarmupDecayLR`` (a real engine writes the
checkpoint the reader reads). DeepSpeed's ``WarmupDecayLR`` is the class only the reader
knew: it read ``total_num_steps`` from ds_config, while the guard's own table had no
DeepSpeed class and its horizon check (LRD101) never ran on one.
"""

from __future__ import annotations

import json
import re
import textwrap
import warnings
from pathlib import Path

import pytest

from lrdoctor.core.state import Unit
from lrdoctor.read.layouts._torchstate import optimizer_info, torch_scheduler
from lrdoctor.read.scan.shapes import scheduler_field
from lrdoctor.runtime.guard import scheduler_horizon
from lrdoctor.schedules import horizon_fields
from tests.helpers.factories import run_deepspeed

torch = pytest.importorskip("torch")
lr_scheduler = torch.optim.lr_scheduler

pytestmark = pytest.mark.frameworks

REPO = Path(__file__).resolve().parents[2]


def _opt():
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)


# One real scheduler per class of the table, each with its own horizon; the guard sees
# the horizon only where the schedule decays over it.
TORCH_CASES = {
    "CosineAnnealingLR": (lambda o: lr_scheduler.CosineAnnealingLR(o, T_max=37), 37, True),
    "OneCycleLR": (lambda o: lr_scheduler.OneCycleLR(o, max_lr=1e-2, total_steps=41), 41, True),
    "PolynomialLR": (lambda o: lr_scheduler.PolynomialLR(o, total_iters=43), 43, True),
    "LinearLR": (lambda o: lr_scheduler.LinearLR(o, start_factor=1.0, end_factor=0.1,
                                                 total_iters=47), 47, True),
    "ConstantLR": (lambda o: lr_scheduler.ConstantLR(o, factor=0.5, total_iters=53), 53, False),
}


def test_every_torch_class_of_the_table_is_covered_here():
    assert set(TORCH_CASES) == set(horizon_fields.TORCH)


@pytest.mark.parametrize("kind", sorted(TORCH_CASES))
def test_guard_and_reader_read_the_same_torch_horizon(kind):
    build, horizon, decays = TORCH_CASES[kind]
    opt = _opt()
    sched = build(opt)
    assert type(sched).__name__ == kind
    spec, _, notes = torch_scheduler(sched.state_dict(), unit=Unit.UPDATES, source="s",
                                     opt=optimizer_info(opt.state_dict()))
    assert spec is not None, notes
    assert spec.horizon == horizon  # the reader, from the saved state
    assert scheduler_horizon(sched) == (horizon if decays else None)  # the guard, live


def test_a_rising_linear_lr_has_a_horizon_field_but_no_decay_for_the_guard():
    sched = lr_scheduler.LinearLR(_opt(), start_factor=0.1, end_factor=1.0, total_iters=9)
    assert scheduler_horizon(sched) is None
    spec, _, _ = torch_scheduler(sched.state_dict(), unit=Unit.UPDATES, source="s")
    assert spec is not None and spec.horizon == 9


def test_megatron_core_scheduler_horizon_is_the_same_field_live_and_saved():
    pytest.importorskip("megatron.core")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    s = OptimizerParamScheduler(_opt(), init_lr=0.0, max_lr=1e-3, min_lr=0.0,
                                lr_warmup_steps=0, lr_decay_steps=640, lr_decay_style="cosine",
                                start_wd=0.0, end_wd=0.0, wd_incr_steps=1,
                                wd_incr_style="constant")
    assert scheduler_horizon(s) == 640
    assert scheduler_field(s.state_dict(), "lr_decay_steps") == 640
    assert horizon_fields.MEGATRON[0] in s.state_dict()


def test_the_horizon_table_has_one_home():
    """No other module spells a scheduler class next to its horizon field."""
    pairs = [re.compile(rf'"{re.escape(cls)}"\s*:\s*"{re.escape(f)}"')
             for table in (horizon_fields.TORCH, horizon_fields.DEEPSPEED)
             for cls, f in table.items()]
    home = REPO / "lrdoctor" / "schedules" / "horizon_fields.py"
    found = {str(p.relative_to(REPO)) for p in (REPO / "lrdoctor").rglob("*.py")
             if any(pat.search(p.read_text()) for pat in pairs)}
    assert found == {str(home.relative_to(REPO))}
    guard_src = (REPO / "lrdoctor" / "runtime" / "guard.py").read_text()
    for name in ("T_max", "total_iters", "total_steps", "lr_decay_steps", "total_num_steps"):
        assert f'"{name}"' not in guard_src and f".{name}" not in guard_src, name


DS_RUN = textwrap.dedent("""
    import json, sys, warnings, torch, deepspeed
    from pathlib import Path
    from deepspeed.runtime.lr_schedules import WarmupDecayLR
    from lrdoctor.runtime.guard import StepGuard, scheduler_horizon

    out = Path(sys.argv[1])
    torch.manual_seed(0)
    params = {"warmup_min_lr": 0, "warmup_max_lr": 1e-3, "warmup_num_steps": 2,
              "total_num_steps": 8}
    m = torch.nn.Linear(4, 2)
    cfg = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
           "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
           "scheduler": {"type": "WarmupDecayLR", "params": params}}
    eng, opt, _, sch = deepspeed.initialize(model=m, model_parameters=m.parameters(),
                                            config=cfg)
    for _ in range(3):
        eng.backward(eng(torch.randn(2, 4)).pow(2).mean())
        eng.step()
    eng.save_checkpoint(str(out / "run"))
    live = scheduler_horizon(sch)  # the engine's own scheduler object

    # A plain loop (torch optimizer, DeepSpeed's scheduler class) planned for 12 updates
    # whose scheduler decays over 8: past its horizon at update 8, LRD101.
    o = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    s = WarmupDecayLR(o, **params)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with StepGuard(o, s, action="warn", max_steps=12) as guard:
            for _ in range(12):
                o.step()
                s.step()
    (out / "guard.json").write_text(json.dumps({
        "live_horizon": live, "loop_horizon": guard.horizon,
        "codes": sorted(f.code for f in guard.findings)}))
""")


def test_deepspeed_warmup_decay_lr_horizon_in_guard_and_reader(tmp_path):
    """DeepSpeed ``WarmupDecayLR``: once only the reader knew its horizon; now the guard
    finds the same ``total_num_steps`` on the live engine's scheduler and reports a loop
    that runs past it (LRD101)."""
    pytest.importorskip("deepspeed")
    run_deepspeed(tmp_path, DS_RUN, str(tmp_path), cwd=REPO, env={"PYTHONPATH": str(REPO)})
    got = json.loads((tmp_path / "guard.json").read_text())
    from lrdoctor.read.layouts import deepspeed as ds_fmt

    st = ds_fmt.read(tmp_path / "run")
    assert st.schedule is not None and st.schedule.kind == "WarmupDecayLR"
    assert st.schedule.horizon == 8  # the reader, from ds_config
    assert st.planned_end is not None and st.planned_end.name == "total_num_steps"
    assert got["live_horizon"] == got["loop_horizon"] == 8  # the guard, live
    assert "LRD101" in got["codes"]
