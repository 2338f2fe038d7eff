"""lrdoctor.read.bytes.safeload against real torch.save files, and against hostile pickles.

Every non-tensor value and every tensor's dtype/shape must match what
torch.load gives; payloads that would run code must be refused before anything runs.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import io
import os
import pathlib
import pickle
import subprocess
import sys
import zipfile
from collections import OrderedDict

import pytest
import torch

from lrdoctor.core.errors import UnsafePickle, UnusableInput
from lrdoctor.read.bytes import safeload
from lrdoctor.read.bytes.safeload import Opaque, TensorRef

PY = sys.executable


# --------------------------------------------------------------------------- helpers


def expected(obj):
    """What safeload should give for an object torch.load returned (tensors: dtype+shape)."""
    import numpy as np

    if isinstance(obj, torch.Tensor):
        return ("tensor", str(obj.dtype).removeprefix("torch."), tuple(obj.shape))
    if isinstance(obj, torch.Size):
        return tuple(obj)
    if isinstance(obj, (torch.dtype, torch.device)):
        return str(obj)
    if isinstance(obj, enum.Enum):
        return obj.value
    if isinstance(obj, argparse.Namespace):
        return Opaque("argparse.Namespace", state=expected(vars(obj)))
    if isinstance(obj, np.ndarray):
        return Opaque("numpy.ndarray", state={"dtype": obj.dtype.str, "shape": obj.shape,
                                               "values": obj.ravel().tolist()})
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, pathlib.PurePath):
        return str(obj)
    if isinstance(obj, dict):
        return {k: expected(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [expected(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(expected(v) for v in obj)
    if isinstance(obj, (set, frozenset, int, float, str, bytes, bytearray, complex, type(None))):
        return obj
    if hasattr(obj, "__dict__"):  # an allow-listed data class (TrainingArguments, loss scaler)
        return Opaque(f"{type(obj).__module__}.{type(obj).__qualname__}",
                      state=expected(dict(vars(obj))))
    raise AssertionError(f"no expectation for {type(obj)}")


def ours(obj):
    """safeload's result with TensorRefs reduced to dtype+shape, comparable with expected()."""
    if isinstance(obj, TensorRef):
        return ("tensor", obj.dtype, obj.shape)
    if isinstance(obj, Opaque):
        return Opaque(obj.cls, state=ours(obj.state))
    if isinstance(obj, dict):
        return {k: ours(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [ours(v) for v in obj]
    if isinstance(obj, tuple):
        return tuple(ours(v) for v in obj)
    return obj


def assert_same_as_torch(path):
    theirs = torch.load(path, weights_only=False)
    mine = safeload.load(path)
    assert ours(mine) == expected(theirs)
    return mine, theirs


def _trained_state():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-3, total_steps=100)
    for _ in range(3):
        opt.zero_grad()
        model(torch.randn(5, 4)).pow(2).sum().backward()
        opt.step()
        sched.step()
    return model, opt, sched


# --------------------------------------------------------------------------- real checkpoints


def test_optimizer_scheduler_and_odd_values_match_torch_load(tmp_path):
    model, opt, sched = _trained_state()
    base = torch.arange(20, dtype=torch.float32)
    ckpt = {
        "model": model.state_dict(),
        "optimizer": opt.state_dict(),
        "lr_scheduler": sched.state_dict(),
        "args": argparse.Namespace(lr=3e-4, train_iters=1000, lr_decay_style="cosine",
                                   params_dtype=torch.bfloat16, save=pathlib.Path("/ckpt/run"),
                                   ranks=[0, 1], extra={"a": (1, 2.5, None)}),
        "view": base[5:9],
        "strided": base.view(4, 5).t(),
        "bf16": torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
        "fp16": torch.tensor([[0.25]], dtype=torch.float16),
        "param": torch.nn.Parameter(torch.ones(2, 2)),
        "size": torch.Size([3, 4]),
        "device": torch.device("cuda", 1),
        "dtype": torch.float16,
        "misc": OrderedDict(s={1, 2}, f=frozenset({3}), b=b"\x00\xffraw", c=2 + 3j,
                            ba=bytearray(b"xy"), big=2**70, neg=-7, e=[]),
        "iteration": 3,
    }
    path = tmp_path / "model_optim_rng.pt"
    torch.save(ckpt, path)
    mine, theirs = assert_same_as_torch(path)

    step = mine["optimizer"]["state"][0]["step"]
    assert step.dtype == "float32" and step.shape == ()
    assert safeload.read_values(step) == [3.0]
    assert mine["view"].storage_offset == 5
    assert safeload.read_values(mine["view"]) == [5.0, 6.0, 7.0, 8.0]
    assert mine["strided"].stride == (1, 5)
    assert safeload.read_values(mine["strided"]) == theirs["strided"].flatten().tolist()
    assert safeload.read_values(mine["bf16"]) == [1.5, -2.0]
    assert safeload.read_values(mine["fp16"]) == [0.25]
    assert mine["lr_scheduler"]["last_epoch"] == 3
    assert mine["args"].state["params_dtype"] == "torch.bfloat16"
    exp_avg = mine["optimizer"]["state"][0]["exp_avg"]
    assert safeload.read_values(exp_avg) == theirs["optimizer"]["state"][0]["exp_avg"].flatten().tolist()


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16,
                                   torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8,
                                   torch.bool, torch.complex64, torch.uint16,
                                   torch.float8_e4m3fn, torch.float8_e5m2])
