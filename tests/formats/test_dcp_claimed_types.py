"""The DCP reader narrows every field ``.metadata`` claims before it uses it.

Bugs found by typing the untrusted ``.metadata`` fields honestly (``object``, narrowed
with isinstance: mypy strict on lrdoctor.read.bytes.dcp). Each field below is one a
hostile or corrupt file may set to anything; each ended in an unexpected TypeError
(a traceback, not one line) or in a tree of the wrong type. The folders are written
by torch's own ``torch.distributed.checkpoint.save`` (a plain torch loop: AdamW +
LinearLR), then one field is changed with torch's own metadata classes.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.read.bytes import dcp
from lrdoctor.read.bytes.safeload import TensorRef
from tests.formats.test_formats_dcp import _loop_state, _rewrite_metadata, _save, _storage_of


@pytest.fixture(scope="module")
def loop_ckpt(tmp_path_factory):
    """The folder torch's DCP save writes for a torch loop (as test_formats_dcp's)."""
    model, opt, sched = _loop_state()
    path = tmp_path_factory.mktemp("dcp") / "ckpt"
    _save({"model": model.state_dict(), "optimizer": opt.state_dict(),
           "lr_scheduler": sched.state_dict(), "train_state": {"step": 6, "epoch": 1}}, path)
    return path, None


def test_transform_descriptors_that_are_not_a_list(loop_ckpt, tmp_path):
    """transform_descriptors=7 was iterated for the message: TypeError."""
    def edit(md):
        k = _storage_of(md, "lr_scheduler.last_epoch")
        md.storage_data[k] = replace(md.storage_data[k], transform_descriptors=7)

    _rewrite_metadata(loop_ckpt[0], tmp_path / "c", edit)
    with pytest.raises(UnusableInput) as e:
        dcp.load(tmp_path / "c")
    msg = str(e.value)
    assert "'lr_scheduler.last_epoch'" in msg and "transforms 7" in msg and "\n" not in msg


def test_relative_path_that_is_not_a_string(loop_ckpt, tmp_path):
    """A tensor's relative_path=5 was joined to the folder: TypeError. Now the tensor
    stays a shape reference and the read of the checkpoint goes on."""
    def edit(md):
        k = _storage_of(md, "model.weight")
        md.storage_data[k] = replace(md.storage_data[k], relative_path=5)

    _rewrite_metadata(loop_ckpt[0], tmp_path / "c", edit)
    st = dcp.load(tmp_path / "c")
    ref = st.tree["model"]["weight"]
    assert isinstance(ref, TensorRef) and ref.shape == (3, 4)
    assert ref.path == str(tmp_path / "c" / ".metadata")
    assert st.tree["train_state"] == {"step": 6, "epoch": 1}


def test_tensor_size_that_is_not_ints(loop_ckpt, tmp_path):
    """A TensorStorageMetadata size of ('a', 'b') was multiplied out: TypeError. A size
    that is not a tuple of ints is no size, as a size that is not a tuple always was:
    the item is then read as a one-element tensor, which it is not, and that is refused
    in one line naming the key."""
    def edit(md, size):
        meta = md.state_dict_metadata["model.bias"]
        md.state_dict_metadata["model.bias"] = replace(meta, size=size)

    for name, size in [("ints", ("a", "b")), ("tuple", None)]:
        _rewrite_metadata(loop_ckpt[0], tmp_path / name, lambda md: edit(md, size))
        with pytest.raises(UnusableInput) as e:
            dcp.load(tmp_path / name)
        assert "[model.bias]" in str(e.value) and "holds something else" in str(e.value)
        st = dcp.load(tmp_path / name, prefixes=["model.weight", "train_state"])
        assert st.tree["model"]["weight"].shape == (3, 4)


def test_planner_paths_cannot_make_the_tree_a_list(loop_ckpt, tmp_path):
    """Planner paths whose first parts are 0..n-1 re-nested the top level into a list,
    which every layout then called ``.get`` on (``DcpState.tree`` is a dict)."""
    def edit(md):
        md.planner_data["train_state.step"] = (0, "step")
        md.planner_data["train_state.epoch"] = (0, "epoch")

    _rewrite_metadata(loop_ckpt[0], tmp_path / "c", edit)
    st = dcp.load(tmp_path / "c", prefixes=["train_state"])
    assert isinstance(st.tree, dict)
    assert st.tree == {"0": {"step": 6, "epoch": 1}}
    assert st.get("0.step") == 6
