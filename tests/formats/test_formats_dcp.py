"""The metadata-only torch.distributed.checkpoint reader, against folders written by
torch's own ``torch.distributed.checkpoint.save`` (single process, CPU)."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from lrdoctor.core.errors import UnsafePickle, UnusableInput
from lrdoctor.read.bytes import dcp
from lrdoctor.read.bytes.safeload import TensorRef
from tests.helpers.paths import TESTS


def _save(state: dict, path: Path) -> None:
    import warnings

    import torch.distributed.checkpoint as tdcp

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        tdcp.save(state, checkpoint_id=str(path))


def _loop_state(updates: int = 6, sched_calls: int | None = None):
    """A torch loop's state: AdamW + a LinearLR stepped ``sched_calls`` times."""
    import torch

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=20)
    for _ in range(updates):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
    for _ in range(updates if sched_calls is None else sched_calls):
        sched.step()
    return model, opt, sched


@pytest.fixture(scope="module")
def loop_ckpt(tmp_path_factory):
    model, opt, sched = _loop_state()
    path = tmp_path_factory.mktemp("dcp") / "ckpt"
    state = {"model": model.state_dict(), "optimizer": opt.state_dict(),
             "lr_scheduler": sched.state_dict(), "train_state": {"step": 6, "epoch": 1}}
    _save(state, path)
    return path, state


def test_tree_matches_what_was_saved(loop_ckpt):
    path, state = loop_ckpt
    assert dcp.is_dcp(path)
    st = dcp.load(path)
    # Non-tensor leaves come back exactly, re-nested along the planner's recorded paths
    # (param_groups is a list again, optimizer state keyed by the param ids).
    assert st.tree["lr_scheduler"] == state["lr_scheduler"]
    assert st.tree["train_state"] == {"step": 6, "epoch": 1}
    groups = st.tree["optimizer"]["param_groups"]
    assert isinstance(groups, list) and len(groups) == 1
    assert groups[0] == state["optimizer"]["param_groups"][0]
    # One-element tensors (AdamW's step) are read; the rest stay shape/dtype references.
    pstate = st.tree["optimizer"]["state"]
    assert {k: v["step"] for k, v in pstate.items()} == {"0": 6.0, "1": 6.0}
    ref = pstate["0"]["exp_avg"]
    assert isinstance(ref, TensorRef) and (ref.dtype, ref.shape) == ("float32", (3, 4))
    assert st.tree["model"]["weight"].shape == (3, 4)
    assert st.get("lr_scheduler.last_epoch") == 6 == st.flat["lr_scheduler.last_epoch"]
    assert st.get("optimizer.param_groups.0.lr") == opt_lr(state)
    assert st.files == [str(path / ".metadata"), str(path / "__0_0.distcp")]
    assert st.tensors == 8 and st.bytes_items == len(st.flat) - st.tensors
    assert not st.skipped


def opt_lr(state):
    return state["optimizer"]["param_groups"][0]["lr"]


def test_prefixes_read_only_those_items(loop_ckpt):
    path, _ = loop_ckpt
    st = dcp.load(path, prefixes=["lr_scheduler"])
    assert set(st.tree) == {"lr_scheduler"}
    assert st.tree["lr_scheduler"]["last_epoch"] == 6


