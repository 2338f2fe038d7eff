"""The epoch arithmetic (lrdoctor/epochs.py, LRD117) reads its knobs by the evidence
vocabulary's names (read/evidence/vocabulary.py), their one home: a name added there
only is seen by the epoch plan, from a config dict and from a real torch.save checkpoint
holding a loop's ``args`` Namespace read by content."""

from __future__ import annotations

import argparse

import pytest

from lrdoctor import epochs
from lrdoctor.core.evidence import Quantity as Q
from lrdoctor.core.evidence import Role as R
from lrdoctor.inspect_api import inspect_path
from lrdoctor.read.evidence import vocabulary

NEW_NAME = "train_set_size"  # in no table of the vocabulary today


def _cfg(**more) -> dict:
    return {"num_train_epochs": 3, "per_device_train_batch_size": 2,
            "gradient_accumulation_steps": 4, "max_train_steps": 9, **more}


def test_numeric_knobs_are_vocabulary_meanings():
    """Every name the epoch plan reads for a number means in the vocabulary what the plan
    takes it for (no second spelling of a meaning anywhere)."""
    want = {"dataset_len": (R.FACTOR, Q.DATASET),
            "batches_per_epoch": (R.FACTOR, Q.BATCHES_PER_EPOCH),
            "epochs": (R.PLANNED_END, Q.EPOCHS), "batch_size": (R.FACTOR, Q.MICRO_BATCH),
            "ga": (R.FACTOR, Q.GRAD_ACCUM), "world_size": (R.FACTOR, Q.PROCESSES)}
    knobs = vocabulary.epoch_knobs()
    for what, meaning in want.items():
        assert knobs[what], what
        assert {vocabulary.meaning(k, in_config=True) for k in knobs[what]} == {meaning}, what
    assert {vocabulary.meaning(k, in_config=True) for k in knobs["horizon"]} \
        <= {(R.PLANNED_END, Q.ITERATIONS), (R.HORIZON, Q.SCHEDULER_CALLS)}
    assert "lr_decay_steps" not in knobs["horizon"]  # total - warmup is no run length


def test_a_name_added_only_to_the_vocabulary_is_read_by_the_epoch_plan(monkeypatch):
    assert epochs.plan_from(_cfg(**{NEW_NAME: 30})) is None  # no epoch length known
    monkeypatch.setitem(vocabulary.FACTOR, NEW_NAME, Q.DATASET)
    plan = epochs.plan_from(_cfg(**{NEW_NAME: 30}))
    assert plan is not None and (plan.dataset_len, plan.batches_per_epoch) == (30, 15)
    # The names the tables had first still win (table order): num_train_samples is first.
    plan = epochs.plan_from(_cfg(**{NEW_NAME: 30, "num_train_samples": 40}))
    assert plan is not None and plan.dataset_len == 40


def test_a_name_added_only_to_the_vocabulary_reaches_lrd117(tmp_path, monkeypatch):
    """A torch.save checkpoint (read by content) whose loop saved its dataset size under a
    name no table held: no epoch plan, so no LRD117; with the name added to the vocabulary
    only, LRD117 says what each window policy takes (12 or 11 updates vs the horizon 9)."""
    import torch

    torch.save({"optimizer": {"state": {}, "param_groups": [{"lr": 1e-3, "params": []}]},
                "step": 5, "epoch": 1.5,
                "args": argparse.Namespace(**_cfg(**{NEW_NAME: 30}))}, tmp_path / "ck.pt")
    (r,) = inspect_path(tmp_path / "ck.pt")
    assert "LRD117" not in [f.code for f in r.findings]
    monkeypatch.setitem(vocabulary.FACTOR, NEW_NAME, Q.DATASET)
    (r,) = inspect_path(tmp_path / "ck.pt")
    (f,) = [f for f in r.findings if f.code == "LRD117"]
    assert f.evidence["plan"]["dataset_len"] == 30 and f.evidence["horizon"] == 9
    assert "takes 12" in f.message and "takes 11" in f.message


@pytest.mark.parametrize("name", ["loader_len", "num_batches"])
def test_vocabulary_names_the_old_table_lacked(name):
    """Names the vocabulary already knew for the loader length, which the epoch plan's own
    table did not: now one meaning, read by both."""
    plan = epochs.plan_from(_cfg(**{name: 15}))
    assert plan is not None and plan.batches_per_epoch == 15
