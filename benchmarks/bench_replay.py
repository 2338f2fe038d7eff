"""Replay speed: the fast path on 1,000,000 samples over 10,000 train steps (goal < 5 s),
and the torch path's micro-batches per second on CPU (and CUDA with peak memory).

Run: ``python benchmarks/bench_replay.py [--steps 10000] [--per-step 100]``.
Prints figures; asserts nothing (performance goals live here, not in tests).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from lrdoctor.replay import analysis, engine
from lrdoctor.replay.config import config_from_dict


def _cfg(steps: int, per: int, strategy: str) -> object:
    batching = {"strategy": strategy}
    if strategy != "static":
        batching["max_tokens_per_microbatch"] = 8192
    return config_from_dict({
        "schedule": {"family": "megatron", "kind": "cosine", "max_lr": 1e-6, "min_lr": 1e-7},
        "budget": {"formula": "roll"},
        "train": {"steps": steps, "samples_per_step": per, "micro_batch_size": 2,
                  "gradient_accumulation": 4},
        "dp": {"size": 4},
        "batching": batching,
    })


def _lengths(steps: int, per: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    tok = np.clip(rng.lognormal(np.log(1500), 0.6, steps * per), 16, 16384).astype(np.int64)
    return pd.DataFrame({"step": np.repeat(np.arange(steps), per), "tokens": tok})


def bench_fast(steps: int, per: int, strategy: str) -> None:
    cfg = _cfg(steps, per, strategy)
    df = _lengths(steps, per)
    t0 = time.perf_counter()
    infos = engine.plan_steps(cfg, df)
    t1 = time.perf_counter()
    rep = engine.simulate(cfg, infos)
    t2 = time.perf_counter()
    s = analysis.summarize(rep)
    analysis.findings(rep, s)
    t3 = time.perf_counter()
    print(f"fast path, {strategy:>12}: {len(df):,} samples / {steps:,} steps -> "
          f"{s['micro_batches']:,} micro-batches, {s['actual_updates']:,} updates: "
          f"plan {t1 - t0:.2f} s + simulate {t2 - t1:.2f} s + analyse {t3 - t2:.2f} s "
          f"= {t3 - t0:.2f} s (goal < 5 s)")


def bench_torch(device: str, steps: int = 40, per: int = 256) -> None:
    from lrdoctor.replay import torch_exec

    cfg = _cfg(steps, per, "token_budget")
    infos = engine.plan_steps(cfg, _lengths(steps, per, seed=1))
    torch_exec.replay_torch(cfg, engine.plan_steps(cfg, _lengths(2, per, 2)), device=device)
    rep = torch_exec.replay_torch(cfg, infos, device=device)
    n = len(rep.trace["lr"])
    line = (f"torch path on {device}: {n:,} micro-batches in {rep.notes['torch_seconds']:.2f} s "
            f"= {rep.notes['micro_batches_per_second']:,.0f} micro-batches/s "
            f"(probe model, {rep.notes['scheduler_class']})")
    if device == "cuda":
        line += f", peak memory {rep.notes['peak_memory_bytes'] / 2**20:.1f} MiB"
    print(line)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--per-step", type=int, default=100)
    ap.add_argument("--strategies", default="static,token_budget")
    args = ap.parse_args()
    for strategy in args.strategies.split(","):
        bench_fast(args.steps, args.per_step, strategy)
    bench_torch("cpu")
    import torch

    if torch.cuda.is_available():
        bench_torch("cuda")
    else:
        print("torch path on cuda: no CUDA device here")


if __name__ == "__main__":
    main()