def test_read_values_decodes_each_dtype(tmp_path, dtype):
    src = torch.tensor([[0.0, 1.0, -2.5], [3.25, 100.0, -0.125]])
    if dtype in (torch.uint8, torch.uint16):
        src = src.abs()
    t = src.to(dtype)
    path = tmp_path / "t.pt"
    torch.save({"t": t, "col": t[:, 1]}, path)
    got = safeload.load(path)
    assert got["t"].dtype == str(dtype).removeprefix("torch.")
    want = t.flatten().tolist() if dtype not in (torch.float8_e4m3fn, torch.float8_e5m2) \
        else t.float().flatten().tolist()
    assert safeload.read_values(got["t"]) == want
    assert len(safeload.read_values(got["col"])) == 2


def test_read_values_refuses_big_tensors(tmp_path):
    path = tmp_path / "big.pt"
    torch.save({"w": torch.zeros(100)}, path)
    ref = safeload.load(path)["w"]
    with pytest.raises(UnusableInput, match="100-element"):
        safeload.read_values(ref)
    assert len(safeload.read_values(ref, limit=100)) == 100


def test_bare_storages_new_dtypes_and_meta_tensors(tmp_path):
    path = tmp_path / "s.pt"
    torch.save({"u": torch.UntypedStorage(6), "f8": torch.zeros(3, dtype=torch.float8_e4m3fn),
                "meta": torch.empty(2, 3, device="meta")}, path)
    got = safeload.load(path)
    assert got["u"].dtype == "uint8" and got["u"].shape == (6,)
    assert got["f8"].dtype == "float8_e4m3fn" and got["f8"].shape == (3,)
    assert got["meta"].shape == (2, 3) and got["meta"].storage_key == ""


def test_legacy_non_zip_format_is_supported(tmp_path):
    base = torch.arange(6, dtype=torch.float32)
    obj = {"view": base[2:5], "whole": base, "step": torch.tensor(7.0),
           "args": argparse.Namespace(lr=0.5), "n": 4}
    path = tmp_path / "legacy.pt"
    torch.save(obj, path, _use_new_zipfile_serialization=False)
    mine, _ = assert_same_as_torch(path)
    assert safeload.read_values(mine["view"]) == [2.0, 3.0, 4.0]
    assert safeload.read_values(mine["step"]) == [7.0]


def test_hf_rng_state_numpy_arrays_without_numpy(tmp_path):
    import random

    import numpy as np

    random.seed(1)
    np.random.seed(2)
    states = {"python": random.getstate(), "numpy": np.random.get_state(),
              "cpu": torch.get_rng_state(), "np_scalars": [np.float64(1.5), np.int32(-3)]}
    path = tmp_path / "rng_state.pth"
    torch.save(states, path)
    mine, _ = assert_same_as_torch(path)
    assert mine["numpy"][0] == "MT19937"
    assert mine["numpy"][1].state["values"] == np.random.get_state()[1].tolist()
    # accelerate's random_states_*.pkl of old versions: a plain pickle
    plain = tmp_path / "random_states_0.pkl"
    plain.write_bytes(pickle.dumps({"random_state": random.getstate(),
                                    "numpy_random_seed": np.random.get_state()}, protocol=4))
    got = safeload.load_pickle_file(plain)
    assert got["numpy_random_seed"][1].state["shape"] == (624,)
    assert got["random_state"] == expected(random.getstate())


