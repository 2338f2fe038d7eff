"""Writer for PyTorch Lightning ``.ckpt`` files.

``lr_schedulers[i]`` and ``optimizer_states[i]`` are plain torch state dicts and
are found by shape, as for a plain torch.save dict. ``global_step`` and the
``loops`` progress trackers are the trainer's own counts, so they are kept.
"""

from __future__ import annotations

from pathlib import Path

from lrdoctor.formats import lightning as reader
from lrdoctor.model import RunState
from lrdoctor.repair.policies import Target
from lrdoctor.repair.torchstate import plan_torch_state
from lrdoctor.repair.writer import load_pickle


def plan(path: Path, state: RunState, target: Target):
    from lrdoctor.repair.engine import FormatPlan

    f = reader.find_checkpoints(Path(path))[-1]
    changes, notes = plan_torch_state(f.name, load_pickle(f), target)
    if f != Path(path):
        notes.append(f"the output is a repaired copy of {f.name}; resume with "
                     "trainer.fit(model, ckpt_path=OUT)")
    return FormatPlan(root=f, files=[f.name], changes=changes, notes=notes)
