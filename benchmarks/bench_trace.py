"""``replay --trace`` beside the same replay without it, as a user runs it (goal <= 1.5x).

A run of 74,800 micro-batches (3,740 train steps x 160 samples, 2 per micro-batch on
4 ranks, synthetic lengths; the size issue 30 measured: 2.2 s -> 14.4 s with
``--trace``), each command in a fresh process (``python -m lrdoctor replay --fast -q``,
imports included: the trace's cost was mostly importing pandas, which the replay
itself never does), best of ``--repeat`` runs, interleaved so the machine's load
falls on all three alike.

Run: ``python benchmarks/bench_trace.py [--dir DIR] [--repeat 3] [--tree CHECKOUT]``. Prints figures and
the ratios; asserts nothing (performance goals live here, not in tests). ``--dir``:
where the config and traces go (default: a new temporary folder; lrdoctor refuses to
write into a folder that holds checkpoints, so pick one of its own).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG = """\
schedule: {family: megatron, kind: cosine, max_lr: 1.0e-6, min_lr: 1.0e-7}
budget: {formula: nominal}
train: {steps: 3740, samples_per_step: 160, micro_batch_size: 2, gradient_accumulation: 20}
dp: {size: 4}
batching: {strategy: static}
data: {synthetic: "uniform:64:4096"}
"""


def _time(cmd: list[str], cwd: Path, tree: Path) -> float:
    t = time.perf_counter()
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True,
                       env={**os.environ, "PYTHONPATH": str(tree)})
    took = time.perf_counter() - t
    if r.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed: {r.stderr.strip()[-400:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tree", type=Path, default=Path(__file__).resolve().parents[1],
                    help="the lrdoctor source tree to time (another checkout: before/after)")
    a = ap.parse_args()
    work = a.dir or Path(tempfile.mkdtemp(prefix="lrd-bench-trace-"))
    work.mkdir(parents=True, exist_ok=True)
    cfg = work / "run.yaml"
    cfg.write_text(CONFIG)
    base = [sys.executable, "-m", "lrdoctor", "replay", "--config", str(cfg), "--fast", "-q"]
    runs = {"replay": base, "--trace .parquet": base + ["--trace", str(work / "t.parquet")],
            "--trace .csv": base + ["--trace", str(work / "t.csv")]}
    best = {k: float("inf") for k in runs}
    for _ in range(a.repeat):
        for name, cmd in runs.items():
            best[name] = min(best[name], _time(cmd, work, a.tree))
    rows = sum(1 for _ in open(work / "t.csv")) - 1
    print(f"trace rows: {rows} micro-batches (best of {a.repeat}, each in a fresh process)")
    for name, t in best.items():
        ratio = t / best["replay"]
        print(f"  {name:18s} {t:6.2f} s   {ratio:4.2f}x the replay without a trace"
              + ("   (goal <= 1.5x)" if name != "replay" else ""))


if __name__ == "__main__":
    main()