@pytest.mark.frameworks
def test_hf_training_args_bin_as_trainer_saves_it(tmp_path):
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=str(tmp_path / "out"), learning_rate=3e-4,
                             lr_scheduler_type="cosine_with_min_lr", warmup_steps=12,
                             lr_scheduler_kwargs={"min_lr": 1e-5}, max_steps=500,
                             gradient_accumulation_steps=4, report_to=[], save_strategy="steps")
    _ = args.device  # what Trainer does before saving: fills the cached device state
    path = tmp_path / "training_args.bin"
    torch.save(args, path)  # Trainer._save: torch.save(self.args, TRAINING_ARGS_NAME)
    assert zipfile.is_zipfile(path)
    got = safeload.load(path)
    assert isinstance(got, Opaque)
    assert got.cls == "transformers.training_args.TrainingArguments"
    assert got.state["lr_scheduler_type"] == "cosine_with_min_lr"
    assert got.state["warmup_steps"] == 12
    assert got.state["lr_scheduler_kwargs"] == {"min_lr": 1e-5}
    assert got.state["save_strategy"] == "steps"
    assert got.state["gradient_accumulation_steps"] == 4
    assert isinstance(got.state["optim"], str)
    theirs = torch.load(path, weights_only=False)
    assert ours(got) == expected(theirs)
    # the safe loader never created the real class (or imported transformers for it)
    assert type(got) is Opaque


@pytest.mark.frameworks
def test_deepspeed_loss_scaler_and_zero_stage(tmp_path):
    from deepspeed.runtime.fp16.loss_scaler import DynamicLossScaler, LossScaler
    from deepspeed.runtime.zero.config import ZeroStageEnum

    scaler = DynamicLossScaler(init_scale=2**16, scale_window=1000, min_scale=1,
                               delayed_shift=2, consecutive_hysteresis=False)
    state = {"loss_scaler": scaler, "static": LossScaler(128.0), "dynamic_loss_scale": True,
             "zero_stage": ZeroStageEnum.optimizer_states, "partition_count": [2],
             "base_optimizer_state": {"state": {0: {"step": torch.tensor(5.0)}}}}
    path = tmp_path / "zero_pp_rank_0_mp_rank_00_optim_states.pt"
    torch.save({"optimizer_state_dict": state, "ds_version": "0.19"}, path)
    got = safeload.load(path)
    ls = got["optimizer_state_dict"]["loss_scaler"]
    assert ls.cls == "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler"
    assert ls.state["cur_scale"] == 2**16 and ls.state["scale_window"] == 1000
    assert got["optimizer_state_dict"]["zero_stage"] == 1
    assert ours(got) == expected(torch.load(path, weights_only=False))


@pytest.mark.frameworks
@pytest.mark.slow
def test_lightning_attribute_dict_becomes_dict(tmp_path):
    from lightning_fabric.utilities.data import AttributeDict

    path = tmp_path / "epoch=0-step=10.ckpt"
    torch.save({"hyper_parameters": AttributeDict(lr=0.1, warmup=5), "global_step": 10}, path)
    got = safeload.load(path)
    assert type(got["hyper_parameters"]) is dict
    assert got["hyper_parameters"] == {"lr": 0.1, "warmup": 5}


# --------------------------------------------------------------------------- hostile input


class _Payload:
    """Pickles as a call of ``target(*args)`` — what an attacker plants."""

    def __init__(self, target, *args):
        self.target, self.args = target, args

    def __reduce__(self):
        return (self.target, self.args)


