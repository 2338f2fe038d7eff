"""Epoch-end arithmetic: the updates an epoch-based loop really takes vs its horizon.

The arithmetic is checked against a real torch DataLoader and a real loop; the
checkpoints are written by a hand-written loop that saves its ``args`` Namespace
(``max_train_steps`` and the epoch knobs), as accelerate's no_trainer scripts do.
"""

from __future__ import annotations

import argparse
import math

import pytest

from lrdoctor import epochs
from lrdoctor.inspect_api import inspect_path


@pytest.mark.parametrize("n,bs,ws,drop", [(30, 2, 1, False), (31, 2, 1, False), (31, 2, 1, True),
                                          (50, 4, 2, False), (50, 4, 2, True), (7, 8, 1, False)])
def test_batches_per_epoch_is_len_dataloader(n, bs, ws, drop):
    import torch
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    ds = TensorDataset(torch.zeros(n, 1))
    lens = []
    for rank in range(ws):
        sampler = DistributedSampler(ds, num_replicas=ws, rank=rank, shuffle=False,
                                     drop_last=drop) if ws > 1 else None
        lens.append(len(DataLoader(ds, batch_size=bs, sampler=sampler, drop_last=drop)))
    assert set(lens) == {epochs.batches_per_epoch(n, bs, ws, drop)}


@pytest.mark.parametrize("L,E,k", [(15, 3, 4), (16, 3, 4), (7, 5, 3), (1, 4, 2)])
def test_updates_match_a_real_loop(L, E, k):
    """Count optimizer.step() calls of the three loop shapes."""
    def run(policy):
        n, micro = 0, 0
        for _ in range(E):
            for i in range(L):
                micro += 1
                if policy == "carry":
                    n += micro % k == 0
                elif policy == "drop":
                    n += (i + 1) % k == 0
                else:
                    n += (i + 1) % k == 0 or i + 1 == L
        return n
    for p in epochs.POLICIES:
        assert epochs.updates(L, E, k, p) == run(p), p


