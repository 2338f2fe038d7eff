"""lrdoctor fix on real DeepSpeed engine checkpoints, resumed by a real engine (CPU)."""

from __future__ import annotations

import json
import math
import textwrap

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.repair import Refusal, plan_fix, write_fix
from tests.helpers.factories import run_deepspeed
from tests.helpers.fix_support import diff, load, tree_hash

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]
STEPS, GA = 5, 4
SCHED = {"type": "WarmupDecayLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 1e-3,
                                             "warmup_num_steps": 2, "total_num_steps": 40}}
CONFIGS = {
    "plain": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
              "gradient_accumulation_steps": GA,
              "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
              "scheduler": SCHED},
    # fp16 where DeepSpeed supports it on this CPU, else bf16 (see GEN)
    "halfz1": {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
               "gradient_accumulation_steps": GA,
               "fp16": {"enabled": True, "initial_scale_power": 4},
               "zero_optimization": {"stage": 1},
               "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
               "scheduler": SCHED},
}

GEN = textwrap.dedent("""
    import json, sys, torch, deepspeed
    from pathlib import Path
    mode, out, cfgs = sys.argv[1], Path(sys.argv[2]), json.loads(sys.argv[3])
    result = {}
    from deepspeed.accelerator import get_accelerator
    for name, cfg in cfgs.items():
        if "fp16" in cfg and not get_accelerator().is_fp16_supported():
            del cfg["fp16"]  # a CPU without AVX512-FP16/AMX: the precision it supports
            cfg["bf16"] = {"enabled": True}
        torch.manual_seed(0)
        m = torch.nn.Linear(4, 2)
        eng, opt, _, sch = deepspeed.initialize(model=m, model_parameters=m.parameters(),
                                                config=cfg)
        ga = cfg["gradient_accumulation_steps"]
        if mode == "train":
            for i in range(%(steps)d * ga):
                x = torch.randn(2, 4, dtype=next(eng.module.parameters()).dtype)
                eng.backward(eng(x).float().pow(2).mean())
                eng.step()
                sch.step()  # the bug: an extra scheduler step on every micro-batch
            eng.save_checkpoint(str(out / name))
        else:
            eng.load_checkpoint(str(out / name))
            first = [g["lr"] for g in opt.param_groups]
            lbi = sch.last_batch_iteration
            for i in range(ga):  # one more update, stepped correctly
                x = torch.randn(2, 4, dtype=next(eng.module.parameters()).dtype)
                eng.backward(eng(x).float().pow(2).mean())
                eng.step()
            result[name] = {"fp16": eng.fp16_enabled(), "bf16": eng.bfloat16_enabled(),
                            "fp16_supported": bool(get_accelerator().is_fp16_supported()),
                            "lbi": lbi, "first_lr": first, "lbi_after": sch.last_batch_iteration,
                            "lr_after": [g["lr"] for g in opt.param_groups]}
    print("RESULT" + json.dumps(result))
""") % {"steps": STEPS}


def engine(tmp, mode, out):
    r = run_deepspeed(tmp, GEN, mode, str(out), json.dumps(CONFIGS))
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT")), "RESULT{}")
    return json.loads(line[len("RESULT"):])


def healthy_lr(n):
    """The LR DeepSpeed's own WarmupDecayLR gives after n correct steps."""
    import torch
    from deepspeed.runtime.lr_schedules import WarmupDecayLR

    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    s = WarmupDecayLR(opt, **SCHED["params"])
    for _ in range(n):
        s.step()
    return opt.param_groups[0]["lr"]


def test_fix_then_resume_with_a_real_engine(tmp_path):
    runs = tmp_path / "runs"
    engine(tmp_path, "train", runs)
    fixed = tmp_path / "fixed"
    fixed.mkdir()
    for name in CONFIGS:
        src = runs / name
        before = tree_hash(src)
        plan = plan_fix(src)
        assert plan.target.policy == "nominal" and "LRD109" in plan.target.motivated_by
        assert plan.target.progress == STEPS and plan.target.progress_before == STEPS * (GA + 1)
        res = write_fix(plan, fixed / name)
        assert tree_hash(src) == before
        assert [f.code for f in res.after_findings if f.severity >= Severity.WARNING] == []
        tag = f"global_step{STEPS}"
        assert (fixed / name / "latest").read_text() == (src / "latest").read_text()
        for f in (src / tag).iterdir():
            rel = f"{tag}/{f.name}"
            changed = {c.key for c in plan.changes if c.file == rel}
            got = set(diff(load(f), load(fixed / name / rel)))
            assert got == changed, (rel, got, changed)
        with pytest.raises(Refusal, match="total_num_steps"):
            plan_fix(src, policy="extend-horizon")

    resumed = engine(tmp_path, "resume", fixed)
    half = resumed["halfz1"]  # the half precision the CPU supports, chosen by DeepSpeed's word
    assert (half["fp16"], half["bf16"]) == (half["fp16_supported"], not half["fp16_supported"])
    for name in CONFIGS:
        r = resumed[name]
        assert r["lbi"] == STEPS - 1
        assert math.isclose(r["first_lr"][0], healthy_lr(STEPS), rel_tol=1e-12)
        assert r["lbi_after"] == STEPS
        assert math.isclose(r["lr_after"][0], healthy_lr(STEPS + 1), rel_tol=1e-12)
