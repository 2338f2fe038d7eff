"""Write the Megatron-LM checkpoints of the ``check`` test projects with the real
megatron-core scheduler and a real torch optimizer.

    .venv/bin/python tests/projects/make_checkpoints.py      # rewrites ok/ and bad/

- ``ok/checkpoints/run-a``: a healthy run at iteration 50 of 100 (global batch 32):
  ``num_steps`` 1600 == consumed samples 1600. The param-group LR was set by hand
  after the last scheduler step (LRD105, ignored in ok/pyproject.toml with a reason).
- ``bad/checkpoints/run-a``: the same run with the scheduler stepped on each of
  the 4 micro-batches of every update: ``num_steps`` 6400 vs 1600 consumed.

The files are committed so ``cd tests/projects/ok && lrdoctor check`` works as is.
"""

from __future__ import annotations

import argparse
import os
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
GBS, ITERS, TRAIN_ITERS, GA = 32, 50, 100, 4


def write_run(run_dir: Path, *, steps_per_update: int, lr_by_hand: float | None) -> Path:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    sched = OptimizerParamScheduler(
        opt, init_lr=0.0, max_lr=3e-4, min_lr=3e-5, lr_warmup_steps=10 * GBS,
        lr_decay_steps=TRAIN_ITERS * GBS, lr_decay_style="cosine", start_wd=0.1, end_wd=0.1,
        wd_incr_steps=TRAIN_ITERS * GBS, wd_incr_style="constant")
    for _ in range(ITERS):
        model(torch.randn(2, 4)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        for _ in range(steps_per_update):
            sched.step(increment=GBS)
    if lr_by_hand is not None:
        for g in opt.param_groups:
            g["lr"] = lr_by_hand
    args = argparse.Namespace(
        train_iters=TRAIN_ITERS, lr_decay_iters=None, lr_warmup_iters=10, lr=3e-4, min_lr=3e-5,
        lr_decay_style="cosine", global_batch_size=GBS, micro_batch_size=GBS // GA,
        data_parallel_size=1, consumed_train_samples=ITERS * GBS, skipped_train_samples=0,
        ckpt_format="torch", use_checkpoint_opt_param_scheduler=True,
        override_opt_param_scheduler=False)
    state = {"args": args, "checkpoint_version": 3.0, "iteration": ITERS,
             "optimizer": {"optimizer": opt.state_dict()},
             "opt_param_scheduler": sched.state_dict(),
             "model": {}}
    rank_dir = run_dir / f"iter_{ITERS:07d}" / "mp_rank_00"
    rank_dir.mkdir(parents=True, exist_ok=True)
    tmp = rank_dir / "model_optim_rng.pt.tmp"
    torch.save(state, tmp)
    os.replace(tmp, rank_dir / "model_optim_rng.pt")
    (run_dir / "latest_checkpointed_iteration.txt").write_text(f"{ITERS}\n")
    return run_dir


def build(project: str, root: Path) -> Path:
    """Write ``project``'s checkpoints under ``root`` (the project directory)."""
    run = root / "checkpoints" / "run-a"
    if project == "ok":
        return write_run(run, steps_per_update=1, lr_by_hand=2.5e-4)
    if project == "bad":
        return write_run(run, steps_per_update=GA, lr_by_hand=None)
    raise ValueError(project)


if __name__ == "__main__":
    for name in ("ok", "bad"):
        print(build(name, HERE / name))
