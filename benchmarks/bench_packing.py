"""Packing and batch-log speed: every micro-batching strategy on N samples over S steps.

Goal: planning 1,000,000 samples over 10,000 train steps fits in the replay's
< 5 s fast path, each strategy about 1 s of CPU or less on a 2-core machine
(Karmarkar-Karp included: issue 10 asks <= 1 s). Each strategy is timed through
``packing.plan_many``, the call the replay makes for the whole run. By default
every strategy runs, Karmarkar-Karp once per modelled release (verl 0.9.1,
verl < 0.9.1, OpenRLHF), each next to its per-step reference planner (the same
plans, checked: the micro-step counts must agree), and on the count-only path. Prints CPU and wall seconds (CPU is the fairer figure on a
shared machine); asserts nothing.

Run: ``python benchmarks/bench_packing.py [--steps 10000] [--per-step 100] [--dp 8]
[--strategies all|token_budget,static,...] [--repeat 2] [--io] [--baseline DIR]``
(each time is the best of ``--repeat`` runs: the first also pays for fresh memory)

``--baseline DIR`` also runs the same strategies with lrdoctor imported from DIR
(e.g. ``git archive <old commit> lrdoctor | tar -x -C DIR``) and prints the
baseline/current CPU ratio of each, so before/after come from one run.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lrdoctor.replay import batchlog, packing

SPEC = "lognormal:mean=2048,sigma=0.6,max=8192;turns:1:5;docs:1:4"
ALL = (
    "token_budget",
    "static",
    "doc_target",
    "balanced_first_fit",
    "prompt_unit",
    "sequence_packing",
    "karmarkar_karp",
    "karmarkar_karp:verl_ceildiv",
    "karmarkar_karp:openrlhf",
    "karmarkar_karp:counts",
)


class _Clock:
    def __enter__(self):
        self.c, self.w = time.process_time(), time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.cpu = time.process_time() - self.c
        self.wall = time.perf_counter() - self.w


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--per-step", type=int, default=100)
    ap.add_argument("--dp", type=int, default=8)
    ap.add_argument("--strategies", default="all")
    ap.add_argument("--io", action="store_true", help="also time writing/reading the log")
    ap.add_argument("--baseline", help="a source tree holding an older lrdoctor/ to compare")
    ap.add_argument("--repeat", type=int, default=2,
                    help="time each strategy N times and print the best (default 2)")
    ap.add_argument("--no-per-step-reference", dest="per_step_reference", action="store_false",
                    help="skip timing Karmarkar-Karp's per-step reference planner")
    a = ap.parse_args()
    strategies = ALL if a.strategies == "all" else tuple(a.strategies.split(","))
    n = a.steps * a.per_step
    print(f"{n:,} samples over {a.steps:,} steps, dp {a.dp}")

    with _Clock() as t:
        df = batchlog.synthetic(SPEC, a.steps, a.per_step, seed=0)
    print(f"  synthetic            cpu {t.cpu:6.2f} s  wall {t.wall:6.2f} s")
    with _Clock() as t:
        steps = packing.split_steps(df)
    print(f"  split_steps          cpu {t.cpu:6.2f} s  wall {t.wall:6.2f} s")
    frames = [fr for _, fr in steps]

    mine: dict[str, float] = {}
    train = {"micro_batch_size": 2, "samples_per_step": a.per_step, "mini_batch_size": a.per_step}
    for name in strategies:
        strat, _, flavor = name.partition(":")
        batching = {
            "strategy": strat,
            "max_tokens_per_microbatch": 8192,
            "round_to": 128,
            "docs_per_step": 64,
        }
        if flavor and flavor != "counts":
            batching["flavor"] = flavor
        t = None
        for _ in range(max(1, a.repeat)):  # the best of N: the first run also pays page faults
            count = 0
            with _Clock() as ti:
                if flavor == "counts":  # verl < 0.9.1 counts without building micro-batches
                    for _, fr in steps:
                        count += sum(packing.count_micro_batches(
                            fr, a.dp, 8192, flavor="verl_ceildiv",
                            mini_per_rank=a.per_step // a.dp))
                elif hasattr(packing, "plan_many"):  # what replay calls: the whole run at once
                    plans = packing.plan_many(batching, train, frames, [a.dp] * len(frames))
                    count = sum(len(p.micro_batches) for p in plans)
                    del plans
                else:  # a --baseline tree from before plan_many: step by step, as replay was
                    plans = [packing.plan_step(batching, train, fr, a.dp) for fr in frames]
                    count = sum(len(p.micro_batches) for p in plans)
                    del plans  # kept, then freed, as in a replay
            if t is None or ti.cpu < t.cpu:
                t = ti
        mine[name] = t.cpu
        print(
            f"  {name:<28} cpu {t.cpu:6.2f} s  wall {t.wall:6.2f} s  ({count:,} micro-steps)"
        )
        if (strat == "karmarkar_karp" and flavor != "counts" and a.per_step_reference
                and hasattr(packing, "paused_gc")):
            t2 = None
            for _ in range(max(1, a.repeat)):
                with _Clock() as ti, packing.paused_gc():
                    plans = [packing.plan_step(batching, train, fr, a.dp) for fr in frames]
                    ref = sum(len(p.micro_batches) for p in plans)
                    del plans
                if t2 is None or ti.cpu < t2.cpu:
                    t2 = ti
            label = f"  {'  per step (reference)':<28}"
            print(f"{label} cpu {t2.cpu:6.2f} s  wall {t2.wall:6.2f} s  ({ref:,} micro-steps)"
                  f"  x{t2.cpu / max(t.cpu, 1e-9):.1f} the whole-run time")
            if ref != count:
                raise SystemExit(f"{name}: the per-step plan differs ({ref} vs {count})")

    if a.baseline:
        argv = [sys.executable, __file__, "--steps", str(a.steps), "--per-step",
                str(a.per_step), "--dp", str(a.dp), "--strategies", ",".join(strategies),
                "--repeat", str(a.repeat), "--no-per-step-reference"]
        env = {**os.environ, "PYTHONPATH": os.path.abspath(a.baseline)}
        out = subprocess.run(argv, env=env, capture_output=True, text=True, check=True).stdout
        print(f"baseline {a.baseline} (cpu s, baseline / current):")
        for m in re.finditer(r"^  (\S+)\s+cpu\s+([\d.]+) s.*micro-steps", out, re.M):
            name, base = m.group(1), float(m.group(2))
            if name in mine:
                ratio = base / mine[name] if mine[name] else float("inf")
                print(f"  {name:<28} {base:6.2f} s -> {mine[name]:6.2f} s  x{ratio:.2f}")

    if a.io:
        with tempfile.TemporaryDirectory() as d:
            for ext in ("jsonl", "csv", "parquet"):
                f = Path(d) / f"log.{ext}"
                batchlog.write_batch_log(df, f)
                with _Clock() as t:
                    batchlog.read_batch_log(f)
                print(f"  read {ext:<15} cpu {t.cpu:6.2f} s  wall {t.wall:6.2f} s")


if __name__ == "__main__":
    main()
