"""Write the megatron-core 0.19.2 DISTRIBUTED-optimizer fixtures beside this file (run by hand).

Same setup as make_fixtures.py (the cp312 wheel unpacked and put first on the
path of the py3.11 test venv)::

    PYTHONPATH=/tmp/mc019/pkg:. .venv/bin/python tests/data/megatron_core_0_19/make_distopt_fixtures.py [NAME...]

``--out DIR`` writes elsewhere with whatever megatron-core is installed (the test
extra's; tests/formats/test_formats_megatron_distopt.py runs it so, in a subprocess,
as the shims below patch torch process-wide); without it the version must be 0.19.2.

What is real: megatron-core 0.19.2's own ``DistributedDataParallel`` (param and
grad buffers), ``get_megatron_optimizer`` (which builds a ``ChainedOptimizer``
of ``DistributedOptimizer``s, one for dense and one for expert parameters, with
Megatron's wd / no-wd param groups), five real ``optimizer.step()`` calls on a
tiny ``MegatronModule``, a real ``OptimizerParamScheduler`` driving that
optimizer's param groups (stepped by the global batch per iteration, as
Megatron-LM does), ``optimizer.sharded_state_dict(model_sd, metadata=...)``
with the metadata Megatron-LM's ``_build_sharded_state_dict_metadata`` passes,
and ``dist_checkpointing.save`` (one gloo rank). The legacy ``torch`` layout is
``torch.save`` of ``optimizer.state_dict()`` into ``model_optim_rng.pt`` and
``save_parameter_state`` into ``distrib_optim.pt``, as Megatron-LM's
save_checkpoint does.

CPU shims (none changes what is written, only where tensors live): the
GPU-only triton module megatron imports at package import is stubbed;
``torch.cuda.synchronize``/``current_device`` are CPU no-ops;
``torch.tensor/zeros/empty/ones/full(device="cuda")`` allocate on the CPU;
``Tensor.cuda()`` returns the tensor; ``Tensor.type()`` (no argument) answers
``torch.cuda.*Tensor`` so the optimizer's CUDA-type asserts pass for CPU
params; DDP's grad reduce-scatter is not called (one rank: it is the identity).

Fixtures (``truth.json`` in each: the live param-group LRs and counters at save):

- ``distopt_dp_reshardable/``: ``--use-distributed-optimizer`` torch_dist, Megatron-LM's
  default sharding ``dp_reshardable``: the param groups are the ShardedObject
  ``optimizer.distributed.dp_group_idx_0.optimizer`` (a DCP bytes item), not in
  ``common_state``.
- ``distopt_chained/``: an expert (``allreduce=False``) parameter too: two
  DistributedOptimizers, keys prefixed ``chained_0.`` / ``chained_1.``.
- ``distopt_fully_reshardable/``: ``--dist-ckpt-optim-fully-reshardable``: param groups
  stay in ``common_state`` (``optimizer.optimizer.param_groups``).
- ``distopt_partly_unreadable/``: as distopt_chained, the expert optimizer's
  (``chained_1.``) param-group item poisoned the same way.
- ``distopt_lr_by_hand/``: as distopt_chained, but every param group's ``lr`` set to
  1e-3 by hand after the scheduler's last step (LRD105 must see it).
- ``distopt_legacy/``: ``--ckpt-format torch``: ``mp_rank_00/model_optim_rng.pt`` +
  ``mp_rank_00/distrib_optim.pt``.
- ``distopt_torch_dcp/``: ``--ckpt-format torch_dcp`` with dense + expert parameters:
  ``optimizer.state_dict()`` (a list of two) flattened into DCP items.
- ``distopt_unreadable/``: as dp_reshardable, but one param group also holds a
  ``fractions.Fraction`` (a class lrdoctor does not know): once an unread item, now an
  opaque value with a note, the LRs beside it read (unknown classes are opaque).
"""

from __future__ import annotations

import copy
import fractions
import functools
import json
import shutil
import sys
import tempfile
import warnings
from pathlib import Path
from unittest import mock

warnings.filterwarnings("ignore")
sys.modules["megatron.core.transformer.moe.ops.paged_stash"] = mock.MagicMock()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

torch.cuda.synchronize = lambda *a, **k: None
torch.cuda.current_device = lambda: "cpu"


def _on_cpu(fn):
    @functools.wraps(fn)
    def wrapped(*a, device=None, **k):
        if device is not None and "cuda" not in str(device):
            k["device"] = device
        return fn(*a, **k)
    return wrapped


