"""What discovery's DCP item selection saves on a checkpoint with a large bytes item.

Writes (with ``torch.distributed.checkpoint.save``, into a temporary directory removed
afterwards) a DCP folder holding a loop's model, AdamW state, LinearLR state and step,
plus one large bytes item under megatron-core's ``dp_zero_gather_scatter`` key
(``optimizer.distributed.dp_group_idx_0.param_state/...``: a tuple of fp32 tensors,
torch.saved as ONE item, --item-mb MiB, under dcp.MAX_ITEM_BYTES so a full read reads
it). Then, each in a fresh subprocess, side by side:

* ``selective``: discovery as shipped (``reading.DCP_SMALL_ITEM``: large items whose key
  names no scheduler/param-group/trainer/common state are left unread);
* ``full``: the same with the bound raised to ``dcp.MAX_ITEM_BYTES`` (every bytes item
  read, what discovery did before).

Each reports ``reading.scan`` of the checkpoint (best of --repeat inside the process),
the bytes of DCP items read, the peak RSS of the process, and the verdict (scheduler
progress, optimizer step), which must be equal.

    .venv/bin/python benchmarks/bench_dcp_discovery.py [--item-mb 48] [--repeat 5]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CHILD = r"""
import json, sys, time
sys.path.insert(0, {root!r})
from pathlib import Path
from lrdoctor.read.scan import grouping, reading
from lrdoctor.read.bytes import dcp
from lrdoctor.read.layouts import torchsave
if {full!r}:
    reading.DCP_SMALL_ITEM = dcp.MAX_ITEM_BYTES
read = [0]
real = dcp._Files.read
def counted(self, rel, off, length):
    read[0] += length
    return real(self, rel, off, length)
dcp._Files.read = counted
def hwm_kb():  # this process's peak RSS (ru_maxrss would carry the parent's over exec)
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0
ck = Path({ck!r})
(c,) = grouping.run_checkpoints(ck)
best = None
for _ in range({repeat}):
    read[0] = 0
    t = time.perf_counter()
    sc = reading.scan(c)
    dt = time.perf_counter() - t
    best = dt if best is None else min(best, dt)
st = torchsave.build(sc)
print(json.dumps({{"s": best, "read": read[0],
                  "rss_mb": hwm_kb() / 1024,
                  "verdict": [st.scheduler_progress.value if st.scheduler_progress else None,
                              st.counter("optimizer.step").value
                              if st.counter("optimizer.step") else None],
                  "skipped": len(sc.skipped)}}))
"""


def write(ck: Path, item_mb: int) -> None:
    import torch
    import torch.distributed.checkpoint as tdcp

    torch.manual_seed(0)
    model = torch.nn.Linear(64, 64)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=1000)
    for _ in range(10):
        model(torch.ones(2, 64)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    n = item_mb * (1 << 20) // 8  # exp_avg + exp_avg_sq, fp32
    param_state = ({"exp_avg": torch.zeros(n), "exp_avg_sq": torch.zeros(n)},)
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(),
             "lr_scheduler": sched.state_dict(), "train_state": {"step": 10},
             "optimizer.distributed.dp_group_idx_0.param_state/shard_0_1": param_state}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tdcp.save(state, checkpoint_id=str(ck))


def run(ck: Path, full: bool, repeat: int) -> dict:
    code = CHILD.format(root=str(ROOT), full=full, ck=str(ck), repeat=repeat)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=600)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--item-mb", type=int, default=48)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        ck = Path(tmp) / "step_10"
        write(ck, args.item_mb)
        size = sum(p.stat().st_size for p in ck.iterdir())
        print(f"DCP folder: {size / 2**20:.1f} MiB, one bytes item of ~{args.item_mb} MiB "
              f"(param_state); scan best of {args.repeat}")
        sel, full = run(ck, False, args.repeat), run(ck, True, args.repeat)
    print(f"{'':12}{'scan s':>10}{'items read':>14}{'peak RSS':>11}  verdict")
    for name, r in (("selective", sel), ("full", full)):
        print(f"{name:12}{r['s']:>10.4f}{r['read'] / 2**20:>10.2f} MiB{r['rss_mb']:>7.0f} MiB"
              f"  {r['verdict']}")
    print(f"full / selective: time x{full['s'] / sel['s']:.1f}, bytes read "
          f"x{full['read'] / max(sel['read'], 1):.0f}, peak RSS "
          f"x{full['rss_mb'] / sel['rss_mb']:.2f}; same verdict: "
          f"{sel['verdict'] == full['verdict']}; items named as skipped: {sel['skipped']}")


if __name__ == "__main__":
    main()
