"""Write AReaL's Megatron-engine recover checkpoints beside this file (run by hand).

AReaL (areal-project/AReaL) saves a recover checkpoint of its Megatron engine five folders
below the run root: ``<fileroot>/checkpoints/<user>/<experiment>/<trial>/default/
recover_checkpoint``, a megatron-core ``dist_checkpointing`` folder (model, optimizer,
``lr_scheduler``: a real ``OptimizerParamScheduler`` state, ``rng_state``), with
``<trial>/recover_info/step_info.json`` (epoch, epoch_step, global_step, steps_per_epoch)
beside it. The save is megatron-core 0.19.2's own ``dist_checkpointing.save`` (one gloo
rank), as in the field corpus (/work/shared/corpus/field/make_cases.py, areal_case).

megatron-core 0.19 is published only as a cp312 wheel; its ``dist_checkpointing`` is pure
Python, so the wheel is unpacked and put first on the path of the py3.11 test venv, with
the CPU shims of ``tests/data/megatron_core_0_19/make_fixtures.py`` (none touches what is
written)::

    pip download --no-deps megatron-core==0.19.2 -d /tmp/mc019
    unzip -q /tmp/mc019/megatron_core-0.19.2-*.whl -d /tmp/mc019/pkg
    PYTHONPATH=/tmp/mc019/pkg:. .venv/bin/python tests/data/areal_recover/make_fixtures.py

``decay_twice/``: AReaL's ``MegatronEngine`` before PR #1289: warmup 22 = 10% of 220
planned steps, ``lr_decay_steps`` = 220 - 22 = 198 (megatron-core counts it from step 0:
the warmup is subtracted twice), saved at its last step 220: ``num_steps`` 220 is past
the decay horizon 198 and the last 22 steps ran at the floor; ``decay_twice_mid/``: the
same run saved at step 100, before the horizon (only the horizon against the run's length,
``wd_incr_steps`` 220, shows it). ``healthy/``: the fix, ``lr_decay_steps`` 220, saved at
step 100.
"""

from __future__ import annotations

import json
import shutil
import sys
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
TOTAL, STEPS_PER_EPOCH, LR = 220, 22, 1e-6
TRIAL = Path("checkpoints", "root", "gsm8k-grpo-megatron", "trial0")


def write(out: Path, fixed: bool, stop: int) -> None:
    import megatron.core
    from megatron.core import dist_checkpointing
    from megatron.core.dist_checkpointing.mapping import ShardedObject, ShardedTensor
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    assert megatron.core.__version__ == "0.19.2", megatron.core.__version__
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.01)
    warm = int(0.1 * TOTAL)
    sched = OptimizerParamScheduler(
        opt, init_lr=0.0, max_lr=LR, min_lr=0.0, lr_warmup_steps=warm,
        lr_decay_steps=TOTAL if fixed else TOTAL - warm, lr_decay_style="cosine",
        start_wd=0.01, end_wd=0.01, wd_incr_steps=TOTAL, wd_incr_style="constant")
    for _ in range(stop):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step(1)
    sd = opt.state_dict()
    step = int(float(next(iter(sd["state"].values()))["step"]))
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "step": step}
              for g in sd["param_groups"]]
    state = {
        "model": {n: ShardedTensor.from_rank_offsets(f"decoder.{n}", p.detach().clone(),
                                                     replica_id=0)
                  for n, p in model.named_parameters()},
        "optimizer": ShardedObject("optimizer.distributed.dp_group_idx_0.optimizer",
                                   {"param_groups": groups}, (1,), (0,), replica_id=(0, 0, 0)),
        "lr_scheduler": sched.state_dict(),
        "rng_state": ShardedObject("rng_state", [{"torch_rng_state": torch.get_rng_state(),
                                                  "rng_tracker_states": {}}],
                                   (1, 1), (0, 0), replica_id=0),
    }
    if out.exists():
        shutil.rmtree(out)
    trial = out / TRIAL
    ckpt = trial / "default" / "recover_checkpoint"
    ckpt.mkdir(parents=True)
    dist_checkpointing.save(state, str(ckpt))
    g = stop - 1
    info = trial / "recover_info"
    info.mkdir()
    (info / "step_info.json").write_text(json.dumps(
        {"epoch": g // STEPS_PER_EPOCH, "epoch_step": g % STEPS_PER_EPOCH, "global_step": g,
         "steps_per_epoch": STEPS_PER_EPOCH}, indent=4))
    print(out, sorted(p.name for p in ckpt.iterdir()), "num_steps", sched.num_steps,
          "lr_decay_steps", sched.lr_decay_steps, "lr", opt.param_groups[0]["lr"])


def main() -> None:
    from tests.helpers.factories import free_port

    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    try:
        write(HERE / "decay_twice", fixed=False, stop=TOTAL)
        write(HERE / "decay_twice_mid", fixed=False, stop=100)
        write(HERE / "healthy", fixed=True, stop=100)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
