"""Every value a reader fills carries a FieldRef (the file as the reader opened it, the key
path as a tuple), and following the ref through the file gives the value the reader reported:
the same refs a repair writes through, so nothing re-finds a field by its own tests.

Checked on checkpoints written by each framework's own classes: megatron-core
(Megatron-LM's layout), HF Trainer (torch scheduler + optimizer files), ROLL
(megatron-core scheduler in scheduler.pt), and a plain torch loop read by content
(the content reader was not written for any of these layouts in particular)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lrdoctor.core.fieldref import FieldRef
from lrdoctor.inspect_api import read_state
from lrdoctor.read.bytes import safeload, safetext
from lrdoctor.read.layouts._common import number
from lrdoctor.read.scan.shapes import follow
from tests.helpers.paths import REPO


def _follow(ref: FieldRef) -> Any:
    f = Path(ref.file)
    obj = (safetext.json_loads(f.read_text(), str(f)) if f.suffix == ".json"
           else safeload.load(f))
    return number(follow(obj, ref.key))


def _check(st) -> int:
    seen = 0
    for c in (st.scheduler_progress, st.planned_end, st.trainer_progress, *st.counters):
        if c is not None and c.ref is not None:
            assert Path(c.ref.file).is_relative_to(Path(st.path)), c.ref
            assert _follow(c.ref) == pytest.approx(c.value), (c.name, c.ref)
            seen += 1
    assert len(st.optimizer_lr_refs) == len(st.optimizer_lrs)
    for ref, lr in zip(st.optimizer_lr_refs, st.optimizer_lrs, strict=True):
        assert ref.key[-1] == "lr" and _follow(ref) == pytest.approx(lr)
        seen += 1
    if st.schedule is not None and "horizon" in st.schedule.refs:
        assert _follow(st.schedule.refs["horizon"]) is not None
        seen += 1
    return seen


def test_megatron_refs(megatron_run_dir):
    st = read_state(megatron_run_dir.root)
    assert st.scheduler_progress.ref.key[-1] == "num_steps"
    assert st.schedule.refs["horizon"].key[-1] == "lr_decay_steps"
    assert _check(st) >= 4


def test_hf_refs(hf_run_dir):
    st = read_state(hf_run_dir.root)
    ck = Path(st.path)
    assert st.scheduler_progress.ref == FieldRef(str(ck / "scheduler.pt"), ("last_epoch",))
    assert st.planned_end.ref == FieldRef(str(ck / "trainer_state.json"), ("max_steps",))
    assert _check(st) >= 3


def test_roll_refs(roll_run_dir):
    st = read_state(roll_run_dir.root)
    assert st.scheduler_progress.ref.key == ("num_steps",)
    assert _check(st) >= 2


def test_content_read_refs():
    """A torch loop's single checkpoint file: refs name the file and the nested keys."""
    st = read_state(REPO / "sample_checkpoints" / "torch-microstep")
    assert st.scheduler_progress.ref.key == ("scheduler", "last_epoch")
    assert st.schedule.refs["horizon"].key == ("scheduler", "T_max")
    assert st.optimizer_lr_refs[0].key == ("optimizer", "param_groups", 0, "lr")
    assert _check(st) >= 4
