"""Replay speed: a verl Megatron launch script at 131,072 samples beside verl's own
Karmarkar-Karp on the same partitions; the fast path on 1,000,000 samples over 10,000
train steps (goal < 5 s);
the torch engine's micro-batches per second beside the fast engine's on the same run
(CPU, and CUDA with peak memory); and every shipped example as a user runs it
(``lrdoctor replay -c examples/X.yaml``: fast path + torch cross-check of a sample,
goal < 5 s each, the whole command with its imports).

Run: ``python benchmarks/bench_replay.py [--steps 10000] [--per-step 100] [--no-examples]``.
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


def bench_engines(device: str, steps: int = 40, per: int = 256) -> None:
    """The same run through both engines: micro-batches per second side by side."""
    from lrdoctor.replay import torch_exec

    cfg = _cfg(steps, per, "token_budget")
    infos = engine.plan_steps(cfg, _lengths(steps, per, seed=1))
    torch_exec.replay_torch(cfg, engine.plan_steps(cfg, _lengths(2, per, 2)), device=device)
    t0 = time.perf_counter()
    fast = engine.simulate(cfg, infos)
    fast_s = time.perf_counter() - t0
    rep = torch_exec.replay_torch(cfg, infos, device=device)
    n = len(rep.trace["lr"])
    torch_rate = rep.notes["micro_batches_per_second"]
    fast_rate = len(fast.trace["lr"]) / fast_s if fast_s else float("inf")
    print(f"engines on {device}, {n:,} micro-batches ({steps} steps x {per} samples, "
          "token_budget):")
    print(f"  fast  (numpy):                 {fast_s:7.3f} s = {fast_rate:12,.0f} "
          "micro-batches/s")
    line = (f"  torch (probe model, {device:>4}):    {rep.notes['torch_seconds']:7.3f} s = "
            f"{torch_rate:12,.0f} micro-batches/s  ({fast_rate / torch_rate:,.0f}x slower; "
            f"{rep.notes['scheduler_class']})")
    if device == "cuda":
        line += f", peak memory {rep.notes['peak_memory_bytes'] / 2**20:.1f} MiB"
    print(line)


def bench_examples() -> None:
    """Each shipped example as a user runs it: the whole command, imports included."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    shipped = [*(root / "examples").glob("*.yaml"), *(root / "examples").rglob("*.sh")]
    for cfg in sorted(shipped):
        extra = (["--batch-log", str(root / "examples/batchlogs/roll-sokoban.csv")]
                 if cfg.stem == "roll-sokoban-dynamic" else [])
        row = [f"  {cfg.stem:<26}"]
        for label, flags in (("--fast", ["--fast"]), ("default", ["--device", "cpu"])):
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, "-m", "lrdoctor", "replay", "-c", str(cfg),
                                *extra, *flags, "--json"], capture_output=True, text=True,
                               cwd=root)
            wall = time.perf_counter() - t0
            row.append(f"{label} {wall:5.1f} s")
            if label == "default":
                c = json.loads(p.stdout)["summary"].get("cross_check") or {}
                row.append(f"(torch checked {c.get('micro_batches', 0):,} of "
                           f"{c.get('of', 0):,} micro-batches, agree={c.get('agree')})")
        print("  ".join(row))


VERL_MEGATRON_SETS = ("data.train_batch_size=1024", "actor_rollout_ref.rollout.n=8",
                      "trainer.total_training_steps=16")  # 8,192 samples x 16 steps


def bench_verl_megatron() -> None:
    """The shipped verl Megatron launch script scaled to 131,072 samples (``--set``):
    lrdoctor's default-mode replay (fast path; the knob check reuses the first plan)
    beside verl's own Karmarkar-Karp (``verl.utils.seqlen_balancing``, loaded as the
    peer tests load it) doing the same partitions on the same lengths."""
    from pathlib import Path

    from lrdoctor.replay import ReplayOptions, replay_full

    root = Path(__file__).resolve().parents[1]
    script = root / "examples" / "verl-ppo-megatron.sh"
    opts = ReplayOptions(engine="fast", sets=VERL_MEGATRON_SETS)
    t0 = time.perf_counter()
    res = replay_full(str(script), options=opts)
    lrd = time.perf_counter() - t0
    infos = res.replay.infos
    n = sum(i.samples for i in infos)
    print(f"verl Megatron launch script, {n:,} samples / {len(infos)} steps: lrdoctor "
          f"replay (fast path, knob check {res.report.extra['summary']['memory_knob']['source']!r})"
          f" {lrd:.2f} s")
    try:
        import sys

        sys.path.insert(0, str(root))
        from tests.helpers import peers

        verl = peers.verl_balancing()
    except ImportError:
        verl = None
    if verl is None:
        print("  verl's own packer: not installed (pip install --no-deps verl==0.9.1)")
        return
    cfg = res.replay.cfg
    dp = cfg.dp.size
    mpr = int(cfg.train.mini_batch_size) // dp
    samples = engine.load_samples(cfg)  # the replay's own (seeded) synthetic lengths
    tok = samples["tokens"].to_numpy()
    step = samples["step"].to_numpy()
    calls = 0
    t0 = time.perf_counter()
    for info in infos:
        lens = tok[step == info.step].tolist()
        # verl balance_batch: dp partitions of equal size, then per rank and mini-batch
        # the micro-batch partitions (as many as lrdoctor's plan has)
        ranks = verl.get_seqlen_balanced_partitions(lens, dp, True)
        counts = iter([b - a for a, b in zip([-1, *info.plan.boundaries],
                                             info.plan.boundaries, strict=False)])
        for r in ranks:
            rl = [lens[i] for i in r]
            for a in range(0, len(rl), mpr):
                k = min(next(counts, 1), len(rl[a:a + mpr]))
                verl.get_seqlen_balanced_partitions(rl[a:a + mpr], k, False)
                calls += 1
    own = time.perf_counter() - t0
    print(f"  verl's own get_seqlen_balanced_partitions, same partitions ({calls:,} calls): "
          f"{own:.2f} s; lrdoctor / verl = {lrd / own:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--per-step", type=int, default=100)
    ap.add_argument("--strategies", default="static,token_budget,karmarkar_karp")
    ap.add_argument("--no-examples", action="store_true")
    args = ap.parse_args()
    bench_verl_megatron()
    for strategy in args.strategies.split(","):
        bench_fast(args.steps, args.per_step, strategy)
    bench_engines("cpu")
    import torch

    if torch.cuda.is_available():
        bench_engines("cuda")
    else:
        print("engines on cuda: no CUDA device here")
    if not args.no_examples:
        print("examples (lrdoctor replay -c examples/X.yaml, wall time of the command):")
        bench_examples()


if __name__ == "__main__":
    main()
