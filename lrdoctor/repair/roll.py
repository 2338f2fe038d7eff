"""Writer for ROLL (mcore_adapter) worker checkpoints: ``checkpoint-N/scheduler.pt``.

The scheduler is megatron-core's (``num_steps`` counts optimizer updates); the
optimizer's param groups live in ``iter_0000001/mp_rank_*/optimizer.pt``. The
output is a repaired copy of the worker's ``checkpoint-N`` directory.
"""

from __future__ import annotations

from pathlib import Path

from lrdoctor.core.state import RunState
from lrdoctor.read.layouts import roll as reader
from lrdoctor.repair.megatron import optimizer_edits, scheduler_edits
from lrdoctor.repair.policies import Refusal, Target
from lrdoctor.repair.writer import load_pickle


def plan(path: Path, state: RunState, target: Target):
    from lrdoctor.repair.engine import FormatPlan

    ckpt = reader.find_checkpoints(Path(path))[-1]
    sfile = reader.scheduler_file(ckpt)
    sched = load_pickle(sfile)
    if not isinstance(sched, dict):
        raise Refusal("not a scheduler state dict", str(sfile))
    changes = scheduler_edits(str(sfile.relative_to(ckpt)), (), sched, target)
    notes = []
    opt_files = sorted((sfile.parent / reader.ITER_DIR).glob(f"mp_rank_*/{reader.OPTIMIZER_FILE}"))
    for f in opt_files:
        ch, _ = optimizer_edits(str(f.relative_to(ckpt)), load_pickle(f), (), target)
        changes += ch
    if not opt_files:
        notes.append("optimizer state not in optimizer.pt files (dist_optimizer/ or not saved): "
                     "megatron-core sets the LR from num_steps when it loads the scheduler")
    if target.horizon is not None:
        notes.append("mcore_adapter checks lr_decay_steps against the run's config on resume "
                     "unless use_checkpoint_opt_param_scheduler is set: set lr_decay_steps "
                     f"{target.horizon:g} in lr_scheduler_kwargs (or use the checkpoint's)")
    notes.append(f"the output is a repaired copy of {ckpt.parent.name}/{ckpt.name}; put it "
                 "where the run resumes from")
    return FormatPlan(root=ckpt, files=None, changes=changes, notes=notes)
