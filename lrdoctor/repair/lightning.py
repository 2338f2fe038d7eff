"""Writer for PyTorch Lightning ``.ckpt`` files.

``lr_schedulers[i]`` and ``optimizer_states[i]`` are plain torch state dicts and
are found by shape, as for a plain torch.save dict. ``global_step`` and the
``loops`` progress trackers are the trainer's own counts, so they are kept.
"""

from __future__ import annotations

from pathlib import Path

from lrdoctor.core.state import RunState
from lrdoctor.read.layouts import lightning as reader
from lrdoctor.repair.policies import Target
from lrdoctor.repair.torchstate import plan_torch_state
from lrdoctor.repair.writer import load_pickle


def plan(path: Path, state: RunState, target: Target):
    from lrdoctor.repair.engine import FormatPlan

    path = Path(path)
    f = reader.find_checkpoints(path)[-1]
    # A directory in gives a directory out, holding the repaired .ckpt under its name.
    root = path if path.is_dir() else f
    rel = str(f.relative_to(root)) if root.is_dir() else f.name
    changes, notes = plan_torch_state(rel, load_pickle(f), target)
    if root.is_dir():
        notes.append(f"the output holds a repaired copy of {rel} only; resume with "
                     f"trainer.fit(model, ckpt_path=OUT/{rel})")
    return FormatPlan(root=root, files=[rel], changes=changes, notes=notes)