for _name in ("tensor", "zeros", "empty", "ones", "full"):
    setattr(torch, _name, _on_cpu(getattr(torch, _name)))
torch.Tensor.cuda = lambda self, *a, **k: self
_real_type = torch.Tensor.type
torch.Tensor.type = lambda self, *a, **k: (_real_type(self, *a, **k) if a or k else
                                           _real_type(self).replace("torch.", "torch.cuda.", 1))

HERE = Path(__file__).resolve().parent  # the output folder (--out DIR changes it)
ITERS, GBS, MBS, DP = 5, 16, 2, 2


def build(expert: bool):
    from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import MegatronModule

    cfg = TransformerConfig(num_layers=1, hidden_size=4, num_attention_heads=1,
                            use_cpu_initialization=True)

    class Tiny(MegatronModule):
        def __init__(self):
            super().__init__(cfg)
            self.dense = torch.nn.Linear(4, 3)
            if expert:
                self.expert = torch.nn.Linear(3, 2, bias=False)
                self.expert.weight.allreduce = False  # megatron's mark of an expert param

        def forward(self, x):
            y = self.dense(x)
            return self.expert(y) if expert else y

    torch.manual_seed(0)
    ddp = DistributedDataParallel(cfg, DistributedDataParallelConfig(
        use_distributed_optimizer=True), Tiny())
    opt = get_megatron_optimizer(OptimizerConfig(
        optimizer="adam", lr=3e-4, min_lr=3e-5, weight_decay=0.01,
        use_distributed_optimizer=True), [ddp])
    return ddp, opt


def train(ddp, opt):
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    from tests.helpers.factories import megatron_args

    args = megatron_args(train_iters=40, global_batch_size=GBS, micro_batch_size=MBS,
                         data_parallel_size=DP, lr_warmup_iters=4, ckpt_format="torch_dist",
                         use_distributed_optimizer=True)
    sched = OptimizerParamScheduler(
        opt, init_lr=0.0, max_lr=args.lr, min_lr=args.min_lr, lr_warmup_steps=4 * GBS,
        lr_decay_steps=40 * GBS, lr_decay_style="cosine", start_wd=0.01, end_wd=0.01,
        wd_incr_steps=40 * GBS, wd_incr_style="constant")
    x = torch.ones(2, 4)
    for it in range(1, ITERS + 1):
        ddp.zero_grad_buffer()
        opt.zero_grad()
        ddp(x).sum().backward()
        ok, _, _ = opt.step()
        assert ok
        sched.step(increment=GBS)
        args.consumed_train_samples += GBS
        args.iteration = it
    return args, sched


def state_dict(model_sd, args, sched, optimizer_sd) -> dict:
    """Megatron-LM's generate_state_dict, the keys it writes."""
    return {"args": copy.deepcopy(args), "checkpoint_version": 3.0, "iteration": ITERS,
            "model": model_sd, "optimizer": optimizer_sd, "opt_param_scheduler": sched.state_dict(),
            "num_floating_point_operations_so_far": 0}


def truth(opt, sched, args, **extra) -> dict:
    return {"lrs": [g["lr"] for g in opt.param_groups],
            "step": sorted({float(s["step"]) for o in opt.chained_optimizers
                            for s in o.optimizer.state.values()}),
            "num_steps": sched.num_steps, "iteration": ITERS,
            "consumed_train_samples": args.consumed_train_samples,
            "megatron_core": __import__("megatron.core").core.__version__, **extra}


def metadata(sharding: str) -> dict:
    """What Megatron-LM's _build_sharded_state_dict_metadata gives with the distributed
    optimizer (dp_cp_group: the one rank's data-parallel group)."""
    from megatron.core import parallel_state as ps

    return {"distrib_optim_sharding_type": sharding, "singleton_local_shards": False,
            "chained_optim_avoid_prefix": True,
            "dp_cp_group": ps.get_data_parallel_group(with_context_parallel=True)}