def _payloads(marker):
    cmd = f"touch {marker}"
    return {
        "os.system": (_Payload(os.system, cmd), f"{os.system.__module__}.system"),
        "builtins.eval": (_Payload(eval, f"__import__('os').system({cmd!r})"), "builtins.eval"),
        "subprocess.Popen": (_Payload(subprocess.Popen, ["touch", str(marker)]),
                             "subprocess.Popen"),
        "nested": ({"state": {"ok": 1, "deep": [1, {"x": _Payload(os.system, cmd)}]}},
                   f"{os.system.__module__}.system"),
    }


@pytest.mark.parametrize("kind", ["os.system", "builtins.eval", "subprocess.Popen", "nested"])
@pytest.mark.parametrize("container", ["torch-zip", "plain-pickle-2", "plain-pickle-5",
                                       "torch-legacy"])
def test_code_execution_payloads_are_refused(tmp_path, kind, container):
    marker = tmp_path / "pwned"
    payload, global_name = _payloads(marker)[kind]
    path = tmp_path / "evil.pt"
    if container == "torch-zip":
        torch.save({"model": {"w": torch.ones(2)}, "x": payload}, path)
    elif container == "torch-legacy":
        torch.save({"x": payload}, path, _use_new_zipfile_serialization=False)
    else:
        path.write_bytes(pickle.dumps({"x": payload}, protocol=int(container[-1])))
    with pytest.raises(UnsafePickle) as info:
        safeload.load(path)
    assert info.value.global_name == global_name
    msg = str(info.value)
    assert "\n" not in msg and str(path) in msg and global_name in msg
    assert not marker.exists()
    # same for the explicit plain-pickle entry point
    with pytest.raises(UnsafePickle):
        safeload.load_pickle_file(path)
    assert not marker.exists()


def test_protocol0_inst_and_getattr_tricks_are_refused(tmp_path):
    marker = tmp_path / "pwned"
    inst = f"(S'touch {marker}'\nios\nsystem\n.".encode()
    # getattr(<an allowed global>, "__globals__"...) would reach anything: getattr is refused
    getattr_trick = b"cbuiltins\ngetattr\n(cbuiltins\nset\nS'__init__'\ntR."
    for name, blob, glob in [("inst.pkl", inst, "os.system"),
                             ("getattr.pkl", getattr_trick, "builtins.getattr")]:
        p = tmp_path / name
        p.write_bytes(blob)
        with pytest.raises(UnsafePickle) as info:
            safeload.load_pickle_file(p)
        assert info.value.global_name == glob
    assert not marker.exists()


def test_hostile_data_pkl_inside_a_real_checkpoint_zip(tmp_path):
    """Swap a real checkpoint's data.pkl for a payload; the zip stays valid."""
    marker = tmp_path / "pwned"
    good = tmp_path / "good.pt"
    torch.save({"w": torch.ones(3)}, good)
    evil = tmp_path / "evil.pt"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(evil, "w") as dst:
        for info in src.infolist():
            data = src.read(info.filename)
            if info.filename.endswith("/data.pkl"):
                data = pickle.dumps([_Payload(os.system, f"touch {marker}")], protocol=2)
            dst.writestr(info, data)
    with pytest.raises(UnsafePickle):
        safeload.load(evil)
    assert not marker.exists()


def _good_checkpoint(tmp_path):
    _, opt, sched = _trained_state()
    path = tmp_path / "ckpt.pt"
    torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict()}, path)
    return path


@pytest.mark.parametrize("keep", [0.1, 0.5, 0.9, -1, -30])
def test_truncated_checkpoint_is_unusable_input(tmp_path, keep):
    src = _good_checkpoint(tmp_path)
    data = src.read_bytes()
    n = int(len(data) * keep) if keep > 0 else len(data) + keep
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[:n])
    with pytest.raises(UnusableInput) as info:
        safeload.load(cut)
    assert not isinstance(info.value, UnsafePickle)
    assert str(cut) in str(info.value) and "\n" not in str(info.value)


