"""Write sample_checkpoints/: small, deterministic, real checkpoints for demos and docs.

Every sample is written by the framework's own classes (megatron-core
OptimizerParamScheduler, transformers.Trainer, torch AdamW + LR schedulers)
through the factories in tests/helpers/factories.py; model tensors are a few floats.

    python scripts/make_samples.py [--out sample_checkpoints]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# ROLL issue 442 shape: the pipeline planned 300 steps x 8 nominal updates = 2400
# (lr_decay_steps), dynamic batching made it 8429 real updates.
ROLL_PIPELINE_STEPS = 300
ROLL_NOMINAL_PER_STEP = 8
_ROLL_JITTER = (-3, 2, 0, 1, -1, 3, -2, 0, 1, -1)  # sums to 0 over 10 steps


def roll_updates(step: int) -> int:
    """Real optimizer updates in pipeline step ``step``: about 28, totalling 8429 over 300."""
    return 28 + _ROLL_JITTER[step % 10] + (1 if step % 10 == 0 and step < 290 else 0)


def make_roll(dst: Path) -> None:
    from tests.helpers.factories import roll_run

    assert sum(roll_updates(s) for s in range(ROLL_PIPELINE_STEPS)) == 8429
    roll_run(dst, pipeline_max_steps=ROLL_PIPELINE_STEPS, nominal_per_step=ROLL_NOMINAL_PER_STEP,
             updates_per_step=roll_updates, save_at=(100, 200, ROLL_PIPELINE_STEPS - 1),
             save_steps=100,
             lr=1e-6, min_lr=1e-7, warmup=20, style="cosine")


def make_torch_microstep(dst: Path) -> None:
    from tests.helpers.factories import torch_loop

    # Planned 100 optimizer updates with GA=4; scheduler.step() on every micro-batch.
    torch_loop(dst / "checkpoint_60.pt", scheduler="cosine", updates=60, ga=4,
               step_per_micro=True, lr=3e-4, total_steps=100)


def make_hf(dst: Path) -> None:
    from tests.helpers.factories import hf_run

    # Relative output_dir so training_args.bin holds no machine path.
    cwd = os.getcwd()
    os.chdir(dst.parent)
    try:
        hf_run(Path(dst.name), max_steps=20, save_steps=10, lr=5e-4, scheduler="cosine",
               warmup_steps=2, logging_steps=2, save_state=False)  # no run times: deterministic
    finally:
        os.chdir(cwd)


def make_megatron(dst: Path) -> None:
    from tests.helpers.factories import megatron_run

    megatron_run(dst, save_at=(200, 400), tp=2, train_iters=500, global_batch_size=256,
                 micro_batch_size=4, data_parallel_size=8, lr=3e-4, min_lr=3e-5,
                 lr_warmup_iters=50, lr_decay_style="cosine")


SAMPLES = {
    "roll-overshoot": make_roll,
    "torch-microstep": make_torch_microstep,
    "hf-healthy": make_hf,
    "megatron-healthy": make_megatron,
}


def digest(root: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(p for p in root.rglob("*") if p.is_file()):
        h.update(str(f.relative_to(root)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=REPO / "sample_checkpoints")
    ap.add_argument("--only", choices=sorted(SAMPLES), action="append")
    opts = ap.parse_args()
    os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
    opts.out.mkdir(parents=True, exist_ok=True)
    for name in opts.only or SAMPLES:
        with tempfile.TemporaryDirectory() as tmp:
            work = Path(tmp) / name
            SAMPLES[name](work)
            final = opts.out / name
            if final.exists():
                shutil.rmtree(final)
            shutil.copytree(work, final)
        size = sum(f.stat().st_size for f in final.rglob("*") if f.is_file())
        print(f"{name:18s} {size / 1024:8.1f} KiB  sha256[:16]={digest(final)}")


if __name__ == "__main__":
    main()
