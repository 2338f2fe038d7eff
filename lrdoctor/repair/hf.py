"""Writer for Hugging Face Trainer ``checkpoint-N`` directories.

Only ``scheduler.pt`` (``last_epoch``, ``_step_count``, ``_last_lr``) and the
optimizer's param-group ``lr`` change. ``trainer_state.json`` holds the
trainer's own count (``global_step``), which is the truth the scheduler is
repaired towards, so it is copied as is; ``training_args.bin`` (a pickle of
TrainingArguments) is always copied byte for byte, never rewritten.
"""

from __future__ import annotations

from pathlib import Path

from lrdoctor.formats import hf as reader
from lrdoctor.model import RunState
from lrdoctor.repair.policies import Refusal, Target
from lrdoctor.repair.torchstate import (
    group_lrs,
    is_optimizer,
    is_scheduler,
    optimizer_changes,
    scheduler_changes,
)
from lrdoctor.repair.writer import load_pickle


def plan(path: Path, state: RunState, target: Target):
    from lrdoctor.repair.engine import FormatPlan

    if target.horizon is not None:
        raise Refusal("the HF Trainer rebuilds the schedule's horizon from TrainingArguments "
                      "(max_steps / num_train_epochs) when it resumes, and lrdoctor never rewrites "
                      "training_args.bin: use --policy nominal, or resume with a new --max_steps")
    ckpt = reader.find_checkpoints(Path(path))[-1]
    sfile = reader.scheduler_file(ckpt)
    if not sfile.is_file():
        raise Refusal(f"no {reader.SCHEDULER_FILE} to repair", str(ckpt))
    sched = load_pickle(sfile)
    if not is_scheduler(sched):
        raise Refusal("not a torch LRScheduler state dict", str(sfile))
    ofile = reader.optimizer_file(ckpt)
    opt = load_pickle(ofile) if ofile is not None else None
    lrs = group_lrs(opt, target) if opt is not None and is_optimizer(opt) else None
    changes = scheduler_changes(sfile.name, sched, (), target, lrs)
    notes = []
    if opt is not None and is_optimizer(opt):
        changes += optimizer_changes(ofile.name, opt, (), lrs)
    else:
        notes.append("no optimizer.pt param groups: the first resumed update keeps its LR")
    if lrs is None:
        notes.append("the schedule is not known, so the param-group lr stays as saved")
    if ckpt != Path(path):
        notes.append(f"the output is a repaired copy of {ckpt.name} (resume from it with "
                     "trainer.train(resume_from_checkpoint=OUT))")
    return FormatPlan(root=ckpt, files=None, changes=changes, notes=notes)
