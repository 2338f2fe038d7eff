"""A folder of 200 runs x 2 small checkpoints, listed and judged (issue 28: <= 3 s).

Writes (``torch.save``, into a temporary directory removed afterwards) --runs run folders,
each a torch loop's two checkpoints ``ckpt_10.pt`` and ``ckpt_20.pt`` (a small model,
AdamW state, a CosineAnnealingLR state, the step), half of them with the scheduler stepped
per micro-batch (GA 2). Then, each in a fresh subprocess, side by side:

* ``folder``: ``inspect_path`` of the folder of runs (discovery of every checkpoint at any
  depth, runs grouped, each run read and judged apart), best of --repeat;
* ``one run``: ``inspect_path`` of one run folder, best of --repeat.

It prints both times, the folder's time over (runs x one run) (the cost of finding and
grouping the runs, 1.0 when there is none) and checks the verdicts: every buggy run an
LRD103 error, every healthy run clean. The goal (issue 28) is the folder in <= 3 s; the
exit code is 1 when it is slower or a verdict is wrong.

    .venv/bin/python benchmarks/bench_runs.py [--runs 200] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOAL_S = 3.0

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from lrdoctor.inspect_api import inspect_path
best, cpu, reports = None, None, None
for _ in range({repeat}):
    t, c = time.perf_counter(), time.process_time()
    reports = inspect_path({path!r})
    dt, dc = time.perf_counter() - t, time.process_time() - c
    best = dt if best is None else min(best, dt)
    cpu = dc if cpu is None else min(cpu, dc)
print(json.dumps({{"s": best, "cpu": cpu, "runs": [[r.run.root if r.run else r.target,
                                        sorted(f.code for f in r.findings
                                               if int(f.severity) >= 3)] for r in reports]}}))
"""


def write(folder: Path, runs: int) -> None:
    import torch

    for i in range(runs):
        torch.manual_seed(i)
        model = torch.nn.Linear(8, 1)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=40)
        ga = 2 if i % 2 else 1  # odd runs: the scheduler stepped on every micro-batch
        d = folder / f"run_{i:03d}"
        d.mkdir(parents=True)
        for step in range(1, 21):
            model(torch.ones(2, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
            for _ in range(ga):
                sched.step()
            if step % 10 == 0:
                torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                            "scheduler": sched.state_dict(), "step": step},
                           d / f"ckpt_{step}.pt")


def measure(path: Path, repeat: int) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD.format(root=str(ROOT), path=str(path),
                                                             repeat=repeat)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--strict", action="store_true", help="exit 1 when over the goal")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "runs"
        write(folder, args.runs)
        whole = measure(folder, args.repeat)
        one = measure(folder / "run_001", args.repeat)
    per_run = {Path(root).name: codes for root, codes in whole["runs"]}
    wrong = [name for name, codes in per_run.items()
             if ("LRD103" in codes) != (int(name.split("_")[1]) % 2 == 1)]
    ratio = whole["s"] / (args.runs * one["s"])
    met = "met" if whole["s"] <= GOAL_S else "MISSED"
    print(f"folder of {args.runs} runs x 2 checkpoints: {whole['s']:.2f} s "
          f"(goal <= {GOAL_S:.0f} s: {met}); one run: {one['s'] * 1000:.1f} ms; "
          f"folder / ({args.runs} x one run) = {ratio:.2f}; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    print(f"CPU time (this process, less sensitive to the machine's load): folder "
          f"{whole['cpu']:.2f} s, one run {one['cpu'] * 1000:.1f} ms")
    print(f"runs judged: {len(per_run)}; wrong verdicts: {len(wrong)} {wrong[:5]}")
    if wrong or len(per_run) != args.runs:
        return 1
    return 1 if args.strict and met != "met" else 0


if __name__ == "__main__":
    sys.exit(main())