def test_corrupt_inputs_are_one_line_unusable_input(tmp_path):
    src = _good_checkpoint(tmp_path)
    cases = {}
    # a data.pkl that stops half-way (zip itself intact)
    half = tmp_path / "halfpkl.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(half, "w") as zout:
        for info in zin.infolist():
            data = zin.read(info.filename)
            if info.filename.endswith("/data.pkl"):
                data = data[: len(data) // 2]
            zout.writestr(info, data)
    cases["half pickle"] = half
    # a tensor whose storage member was dropped
    missing = tmp_path / "missing.pt"
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(missing, "w") as zout:
        for info in zin.infolist():
            if not info.filename.endswith("/data/0"):
                zout.writestr(info, zin.read(info.filename))
    cases["missing storage"] = missing
    # flipped bytes inside data.pkl: the zip CRC check catches it
    flipped = tmp_path / "flipped.pt"
    raw = bytearray(src.read_bytes())
    raw[60:70] = b"\xff" * 10
    flipped.write_bytes(bytes(raw))
    cases["flipped"] = flipped
    empty = tmp_path / "empty.pt"
    empty.write_bytes(b"")
    cases["empty"] = empty
    text = tmp_path / "notes.pt"
    text.write_text("hello, not a checkpoint\n")
    cases["text"] = text
    nozip = tmp_path / "other.zip"
    with zipfile.ZipFile(nozip, "w") as z:
        z.writestr("readme.txt", "x")
    cases["zip without data.pkl"] = nozip
    cases["directory"] = tmp_path
    cases["no such file"] = tmp_path / "absent.pt"
    for what, path in cases.items():
        with pytest.raises(UnusableInput) as info:
            safeload.load(path)
        msg = str(info.value)
        assert "\n" not in msg and str(path) in msg, (what, msg)


def test_refused_global_in_legit_looking_class(tmp_path):
    @dataclasses.dataclass
    class Config:  # a class from the user's own code is not on the allow-list
        lr: float = 0.1

    Config.__module__ = "myproject.config"
    Config.__qualname__ = "Config"
    sys.modules.setdefault("myproject", type(sys)("myproject"))
    mod = type(sys)("myproject.config")
    mod.Config = Config
    sys.modules["myproject.config"] = mod
    try:
        path = tmp_path / "c.pt"
        torch.save({"cfg": Config()}, path)
    finally:
        del sys.modules["myproject.config"]
    with pytest.raises(UnsafePickle, match="myproject.config.Config"):
        safeload.load(path, unknown_as_opaque=False)  # the strict mode (issue 28: not the default)
    got = safeload.load(path)  # the default: its fields read as data, nothing imported
    assert got["cfg"].cls == "myproject.config.Config" and got["cfg"].state == {"lr": 0.1}


def test_opaque_survives_copy_and_pickle():
    import copy

    o = Opaque("argparse.Namespace", state={"lr": 1.0}, args=(1,))
    assert copy.deepcopy(o) == o
    assert pickle.loads(pickle.dumps(o)) == o


def test_safeload_never_imports_torch_or_numpy(tmp_path):
    import numpy as np

    path = tmp_path / "c.pt"
    torch.save({"opt": _trained_state()[1].state_dict(), "args": argparse.Namespace(a=1),
                "rng": np.random.get_state()}, path)
    code = ("import sys, lrdoctor.read.bytes.safeload as s; o = s.load(sys.argv[1]); "
            "st = o['opt']['state'][0]['step']; assert s.read_values(st) == [3.0]; "
            "bad = [m for m in ('torch', 'numpy', 'pandas') if m in sys.modules]; "
            "assert not bad, bad")
    res = subprocess.run([PY, "-c", code, str(path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr


def test_unpickler_reads_in_memory_stream_names():
    # py2-era module names in protocol-2 pickles are mapped like the stdlib does
    blob = b"\x80\x02c__builtin__\nset\n]q\x00(K\x01K\x02e\x85R."
    f = io.BytesIO(blob)
    assert safeload._Unpickler(f, "<mem>").load() == {1, 2}


def _rewrite_zip(src, dst, change, compression=zipfile.ZIP_STORED):
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", compression) as zout:
        for info in zin.infolist():
            data = change(info.filename, zin.read(info.filename))
            if data is not None:
                zout.writestr(info.filename, data)


def test_big_endian_checkpoint_values(tmp_path):
    """A file written on a big-endian host: byteorder record 'big', bytes swapped."""
    src = tmp_path / "le.pt"
    t = torch.tensor([1.5, -2.25, 1e6], dtype=torch.float32)
    h = torch.tensor([0.5, 3.0], dtype=torch.bfloat16)
    torch.save({"t": t, "h": h}, src)
    swaps = {}
    for name in ("t", "h"):
        ref = safeload.load(src)[name]
        swaps[ref.storage_key] = {"t": 4, "h": 2}[name]

    def to_big(name, data):
        if name.endswith("/byteorder"):
            return b"big"
        key = name.rpartition("/data/")[2]
        if "/data/" in name and key in swaps:
            w = swaps[key]
            return b"".join(data[i:i + w][::-1] for i in range(0, len(data), w))
        return data

    big = tmp_path / "be.pt"
    _rewrite_zip(src, big, to_big)
    got = safeload.load(big)
    assert safeload.read_values(got["t"]) == t.tolist()
    assert safeload.read_values(got["h"]) == h.tolist()
    theirs = torch.load(big, weights_only=True)  # torch swaps back, as we do
    assert theirs["t"].tolist() == t.tolist()


def test_deflated_members_and_pickle_size_cap(tmp_path, monkeypatch):
    src = tmp_path / "a.pt"
    torch.save({"step": torch.tensor(42.0), "w": torch.arange(8.0)[3:]}, src)
    packed = tmp_path / "packed.pt"
    _rewrite_zip(src, packed, lambda n, d: d, zipfile.ZIP_DEFLATED)
    got = safeload.load(packed)
    assert safeload.read_values(got["step"]) == [42.0]
    assert safeload.read_values(got["w"]) == [3.0, 4.0, 5.0, 6.0, 7.0]
    monkeypatch.setenv("LRDOCTOR_MAX_PICKLE_BYTES", "16")
    with pytest.raises(UnusableInput, match="data.pkl is .*LRDOCTOR_MAX_PICKLE_BYTES=16"):
        safeload.load(src)


def test_model_state_dict_keeps_its_order_and_type(tmp_path):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.LayerNorm(2))
    path = tmp_path / "m.pt"
    torch.save(model.state_dict(), path)
    got = safeload.load(path)
    assert isinstance(got, OrderedDict)
    assert list(got) == list(model.state_dict())
    assert [v.shape for v in got.values()] == [tuple(v.shape) for v in model.state_dict().values()]


@pytest.mark.frameworks
def test_every_pickle_of_real_framework_runs_matches_torch_load(hf_run_dir, megatron_run_dir,
                                                                 roll_run_dir):
    """Real Trainer / Megatron / ROLL runs (conftest): each pickled file reads like torch.load."""
    seen = 0
    for truth in (hf_run_dir, megatron_run_dir, roll_run_dir):
        for f in sorted(truth.root.rglob("*")):
            if f.suffix in (".pt", ".pth", ".bin", ".pkl", ".ckpt") and f.is_file():
                assert_same_as_torch(f)
                seen += 1
    assert seen >= 8


def test_unknown_as_opaque_keeps_user_classes_inert(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "hp.ckpt"
    torch.save({"global_step": 7, "hyper_parameters": {"cfg": _Payload(os.system, f"touch {marker}")}},
               path)
    with pytest.raises(UnsafePickle):
        safeload.load(path)
    # A code-execution primitive is refused even where unknown classes are kept opaque
    # (issue 9): such a file is hostile, whatever else it holds.
    with pytest.raises(UnsafePickle, match="system"):
        safeload.load(path, unknown_as_opaque=True)
    assert not marker.exists()
    # a dataclass-like user object: its fields survive as state
    ns = type(sys)("userpkg")
    sys.modules["userpkg"] = ns

    @dataclasses.dataclass
    class Hp:
        lr: float = 0.5

    Hp.__module__, Hp.__qualname__ = "userpkg", "Hp"
    ns.Hp = Hp
    try:
        torch.save({"hp": Hp()}, path)
    finally:
        del sys.modules["userpkg"]
    got = safeload.load_pickle_file(path, unknown_as_opaque=True)
    assert got["hp"].cls == "userpkg.Hp" and got["hp"].state == {"lr": 0.5}


def test_read_values_of_far_apart_strided_elements(tmp_path):
    base = torch.arange(3_000_000, dtype=torch.float32)
    path = tmp_path / "wide.pt"
    torch.save({"far": base[5::1_000_000]}, path)
    ref = safeload.load(path)["far"]
    assert ref.stride == (1_000_000,) and ref.storage_offset == 5
    assert safeload.read_values(ref) == [5.0, 1_000_005.0, 2_000_005.0]


@pytest.mark.parametrize("keep", [0.3, 0.7, -4])
def test_truncated_legacy_file_is_unusable_input(tmp_path, keep):
    src = tmp_path / "legacy.pt"
    torch.save({"w": torch.ones(64), "step": torch.tensor(3.0)}, src,
               _use_new_zipfile_serialization=False)
    data = src.read_bytes()
    cut = tmp_path / "cut.pt"
    cut.write_bytes(data[: int(len(data) * keep) if keep > 0 else len(data) + keep])
    with pytest.raises(UnusableInput) as info:
        safeload.load(cut)
    assert str(cut) in str(info.value) and "\n" not in str(info.value)


def test_numpy_frombuffer_of_an_int_is_refused_before_any_allocation():
    """Bug found by typing the stand-ins' arguments as what a pickle may pass (``object``,
    narrowed): numpy's ``_frombuffer`` stand-in called ``bytes(buf)`` on whatever ``buf``
    was, so an int asked for that many zero bytes (2**40 here), past every limit, as the
    ``bytes(n)`` that _bytes_like refuses. The pickle names numpy's own _frombuffer and
    dtype (pickled by numpy's reducers); a real buffer still decodes."""
    import numpy as np
    from numpy._core.numeric import _frombuffer

    class Buffer:
        def __init__(self, buf):
            self.buf = buf

        def __reduce__(self):
            return (_frombuffer, (self.buf, np.dtype("<f8"), (1,), "C"))

    with pytest.raises(UnusableInput) as e:
        safeload.load_bytes(pickle.dumps({"rng": Buffer(1 << 40)}, protocol=2), "rng.pkl")
    assert "malformed numpy buffer" in str(e.value) and "MemoryError" not in str(e.value)
    ok = safeload.load_bytes(pickle.dumps({"rng": Buffer(np.float64(2.5).tobytes())},
                                          protocol=2), "rng.pkl")
    assert ok["rng"].state["values"] == [2.5]


def _legacy_file(path: pathlib.Path, view) -> pathlib.Path:
    """The legacy (non-zip) torch format, written as torch's _legacy_save lays it out,
    with torch's own FloatStorage class in the persistent id and ``view`` as its view."""
    import struct

    class Storage:
        pass

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if isinstance(obj, Storage):
                return ("storage", torch.FloatStorage, "0", "cpu", 4, view)
            return None

    with open(path, "wb") as f:
        pickle.dump(0x1950A86A20F9469CFC6C, f, protocol=2)
        pickle.dump(1001, f, protocol=2)
        pickle.dump({"protocol_version": 1001, "little_endian": True,
                     "type_sizes": {"short": 2, "int": 4, "long": 4}}, f, protocol=2)
        Pickler(f, protocol=2).dump({"w": Storage()})
        pickle.dump(["0"], f, protocol=2)
        f.write(struct.pack("<q", 4) + struct.pack("<4f", 1, 2, 3, 4))
    return path


def test_legacy_storage_view_is_checked(tmp_path):
    """Bug found while typing the persistent ids a pickle hands over: a legacy storage's
    view (root key, offset, size) was unpacked unchecked, so ("0", "x", "y") made a
    TensorRef of shape ('y',) and read_values then raised an unexpected TypeError."""
    good = safeload.load(_legacy_file(tmp_path / "good.pt", ("0", 1, 2)))["w"]
    assert (good.shape, good.storage_offset) == ((2,), 1)
    assert safeload.read_values(good) == [2.0, 3.0]
    assert safeload.load(_legacy_file(tmp_path / "whole.pt", None))["w"].shape == (4,)
    for n, view in enumerate([("0", "x", "y"), ("0", -1, 2), ("0", 1), 7]):
        with pytest.raises(UnusableInput) as e:
            safeload.load(_legacy_file(tmp_path / f"bad{n}.pt", view))
        assert "malformed storage view" in str(e.value), view