def save_dist(name: str, sharding: str, expert: bool, poison: bool = False,
              lr_by_hand: float | None = None) -> None:
    from megatron.core import dist_checkpointing

    ddp, opt = build(expert)
    args, sched = train(ddp, opt)
    if lr_by_hand is not None:  # the LR set by hand after the scheduler's last step
        for g in opt.param_groups:
            g["lr"] = lr_by_hand
    model_sd = ddp.sharded_state_dict()
    osd = opt.sharded_state_dict(model_sd, metadata=metadata(sharding))
    if poison:  # a param-group value lrdoctor's unpickler refuses (see the docstring)
        # the last chained optimizer's param-group object (the only one without chaining)
        target = osd[max(osd)] if expert else osd
        target["optimizer"].data["param_groups"][0]["lr_note"] = fractions.Fraction(1, 3)
    sd = state_dict(model_sd, args, sched, osd)
    out = HERE / name
    with tempfile.TemporaryDirectory() as tmp:
        ckpt = Path(tmp) / f"iter_{ITERS:07d}"
        ckpt.mkdir()
        dist_checkpointing.save(sd, str(ckpt))
        if out.exists():
            shutil.rmtree(out)
        out.mkdir(parents=True)
        shutil.copytree(ckpt, out / ckpt.name)
    (out / "latest_checkpointed_iteration.txt").write_text(str(ITERS))
    t = truth(opt, sched, args, sharding=sharding, chained=len(opt.chained_optimizers))
    (out / "truth.json").write_text(json.dumps(t, indent=1) + "\n")
    print(out, sorted(p.name for p in (out / ckpt.name).iterdir()), t)


def save_torch_dcp(name: str) -> None:
    """--ckpt-format torch_dcp: Megatron-LM's save_checkpoint hands generate_state_dict's
    dict (optimizer.state_dict(): a list for a ChainedOptimizer of two) to
    torch.distributed.checkpoint.save with a FileSystemWriter."""
    import torch.distributed.checkpoint as tdcp

    ddp, opt = build(expert=True)
    args, sched = train(ddp, opt)
    args.ckpt_format = "torch_dcp"
    out = HERE / name
    if out.exists():
        shutil.rmtree(out)
    ckpt = out / f"iter_{ITERS:07d}"
    model_sd = {k: v.detach().clone() for k, v in ddp.module.state_dict().items()}
    tdcp.save(state_dict(model_sd, args, sched, opt.state_dict()),
              storage_writer=tdcp.FileSystemWriter(str(ckpt)))
    (out / "latest_checkpointed_iteration.txt").write_text(str(ITERS))
    t = truth(opt, sched, args, chained=len(opt.chained_optimizers))
    (out / "truth.json").write_text(json.dumps(t, indent=1) + "\n")
    print(out, t)


def save_legacy(name: str) -> None:
    ddp, opt = build(expert=False)
    args, sched = train(ddp, opt)
    args.ckpt_format = "torch"
    out = HERE / name
    if out.exists():
        shutil.rmtree(out)
    rank = out / f"iter_{ITERS:07d}" / "mp_rank_00"
    rank.mkdir(parents=True)
    model_sd = {k: v.detach().clone() for k, v in ddp.module.state_dict().items()}
    sd = state_dict(model_sd, args, sched, opt.state_dict())
    torch.save(sd, rank / "model_optim_rng.pt")
    opt.save_parameter_state(str(rank / "distrib_optim.pt"))
    (out / "latest_checkpointed_iteration.txt").write_text(str(ITERS))
    t = truth(opt, sched, args, chained=len(opt.chained_optimizers))
    (out / "truth.json").write_text(json.dumps(t, indent=1) + "\n")
    print(out, t)


def main() -> None:
    import megatron.core
    from megatron.core import parallel_state as ps

    from tests.helpers.factories import free_port

    global HERE
    names = sys.argv[1:]
    if names[:1] == ["--out"]:
        HERE, names = Path(names[1]), names[2:]
    else:
        assert megatron.core.__version__ == "0.19.2", megatron.core.__version__
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0,
                            world_size=1)
    ps.initialize_model_parallel()
    fixtures = {
        "distopt_dp_reshardable": lambda n: save_dist(n, "dp_reshardable", expert=False),
        "distopt_chained": lambda n: save_dist(n, "dp_reshardable", expert=True),
        "distopt_fully_reshardable": lambda n: save_dist(n, "fully_reshardable", expert=False),
        "distopt_unreadable": lambda n: save_dist(n, "dp_reshardable", expert=False,
                                                  poison=True),
        "distopt_partly_unreadable": lambda n: save_dist(n, "dp_reshardable", expert=True,
                                                         poison=True),
        "distopt_lr_by_hand": lambda n: save_dist(n, "dp_reshardable", expert=True,
                                                  lr_by_hand=1e-3),
        "distopt_legacy": save_legacy,
        "distopt_torch_dcp": save_torch_dcp,
    }
    try:
        for name in names or fixtures:  # names given: only those
            fixtures[name](name)
    finally:
        ps.destroy_model_parallel()
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
