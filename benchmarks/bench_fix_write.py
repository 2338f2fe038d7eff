"""How fast and how lean is ``fix``'s rewrite of a big torch.save file, torchzip vs torch.save?

Writes (into a temporary directory, removed afterwards) one torch.save file of
~SIZE GB (fp32 tensors, an AdamW-like state with 0-d ``step`` tensors, a scheduler
dict), then rewrites it with one changed field (``scheduler.last_epoch``) and one
changed 0-d tensor (a ``step``), each contender in a fresh subprocess, recording
wall time and peak RSS (``ru_maxrss`` of that child):

1. ``torchzip``: ``lrdoctor.repair.torchzip.rewrite`` (no torch import; storages copied)
2. ``torch.save``: ``writer.load_pickle`` (torch.load weights_only, mmap) + apply + ``torch.save``

    .venv/bin/python benchmarks/bench_fix_write.py [--size-gb 1] [--repeat 3] [--tmp DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_RUN = {
    "torchzip": """
from pathlib import Path
from lrdoctor.repair import torchzip
from lrdoctor.repair.writer import Change
torchzip.rewrite(Path(SRC), Path(DST), [Change("f", ("scheduler", "last_epoch"), 10, 20),
                                       Change("f", ("optimizer", "state", 0, "step"), 10, 20)])
""",
    "torch.save": """
from pathlib import Path
from lrdoctor.repair import writer
from lrdoctor.repair.writer import Change
o = writer.load_pickle(Path(SRC))
writer.apply_changes(o, [Change("f", ("scheduler", "last_epoch"), 10, 20)], Path(SRC))
import torch
o["optimizer"]["state"][0]["step"] = torch.tensor(20.0)
writer.write_pickle(o, Path(DST))
""",
}


def make(path: Path, size_gb: float) -> None:
    import torch

    n = max(1, int(size_gb * (1 << 30) / (3 * 4 * (1 << 20))))  # 3 fp32 tensors of 4 MiB each
    state = {i: {"step": torch.tensor(10.0), "exp_avg": torch.randn(1 << 20),
                 "exp_avg_sq": torch.rand(1 << 20)} for i in range(n)}
    torch.save({"model": {f"w{i}": torch.randn(1 << 20) for i in range(n)},
                "optimizer": {"state": state, "param_groups": [{"lr": 1e-3,
                                                                "params": list(range(n))}]},
                "scheduler": {"last_epoch": 10, "_step_count": 11}}, path)


def run(name: str, src: Path, dst: Path) -> tuple[float, float]:
    code = f"SRC, DST = {str(src)!r}, {str(dst)!r}\n" + _RUN[name]
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    t = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-c", code], env=env)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{name} failed")
    dst.unlink()
    return wall, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-gb", type=float, default=1.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tmp", default=None)
    ap.add_argument("--make", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.make:
        make(Path(a.make), a.size_gb)
        return
    tmp = Path(tempfile.mkdtemp(dir=a.tmp))
    try:
        src = tmp / "big.pt"
        # In a child: Linux keeps a forked parent's peak RSS in the child's ru_maxrss.
        subprocess.run([sys.executable, __file__, "--make", str(src), "--size-gb",
                        str(a.size_gb)], check=True)
        print(f"file: {src.stat().st_size / 1e9:.2f} GB, best of {a.repeat} (median RSS)")
        rows = {}
        for name in _RUN:
            runs = [run(name, src, tmp / "out.pt") for _ in range(a.repeat)]
            rows[name] = (min(r[0] for r in runs), statistics.median(r[1] for r in runs))
        base = rows["torchzip"]
        print(f"{'writer':<12}{'wall s':>9}{'peak RSS MB':>13}{'x wall':>8}{'x RSS':>8}")
        for name, (w, m) in rows.items():
            print(f"{name:<12}{w:>9.2f}{m:>13.0f}{w / base[0]:>8.2f}{m / base[1]:>8.1f}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
