"""Which DCP bytes items content-first discovery reads (``reading._load_dcp``): small ones
and those whose key names scheduler/param-group/trainer/common state; a large item under
any other key is left unread (decided from ``.metadata``: its bytes are never touched),
named in the notes and ``extras["dcp_skipped"]``; and when the items read hold no
scheduler, the large ones are read after all, so the verdict is the full read's.

Folders are written by torch's own ``torch.distributed.checkpoint.save``."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from lrdoctor.inspect_api import inspect_path, read_state
from lrdoctor.read.bytes import dcp
from lrdoctor.read.scan import reading

BOUND = 64 << 10  # discovery's bound, made small so the "large" items stay small here
BIG = list(range(40_000))  # > BOUND once torch.saved (about 200 KB)


def _save(state: dict, path: Path) -> None:
    import torch.distributed.checkpoint as tdcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        tdcp.save(state, checkpoint_id=str(path))


def _loop(updates: int = 5):
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=50)
    for _ in range(updates):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
    return model, opt, sched


@pytest.fixture
def reads(monkeypatch):
    """Every (fqn-less) data-file read DCP makes: (relative path, offset, length)."""
    monkeypatch.setattr(reading, "DCP_SMALL_ITEM", BOUND)
    seen: list[tuple[str, int, int]] = []
    real = dcp._Files.read

    def read(self, rel, off, length):
        seen.append((rel, off, length))
        return real(self, rel, off, length)

    monkeypatch.setattr(dcp._Files, "read", read)
    return seen


def _item_length(ck: Path, fqn: str) -> int:
    md = dcp.read_metadata(ck)
    (chunks,) = [v for k, v in dcp._storage_index(md["storage_data"]).items() if k == fqn]
    return chunks[0][1]["length"]


def test_large_item_under_an_unrelated_key_is_left_unread_and_named(tmp_path, reads):
    model, opt, sched = _loop()
    ck = tmp_path / "ckpts" / "step_5"
    # megatron-core's dp_zero_gather_scatter param_state is one bytes item like this one
    # (a tuple is a leaf for DCP's flattening: one item).
    key = "optimizer.distributed.dp_group_idx_0.param_state/shard_0_1"
    _save({"model": model.state_dict(), "optimizer": opt.state_dict(),
           "scheduler": sched.state_dict(), "step": 5, key: (BIG,)}, ck)
    length = _item_length(ck, key)
    assert length > BOUND
    st = read_state(tmp_path / "ckpts")
    assert st.scheduler_progress.value == 5 and st.counter("optimizer.step").value == 5
    assert length not in [n for _, _, n in reads]  # its bytes were never read
    where = f"{ck / '.metadata'}:{key}"
    assert f"{length:,} bytes" in st.extras["dcp_skipped"][where]
    (note,) = [n for n in st.notes if "large DCP item" in n]
    assert key in note and f"{length:,} bytes" in note
    # Reported in the machine output too.
    (rep,) = inspect_path(tmp_path / "ckpts")
    assert where in json.loads(json.dumps(rep.to_dict()))["state"]["extras"]["dcp_skipped"]


def test_large_item_whose_key_names_scheduler_state_is_read(tmp_path, reads):
    model, opt, sched = _loop()
    ck = tmp_path / "c"
    _save({"model": model.state_dict(), "optimizer": opt.state_dict(),
           "lr_scheduler": {**sched.state_dict(), "history": (BIG,)}, "step": 5}, ck)
    length = _item_length(ck, "lr_scheduler.history")
    assert length > BOUND
    st = read_state(ck)
    assert length in [n for _, _, n in reads]
    assert "dcp_skipped" not in st.extras and not any("large DCP" in n for n in st.notes)
    assert st.scheduler_progress.value == 5


@pytest.mark.parametrize("key", ["common_state/shard_0_1", "args", "train_state",
                                 "optimizer.param_groups.0.lr_history",
                                 "optimizer.distributed.dp_group_idx_0.optimizer/shard_0.1"])
def test_state_keys_are_read_whatever_their_size(key):
    assert reading.dcp_item_matters(key)
    assert reading._dcp_leave(key, 1 << 30) is None


@pytest.mark.parametrize("key", ["optimizer.distributed.dp_group_idx_0.param_state/shard_0_1",
                                 "dataloader.dp_rank_0", "rng_state", "extra"])
def test_other_keys_are_read_only_when_small(key):
    assert not reading.dcp_item_matters(key)
    assert reading._dcp_leave(key, reading.DCP_SMALL_ITEM) is None
    assert "bytes" in reading._dcp_leave(key, reading.DCP_SMALL_ITEM + 1)


def test_scheduler_only_inside_a_large_item_is_still_found(tmp_path, reads, monkeypatch):
    """Nothing scheduler-like among the items read: the large ones are read after all, so
    the verdict is the one a full read gives (here: the scheduler is found and judged)."""
    model, opt, sched = _loop()
    ck = tmp_path / "c"
    _save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": 5,
           "extra": (sched.state_dict(), BIG)}, ck)
    length = _item_length(ck, "extra")
    assert length > BOUND
    st = read_state(ck)
    assert length in [n for _, _, n in reads]
    assert st.scheduler_progress.value == 5 and "dcp_skipped" not in st.extras
    monkeypatch.setattr(reading, "DCP_SMALL_ITEM", dcp.MAX_ITEM_BYTES)  # the full read
    full = read_state(ck)
    assert (full.scheduler_progress, full.schedule, full.counters) == \
        (st.scheduler_progress, st.schedule, st.counters)
