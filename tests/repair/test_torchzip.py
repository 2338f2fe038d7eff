"""The torch-free rewrite of torch.save zip files (lrdoctor.repair.torchzip), checked with torch.

Every output is loaded back with real ``torch.load(weights_only=True)`` and
``torch.load(mmap=True)``: tensors equal to the input's, changed fields as planned,
every other key unchanged. ``fix`` itself is run once with torch unimportable.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from lrdoctor.core.repair import key_str
from lrdoctor.repair import plan_fix, torchzip, write_fix
from lrdoctor.repair.standins import PICKLE_MODULE, classes, safe_globals
from lrdoctor.repair.writer import Change
from tests.helpers.fix_support import diff, megatron_run

ROOT = Path(__file__).resolve().parents[2]
SAMPLES = ROOT / "sample_checkpoints"


def tload(path: Path, **kw):
    with torch.serialization.safe_globals([argparse.Namespace, *safe_globals()]):
        return torch.load(path, weights_only=True, map_location="cpu", **kw)


def check(src: Path, out: Path, changes: list[Change]) -> None:
    """``out`` loads both ways, differs from ``src`` exactly at ``changes``, and is aligned."""
    a = tload(src)
    for b in (tload(out), tload(out, mmap=True)):
        changed = {c.key: [] for c in changes}
        for d in diff(a, b):  # every difference lies inside a planned field, each one differs
            owner = [k for k in changed if d[:len(k)] == k]
            assert owner, f"unplanned difference at {key_str(d)}"
            changed[owner[0]].append(d)
        assert all(changed.values()), changed
        for c in changes:
            got = b
            for k in c.key:
                got = getattr(got, k) if isinstance(got, argparse.Namespace) else got[k]
            was = a
            for k in c.key:
                was = getattr(was, k) if isinstance(was, argparse.Namespace) else was[k]
            if isinstance(was, torch.Tensor):  # a 0-d tensor stays one, in its dtype
                assert isinstance(got, torch.Tensor) and got.dtype == was.dtype
                assert got.shape == was.shape and got.item() == c.after
            else:
                assert type(got) is type(was) and got == c.after, key_str(c.key)
    with zipfile.ZipFile(out) as zf, open(out, "rb") as f:
        for info in zf.infolist():  # torch's reader maps storages from 64-byte boundaries
            f.seek(info.header_offset + 26)
            n, e = int.from_bytes(f.read(2), "little"), int.from_bytes(f.read(2), "little")
            assert (info.header_offset + 30 + n + e) % 64 == 0, info.filename
            assert info.compress_type == zipfile.ZIP_STORED
        with zipfile.ZipFile(src) as zs:  # storages copied byte for byte
            for name in zs.namelist():
                if "/data/" in name and name in zf.namelist():
                    assert zs.read(name) == zf.read(name), name


def test_rewrite_keeps_everything_but_the_planned_fields(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    m(torch.randn(2, 4)).sum().backward()
    opt.step()
    sched = torch.optim.lr_scheduler.LinearLR(opt, 1.0, 0.1, total_iters=10)
    enum = classes()["megatron.core.enums.ModelType"]
    shared = [1, 2]
    src = tmp_path / "in.pt"
    torch.save({"model": m.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(),
                "args": argparse.Namespace(lr=1e-3, iters=7, dev=torch.device("cpu"),
                                           dtype=torch.bfloat16, blob=b"\x00\xff",
                                           model_type=enum(1)),
                "half": torch.arange(6, dtype=torch.float16).reshape(2, 3)[:, 1:],
                "count": torch.tensor(5, dtype=torch.int64), "a": shared, "b": shared},
               src, pickle_module=PICKLE_MODULE)  # the stand-in enum under Megatron's name
    changes = [Change(src.name, ("scheduler", "last_epoch"), 0, 40),
               Change(src.name, ("scheduler", "_last_lr"), [1e-3], [5e-4]),
               Change(src.name, ("args", "iters"), 7, 70),
               Change(src.name, ("optimizer", "state", 0, "step"), 1.0, 9.0),
               Change(src.name, ("count",), 5, 12)]
    out = tmp_path / "out.pt"
    torchzip.rewrite(src, out, changes)
    check(src, out, changes)
    b = tload(out)
    assert b["a"] is b["b"]  # shared objects stay shared
    assert b["args"].blob == b"\x00\xff" and b["args"].dtype is torch.bfloat16
    assert b["optimizer"]["state"][1]["step"].item() == 1.0  # the other step untouched


def test_a_changed_field_must_still_hold_the_planned_value(tmp_path):
    from lrdoctor.core.errors import UnusableInput

    src = tmp_path / "in.pt"
    torch.save({"step": torch.tensor(3.0)}, src)
    with pytest.raises(UnusableInput, match="expected 4"):
        torchzip.rewrite(src, tmp_path / "out.pt", [Change(src.name, ("step",), 4, 8)])
    assert not (tmp_path / "out.pt").exists()


@pytest.fixture
def torch_free_writer(monkeypatch):
    monkeypatch.delenv("LRDOCTOR_TORCH_FREE_FIX", raising=False)  # the default


def _check_plan(plan, src_root: Path, out: Path) -> None:
    by_file: dict[str, list[Change]] = {}
    for c in plan.changes:
        if c.kind == "pickle":
            by_file.setdefault(c.file, []).append(c)
    assert by_file, "no pickle change planned"
    for rel, cs in by_file.items():
        s = src_root / rel if src_root.is_dir() else src_root
        o = out / rel if out.is_dir() else out
        check(s, o, cs)


def test_megatron_rank_files(tmp_path, torch_free_writer):
    run = megatron_run(tmp_path / "run")
    plan = plan_fix(run)
    write_fix(plan, tmp_path / "fixed")
    assert {c.file for c in plan.changes} == {
        f"iter_0000050/mp_rank_{r:02d}/model_optim_rng.pt" for r in range(2)}
    _check_plan(plan, plan.root, tmp_path / "fixed")


@pytest.mark.parametrize("sample", ["torch-microstep", "roll-overshoot"])
def test_samples_in_process(sample, tmp_path, torch_free_writer):
    plan = plan_fix(SAMPLES / sample)
    write_fix(plan, tmp_path / "fixed")
    _check_plan(plan, plan.root, tmp_path / "fixed")


_BLOCK = """
import os
import sys
class _NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, _NoTorch())
from lrdoctor.cli import main
sys.argv = ["lrdoctor", *sys.argv[1:]]
try:
    main()
