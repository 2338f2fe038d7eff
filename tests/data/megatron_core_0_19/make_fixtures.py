"""Write the megatron-core 0.19.2 ``torch_dist`` fixtures beside this file (run by hand).

megatron-core 0.19 is published only as a cp312 wheel, and on this machine a
py3.12 torch pulls CUDA wheels; its ``dist_checkpointing`` package is pure
Python, so the wheel is unpacked and put first on the path of the py3.11 test
venv (torch CPU)::

    pip download --no-deps megatron-core==0.19.2 -d /tmp/mc019   # cp312 wheel
    unzip -q /tmp/mc019/megatron_core-0.19.2-*.whl -d /tmp/mc019/pkg
    PYTHONPATH=/tmp/mc019/pkg:. .venv/bin/python tests/data/megatron_core_0_19/make_fixtures.py

The save itself is megatron-core's own ``dist_checkpointing.save`` (the
default TorchDistSaveShardedStrategy, one gloo rank) of the state dict
Megatron-LM's ``generate_state_dict`` builds: ``args``, ``checkpoint_version``,
``iteration``, ``model`` (ShardedTensors), ``optimizer`` (``FP32Optimizer
.sharded_state_dict``: param groups + ``common_step`` in the common part),
``opt_param_scheduler`` (a real ``OptimizerParamScheduler``),
``num_floating_point_operations_so_far``. Three CPU-only shims, none touching
what is written: a GPU-only triton module megatron imports at package import is
stubbed, ``torch.cuda.synchronize``/``current_device`` are made CPU no-ops, and
FP32Optimizer's unit loss scale is built on the CPU.

``healthy/``: Megatron-LM's loop, one ``step(increment=global_batch_size)`` per
iteration. ``buggy/``: the scheduler stepped once per micro-batch
(global_batch_size / (micro_batch_size x data_parallel_size) = 4 times per iteration).
"""

from __future__ import annotations

import copy
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from unittest import mock

warnings.filterwarnings("ignore")
# GPU-only kernels (triton) imported by megatron.core's package __init__; unused here.
sys.modules["megatron.core.transformer.moe.ops.paged_stash"] = mock.MagicMock()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

torch.cuda.synchronize = lambda *a, **k: None  # preload_tensors syncs a D2H copy
torch.cuda.current_device = lambda: "cpu"  # the finalize all-reduce runs on gloo here

HERE = Path(__file__).resolve().parent
ITERS, GBS, MBS, DP = 5, 16, 2, 2


def write(out: Path, per_micro: bool) -> None:
    import megatron.core
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing import ShardedTensor
    from megatron.core.optimizer import OptimizerConfig
    from megatron.core.optimizer.optimizer import FP32Optimizer
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    from tests.helpers.factories import megatron_args

    assert megatron.core.__version__ == "0.19.2", megatron.core.__version__
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    args = megatron_args(train_iters=40, global_batch_size=GBS, micro_batch_size=MBS,
                         data_parallel_size=DP, lr_warmup_iters=4, ckpt_format="torch_dist")
    sched = OptimizerParamScheduler(
        opt, init_lr=0.0, max_lr=args.lr, min_lr=args.min_lr, lr_warmup_steps=4 * GBS,
        lr_decay_steps=40 * GBS, lr_decay_style="cosine", start_wd=0.01, end_wd=0.01,
        wd_incr_steps=40 * GBS, wd_incr_style="constant")
    for it in range(1, ITERS + 1):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        for _ in range(GBS // (MBS * DP) if per_micro else 1):
            sched.step(increment=GBS)
        args.consumed_train_samples += GBS
        args.iteration = it
    model_sd = {"weight": ShardedTensor.from_rank_offsets("decoder.weight", model.weight),
                "bias": ShardedTensor.from_rank_offsets("decoder.bias", model.bias)}
    real_tensor = torch.tensor
    torch.tensor = lambda *a, device=None, **k: real_tensor(*a, **k)  # loss scale on cuda
    try:
        mopt = FP32Optimizer(opt, OptimizerConfig(optimizer="adam", lr=args.lr,
                                                  min_lr=args.min_lr), lambda o, c: None)
    finally:
        torch.tensor = real_tensor
    sd = {"args": copy.deepcopy(args), "checkpoint_version": 3.0, "iteration": ITERS,
          "model": model_sd, "optimizer": mopt.sharded_state_dict(model_sd),
          "opt_param_scheduler": sched.state_dict(),
          "num_floating_point_operations_so_far": 0}
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / f"iter_{ITERS:07d}"
        ckpt.mkdir()
        dist_checkpointing.save(sd, str(ckpt))
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        shutil.copytree(ckpt, out / ckpt.name)
    (out / "latest_checkpointed_iteration.txt").write_text(str(ITERS))
    print(out, sorted(p.name for p in (out / ckpt.name).iterdir()),
          "num_steps", sched.num_steps, "consumed", args.consumed_train_samples)


def main() -> None:
    from tests.helpers.factories import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    try:
        write(HERE / "healthy", per_micro=False)
        write(HERE / "buggy", per_micro=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
