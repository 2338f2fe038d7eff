"""A counter a scheduler is rebuilt from is written through its ref with
``Counter.ref_offset`` honoured (issue 18 item 2): the field holds progress - offset, so
the repair writes ``progress - offset``, and refuses a field that does not read
``progress_before - offset``.

The arithmetic is framework-blind (``repair/torchstate.py``); the file is a torch.save
loop state with no scheduler state saved (a trainer that rebuilds its scheduler from a
count kept from -1, as DeepSpeed's ``last_batch_iteration``), keyed under names no code
knows. DeepSpeed's own engine is covered end to end in test_fix_deepspeed_refs.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.repair import Refusal, Target
from lrdoctor.core.state import Counter, RunState, Unit
from lrdoctor.repair.torchstate import content_changes, load_pickle


def _state(f: Path, offset: float, value: float) -> RunState:
    st = RunState(format="torchsave", path=str(f))
    st.scheduler_progress = Counter("loop.batches_done + 1", value, Unit.UPDATES,
                                    ref=FieldRef(str(f), ("loop", "batches_done")),
                                    ref_offset=offset)
    return st


def _target(before: float, after: float) -> Target:
    return Target(policy="rescale", progress_before=before, progress=after, unit=Unit.UPDATES)


def test_the_counter_is_written_as_progress_minus_its_offset(tmp_path):
    f = tmp_path / "loop.pt"
    torch.save({"loop": {"batches_done": 29, "seed": 3}}, f)
    objs = {f: load_pickle(f)}
    changes, _ = content_changes(objs, {f: f.name}, _target(30, 10), _state(f, 1, 30))
    assert [(c.key, c.before, c.after) for c in changes] == [(("loop", "batches_done"), 29, 9)]
    assert isinstance(changes[0].after, int)
    # Without the offset the same field reads 29, not the progress 30: refused, never guessed.
    with pytest.raises(Refusal, match="29"):
        content_changes(objs, {f: f.name}, _target(30, 10), _state(f, 0, 30))
