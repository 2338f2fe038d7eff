"""replay: the loss divisor of each strategy as an effective LR scale per update.

The reference is autograd: a per-token loss ``w * 1`` on a real torch parameter, each
rank's loss divided as the strategy says, rank gradients averaged as DDP does; the
gradient of one update, over the right one, is that update's LR scale.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lrdoctor.replay import engine, loss_scale
from lrdoctor.replay.analysis import findings
from lrdoctor.replay.config import config_from_dict


def _rep(strategy, dp=2, sps=36, ga=4, seed=0):
    cfg = config_from_dict({
        "schedule": {"family": "hf", "kind": "constant", "max_lr": 1e-3},
        "train": {"steps": 2, "samples_per_step": sps, "micro_batch_size": 2,
                  "gradient_accumulation": ga},
        "dp": {"size": dp},
        "batching": {"strategy": "static", "loss_normalization": strategy},
    }, "run.yaml")
    rng = np.random.default_rng(seed)
    samples = pd.DataFrame({"step": np.repeat(np.arange(2), sps),
                            "tokens": rng.integers(10, 500, 2 * sps)})
    return engine.replay_fast(cfg, samples)


def _autograd_scales(rep, strategy):
    import torch

    n = loss_scale.rank_tokens(rep)
    t = rep.trace
    k = rep.cfg.train.gradient_accumulation
    out = []
    for w in np.unique(t["window"][t["applied"]]):
        tok = n[t["window"] == w]
        total, dp = tok.sum(), tok.shape[1]
        grads = []
        for r in range(dp):
            p = torch.zeros((), dtype=torch.float64, requires_grad=True)
            loss = torch.zeros((), dtype=torch.float64)
            for m in range(len(tok)):
                tokens = p * torch.ones(int(tok[m, r]), dtype=torch.float64)  # d/dp = 1 each
                if tok[m, r] == 0:
                    continue
                if strategy == "per_micro_batch_tokens":
                    loss = loss + tokens.mean() / k
                elif strategy == "window_tokens":
                    loss = loss + tokens.sum() / tok[:, r].sum()
                else:  # global, x dp to undo DDP's mean
                    loss = loss + tokens.sum() / total * dp
            loss.backward()
            grads.append(float(p.grad) if p.grad is not None else 0.0)
        out.append(sum(grads) / dp)  # DDP averages; the right gradient here is 1
    return out


@pytest.mark.parametrize("strategy", loss_scale.STRATEGIES)
def test_scale_per_update_matches_autograd(strategy):
    rep = _rep(strategy)
    sc = loss_scale.scale(rep, strategy)
    ref = _autograd_scales(rep, strategy)
    assert sc["updates"] == len(ref)
    assert sc["scale_per_update"]["min"] == pytest.approx(min(ref), rel=1e-12)
    assert sc["scale_per_update"]["max"] == pytest.approx(max(ref), rel=1e-12)


def test_per_micro_batch_divisor_short_window_trains_at_a_quarter():
    """36 sequences, dp 2, micro-batch 2: 9 micro-batches per rank, k 4: windows of 4, 4
    and 1; dividing each micro-batch by its own tokens and by k, the last trains at 1/4."""
    rep = _rep("per_micro_batch_tokens")
    (f,) = [f for f in findings(rep) if f.code == "LRD215"]
    assert f.evidence["scale_per_update"]["min"] == pytest.approx(0.25)
    assert f.evidence["updates_off"] == 2  # one short window per train step
    assert f.evidence["token_weight"]["max"] > 1.5
    from lrdoctor.replay.analysis import summarize

    assert summarize(rep)["loss_scale"]["scale_per_update"]["min"] == pytest.approx(0.25)


def test_global_window_divisor_is_silent():
    rep = _rep("global_window_tokens")
    assert not [f for f in findings(rep) if f.code == "LRD215"]
    assert loss_scale.scale(rep, "global_window_tokens")["scale_per_update"] == {
        "min": 1.0, "max": 1.0, "mean": 1.0}
