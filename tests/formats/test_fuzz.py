"""Property-based fuzzing of the readers and the config loader (issue 12, bounded time).

Inputs are real files (torch.save of optimizer/scheduler states, a Megatron-like
dict with its argparse args, run configs) mutated byte- or value-wise. The property:
a reader returns a result or raises :class:`UnusableInput` (one line naming the
file); never another exception. ``benchmarks/fuzz_hostile.py`` runs the same
mutations at scale through the command line.
"""

from __future__ import annotations

import argparse
import io
import math
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lrdoctor.core.errors import UnusableInput
from lrdoctor.read.bytes import safeload, safetext

FUZZ = settings(max_examples=75, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def _bases() -> list[bytes]:
    import torch

    m = torch.nn.Linear(3, 2)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    sch = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: 1.0)
    m(torch.ones(1, 3)).sum().backward()
    opt.step()
    sch.step()
    docs = [
        {"optimizer": opt.state_dict(), "lr_scheduler": sch.state_dict(), "epoch": 1},
        {"args": argparse.Namespace(lr=3e-4, train_iters=100, global_batch_size=8),
         "iteration": 10, "opt_param_scheduler": {"max_lr": 3e-4, "min_lr": 0.0,
                                                  "num_steps": 80, "lr_decay_style": "cosine"}},
        {"state": {0: {"step": torch.tensor(4.0)}}, "param_groups": [{"lr": 0.1, "params": [0]}]},
    ]
    out = []
    for d in docs:
        buf = io.BytesIO()
        torch.save(d, buf)
        out.append(buf.getvalue())
    return out


BASES = _bases()


def _data_pkl(zipped: bytes) -> bytes:
    import zipfile

    with zipfile.ZipFile(io.BytesIO(zipped)) as zf:
        name = next(n for n in zf.namelist() if n.endswith("/data.pkl"))
        return zf.read(name)


PICKLES = [_data_pkl(b) for b in BASES]


def rezip(base: int, data_pkl: bytes) -> bytes:
    """BASES[base] with its data.pkl replaced (tensor storages kept, so tensors resolve)."""
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(BASES[base])) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, data_pkl if info.filename.endswith("/data.pkl")
                         else src.read(info))
    return out.getvalue()

mutation = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 1 << 20), st.integers(1, 255)),
    st.tuples(st.just("insert"), st.integers(0, 1 << 20), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("delete"), st.integers(0, 1 << 20), st.integers(1, 64)),
    st.tuples(st.just("truncate"), st.integers(0, 1 << 20), st.just(0)),
)


def mutate(data: bytes, muts: list) -> bytes:
    b = bytearray(data)
    for kind, pos, arg in muts:
        pos %= max(1, len(b))
        if kind == "flip":
            b[pos] ^= arg
        elif kind == "insert":
            b[pos:pos] = arg
        elif kind == "delete":
            del b[pos:pos + arg]
        else:
            del b[pos:]
    return bytes(b)


@FUZZ
@given(base=st.integers(0, len(PICKLES) - 1), muts=st.lists(mutation, min_size=1, max_size=4),
       zipped=st.booleans())
def test_mutated_pickles_load_or_refuse_in_one_line(base, muts, zipped):
    data = mutate(PICKLES[base], muts)
    blob = rezip(base, data) if zipped else data
    try:
        obj = safeload.load_bytes(blob, "fuzz.pt")
    except UnusableInput as exc:
        assert str(exc).startswith("fuzz.pt: ") and "\n" not in str(exc)
        return
    repr(obj)  # whatever loaded is plain, finite-size data


@FUZZ
@given(base=st.integers(0, len(BASES) - 1), muts=st.lists(mutation, min_size=1, max_size=3))
def test_mutated_checkpoints_through_the_torch_reader(base, muts):
    """The whole read -> normalize path (validation boundary included) on a mutated file."""
    from lrdoctor.inspect_api import inspect_path

    data = rezip(base, mutate(PICKLES[base], muts))
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "ckpt.pt"
        p.write_bytes(data)
        try:
            [rep] = inspect_path(p, format="torchsave")
        except UnusableInput as exc:
            assert str(exc).startswith(f"{p}: ") and "\n" not in str(exc)
            return
        import json

        json.dumps(rep.to_dict(), allow_nan=False)


scalar = st.one_of(st.none(), st.booleans(), st.integers(-(10**30), 10**30),
                   st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                   st.sampled_from([10**400, -1, 0, 1, 2**62, "cosine", "samples", "verl"]))
config_value = st.recursive(scalar, lambda kids: st.one_of(
    st.lists(kids, max_size=4), st.dictionaries(st.text(max_size=8), kids, max_size=4)),
    max_leaves=20)
KEYS = ["train", "schedule", "budget", "dp", "batching", "accumulation", "scheduler", "data",
        "steps", "samples_per_step", "max_lr", "warmup", "micro_batch_size", "size", "changes"]
config_doc = st.recursive(
    st.dictionaries(st.sampled_from(KEYS), config_value, max_size=5),
    lambda kids: st.dictionaries(st.sampled_from(KEYS), st.one_of(kids, config_value),
                                 max_size=5), max_leaves=30)

BASE_CONFIG = {"train": {"steps": 20, "samples_per_step": 8, "micro_batch_size": 2},
               "schedule": {"kind": "cosine", "max_lr": 1e-3, "warmup": 2}}


def _dump(doc) -> str:
    try:
        return yaml.safe_dump(doc)
    except (yaml.YAMLError, ValueError, OverflowError):
        return str(doc)


@FUZZ
@given(doc=config_doc, merge=st.booleans(), noise=st.binary(max_size=8), cut=st.integers(0, 400))
def test_fuzzed_run_configs_load_or_refuse_in_one_line(doc, merge, noise, cut):
    from lrdoctor.replay.config import load_config

    if merge:
        doc = {**BASE_CONFIG, **doc}
    text = _dump(doc)
    if noise:
        cut = cut % (len(text) + 1)
        text = text[:cut] + noise.decode("latin1") + text[cut:]
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "run.yaml"
        p.write_text(text, encoding="utf-8")
        try:
            cfg = load_config(p)
        except UnusableInput as exc:
            assert str(exc).startswith(f"{p}: ") and "\n" not in str(exc)
            return
        assert cfg.train.steps >= 1 and math.isfinite(cfg.schedule.max_lr)


json_value = st.recursive(scalar, lambda kids: st.one_of(
    st.lists(kids, max_size=5), st.dictionaries(st.text(max_size=6), kids, max_size=5)),
    max_leaves=40)


@FUZZ
@given(doc=json_value, noise=st.text(max_size=6), cut=st.integers(0, 200))
def test_fuzzed_json_sidecars_load_or_refuse_in_one_line(doc, noise, cut):
    import json

    text = json.dumps(doc)
    cut = cut % (len(text) + 1)
    text = text[:cut] + noise + text[cut:]
    try:
        safetext.json_loads(text, "trainer_state.json")
    except UnusableInput as exc:
        assert str(exc).startswith("trainer_state.json: ") and "\n" not in str(exc)


@pytest.mark.parametrize("base", range(len(BASES)))
def test_fuzz_bases_are_valid(base):
    """The fuzz starts from files the reader accepts (else it only fuzzes refusals)."""
    assert safeload.load_bytes(BASES[base], "base.pt") is not None
