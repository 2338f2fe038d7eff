"""What the runtime guard and the batch log recorder cost a training loop.

1. ``StepGuard`` around a torch optimizer + scheduler: extra time per optimizer
   update (patched ``step`` calls, the LR window check, the horizon check);
2. ``LoopWatch`` fed as the callbacks feed it: time per update;
3. ``BatchLogRecorder``: rows per second for JSONL (written per step) and Parquet
   (written at close), 256 samples per step.

Goal: a few microseconds per update, negligible next to a real step (milliseconds
or more); a recorder that keeps up with millions of samples per minute.
Prints figures; asserts nothing.

    .venv/bin/python benchmarks/bench_live.py [--updates 20000]
"""

from __future__ import annotations

import argparse
import tempfile
import time
import warnings
from pathlib import Path

import torch

from lrdoctor.runtime.guard import LoopWatch, StepGuard
from lrdoctor.runtime.record import BatchLogRecorder


def loop(updates: int, ga: int, guard: str) -> float:
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.1)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=updates)
    g = w = None
    if guard == "StepGuard":
        g = StepGuard(opt, sched, max_steps=updates)
    elif guard == "LoopWatch":
        w = LoopWatch(strict=True).start(sched, opt, max_steps=updates)
    t0 = time.perf_counter()
    for _ in range(updates):
        for m in range(ga):
            if g is not None:
                g.micro_batch()
            if w is not None:
                w.micro_batch(first=m == 0)
        if w is not None:
            w.before_update()
        opt.step()
        sched.step()
        if w is not None:
            w.after_update()
    dt = time.perf_counter() - t0
    if g is not None:
        g.close()
        assert not g.findings
    return dt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--updates", type=int, default=20000)
    ap.add_argument("--ga", type=int, default=4)
    a = ap.parse_args()
    warnings.simplefilter("ignore")
    base = min(loop(a.updates, a.ga, "none") for _ in range(3))
    print(f"bare optimizer+scheduler step: {base / a.updates * 1e6:.1f} us/update")
    for name in ("StepGuard", "LoopWatch"):
        t = min(loop(a.updates, a.ga, name) for _ in range(3))
        print(f"{name:9s} (GA={a.ga}): +{(t - base) / a.updates * 1e6:.1f} us/update")

    tokens = list(range(1, 257))
    steps = max(1, a.updates // 10)
    with tempfile.TemporaryDirectory() as d:
        for ext in ("jsonl", "csv", "parquet"):
            path = Path(d) / f"b.{ext}"
            t0 = time.perf_counter()
            with BatchLogRecorder(path) as rec:
                for s in range(steps):
                    rec.log(s, tokens)
            dt = time.perf_counter() - t0
            rows = steps * len(tokens)
            print(f"recorder {ext:7s}: {rows / dt / 1e6:.2f} M rows/s "
                  f"({rows:,} rows, {path.stat().st_size / 1e6:.1f} MB)")


if __name__ == "__main__":
    main()