def test_inspect_path_imports_no_torch(loop_ckpt):
    path, _ = loop_ckpt
    code = ("import sys, json; from lrdoctor.read.bytes import dcp; "
            f"st = dcp.load({str(path)!r}); "
            "print(json.dumps([st.tree['lr_scheduler']['last_epoch'], "
            "[m for m in ('torch', 'numpy') if m in sys.modules]]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=60)
    assert json.loads(out.stdout) == [6, []]


def _rewrite_metadata(src: Path, dst: Path, edit) -> None:
    """Copy a DCP folder, changing its Metadata with torch's own classes."""
    import shutil

    shutil.copytree(src, dst)
    with open(dst / ".metadata", "rb") as f:
        md = pickle.load(f)  # our own fixture, written by torch
    edit(md)
    with open(dst / ".metadata", "wb") as f:
        pickle.dump(md, f)


def _storage_of(md, fqn):
    return next(k for k in md.storage_data if k.fqn == fqn)


def test_transform_descriptors_are_refused_with_the_key(loop_ckpt, tmp_path):
    from dataclasses import replace

    def edit(md):
        k = _storage_of(md, "lr_scheduler.last_epoch")
        md.storage_data[k] = replace(md.storage_data[k], transform_descriptors=["stream.zstd"])

    _rewrite_metadata(loop_ckpt[0], tmp_path / "c", edit)
    with pytest.raises(UnusableInput) as e:
        dcp.load(tmp_path / "c")
    msg = str(e.value)
    assert "'lr_scheduler.last_epoch'" in msg and "stream.zstd" in msg and "\n" not in msg
    # Items elsewhere still read when asked for by prefix.
    assert dcp.load(tmp_path / "c", prefixes=["train_state"]).tree["train_state"]["step"] == 6


@pytest.mark.parametrize("where", ["../outside.distcp", "sub/__0_0.distcp"])
def test_storage_paths_cannot_leave_the_folder(loop_ckpt, tmp_path, where):
    from dataclasses import replace

    def edit(md):
        for k, v in list(md.storage_data.items()):
            md.storage_data[k] = replace(v, relative_path=where)

    _rewrite_metadata(loop_ckpt[0], tmp_path / "c", edit)
    (tmp_path / "outside.distcp").write_bytes((loop_ckpt[0] / "__0_0.distcp").read_bytes())
    with pytest.raises(UnusableInput, match="points outside the checkpoint"):
        dcp.load(tmp_path / "c")


def test_symlink_out_of_the_folder_is_refused(loop_ckpt, tmp_path):
    import shutil

    ck = tmp_path / "c"
    shutil.copytree(loop_ckpt[0], ck)
    outside = tmp_path / "elsewhere.distcp"
    (ck / "__0_0.distcp").rename(outside)
    os.symlink(outside, ck / "__0_0.distcp")
    with pytest.raises(UnusableInput, match="symlink leading out"):
        dcp.load(ck)


def test_truncated_data_file_is_one_line(loop_ckpt, tmp_path):
    import shutil

    ck = tmp_path / "c"
    shutil.copytree(loop_ckpt[0], ck)
    data = (ck / "__0_0.distcp").read_bytes()
    (ck / "__0_0.distcp").write_bytes(data[: len(data) // 3])
    with pytest.raises(UnusableInput, match="past the end of __0_0.distcp"):
        dcp.load(ck)


class _Custom:
    """A user class in one item: not on the allow-list."""

    def __init__(self):
        self.x = 1


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_unknown_class_leaves_one_item_unread(tmp_path):
    import io

    # An io.BytesIO value is torch.saved as a pickled BytesIO by DCP's default planner
    # (older torchtitan logs): inert, left unread rather than refusing the checkpoint.
    _save({"lr_scheduler": {"last_epoch": 3}, "extra": _Custom(), "log": io.BytesIO(b"x")},
          tmp_path / "c")
    st = dcp.load(tmp_path / "c", unknown_as_opaque=False)  # the strict mode
    assert st.tree["lr_scheduler"] == {"last_epoch": 3}
    assert "extra" in st.skipped and "_Custom" in st.skipped["extra"]
    assert "_io.BytesIO" in st.skipped["log"]
    # issue 28, the default: an unknown class in an item is an opaque value, its fields data
    st = dcp.load(tmp_path / "c")
    assert st.tree["lr_scheduler"] == {"last_epoch": 3} and not st.skipped
    assert st.tree["extra"].cls.endswith("_Custom") and st.tree["extra"].state == {"x": 1}


def test_code_execution_primitive_refuses_the_input(tmp_path):
    _save({"lr_scheduler": {"last_epoch": 3}, "evil": _Exploit()}, tmp_path / "c")
    with pytest.raises(UnsafePickle) as e:
        dcp.load(tmp_path / "c")
    assert "posix.system" in str(e.value) or "os.system" in str(e.value)
    assert "[evil]" in str(e.value)


def test_hostile_metadata_is_refused(tmp_path):
    ck = tmp_path / "c"
    ck.mkdir()
    (ck / "__0_0.distcp").write_bytes(b"")
    with open(ck / ".metadata", "wb") as f:
        pickle.dump(_Exploit(), f)
    with pytest.raises(UnsafePickle):
        dcp.load(ck)
    (ck / ".metadata").write_bytes(pickle.dumps({"not": "metadata"}))
    with pytest.raises(UnusableInput, match="malformed DCP metadata"):
        dcp.load(ck)


def test_big_bytes_item_is_skipped_not_read(tmp_path, monkeypatch):
    _save({"lr_scheduler": {"last_epoch": 3}, "blob": list(range(100_000))}, tmp_path / "c")
    monkeypatch.setenv("LRDOCTOR_MAX_DCP_ITEM_BYTES", str(64 << 10))
    st = dcp.load(tmp_path / "c")
    assert "blob" not in st.flat and "bytes left unread" in st.skipped["blob"]
    assert st.tree["lr_scheduler"]["last_epoch"] == 3


def test_cli_inspect_of_torch_dist_imports_no_torch():
    """The whole inspect path on a DCP checkpoint (megatron-core 0.19 torch_dist fixture)."""
    fixture = TESTS / "data" / "megatron_core_0_19" / "buggy"
    code = ("import sys, json; from typer.testing import CliRunner; from lrdoctor.cli import app; "
            f"r = CliRunner().invoke(app, ['inspect', {str(fixture)!r}, '--json']); "
            "print(json.dumps([r.exit_code, [m for m in ('torch', 'numpy', 'pandas', "
            "'matplotlib') if m in sys.modules]]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, timeout=120)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [1, []]


def test_metadata_symlink_out_of_the_folder_is_refused(loop_ckpt, tmp_path):
    import shutil

    ck = tmp_path / "c"
    shutil.copytree(loop_ckpt[0], ck)
    (ck / ".metadata").rename(tmp_path / "elsewhere.metadata")
    os.symlink(tmp_path / "elsewhere.metadata", ck / ".metadata")
    with pytest.raises(UnusableInput, match="symlink leading out"):
        dcp.load(ck)
