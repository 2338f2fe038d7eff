"""lrdoctor fix on a real accelerate save_state folder, loaded back with load_state."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap

import pytest
import torch

from lrdoctor.repair import plan_fix, write_fix
from tests.helpers.fix_support import diff, load, tree_hash

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]
UPDATES, MORE = 8, 4

GEN = textwrap.dedent("""
    import json, sys, torch
    from accelerate import Accelerator
    mode, path = sys.argv[1], sys.argv[2]
    torch.manual_seed(0)
    acc = Accelerator(cpu=True)
    m = torch.nn.Linear(4, 1)
    o = torch.optim.AdamW(m.parameters(), lr=1e-3)
    s = torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=40, eta_min=1e-5)
    m, o, s = acc.prepare(m, o, s)
    lrs = []
    if mode == "bad":
        for _ in range(%(updates)d):
            acc.backward(m(torch.randn(2, 4)).pow(2).mean())
            o.step(); o.zero_grad()
            s.step(); s.step()  # the bug: the scheduler stepped twice per update
        acc.save_state(path)
    else:
        acc.load_state(path)
        first = (s.scheduler.last_epoch, o.param_groups[0]["lr"])
        for _ in range(%(more)d):
            acc.backward(m(torch.randn(2, 4)).pow(2).mean())
            o.step(); o.zero_grad(); s.step()
            lrs.append(o.param_groups[0]["lr"])
        print("RESULT" + json.dumps({"first": first, "lrs": lrs}))
""") % {"updates": UPDATES, "more": MORE}


def run(tmp, mode, path):
    (tmp / "gen.py").write_text(GEN)
    r = subprocess.run([sys.executable, str(tmp / "gen.py"), mode, str(path)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    line = next((x for x in r.stdout.splitlines() if x.startswith("RESULT")), "RESULT{}")
    return json.loads(line[len("RESULT"):])


def healthy(n):
    o = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1e-3)
    s = torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=40, eta_min=1e-5)
    out = []
    for _ in range(n):
        o.step()
        s.step()
        out.append(o.param_groups[0]["lr"])
    return out


def test_rescaled_state_loads_back_at_the_healthy_lr(tmp_path):
    bad = tmp_path / "bad"
    run(tmp_path, "bad", bad)
    before = tree_hash(bad)
    plan = plan_fix(bad)
    assert plan.target.policy == "rescale" and plan.target.k == 2
    out = tmp_path / "fixed"
    write_fix(plan, out)
    assert tree_hash(bad) == before
    assert set(diff(load(bad / "scheduler.bin"), load(out / "scheduler.bin"))) == {
        ("last_epoch",), ("_step_count",), ("_last_lr", 0)}
    assert set(diff(load(bad / "optimizer.bin"), load(out / "optimizer.bin"))) == {
        ("param_groups", 0, "lr")}
    for f in bad.iterdir():
        if f.name not in ("scheduler.bin", "optimizer.bin"):
            assert (out / f.name).read_bytes() == f.read_bytes()
    r = run(tmp_path, "resume", out)
    want = healthy(UPDATES + MORE)
    assert r["first"][0] == UPDATES
    assert math.isclose(r["first"][1], want[UPDATES - 1], rel_tol=1e-12)
    for got, exp in zip(r["lrs"], want[UPDATES:], strict=True):
        assert math.isclose(got, exp, rel_tol=1e-9)
