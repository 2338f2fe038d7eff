"""How fast and how lean is ``lrdoctor inspect`` on a big checkpoint, next to torch.load?

Writes (into a temporary directory, removed afterwards) a Megatron-style run
with one ``model_optim_rng.pt`` holding ~SIZE GB of AdamW exp_avg/exp_avg_sq
tensors (plus a bf16 model, the OptimizerParamScheduler state, an args
Namespace and RNG states), then runs each contender in a fresh subprocess and
records its wall time and peak RSS (GNU time's max RSS of that process):

1. ``lrdoctor inspect RUN_DIR``            (the CLI: what users run)
2. ``lrdoctor.read.bytes.safeload.load(file)``        (the loader alone)
3. ``torch.load(file, weights_only=True)`` (with argparse.Namespace allow-listed)
4. ``torch.load(file, weights_only=True, mmap=True)``
5. ``lrdoctor --help``

Goals: inspect < 1 s and < 150 MB; ``--help`` < 0.3 s.

Two more cases, each in its own table with ratios to ``lrdoctor inspect``:

* ``dcp``: a torch.distributed.checkpoint folder (torchtitan's ``step-N`` layout,
  written by ``torch.distributed.checkpoint.save``) with >= 1 GiB of tensor data,
  beside ``torch.distributed.checkpoint.load`` of the same state (all items; and
  only the non-tensor items, what a scheduler check needs).
* ``ranks512``: a Megatron torch-format iteration with 512 rank files
  (``mp_rank_TT_PPP``, tp 8 x pp 64), beside ``torch.load`` of every rank file
  (lrdoctor reads them all to check that the ranks agree).

    .venv/bin/python benchmarks/bench_inspect.py [--size-gb 2] [--dcp-gb 1] [--repeat 3]
        [--cases megatron,dcp,ranks512] [--tmp DIR]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
LRDOCTOR = str(Path(PY).parent / "lrdoctor")

INSPECT_GOAL_S, INSPECT_GOAL_MB, HELP_GOAL_S = 1.0, 150.0, 0.3


def write_checkpoint(run: Path, size_gb: float) -> Path:
    """A Megatron-LM torch-format run directory: tracker + iter_0001000/mp_rank_00/model_optim_rng.pt."""
    import random
    from collections import OrderedDict

    import numpy as np
    import torch

    hidden, vocab = (2048, 32000) if size_gb >= 1 else (512, 8000)
    per_layer = 12 * hidden * hidden
    target_params = int(size_gb * 2**30 / 8)  # exp_avg + exp_avg_sq in fp32 = 8 bytes/param
    layers = max(1, round((target_params - vocab * hidden) / per_layer))
    shapes: list[tuple[str, tuple[int, ...]]] = [("embedding.word_embeddings.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"decoder.layers.{i}."
        shapes += [
            (p + "input_layernorm.weight", (hidden,)),
            (p + "self_attention.linear_qkv.weight", (3 * hidden, hidden)),
            (p + "self_attention.linear_qkv.bias", (3 * hidden,)),
            (p + "self_attention.linear_proj.weight", (hidden, hidden)),
            (p + "self_attention.linear_proj.bias", (hidden,)),
            (p + "pre_mlp_layernorm.weight", (hidden,)),
            (p + "mlp.linear_fc1.weight", (4 * hidden, hidden)),
            (p + "mlp.linear_fc1.bias", (4 * hidden,)),
            (p + "mlp.linear_fc2.weight", (hidden, 4 * hidden)),
            (p + "mlp.linear_fc2.bias", (hidden,)),
        ]
    shapes.append(("decoder.final_layernorm.weight", (hidden,)))

    iteration, gbs = 1000, 256
    model = OrderedDict((name, torch.empty(shape, dtype=torch.bfloat16)) for name, shape in shapes)
    state = {i: {"step": torch.tensor(float(iteration)),
                 "exp_avg": torch.empty(shape, dtype=torch.float32),
                 "exp_avg_sq": torch.empty(shape, dtype=torch.float32)}
             for i, (_, shape) in enumerate(shapes)}
    # the param-group lr the cosine schedule gives at the saved progress (a consistent run)
    warm, decay, done = 200 * gbs, 20000 * gbs, iteration * gbs
    lr_now = 3e-5 + 0.5 * (3e-4 - 3e-5) * (1 + math.cos(math.pi * (done - warm) / (decay - warm)))
    param_groups = [{"lr": lr_now, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1,
                     "amsgrad": False, "maximize": False, "foreach": None, "capturable": False,
                     "differentiable": False, "fused": None, "decoupled_weight_decay": True,
                     "params": list(range(len(shapes)))}]
    args = argparse.Namespace(
        num_layers=layers, hidden_size=hidden, padded_vocab_size=vocab, micro_batch_size=4,
        global_batch_size=gbs, train_iters=20000, lr=3e-4, min_lr=3e-5,
        lr_decay_style="cosine", lr_warmup_iters=200, lr_decay_iters=20000,
        lr_warmup_init=0.0, consumed_train_samples=iteration * gbs, skipped_train_samples=0,
        consumed_valid_samples=0, params_dtype=torch.bfloat16, bf16=True,
        use_distributed_optimizer=False, ckpt_format="torch", save="/ckpt/run",
        weight_decay=0.1, start_weight_decay=0.1, end_weight_decay=0.1,
        weight_decay_incr_style="constant", seed=1234, world_size=1,
        tensor_model_parallel_size=1, pipeline_model_parallel_size=1,
    )
    sched = {"max_lr": 3e-4, "lr_warmup_steps": 200 * gbs, "num_steps": iteration * gbs,
             "lr_decay_style": "cosine", "lr_decay_steps": 20000 * gbs, "min_lr": 3e-5,
             "start_wd": 0.1, "end_wd": 0.1, "wd_incr_style": "constant",
             "wd_incr_steps": 20000 * gbs}
    random.seed(0)
    np.random.seed(0)
    sd = {
        "args": args, "checkpoint_version": 3.0, "iteration": iteration,
        "model": model,
        "optimizer": {"optimizer": {"state": state, "param_groups": param_groups},
                      "grad_scaler": None},
        "opt_param_scheduler": sched,
        "rng_state": [{"random_rng_state": random.getstate(),
                       "np_rng_state": np.random.get_state(),
                       "torch_rng_state": torch.get_rng_state(),
                       "cuda_rng_state": torch.get_rng_state(),
                       "rng_tracker_states": {}}],
        "num_floating_point_operations_so_far": 1.5e18,
    }
    ckpt = run / f"iter_{iteration:07d}" / "mp_rank_00" / "model_optim_rng.pt"
    ckpt.parent.mkdir(parents=True)
    torch.save(sd, ckpt)
    (run / "latest_checkpointed_iteration.txt").write_text(f"{iteration}\n")
    return ckpt


def measure(cmd: list[str], repeat: int, scratch: Path) -> dict:
    """Median wall seconds and max peak RSS (MB) of ``cmd`` over ``repeat`` fresh processes.

    Peak RSS comes from GNU time (its child is forked from a 2 MB process; a child
    forked from this Python would inherit this process's RSS as its floor).
    """
    walls, rss, rcs, tail = [], [], set(), ""
    report = scratch / "time.out"
    for _ in range(repeat):
        t0 = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-q", "-f", "%M", "-o", str(report), *cmd],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        walls.append(time.perf_counter() - t0)
        rss.append(int(report.read_text().split()[-1]) / 1024)  # KiB
        rcs.add(proc.returncode)
        tail = proc.stdout.decode(errors="replace").strip().splitlines()[-1:] or [""]
    return {"wall": statistics.median(walls), "wall_min": min(walls), "rss": max(rss),
            "rc": sorted(rcs), "last_line": tail[0][:100]}


def write_dcp(ckpt: Path, size_gb: float) -> Path:
    """torchtitan's step-N layout (model flattened at the top, flat optimizer, lr_scheduler,
    train_state), written by torch.distributed.checkpoint.save in one process."""
    import warnings

    import torch
    import torch.distributed.checkpoint as dcp

    hidden = 2048
    n_mats = max(1, math.ceil(size_gb * 2**30 / (3 * 4 * hidden * hidden)))  # w, m, v: >= SIZE
    state: dict = {"lr_scheduler": {"last_epoch": 1000},
                   "train_state": {"step": 1000, "ntokens_seen": 1000 * 2**20}}
    flat: dict = {}
    for i in range(n_mats):
        fqn = f"layers.{i}.weight"
        state[fqn] = torch.zeros(hidden, hidden)
        flat[f"state.{fqn}.step"] = torch.tensor(1000.0)
        flat[f"state.{fqn}.exp_avg"] = torch.zeros(hidden, hidden)
        flat[f"state.{fqn}.exp_avg_sq"] = torch.zeros(hidden, hidden)
        for k, v in {"lr": 2.5e-4, "betas": (0.9, 0.95), "eps": 1e-8, "weight_decay": 0.1,
                     "initial_lr": 3e-4}.items():
            flat[f"param_groups.{fqn}.{k}"] = v
    state["optimizer"] = flat
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dcp.save(state, checkpoint_id=str(ckpt))
    return ckpt


def write_ranks(run: Path, tp: int = 8, pp: int = 64) -> Path:
    """A Megatron torch-format iteration with tp x pp rank files, small tensors each."""
    import argparse as ap

    import torch

    it, gbs = 1000, 512
    ckpt = run / f"iter_{it:07d}"
    sched = {"max_lr": 3e-4, "lr_warmup_steps": 200 * gbs, "num_steps": it * gbs,
             "lr_decay_style": "cosine", "lr_decay_steps": 20000 * gbs, "min_lr": 3e-5,
             "start_wd": 0.1, "end_wd": 0.1, "wd_incr_style": "constant",
             "wd_incr_steps": 20000 * gbs}
    args = ap.Namespace(global_batch_size=gbs, micro_batch_size=1, train_iters=20000,
                        consumed_train_samples=it * gbs, skipped_train_samples=0,
                        tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                        data_parallel_size=1, lr=3e-4, min_lr=3e-5, lr_decay_style="cosine")
    w = torch.zeros(256, 256)
    for t in range(tp):
        for p in range(pp):
            d = ckpt / f"mp_rank_{t:02d}_{p:03d}"
            d.mkdir(parents=True)
            opt = {"state": {0: {"step": torch.tensor(float(it)), "exp_avg": w, "exp_avg_sq": w}},
                   "param_groups": [{"lr": 2.9e-4, "params": [0]}]}
            torch.save({"args": args, "iteration": it, "checkpoint_version": 3.0,
                        "model": {"w": w}, "optimizer": {"optimizer": opt},
                        "opt_param_scheduler": sched}, d / "model_optim_rng.pt")
    (run / "latest_checkpointed_iteration.txt").write_text(str(it))
    return ckpt


def table(title: str, results: dict, base_name: str) -> None:
    base = results[base_name]
    print(f"\n{title}")
    print(f"{'contender':34} {'wall s':>8} {'min s':>7} {'peak MB':>9} {'x wall':>8} "
          f"{'x RSS':>7}  rc")
    for name, r in results.items():
        print(f"{name:34} {r['wall']:8.3f} {r['wall_min']:7.3f} {r['rss']:9.1f} "
              f"{r['wall'] / base['wall']:8.1f} {r['rss'] / base['rss']:7.1f}  {r['rc']}")
    for name, r in results.items():
        if any(rc not in (0, 1) for rc in r["rc"]):
            print(f"!! {name} exited {r['rc']}: {r['last_line']}")


DCP_LOAD = """
import sys, warnings, torch, torch.distributed.checkpoint as d
from torch.distributed.checkpoint.metadata import TensorStorageMetadata
warnings.simplefilter("ignore")
r = d.FileSystemReader(sys.argv[1]); md = r.read_metadata(); tensors = sys.argv[2] == "all"
sd = {k: (torch.empty(m.size, dtype=m.properties.dtype) if isinstance(m, TensorStorageMetadata)
          else None) for k, m in md.state_dict_metadata.items()
      if tensors or not isinstance(m, TensorStorageMetadata)}
