"""fix's second read of data.pkl (lrdoctor.repair.torchzip) is bounded on its own, and a file
that changes on disk while ``fix`` rewrites it is refused with nothing written.

The safe reader (lrdoctor.read.bytes.safeload) checks a file before ``fix`` re-reads it for rewriting;
these tests feed the re-reader hostile pickles directly, so they would fail if it only relied
on that earlier check.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from lrdoctor.core.errors import LimitExceeded, UnusableInput
from lrdoctor.repair import torchzip
from lrdoctor.repair.writer import Change
from tests.helpers import hostile

ROOT = Path(__file__).resolve().parents[2]


def _memo_bomb(n: int) -> bytes:
    """``n`` distinct memo entries (LONG_BINPUT), each a popped None."""
    return hostile.PROTO + b"".join(b"N" + hostile._put(i) + b"0" for i in range(n)) \
        + b"N" + hostile.STOP


def _ops_bomb(n: int) -> bytes:
    return hostile.PROTO + b"N0" * n + b"N" + hostile.STOP


def _reread(tmp_path: Path, blob: bytes):
    """``blob`` through torchzip's re-reader alone, as the data.pkl of a torch-shaped zip."""
    p = tmp_path / "evil.pt"
    p.write_bytes(hostile.torch_zip(blob))
    with open(p, "rb") as f, zipfile.ZipFile(f) as zf:
        arch = torchzip._Archive(p, f, zf, "archive/", blob)
        return torchzip.read_pickle(blob, arch)


# (payload, environment, the limit the refusal must name)
LIMITED = {
    "oversize": (lambda: hostile.PROTO + hostile._str("x" * 5000) + hostile.STOP,
                 {"LRDOCTOR_MAX_PICKLE_BYTES": "4096"}, "LRDOCTOR_MAX_PICKLE_BYTES"),
    "opcodes": (lambda: _ops_bomb(5000), {"LRDOCTOR_MAX_PICKLE_OPS": "1000"},
                "LRDOCTOR_MAX_PICKLE_OPS"),
    "memo_bomb": (lambda: _memo_bomb(3000), {"LRDOCTOR_MAX_PICKLE_MEMO": "1000"},
                  "LRDOCTOR_MAX_PICKLE_MEMO"),
    "deep_marks": (lambda: hostile.deep_marks(), {}, "LRDOCTOR_MAX_DEPTH"),
    "deep_tuples": (lambda: hostile.deep_tuples(), {}, "LRDOCTOR_MAX_DEPTH"),
    "deep_lists_memo": (lambda: hostile.deep_lists_memo(5000), {}, "LRDOCTOR_MAX_DEPTH"),
    "billion_laughs": (lambda: hostile.billion_laughs(), {}, "LRDOCTOR_MAX_NODES"),
    "nested_dict_laughs": (lambda: hostile.nested_dict_laughs(), {}, "LRDOCTOR_MAX_NODES"),
    "list_amplification": (lambda: hostile.list_amplification(), {}, "LRDOCTOR_MAX_ITEMS"),
    "dict_amplification": (lambda: hostile.dict_amplification(20_000, 1000), {},
                           "LRDOCTOR_MAX_ITEMS"),
    "huge_long4": (lambda: hostile.huge_long4(), {}, "LRDOCTOR_MAX_PICKLE_INT_BYTES"),
    "huge_long_text": (lambda: hostile.huge_long_text(), {}, "LRDOCTOR_MAX_PICKLE_INT_BYTES"),
}


@pytest.mark.parametrize("name", sorted(LIMITED))
def test_the_reread_enforces_the_limits_itself(name, tmp_path, monkeypatch):
    build, env, limit = LIMITED[name]
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(LimitExceeded) as e:
        _reread(tmp_path, build())
    msg = str(e.value)
    assert f"{limit}=" in msg and "evil.pt" in msg and "\n" not in msg


@pytest.mark.parametrize("name,blob,why", [
    ("hash_bomb", hostile.hash_bomb(), "costly to hash"),
    ("int_collisions", hostile.int_collisions(2000), "costly to hash"),
    ("bytearray_bomb", hostile.bytearray_bomb(), "BYTEARRAY8 longer than the pickle"),
    ("append_to_a_global", hostile.PROTO + hostile._global("mymod", "Thing") + b"Na"
     + hostile.STOP, "APPEND to a GlobalRef"),
    ("build_on_a_global", hostile.poison_payloads()["poison_storage_dtype"], "BUILD on a"),
    ("code_execution", hostile.reduce_call("os", "system", "x"), "'os.system', a code-exec"),
])
def test_the_reread_refuses_what_the_limited_machine_refuses(name, blob, why, tmp_path):
    with pytest.raises(UnusableInput, match=why) as e:
        _reread(tmp_path, blob)
    assert "evil.pt" in str(e.value) and "\n" not in str(e.value)


