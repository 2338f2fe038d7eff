"""replay: a budget counted in generation batches while the scheduler counts train steps
(verl issue 991, DAPO dynamic sampling: filtered groups make one train step consume
several generation batches)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lrdoctor.replay import engine
from lrdoctor.replay.analysis import findings
from lrdoctor.replay.config import config_from_dict


def _run(budget):
    cfg = config_from_dict({
        "schedule": {"family": "hf", "kind": "cosine", "max_lr": 1e-6, "warmup": 2},
        "train": {"steps": 40, "samples_per_step": 16, "micro_batch_size": 4,
                  "gradient_accumulation": 4},
        "scheduler": {"step_on": "rollout_step"},
        "budget": budget,
    }, "run.yaml")
    samples = pd.DataFrame({"step": np.repeat(np.arange(40), 16),
                            "tokens": np.full(640, 100, dtype=np.int64)})
    return engine.replay_fast(cfg, samples)


def test_generation_batches_budget_is_named():
    """100 generation batches budgeted; with filtering 40 train steps took them all (2.5 per
    step): the cosine stops at 40% of its horizon."""
    rep = _run({"formula": "generation_steps", "total": 100})
    by = {f.code: f for f in findings(rep)}
    f = by["LRD202"]
    assert f.evidence["generation_batches"] == 100
    assert f.evidence["generation_batches_per_train_step"] == 2.5
    assert f.evidence["horizon"] == 100 and f.evidence["scheduler_progress_end"] == 40
    assert "generation batches (100)" in f.message and "2.5 generation batches" in f.message
    assert "size the horizon in train steps (40)" in f.fix
    # the LR at the end is the HF cosine at 40 of 100 steps, well above the floor
    assert rep.trace["lr"][-1] > 0.5e-6


def test_train_step_budget_is_silent():
    rep = _run({"formula": "explicit", "total": 40})
    assert not [f for f in findings(rep) if f.code in ("LRD201", "LRD202")]


def test_generation_budget_needs_a_total():
    from lrdoctor.core.errors import UnusableInput

    with pytest.raises(UnusableInput, match="generation_steps needs budget.total"):
        _run({"formula": "generation_steps"})
