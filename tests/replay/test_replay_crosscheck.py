"""The default replay: the fast path over the whole run, the real torch loop over a
sample of it (first steps, each dp change, each failed update), compared row by row."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lrdoctor.replay import ReplayOptions, crosscheck, engine, planning, replay_full
from lrdoctor.replay.config import config_from_dict


def _elastic_run():
    cfg = config_from_dict({
        "schedule": {"family": "hf", "kind": "linear", "max_lr": 1e-3, "warmup": 2},
        "train": {"steps": 40, "samples_per_step": 16, "micro_batch_size": 2,
                  "gradient_accumulation": 4},
        "dp": {"size": 2, "changes": [{"at_step": 25, "size": 1}]},
        "scheduler": {"failed_updates": [50], "increment": "samples"},
    })
    df = pd.DataFrame({"step": np.repeat(np.arange(40), 16), "tokens": np.full(640, 64)})
    infos = planning.plan_steps(cfg, df)
    return cfg, infos, engine.simulate(cfg, infos)


def test_the_sample_covers_every_path_the_run_takes():
    cfg, infos, fast = _elastic_run()
    res = crosscheck.cross_check(cfg, infos, fast)
    whys = [s["why"] for s in res["segments"]]
    assert whys[0] == "first train steps" and "dp 2 -> 1" in whys
    assert any(w.startswith("failed update 50") for w in whys)
    dp_seg = next(s for s in res["segments"] if s["why"] == "dp 2 -> 1")
    assert dp_seg["steps"][0] == 25  # resumed where the dp size changes
    assert res["agree"] and res["ran"] and res["micro_batches"] < res["of"]


def test_a_fast_trace_that_is_wrong_is_caught(monkeypatch):
    cfg, infos, fast = _elastic_run()
    fast.trace["lr"] = fast.trace["lr"].copy()
    fast.trace["lr"][5] *= 1.01
    fast.trace["window_size"] = fast.trace["window_size"].copy()
    row = int(np.searchsorted(fast.trace["train_step"], 25)) + 1  # inside the dp segment
    fast.trace["window_size"][row] += 1
    res = crosscheck.cross_check(cfg, infos, fast)
    assert not res["agree"]
    assert any(m.startswith("lr at trace row 5:") for m in res["mismatches"])
    assert any(m.startswith(f"window_size at trace row {row}:") for m in res["mismatches"])


def test_disagreement_is_a_finding_ci_sees(tmp_path, monkeypatch):
    cfg_path = tmp_path / "run.yaml"
    cfg_path.write_text("train: {steps: 6, samples_per_step: 8, gradient_accumulation: 2}\n"
                        "data: {synthetic: 'fixed:64'}\n")
    real = crosscheck._compare
    monkeypatch.setattr(crosscheck, "_compare",
                        lambda F, T, r0, n: real(F, T, r0, n) + ["lr at trace row 0: x"])
    res = replay_full(str(cfg_path), options=ReplayOptions(device="cpu", cross_check=True))
    f = {x.code: x for x in res.report.findings}["LRD214"]
    assert str(f.severity) == "warning" and "lr at trace row 0" in f.message


@pytest.mark.parametrize("engine_opt, asked, engine_name, cross", [
    ("auto", False, "fast", False), ("auto", True, "fast", True),
    ("fast", False, "fast", False), ("fast", True, "fast", True),
    ("torch", True, "torch", None), ("torch", False, "torch", None)])
def test_engine_choice(tmp_path, engine_opt, asked, engine_name, cross):
    """The cross-check runs exactly when asked for on the fast path; otherwise the
    summary says it did not (never silent); the torch engine is the real loop itself."""
    cfg_path = tmp_path / "run.yaml"
    cfg_path.write_text("train: {steps: 4, samples_per_step: 8, gradient_accumulation: 2}\n"
                        "data: {synthetic: 'fixed:64'}\n")
    s = replay_full(str(cfg_path), options=ReplayOptions(
        engine=engine_opt, device="cpu", cross_check=asked)).report.extra["summary"]
    assert s["engine"] == engine_name
    if cross is None:
        assert "cross_check" not in s
    else:
        assert s["cross_check"]["ran"] is cross
        assert cross or s["cross_check"]["why"].startswith("not asked for (--cross-check")


def test_torch_engine_runs_torch_optimizers_without_importing_the_compiler():
    """The optimizer's own update and the scheduler run, but ``torch._dynamo`` (1.5-2 s
    of a default replay) is never imported; what the replay changes is undone."""
    import subprocess
    import sys

    code = """
import sys, torch
from lrdoctor.replay import torch_exec
SGD = torch_exec._eager_step(torch.optim.SGD)
assert SGD is not torch.optim.SGD and issubclass(SGD, torch.optim.SGD)
w1 = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
w2 = torch.nn.Parameter(torch.tensor([1.0, -2.0]))
with torch_exec._eager_without_dynamo(torch):
    o1 = SGD([w1], lr=0.1, momentum=0.9)
    s1 = torch.optim.lr_scheduler.LambdaLR(o1, lambda i: 1.0 / (i + 1))
    for _ in range(3):
        (w1 * w1).sum().backward()
        o1.step(); s1.step(); o1.zero_grad()
assert "torch._dynamo" not in sys.modules, "the compiler was imported"
assert not any("__dynamo_disable" in vars(f) for f in [torch.optim.Optimizer.zero_grad.__wrapped__])
o2 = torch.optim.SGD([w2], lr=0.1, momentum=0.9)
s2 = torch.optim.lr_scheduler.LambdaLR(o2, lambda i: 1.0 / (i + 1))
for _ in range(3):
    (w2 * w2).sum().backward()
    o2.step(); s2.step(); o2.zero_grad()
assert torch.equal(w1, w2), (w1, w2)
assert s1.get_last_lr() == s2.get_last_lr()
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "ok"