def test_the_reread_of_a_real_checkpoint_is_within_the_limits(tmp_path):
    """The limits are no obstacle to a real torch.save file (the same bytes the safe reader took)."""
    src = tmp_path / "in.pt"
    torch.save({"model": torch.nn.Linear(3, 2).state_dict(), "step": torch.tensor(4),
                "args": {"lr": 1e-3, "iters": 7}}, src)
    loaded = torchzip.load(src)
    try:
        assert loaded.root["args"]["iters"] == 7 and loaded.root["step"] == 4
        assert len(loaded.archive.storage_keys) == 3  # weight, bias, step
    finally:
        loaded.archive.close()


def _other_same_size(src: Path) -> bytes:
    """A torch.save of the same layout under ``src``'s name with a different ``iters``."""
    tmp = src.with_name("tmp-" + src.name)
    torch.save({"iters": 9, "w": torch.ones(2)}, tmp)
    zin = zipfile.ZipFile(tmp)
    out = src.with_name("swap-" + src.name)
    top = src.stem
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zo:
        for info in zin.infolist():
            zo.writestr(top + "/" + info.filename.split("/", 1)[1], zin.read(info))
    zin.close()
    tmp.unlink()
    data = out.read_bytes()
    out.unlink()
    return data


@pytest.mark.parametrize("how", ["replaced", "in_place"])
def test_a_file_changed_between_the_reads_is_refused_and_nothing_written(how, tmp_path,
                                                                        monkeypatch):
    src = tmp_path / "in.pt"
    torch.save({"iters": 7, "w": torch.ones(2)}, src)
    swap = _other_same_size(src)
    real = torchzip.read_pickle

    def change_then_read(data, archive):  # another process writes the file meanwhile
        if how == "replaced":
            new = src.with_name("new.pt")
            new.write_bytes(swap)
            os.replace(new, src)
        else:  # same inode; a same-size, valid zip with other data.pkl bytes
            with open(src, "r+b") as f:
                f.write(swap)
                f.truncate()
        return real(data, archive)

    monkeypatch.setattr(torchzip, "read_pickle", change_then_read)
    out = tmp_path / "out.pt"
    with pytest.raises(UnusableInput, match="changed on disk") as e:
        torchzip.rewrite(src, out, [Change(src.name, ("iters",), 7, 70)])
    assert str(e.value).startswith(str(src)) and "\n" not in str(e.value)
    assert not out.exists()


_CHANGE_DURING = """
import sys
from lrdoctor.repair import torchzip
real = torchzip.read_pickle
swap = open(sys.argv[1], "rb").read()
def change_then_read(data, archive):
    with open(archive.path, "r+b") as f:
        f.write(swap)
        f.truncate()
    return real(data, archive)
torchzip.read_pickle = change_then_read
from lrdoctor.cli import main
sys.argv = ["lrdoctor", *sys.argv[2:]]
main()
"""


def test_fix_exits_2_with_one_line_and_writes_nothing(tmp_path):
    src = tmp_path / "run"
    shutil.copytree(ROOT / "sample_checkpoints" / "torch-microstep", src)
    ckpt = next(src.glob("*.pt"))
    swap = tmp_path / "swap.bin"  # the same checkpoint with one byte of data.pkl changed
    data = ckpt.read_bytes()
    assert data.count(b"last_epoch") == 1
    swap.write_bytes(data.replace(b"last_epoch", b"last_epocH"))
    out = tmp_path / "fixed"
    before = sorted(p.name for p in tmp_path.iterdir())
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LRDOCTOR_TORCH_FREE_FIX", None)  # the default: torchzip rewrites the file
    p = subprocess.run([sys.executable, "-c", _CHANGE_DURING, str(swap), "fix", str(src),
                        "--out", str(out)], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=300)
    assert p.returncode == 2, (p.returncode, p.stderr[-2000:])
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "changed on disk" in lines[0] and ckpt.name in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == before  # no output, no leftovers
