"""Replay speed: a verl Megatron launch script at 131,072 samples beside verl's own
Karmarkar-Karp on the same partitions; Karmarkar-Karp with many micro-batches per
mini-batch (verl >= 0.9.1 raising the count until every rank fits), per 1M samples,
beside verl's own ``rearrange_micro_batches`` on the same rows and, with numba installed
(``lrdoctor[fast]``), beside the scalar code (goal <= 1 s per 1M);
the fast path on 1,000,000 samples over 10,000 train steps (goal < 5 s);
the torch engine's micro-batches per second beside the fast engine's on the same run
(CPU, and CUDA with peak memory); and every shipped example as a user runs it
(``lrdoctor replay -c examples/X``, with its batch log where it has one: ``--fast``,
the default (fast path, torch not imported; goal <= 3 s) and ``--cross-check``, the
whole command with its imports).

Run: ``python benchmarks/bench_replay.py [--steps 10000] [--per-step 100] [--no-examples]
[--kk-mini-batches 8]``.
Prints figures; asserts nothing (performance goals live here, not in tests).
Before/after figures against an earlier tree, side by side: ``bench_baseline.py``.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import pandas as pd

from lrdoctor.replay import analysis, engine, planning
from lrdoctor.replay.config import config_from_dict
from lrdoctor.replay.samples import load_samples


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
    infos = planning.plan_steps(cfg, df)
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
    infos = planning.plan_steps(cfg, _lengths(steps, per, seed=1))
    torch_exec.replay_torch(cfg, planning.plan_steps(cfg, _lengths(2, per, 2)), device=device)
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
    """Each shipped example as a user runs it: the whole command, imports included.
    The default must not import torch (``-X importtime`` lists what it imported)."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    shipped = [*(root / "examples").glob("*.yaml"), *(root / "examples").rglob("*.sh")]
    logs = {"roll-sokoban-dynamic": "examples/batchlogs/roll-sokoban.csv"}  # others: in the config
    for cfg in sorted(shipped):
        extra = ["--batch-log", str(root / logs[cfg.stem])] if cfg.stem in logs else []
        row = [f"  {cfg.relative_to(root / 'examples')!s:<66}"]
        for label, flags in (("--fast", ["--fast"]), ("default", ["-X"]),
                             ("--cross-check", ["--cross-check", "--device", "cpu"])):
            pre = ["-X", "importtime"] if label == "default" else []
            flags = [] if label == "default" else flags
            t0 = time.perf_counter()
            p = subprocess.run([sys.executable, *pre, "-m", "lrdoctor", "replay", "-c",
                                str(cfg), *extra, *flags, "--json"], capture_output=True,
                               text=True, cwd=root)
            wall = time.perf_counter() - t0
            row.append(f"{label} {wall:5.1f} s")
            try:
                c = json.loads(p.stdout)["summary"].get("cross_check") or {}
            except (ValueError, KeyError):
                row.append(f"(exit {p.returncode}: {p.stderr.strip().splitlines()[-1:]})")
                continue
            if label == "default":
                torch_in = any(ln.rsplit("|", 1)[-1].strip().split(".")[0] == "torch"
                               for ln in p.stderr.splitlines() if ln.startswith("import time:"))
                row.append(f"(torch imported: {torch_in}, cross-check ran: {c.get('ran')})")
            elif label == "--cross-check":
                row.append(f"(torch checked {c.get('micro_batches', 0):,} of "
                           f"{c.get('of', 0):,} micro-batches, agree={c.get('agree')})")
        print("  ".join(row))


