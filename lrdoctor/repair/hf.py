"""Writer for Hugging Face Trainer ``checkpoint-N`` directories.

Only ``scheduler.pt`` (``last_epoch``, ``_step_count``, ``_last_lr``) and the
optimizer's param-group ``lr`` change. ``trainer_state.json`` holds the
trainer's own count (``global_step``), which is the truth the scheduler is
repaired towards, so it is copied as is; ``training_args.bin`` (a pickle of
TrainingArguments) is always copied byte for byte, never rewritten.
"""

from __future__ import annotations

from pathlib import Path

from lrdoctor.core.state import RunState
from lrdoctor.read.layouts import hf as reader
from lrdoctor.repair.policies import Refusal, Target
from lrdoctor.repair.torchstate import plan_scheduler_file


def plan(path: Path, state: RunState, target: Target):
    from lrdoctor.repair.engine import FormatPlan

    if target.horizon is not None:
        raise Refusal("the HF Trainer rebuilds the schedule's horizon from TrainingArguments "
                      "(max_steps / num_train_epochs) when it resumes, and lrdoctor never rewrites "
                      "training_args.bin: use --policy nominal, or resume with a new --max_steps")
    ckpt = reader.find_checkpoints(Path(path))[-1]
    sfile = _named_file(state) or reader.scheduler_file(ckpt)
    if not sfile.is_file():
        raise Refusal(f"no {reader.SCHEDULER_FILE} to repair", str(ckpt))
    changes, has_opt, lrs = plan_scheduler_file(sfile, reader.optimizer_file(ckpt), target)
    notes = []
    if not has_opt:
        notes.append("no optimizer.pt param groups: the first resumed update keeps its LR")
    if ckpt != Path(path):
        notes.append(f"the output is a repaired copy of {ckpt.name} (resume from it with "
                     "trainer.train(resume_from_checkpoint=OUT))")
    return FormatPlan(root=ckpt, files=None, changes=changes, notes=notes)


def _named_file(state: RunState) -> Path | None:
    """The scheduler file the reader named with a FieldRef (``Counter.ref``)."""
    ref = state.scheduler_progress.ref if state.scheduler_progress is not None else None
    return Path(ref.file) if ref is not None and not ref.item else None