finally:
    if "torch" in sys.modules:
        sys.stderr.write("torch was imported")
        sys.stderr.flush()
        os._exit(99)
"""


@pytest.mark.parametrize("sample", ["torch-microstep", "roll-overshoot", "megatron"])
def test_fix_runs_with_torch_unimportable(sample, tmp_path):
    src = megatron_run(tmp_path / "run") if sample == "megatron" else SAMPLES / sample
    out = tmp_path / "fixed"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env.pop("LRDOCTOR_TORCH_FREE_FIX", None)
    p = subprocess.run([sys.executable, "-c", _BLOCK, "fix", str(src),
                        "--out", str(out)], capture_output=True, text=True, env=env,
                       cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
    plan = plan_fix(src)  # with torch, here: the same fields
    doc = json.loads((out / "lrdoctor-fix.json").read_text())
    assert {(c["file"], c["key"]) for c in doc["changes"]} == \
        {(c.file, c.key_str) for c in plan.changes}
    _check_plan(plan, plan.root, out)


def test_legacy_files_name_the_torch_extra_and_are_written_by_torch_where_installed(tmp_path):
    from lrdoctor.extras import MissingExtra
    from lrdoctor.repair import writer

    src = tmp_path / "legacy.pt"
    torch.save({"step": 3, "w": torch.ones(2)}, src, _use_new_zipfile_serialization=False)
    assert not torchzip.is_torch_zip(src)
    with pytest.raises(MissingExtra, match=r"pip install 'lrdoctor\[torch\]'"):
        torchzip.load(src)
    out = tmp_path / "out"
    writer.write_output(src, out, [src.name], [Change(src.name, ("step",), 3, 6)],
                        {"command": "fix"})
    got = tload(out)
    assert got["step"] == 6 and torch.equal(got["w"], torch.ones(2))
