"""``inspect`` of one large checkpoint file beside ``torch.load(mmap=True)``: time and memory.

Writes (``torch.save``, into a temporary directory removed afterwards) one loop
checkpoint of --gib GiB: a model's fp32 weights in 64 MiB tensors, AdamW state for a
small head, a CosineAnnealingLR state and the step. Then, each in a fresh subprocess
(so imports and caches are not shared), side by side:

* ``lrdoctor``: :func:`lrdoctor.inspect_path` of the file (read -> diagnose -> report);
* ``torch.load(mmap=True)``: ``torch.load(path, mmap=True, weights_only=True)``, the
  cheapest way torch itself opens the file (tensors mapped, not read).

Each child measures the call's wall time (the first call, the one a CLI run makes, and
the best of --repeat) and its RSS growth: the
peak RSS during the calls (``VmHWM``, reset through ``/proc/self/clear_refs`` once the
imports are done) minus the RSS before them. The file is written by a subprocess too, so
no child inherits a large parent's pages. The goal (issue 19): lrdoctor <= 0.5 s and <= 50 MB on a 2 GiB file. Not a test:
run it by hand.

    .venv/bin/python benchmarks/bench_inspect_large.py [--gib 2] [--repeat 3]
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
GOAL_S, GOAL_MB = 0.5, 50.0

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
path, what, repeat = {path!r}, {what!r}, {repeat!r}

def status_mb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024  # kB
    raise RuntimeError(field)

if what == "lrdoctor":
    from lrdoctor.inspect_api import inspect_path
    def run():
        (rep,) = inspect_path(path)
        return rep.state["scheduler_progress"]["value"]
else:
    import torch
    def run():
        sd = torch.load(path, mmap=True, weights_only=True)
        return sd["scheduler"]["last_epoch"]
before = status_mb("VmRSS")
with open("/proc/self/clear_refs", "w") as f:  # peak RSS (VmHWM) from here on
    f.write("5")
times, out = [], None
for _ in range(repeat):
    t = time.perf_counter()
    out = run()
    times.append(time.perf_counter() - t)
peak = status_mb("VmHWM")
print(json.dumps({{"seconds": times[0], "best": min(times), "rss_growth_mb": max(0.0, peak - before),
                   "scheduler_progress": out}}))
"""


def write_checkpoint(path: Path, gib: float) -> int:
    import torch

    chunk = 16 * 2 ** 20  # fp32 elements: 64 MiB per tensor
    n = max(1, int(gib * 2 ** 30 / (chunk * 4)))
    model = {f"layers.{i}.weight": torch.zeros(chunk) for i in range(n)}
    head = torch.nn.Linear(16, 4)
    opt = torch.optim.AdamW(head.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=100)
    for _ in range(10):
        head(torch.randn(2, 16)).sum().backward()
        opt.step()
        sched.step()
    torch.save({"model": model, "optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                "step": 10}, path)
    return path.stat().st_size


def child(path: Path, what: str, repeat: int, pycache: Path) -> dict:
    """One measurement in a fresh process. Bytecode is cached (in ``pycache``, not in the
    tree), as an installed package has it, and a first run fills that cache, so that the
    first call is timed the way a user's ``lrdoctor inspect`` runs it, not compiling."""
    code = CHILD.format(root=str(ROOT), path=str(path), what=what, repeat=repeat)
    env = {**os.environ, "PYTHONPYCACHEPREFIX": str(pycache)}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for _ in range(2):  # the first fills the bytecode cache
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             check=True, timeout=600, env=env)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gib", type=float, default=2.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--write", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.write:
        write_checkpoint(Path(args.write), args.gib)
        return
    with tempfile.TemporaryDirectory(prefix="lrd-bench-large-") as tmp:
        path = Path(tmp) / "ckpt.pt"
        subprocess.run([sys.executable, __file__, "--write", str(path), "--gib", str(args.gib)],
                       check=True, timeout=1200)
        size = path.stat().st_size
        print(f"checkpoint: {size / 2**30:.2f} GiB ({path.name}); first call and best of "
              f"{args.repeat}, each in a fresh process")
        rows = {what: child(path, what, args.repeat, Path(tmp) / "pycache")
                for what in ("lrdoctor", "torch.load(mmap=True)")}
    lrd, ref = rows["lrdoctor"], rows["torch.load(mmap=True)"]
    assert lrd["scheduler_progress"] == ref["scheduler_progress"] == 10
    print(f"{'':24}{'first s':>10}{'best s':>10}{'RSS growth MB':>16}")
    for what, r in rows.items():
        print(f"{what:24}{r['seconds']:>10.3f}{r['best']:>10.3f}{r['rss_growth_mb']:>16.1f}")
    print(f"{'lrdoctor / torch.load':24}{lrd['seconds'] / max(ref['seconds'], 1e-9):>9.2f}x"
          f"{lrd['rss_growth_mb'] / max(ref['rss_growth_mb'], 1e-9):>15.2f}x")
    ok = lrd["seconds"] <= GOAL_S and lrd["rss_growth_mb"] <= GOAL_MB
    print(f"goal (<= {GOAL_S} s and <= {GOAL_MB:.0f} MB for lrdoctor): "
          + ("met" if ok else "NOT met"))


if __name__ == "__main__":
    main()
