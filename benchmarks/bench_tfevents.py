"""What reading a TensorBoard event file costs: lrdoctor's tfevents vs tensorboard's own.

Writes (with ``torch.utils.tensorboard.SummaryWriter``, into a temporary directory
removed afterwards) a LearningRateMonitor-like event file: ``--steps`` steps, each
with an ``lr-AdamW`` and a ``train_loss`` scalar. Then, side by side in one process,
best of ``--repeat``:

* ``lrdoctor``: ``lrdoctor.read.bytes.tfevents.read`` (pure Python, both CRC-32C checked per record);
* ``tensorboard``: ``EventAccumulator(size_guidance={"scalars": 0}).Reload()`` (every
  scalar kept; its pure-Python or C++ CRC as installed).

Both must read the same (step, value) pairs.

    .venv/bin/python benchmarks/bench_tfevents.py [--steps 100000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def best(fn, repeat: int) -> tuple[float, object]:
    out, t = None, float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        t = min(t, time.perf_counter() - t0)
    return t, out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from torch.utils.tensorboard import SummaryWriter

    from lrdoctor.read.bytes import tfevents

    with tempfile.TemporaryDirectory() as d:
        w = SummaryWriter(d)
        for s in range(a.steps):
            w.add_scalar("lr-AdamW", 1e-3 * (a.steps - s) / a.steps, s)
            w.add_scalar("train_loss", 1.0 / (s + 1), s)
        w.close()
        (f,) = Path(d).glob("events.out.tfevents.*")

        def theirs():
            acc = EventAccumulator(str(f), size_guidance={"scalars": 0})
            acc.Reload()
            return {t: [(e.step, e.value) for e in acc.Scalars(t)]
                    for t in acc.Tags()["scalars"]}

        t_mine, mine = best(lambda: tfevents.read(f).values, a.repeat)
        t_tb, tb = best(theirs, a.repeat)
        size = f.stat().st_size
        print(json.dumps({
            "steps": a.steps, "file_bytes": size, "same_pairs": mine == tb,
            "lrdoctor_s": round(t_mine, 3), "tensorboard_s": round(t_tb, 3),
            "lrdoctor_MB_per_s": round(size / t_mine / 1e6, 2),
            "ratio_lrdoctor_over_tensorboard": round(t_mine / t_tb, 2)}, indent=1))


if __name__ == "__main__":
    main()
