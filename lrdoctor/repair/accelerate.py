"""Writer for accelerate ``save_state`` folders (``scheduler.bin``, ``optimizer.bin``).

The first scheduler/optimizer pair is repaired (the one ``inspect`` reads); model
weights and ``random_states_*.pkl`` are copied as they are.
"""

from __future__ import annotations

from pathlib import Path

from lrdoctor.core.state import RunState
from lrdoctor.read.layouts import accelerate as reader
from lrdoctor.repair.policies import Refusal, Target
from lrdoctor.repair.torchstate import plan_scheduler_file


def plan(path: Path, state: RunState, target: Target):
    from lrdoctor.repair.engine import FormatPlan

    ckpt = reader.find_checkpoints(Path(path))[-1]
    scheds = reader.numbered_files(ckpt, reader.SCHEDULER_FILE)
    opts = reader.numbered_files(ckpt, reader.OPTIMIZER_FILE)
    if not scheds:
        raise Refusal("no scheduler.bin to repair", str(ckpt))
    from lrdoctor.repair.hf import _named_file

    named = _named_file(state)
    sfile = named if named is not None and named in scheds else scheds[0]
    opt = opts[scheds.index(sfile)] if len(opts) == len(scheds) else (opts[0] if opts else None)
    changes, _, _ = plan_scheduler_file(sfile, opt, target)
    notes = []
    if target.policy == "rescale":
        notes.append("a prepared AcceleratedScheduler steps num_processes times per update: "
                     "prepare it with split_batches=True, or step_scheduler_with_optimizer=False, "
                     "or the counter will run ahead again")
    if len(scheds) > 1:
        notes.append(f"{len(scheds) - 1} more scheduler file(s) copied unchanged")
    return FormatPlan(root=ckpt, files=None, changes=changes, notes=notes)