def bench_kk_many(mini_batches: int = 32, verl_mini_batches: int = 2, dp: int = 4,
                  per_rank: int = 640, cap: int = 8192) -> None:
    """Karmarkar-Karp with ~140 micro-batches per mini-batch (640 rows a rank, lognormal
    lengths around 1,500 tokens, cap 8,192): lrdoctor's whole-run planner (verl 0.9.1,
    the count raised until every rank's partitions fit) beside verl's own
    ``rearrange_micro_batches`` run per mini-batch with the dp collectives (ranks as
    threads, as tests/replay/test_replay_peers.py runs it) on the first
    ``verl_mini_batches`` of the same rows (verl takes seconds per mini-batch); per 1M
    samples and as a ratio; those plans are compared."""
    import os
    import sys
    from pathlib import Path

    from lrdoctor.replay.packing import kk_numba
    from lrdoctor.replay.packing.kk_plan import plan_karmarkar_karp_steps

    rng = np.random.default_rng(7)
    n = dp * per_rank
    frames = [{"tokens": np.clip(rng.lognormal(np.log(1500), 0.6, n), 16, cap).astype(np.int64),
               "rank": np.repeat(np.arange(dp), per_rank)} for _ in range(mini_batches)]

    def plan(fr):
        return plan_karmarkar_karp_steps(fr, [dp] * len(fr), cap,
                                         mini_per_rank=[per_rank] * len(fr), flavor="verl")

    def cpu(fr, repeat=3):  # CPU seconds, best of `repeat`: the machine may be shared
        best, out = float("inf"), None
        for _ in range(repeat):
            t = time.process_time()
            out = plan(fr)
            best = min(best, time.process_time() - t)
        return best, out

    total = n * mini_batches
    compiled = kk_numba.available()
    if compiled:
        t0 = time.perf_counter()
        plan(frames[:1])  # compiles, or loads the compiled code cached on disk
        print(f"  numba: first call (compile or load the cache) {time.perf_counter() - t0:.2f} s")
    lrd, plans = cpu(frames)
    counts = [len(p.micro_batches) for p in plans]
    print(f"Karmarkar-Karp, many micro-batches ({min(counts)}-{max(counts)} per mini-batch, "
          f"{per_rank} rows a rank, dp {dp}), {total:,} samples, "
          f"{'compiled (numba)' if compiled else 'scalar (numba not installed)'}: lrdoctor "
          f"{lrd:.2f} CPU s = {lrd / total * 1e6:.2f} s per 1M (goal <= 1 s)")
    if compiled:  # the scalar code beside it, on a quarter of the same mini-batches
        os.environ["LRDOCTOR_KK_COMPILED"] = "0"
        try:
            part = max(1, mini_batches // 4)
            scal, splans = cpu(frames[:part], repeat=1)
        finally:
            del os.environ["LRDOCTOR_KK_COMPILED"]
        same = all(a.micro_batches and len(a.micro_batches) == len(b.micro_batches) and all(
            [r.tolist() for r in x.ranks] == [r.tolist() for r in y.ranks]
            for x, y in zip(a.micro_batches, b.micro_batches, strict=True))
            for a, b in zip(plans[:part], splans, strict=True))
        ps = scal / (n * part)
        print(f"  the scalar code on the first {n * part:,} samples: {scal:.2f} CPU s = "
              f"{ps * 1e6:.2f} s per 1M; compiled / scalar = {(lrd / total) / ps:.3f}; "
              f"same micro-batches: {same}")
    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root))
    try:
        from tests.helpers import peers

        verl = peers.verl_balancing()
    except ImportError:
        verl = None
    if verl is None:
        print("  verl's own rearrange_micro_batches: not installed (pip install --no-deps "
              "verl==0.9.1)")
        return
    import torch

    fake = peers.FakeDist(dp)
    verl.dist = fake

    def batch(lens):
        lens = torch.as_tensor(lens)
        mask = (torch.arange(int(lens.max()))[None, :] < lens[:, None]).long()
        return {"input_ids": torch.zeros_like(mask), "attention_mask": mask}

    frames = frames[:verl_mini_batches]
    inputs = [[(batch(f["tokens"][f["rank"] == r]),) for r in range(dp)] for f in frames]
    same = True
    t0 = time.perf_counter()
    for f, args, plan in zip(frames, inputs, plans[:verl_mini_batches], strict=True):
        got = fake.run(lambda b: verl.rearrange_micro_batches(b, cap, dp_group=object())[1],
                       args)
        for r, parts in enumerate(got):
            rows = np.flatnonzero(f["rank"] == r)
            want = [rows[np.asarray(p, dtype=np.int64)].tolist() for p in parts]
            same &= want == [mb.ranks[r].tolist() for mb in plan.micro_batches]
    own = time.perf_counter() - t0
    vn = n * len(frames)
    print(f"  verl's own rearrange_micro_batches, the first {vn:,} of those samples: "
          f"{own:.2f} s = {own / vn * 1e6:.1f} s per 1M; lrdoctor / verl per sample = "
          f"{(lrd / total) / (own / vn):.4f}; same micro-batches: {same}")


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
    samples = load_samples(cfg)  # the replay's own (seeded) synthetic lengths
    tok = samples["tokens"]
    step = samples["step"]
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
    ap.add_argument("--kk-mini-batches", type=int, default=32)
    args = ap.parse_args()
    bench_verl_megatron()
    bench_kk_many(args.kk_mini_batches)
    for strategy in args.strategies.split(","):
        bench_fast(args.steps, args.per_step, strategy)
    bench_engines("cpu")
    import torch

    if torch.cuda.is_available():
        bench_engines("cuda")
    else:
        print("engines on cuda: no CUDA device here")
    if not args.no_examples:
        print("examples (lrdoctor replay -c examples/X, wall time of the command; default "
              "goal <= 3 s):")
        bench_examples()


if __name__ == "__main__":
    main()
