"""Shared builders for the fix tests: real framework checkpoints, deep comparison."""

from __future__ import annotations

import argparse
import hashlib
import warnings
from pathlib import Path
from typing import Any

GBS, ITERS, TRAIN_ITERS = 32, 50, 100
SCHED_KW = dict(init_lr=0.0, max_lr=3e-4, min_lr=3e-5, lr_warmup_steps=10 * GBS,
                lr_decay_steps=TRAIN_ITERS * GBS, lr_decay_style="cosine", start_wd=0.1,
                end_wd=0.1, wd_incr_steps=TRAIN_ITERS * GBS, wd_incr_style="constant")


def mcore_scheduler(opt, **over):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    kw = dict(SCHED_KW)
    kw.update(over)
    return OptimizerParamScheduler(opt, **kw)


def megatron_run(run: Path, *, steps_per_update: int = 4, ranks: int = 2,
                 width: int = 8, lr_by_hand: float | None = None) -> Path:
    """A Megatron-LM torch-format run dir whose scheduler was stepped per micro-batch."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(width, width)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.1)
    sched = mcore_scheduler(opt)
    for _ in range(ITERS):
        model(torch.randn(2, width)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        for _ in range(steps_per_update):
            sched.step(increment=GBS)
    if lr_by_hand is not None:
        for g in opt.param_groups:
            g["lr"] = lr_by_hand
    args = argparse.Namespace(
        train_iters=TRAIN_ITERS, lr_decay_iters=None, lr_warmup_iters=10, lr=3e-4, min_lr=3e-5,
        lr_decay_style="cosine", global_batch_size=GBS, micro_batch_size=GBS // 4,
        data_parallel_size=1, tensor_model_parallel_size=ranks,
        consumed_train_samples=ITERS * GBS, skipped_train_samples=0, ckpt_format="torch",
        use_checkpoint_opt_param_scheduler=False, override_opt_param_scheduler=False)
    for r in range(ranks):
        state = {"args": args, "checkpoint_version": 3.0, "iteration": ITERS,
                 "optimizer": {"optimizer": opt.state_dict(), "fp32_from_fp16_params": []},
                 "opt_param_scheduler": sched.state_dict(),
                 "model": {k: v + r for k, v in model.state_dict().items()},
                 "rng_state": [{"random_rng_state": (3, (1, 2, 3), None),
                                "torch_rng_state": torch.get_rng_state()}]}
        d = run / f"iter_{ITERS:07d}" / f"mp_rank_{r:02d}"
        d.mkdir(parents=True, exist_ok=True)
        torch.save(state, d / "model_optim_rng.pt")
    (run / "latest_checkpointed_iteration.txt").write_text(f"{ITERS}")
    return run


def tree_hash(root: Path) -> dict[str, str]:
    """sha256 and mtime of every file under root (or of root itself)."""
    files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() + f"@{p.stat().st_mtime_ns}"
            for p in files}


def load(path: Path) -> Any:
    """torch.load(weights_only=True) with lrdoctor's allow-list (DeepSpeed's loss scaler)."""
    from lrdoctor.repair.writer import load_pickle

    return load_pickle(path)


def diff(a: Any, b: Any, key: tuple = ()) -> list[tuple]:
    """Key paths where a and b differ (tensors with torch.equal, dtype and shape)."""
    import torch

    if isinstance(a, argparse.Namespace) and isinstance(b, argparse.Namespace):
        return diff(vars(a), vars(b), key)
    if type(a) is type(b) and hasattr(a, "__dict__") and not isinstance(a, torch.Tensor):
        return diff(vars(a), vars(b), key)
    if type(a) is not type(b):
        return [key]
    if isinstance(a, torch.Tensor):
        same = a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
        return [] if same else [key]
    if isinstance(a, dict):
        if list(a) != list(b):
            return [key]
        return [d for k in a for d in diff(a[k], b[k], key + (k,))]
    if isinstance(a, (list, tuple)):
        if len(a) != len(b):
            return [key]
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in diff(x, y, key + (i,))]
    return [] if a == b else [key]


def assert_resumes_on_healthy_curve(fopt, fsched, hopt, hsched, steps: int,
                                    rel: float = 1e-9) -> None:
    """A repaired copy resumed with torch's own classes (``fopt``/``fsched``) follows the
    healthy run (``hopt``/``hsched``) for ``steps`` updates, every param group's LR equal."""
    import math

    for _ in range(steps):
        for g, h in zip(fopt.param_groups, hopt.param_groups, strict=True):
            assert math.isclose(g["lr"], h["lr"], rel_tol=rel), (g["lr"], h["lr"])
        fopt.step()
        fsched.step()
        hopt.step()
        hsched.step()
