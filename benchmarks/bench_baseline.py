"""Before/after in one run: this tree beside an earlier lrdoctor tree, side by side.

Two figures, each timed alternately (A B A B ...) so that a shared machine's drift
hits both, reported as medians and the median of the per-pair ratios:

- the default replay of ``examples/onevision-offbyone.yaml`` (8,000 train steps,
  static batching), the whole command with its imports (goal <= 3 s);
- Karmarkar-Karp with many micro-batches (verl >= 0.9.1, ~150 per mini-batch, 640
  rows a rank, dp 4): ``plan_karmarkar_karp_steps`` timed inside each process, in
  seconds per 1M samples (goal <= 1 s), and whether both trees give the same plans.

Run: ``git worktree add /tmp/before <rev>`` (or ``git archive <rev> | tar -x -C DIR``),
then ``python benchmarks/bench_baseline.py --baseline /tmp/before [--runs 5]``.
Prints figures; asserts nothing (performance goals live here, not in tests).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

KK = r"""
import hashlib, json, sys, time
import numpy as np
from lrdoctor.replay.packing.kk_plan import plan_karmarkar_karp_steps
dp, per_rank, cap, minis = 4, 640, 8192, int(sys.argv[1])
rng = np.random.default_rng(7)
n = dp * per_rank
frames = [{"tokens": np.clip(rng.lognormal(np.log(1500), 0.6, n), 16, cap).astype(np.int64),
           "rank": np.repeat(np.arange(dp), per_rank)} for _ in range(minis)]
t0 = time.perf_counter()
plans = plan_karmarkar_karp_steps(frames, [dp] * minis, cap, mini_per_rank=[per_rank] * minis,
                                  flavor="verl")
s = time.perf_counter() - t0
h = hashlib.sha256()
for p in plans:
    for mb in p.micro_batches:
        h.update(repr([r.tolist() for r in mb.ranks]).encode())
    h.update(repr(p.boundaries).encode())
print(json.dumps({"s": s, "samples": n * minis, "plans": h.hexdigest(),
                  "counts": [len(p.micro_batches) for p in plans]}))
"""


def _run(tree: Path, args: list[str]) -> tuple[float, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    # cwd = the tree: ``-m`` and ``-c`` put the working directory first on sys.path.
    p = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env,
                       cwd=tree)
    return time.perf_counter() - t0, p.stdout


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--baseline", required=True, type=Path, help="an earlier lrdoctor tree")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--kk-mini-batches", type=int, default=16)
    a = ap.parse_args()
    trees = {"after": ROOT, "before": a.baseline.resolve()}
    replay = ["-m", "lrdoctor", "replay", "-c", str(ROOT / "examples/onevision-offbyone.yaml"),
              "--json"]
    walls: dict[str, list[float]] = {"after": [], "before": []}
    kk: dict[str, list[float]] = {"after": [], "before": []}
    outs: dict[str, set[str]] = {"after": set(), "before": set()}
    plans: dict[str, set[str]] = {"after": set(), "before": set()}
    per_m = 0
    for _ in range(a.runs):
        for name, tree in trees.items():
            wall, out = _run(tree, replay)
            walls[name].append(wall)
            outs[name].add(hashlib.sha256(out.encode()).hexdigest())
            _, out = _run(tree, ["-c", KK, str(a.kk_mini_batches)])
            doc = json.loads(out)
            per_m = doc["samples"]
            kk[name].append(doc["s"] / doc["samples"] * 1e6)
            plans[name].add(doc["plans"])

    def line(label: str, d: dict[str, list[float]], unit: str) -> None:
        ratios = [x / y for x, y in zip(d["after"], d["before"], strict=True)]
        print(f"{label}: before {statistics.median(d['before']):.2f} {unit}, after "
              f"{statistics.median(d['after']):.2f} {unit} (medians of {a.runs}); "
              f"after / before = {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})")

    print(f"baseline tree: {trees['before']}")
    line("default replay of examples/onevision-offbyone.yaml, whole command (goal <= 3 s)",
         walls, "s")
    print(f"  same --json output before and after: {outs['after'] == outs['before']} "
          f"({len(outs['after'] | outs['before'])} distinct)")
    line(f"Karmarkar-Karp, many micro-batches, {per_m:,} samples (goal <= 1 s per 1M)",
         kk, "s per 1M")
    print(f"  same plans before and after: {plans['after'] == plans['before']} "
          f"({len(plans['after'] | plans['before'])} distinct)")


if __name__ == "__main__":
    main()
