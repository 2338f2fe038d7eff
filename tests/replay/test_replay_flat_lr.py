"""LRD201/LRD202 on an LR that does not move (Megatron ``lr_decay_style: constant``, as
RLinf's shipped configs use): the drift harms no update's LR, so neither is an error.
The schedule is megatron-core's ``OptimizerParamScheduler.get_lr`` (lrdoctor.schedules.
megatron, compared with the real class in tests/schedules); the loop is ROLL issue 442's
token budget (two updates per step where one was budgeted)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from lrdoctor.core.findings import Severity
from lrdoctor.replay import analysis, engine
from lrdoctor.replay.config import config_from_dict


def _cfg(kind: str, warmup: float = 0.0, steps: int = 64, formula: str = "roll",
         total: float | None = None) -> dict:
    return {"schedule": {"family": "megatron", "kind": kind, "max_lr": 1e-6, "min_lr": 1e-7,
                         "warmup": warmup},
            "budget": {"formula": formula, **({"total": total} if total else {})},
            "train": {"steps": steps, "samples_per_step": 1024, "micro_batch_size": 2,
                      "gradient_accumulation": 64},
            "dp": {"size": 8},
            "batching": {"strategy": "token_budget", "max_tokens_per_microbatch": 8192}}


def _long(steps: int = 4) -> pd.DataFrame:
    """Every sequence over 4096 tokens: one per micro-batch, 2 updates per step."""
    rng = np.random.default_rng(0)
    return pd.DataFrame({"step": np.repeat(np.arange(steps), 1024),
                         "tokens": rng.integers(4097, 8193, steps * 1024)})


def _found(cfg: dict) -> tuple[dict, dict]:
    rep = engine.replay_fast(config_from_dict(cfg), _long())
    s = analysis.summarize(rep)
    return s, {f.code: f for f in analysis.findings(rep, s)}


def test_overshoot_on_a_constant_lr_is_informational():
    s, found = _found(_cfg("constant"))
    assert s["progress_ratio"] == 2.0  # 128 updates over a 64-update horizon
    f = found["LRD201"]
    assert f.severity == Severity.INFO
    assert "does not move past warmup (1e-06" in f.message


def test_overshoot_on_cosine_stays_an_error():
    s, found = _found(_cfg("cosine"))
    assert s["progress_ratio"] == 2.0
    assert found["LRD201"].severity == Severity.ERROR
    assert "does not move" not in found["LRD201"].message


def test_constant_after_warmup_the_run_finishes_is_flat_too():
    # warmup 8 updates: both the replay (128) and the horizon (64) end past it.
    _, found = _found(_cfg("constant", warmup=8))
    assert found["LRD201"].severity == Severity.INFO


def test_undershoot_on_a_constant_lr_is_informational_and_on_linear_a_warning():
    # Horizon 512 updates given explicitly; the run takes 128: ratio 0.25.
    s, found = _found(_cfg("constant", formula="explicit", total=512))
    assert s["progress_ratio"] == 0.25
    assert found["LRD202"].severity == Severity.INFO
    _, found = _found(_cfg("linear", formula="explicit", total=512))
    assert found["LRD202"].severity == Severity.WARNING


def test_a_constant_lr_still_warming_up_at_the_end_moves():
    # Warmup 400 of a 512 horizon: the run (128) ends inside it, the horizon past it:
    # the LR the run sees moves, so the undershoot keeps its warning.
    _, found = _found(_cfg("constant", warmup=400, formula="explicit", total=512))
    assert found["LRD202"].severity == Severity.WARNING