d.load(sd, storage_reader=r)
assert sd["lr_scheduler.last_epoch"] == 1000
"""

TORCH_LOAD_RANKS = """
import sys, argparse, pathlib, torch
torch.serialization.add_safe_globals([argparse.Namespace])
files = sorted(pathlib.Path(sys.argv[1]).glob("mp_rank_*/model_optim_rng.pt"))
steps = {torch.load(f, weights_only=True, mmap=True)["opt_param_scheduler"]["num_steps"]
         for f in files}
assert len(files) == 512 and len(steps) == 1
"""


def bench_dcp(tmp: Path, opts) -> None:
    run = tmp / "titan" / "checkpoint"
    run.mkdir(parents=True)
    t0 = time.perf_counter()
    res = subprocess.run([PY, __file__, "--_write_dcp", str(run / "step-1000"), str(opts.dcp_gb)],
                         capture_output=True, text=True, check=True)
    ckpt = Path(res.stdout.strip().splitlines()[-1])
    tensor_bytes = sum(f.stat().st_size for f in ckpt.glob("*.distcp"))
    print(f"wrote {ckpt.relative_to(tmp)}: {tensor_bytes / 2**30:.2f} GiB of .distcp in "
          f"{time.perf_counter() - t0:.1f} s")
    subprocess.run(["cat", *map(str, ckpt.iterdir())], stdout=subprocess.DEVNULL, check=True)
    rows = [("lrdoctor inspect RUN_DIR", [LRDOCTOR, "inspect", str(run.parent)]),
            ("dcp.load (every item)", [PY, "-c", DCP_LOAD, str(ckpt), "all"]),
            ("dcp.load (non-tensor items only)", [PY, "-c", DCP_LOAD, str(ckpt), "bytes"])]
    results = {name: measure(cmd, opts.repeat, tmp) for name, cmd in rows}
    table(f"DCP checkpoint (torchtitan step-N): {tensor_bytes / 2**30:.2f} GiB, {opts.repeat} "
          "runs each (median wall, max peak RSS)", results, "lrdoctor inspect RUN_DIR")


def bench_ranks(tmp: Path, opts) -> None:
    run = tmp / "ranks"
    run.mkdir()
    t0 = time.perf_counter()
    res = subprocess.run([PY, __file__, "--_write_ranks", str(run)], capture_output=True,
                         text=True, check=True)
    ckpt = Path(res.stdout.strip().splitlines()[-1])
    files = list(ckpt.glob("mp_rank_*/model_optim_rng.pt"))
    size = sum(f.stat().st_size for f in files)
    print(f"wrote {ckpt.relative_to(tmp)}: {len(files)} rank files, {size / 2**20:.0f} MiB in "
          f"{time.perf_counter() - t0:.1f} s")
    subprocess.run(["cat", *map(str, files)], stdout=subprocess.DEVNULL, check=True)
    rows = [("lrdoctor inspect RUN_DIR", [LRDOCTOR, "inspect", str(run)]),
            ("torch.load x512 (mmap=True)", [PY, "-c", TORCH_LOAD_RANKS, str(ckpt)])]
    results = {name: measure(cmd, opts.repeat, tmp) for name, cmd in rows}
    table(f"Megatron torch format, {len(files)} ranks (tp 8 x pp 64), {opts.repeat} runs each",
          results, "lrdoctor inspect RUN_DIR")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size-gb", type=float, default=2.0, help="optimizer tensor bytes (GiB)")
    ap.add_argument("--dcp-gb", type=float, default=1.0, help="DCP case: tensor bytes (GiB)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--cases", default="megatron,dcp,ranks512")
    ap.add_argument("--tmp", default=None, help="where to write the checkpoint (default: system tmp)")
    ap.add_argument("--_write", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--_write_dcp", nargs=2, help=argparse.SUPPRESS)
    ap.add_argument("--_write_ranks", nargs=1, help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts._write:  # child: write the checkpoint so the parent never holds the tensors
        print(write_checkpoint(Path(opts._write[0]), float(opts._write[1])))
        return 0
    if opts._write_dcp:
        print(write_dcp(Path(opts._write_dcp[0]), float(opts._write_dcp[1])))
        return 0
    if opts._write_ranks:
        print(write_ranks(Path(opts._write_ranks[0])))
        return 0
    cases = set(opts.cases.split(","))

    tmp = Path(tempfile.mkdtemp(prefix="lrdoctor-bench-", dir=opts.tmp))
    try:
        rc = bench_megatron(tmp, opts) if "megatron" in cases else 0
        if "dcp" in cases:
            bench_dcp(tmp, opts)
        if "ranks512" in cases:
            bench_ranks(tmp, opts)
        return rc
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def bench_megatron(tmp: Path, opts) -> int:
    """The original case: one ~SIZE GiB Megatron torch-format file; checks the goals."""
    run = tmp / "run"
    run.mkdir()
    t0 = time.perf_counter()
    res = subprocess.run([PY, __file__, "--_write", str(run), str(opts.size_gb)],
                         capture_output=True, text=True, check=True)
    ckpt = Path(res.stdout.strip().splitlines()[-1])
    size = ckpt.stat().st_size
    print(f"wrote {ckpt.relative_to(tmp)}: {size / 2**30:.2f} GiB in "
          f"{time.perf_counter() - t0:.1f} s")

    inspect_ready = Path(LRDOCTOR).exists() and (ROOT / "lrdoctor/commands/inspect.py").exists()
    loader = ("import sys, lrdoctor.read.bytes.safeload as s; s.load(sys.argv[1]); "
              "assert 'torch' not in sys.modules")
    # what torch needs allow-listed for a Megatron file: args and the numpy RNG state
    tload = ("import sys, argparse, torch, numpy as np; "
             "torch.serialization.add_safe_globals([argparse.Namespace, np.ndarray, np.dtype, "
             "np._core.multiarray._reconstruct, type(np.dtype(np.uint32))]); "
             "torch.load(sys.argv[1], weights_only=True{})")
    rows = []
    if inspect_ready:
        rows.append(("lrdoctor inspect RUN_DIR", [LRDOCTOR, "inspect", str(run)]))
    else:
        print("NOTE: `lrdoctor inspect` is not available; measuring safeload.load alone")
    rows += [
        ("safeload.load(file)", [PY, "-c", loader, str(ckpt)]),
        ("torch.load(weights_only)", [PY, "-c", tload.format(""), str(ckpt)]),
        ("torch.load(mmap=True)", [PY, "-c", tload.format(", mmap=True"), str(ckpt)]),
        ("python -c 'import torch'", [PY, "-c", "import torch"]),
        ("lrdoctor --help", [LRDOCTOR, "--help"]),
    ]
    # warm the page cache once, so every contender sees the same cache state
    subprocess.run(["cat", str(ckpt)], stdout=subprocess.DEVNULL, check=True)
    results = {}
    for name, cmd in rows:
        results[name] = measure(cmd, opts.repeat, tmp)

    base = results.get("lrdoctor inspect RUN_DIR") or results["safeload.load(file)"]
    print(f"\ncheckpoint: {size / 2**30:.2f} GiB, {opts.repeat} runs each "
          f"(median wall, max peak RSS), {os.cpu_count()} CPUs, python {sys.version.split()[0]}")
    print(f"{'contender':28} {'wall s':>8} {'min s':>7} {'peak MB':>9} {'x wall':>8} "
          f"{'x RSS':>7}  rc")
    for name, r in results.items():
        print(f"{name:28} {r['wall']:8.3f} {r['wall_min']:7.3f} {r['rss']:9.1f} "
              f"{r['wall'] / base['wall']:8.1f} {r['rss'] / base['rss']:7.1f}  {r['rc']}")
    for name, r in results.items():
        if any(rc not in (0, 1) for rc in r["rc"]):
            print(f"!! {name} exited {r['rc']}: {r['last_line']}")

    label = "inspect" if inspect_ready else "safeload.load (inspect not ready)"
    ok_wall = base["wall"] < INSPECT_GOAL_S
    ok_rss = base["rss"] < INSPECT_GOAL_MB
    help_r = results["lrdoctor --help"]
    ok_help = help_r["wall"] < HELP_GOAL_S
    print(f"\ngoal {label} wall < {INSPECT_GOAL_S} s: {'MET' if ok_wall else 'MISSED'} "
          f"({base['wall']:.3f} s)")
    print(f"goal {label} peak RSS < {INSPECT_GOAL_MB:.0f} MB: {'MET' if ok_rss else 'MISSED'} "
          f"({base['rss']:.1f} MB)")
    print(f"goal lrdoctor --help < {HELP_GOAL_S} s: {'MET' if ok_help else 'MISSED'} "
          f"({help_r['wall']:.3f} s)")
    return 0 if (ok_wall and ok_rss and ok_help) else 1


if __name__ == "__main__":
    sys.exit(main())