def _loop(path, *, horizon_rule: str, n=30, bs=2, ga=4, n_epochs=3):
    """A loop that carries accumulation windows across epochs (a global micro-step
    counter, as a DeepSpeed engine does) and sizes its cosine with ``horizon_rule``."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(0)
    dl = DataLoader(TensorDataset(torch.randn(n, 4)), batch_size=bs)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    per_epoch = len(dl) / ga
    max_train_steps = {"floor": n_epochs * math.floor(per_epoch),
                       "ceil": n_epochs * math.ceil(per_epoch),
                       "carry": (n_epochs * len(dl)) // ga}[horizon_rule]
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=max_train_steps)
    args = argparse.Namespace(num_train_epochs=n_epochs, per_device_train_batch_size=bs,
                              gradient_accumulation_steps=ga, max_train_steps=max_train_steps,
                              num_train_samples=n, learning_rate=1e-3)
    micro, step = 0, 0
    for epoch in range(n_epochs):
        for (x,) in dl:
            (model(x).pow(2).mean() / ga).backward()
            micro += 1
            if micro % ga == 0:
                opt.step()
                sched.step()
                opt.zero_grad()
                step += 1
        torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                    "lr_scheduler": sched.state_dict(), "step": step, "epoch": epoch,
                    "args": args}, path / f"epoch_{epoch}.pt")
    return step, max_train_steps


def test_floor_horizon_with_windows_across_epochs(tmp_path):
    steps, horizon = _loop(tmp_path, horizon_rule="floor")
    assert (steps, horizon) == (11, 9)  # 15 batches x 3 epochs / 4, vs 3 x floor(15/4)
    (r,) = inspect_path(tmp_path)
    (f,) = [f for f in r.findings if f.code == "LRD117"]
    assert f.severity.name == "ERROR"
    ev = f.evidence
    assert ev["policy"] == "carry" and ev["real_updates"] == 11 and ev["horizon"] == 9
    assert ev["difference"] == 2 and ev["horizon_formula"] == "epochs x floor(L/GA)"
    assert ev["updates_by_policy"] == {"flush": 12, "drop": 9, "carry": 11}
    assert ev["plan"]["batches_per_epoch"] == 15 and ev["plan"]["source"].endswith("args")
    assert "30 samples / batch 2" in f.message and "2 update(s) more" in f.message


@pytest.mark.parametrize("rule", ["carry"])
def test_horizon_the_loop_really_takes_is_silent(tmp_path, rule):
    steps, horizon = _loop(tmp_path, horizon_rule=rule)
    assert steps == horizon == 11
    reps = inspect_path(tmp_path, all=True)
    # After one epoch, "never steps a short window" fits the counters too (3 updates):
    # an info there; from the second epoch end on the counters pick "carry", and agree.
    assert [[(f.code, f.severity.name) for f in r.findings if f.code == "LRD117"]
            for r in reps] == [[("LRD117", "INFO")], [], []]


def test_policy_unknown_mid_epoch_is_info(tmp_path):
    """A checkpoint saved mid-epoch cannot tell the loop's window policy: info, with
    what each policy would take."""
    import torch

    torch.save({"optimizer": {"state": {}, "param_groups": [{"lr": 1e-3, "params": []}]},
                "step": 5, "epoch": 1.5,
                "args": argparse.Namespace(num_train_epochs=3, per_device_train_batch_size=2,
                                           gradient_accumulation_steps=4, max_train_steps=9,
                                           num_train_samples=30)}, tmp_path / "ck.pt")
    (r,) = inspect_path(tmp_path / "ck.pt")
    (f,) = [f for f in r.findings if f.code == "LRD117"]
    assert f.severity.name == "INFO"
    assert "takes 12" in f.message and "takes 11" in f.message


# ---------------------------------------------------------------- replay

def _replay(n, bs, ga, n_epochs, *, flush=True, short="step", drop_last=False, total=None):
    import numpy as np
    import pandas as pd

    from lrdoctor.replay import engine
    from lrdoctor.replay.config import config_from_dict

    cfg = config_from_dict({
        "schedule": {"family": "torch", "kind": "CosineAnnealingLR", "max_lr": 1e-3},
        "train": {"steps": n_epochs, "samples_per_step": n, "micro_batch_size": bs,
                  "gradient_accumulation": ga, "drop_last": drop_last},
        "accumulation": {"flush_at_step_end": flush, "short_window": short},
        **({"budget": {"formula": "explicit", "total": total}} if total else {}),
    }, "run.yaml")
    samples = pd.DataFrame({"step": np.repeat(np.arange(n_epochs), n),
                            "tokens": np.ones(n * n_epochs, dtype=np.int64)})
    return engine.replay_fast(cfg, samples)


@pytest.mark.parametrize("n,bs,drop", [(30, 2, False), (31, 2, False), (31, 2, True)])
@pytest.mark.parametrize("flush,short,policy", [(True, "step", "flush"), (True, "drop", "drop"),
                                                (False, "step", "carry")])
def test_replay_counts_what_a_dataloader_loop_takes(n, bs, drop, flush, short, policy):
    """replay's updates == lrdoctor.epochs == a real loop over a torch DataLoader."""
    import torch
    from torch.utils.data import DataLoader, TensorDataset

    ga, n_epochs = 4, 3
    L = len(DataLoader(TensorDataset(torch.zeros(n, 1)), batch_size=bs, drop_last=drop))
    rep = _replay(n, bs, ga, n_epochs, flush=flush, short=short, drop_last=drop)
    updates = int(rep.trace["is_update"].sum())
    assert updates == epochs.updates(L, n_epochs, ga, policy)
    assert rep.nominal_updates == updates
    assert len(rep.trace["rows"]) == L * n_epochs  # drop_last removed the short batch


def test_replay_names_the_floor_horizon_of_a_carrying_loop():
    """OpenRLHF PR 1351's shape: horizon epochs x floor(L/GA) = 9, windows carried across
    epochs take 11: LRD201 with the numbers."""
    rep = _replay(30, 2, 4, 3, flush=False, total=9)
    from lrdoctor.replay.analysis import findings

    found = {f.code: f for f in findings(rep)}
    assert "LRD201" in found, [(f.code, f.message) for f in found.values()]
    assert int(rep.trace["is_update"].sum()) == 11
