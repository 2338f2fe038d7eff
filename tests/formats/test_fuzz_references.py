"""Issue 23, item 6: property-based fuzz of shared references under allow-listed callables,
and config/counter values at their extremes (2**31, 2**63, negative, NaN) for every key
that sizes anything. Kept small (a CI budget): ``benchmarks/fuzz_hostile.py`` runs the same
generators at scale.

The property everywhere: a result, or one :class:`UnusableInput` line naming the file;
never another exception, never work past the limits (the limits are set low here, so a
payload that escaped them would show as a slow example, not as a passing one)."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lrdoctor.core.errors import UnusableInput
from lrdoctor.read.bytes import limits, safeload
from tests.helpers import hostile
from tests.helpers.paths import REPO

FUZZ = settings(max_examples=60, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

EXTREMES = [2**31, 2**31 - 1, 2**63, -1, -(2**63), float("nan"), float("inf"), 10**30]


@contextlib.contextmanager
def _env(**kv: str):
    old = {k: os.environ.get(k) for k in kv}
    os.environ.update(kv)
    try:
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


# ------------------------------------------------------------------ pickle references

# One step of a program: make a list/tuple/dict of earlier memo slots, or apply a callable
# to one slot. Every result is memoized in the next slot, so later steps share it.
step = st.one_of(
    st.tuples(st.just("list"), st.lists(st.integers(0, 1 << 16), min_size=1, max_size=12)),
    st.tuples(st.just("tuple"), st.lists(st.integers(0, 1 << 16), min_size=1, max_size=6)),
    st.tuples(st.just("dict"), st.lists(st.integers(0, 1 << 16), min_size=1, max_size=6)),
    st.tuples(st.just("call"), st.tuples(st.sampled_from(range(len(hostile.CALLS))),
                                         st.integers(0, 1 << 16))),
)


@FUZZ
@given(steps=st.lists(step, min_size=1, max_size=40), zipped=st.booleans())
def test_shared_references_under_allow_listed_calls_are_bounded(steps, zipped):
    blob = hostile.reference_program(steps)
    data = hostile.torch_zip(blob) if zipped else blob
    with _env(LRDOCTOR_MAX_NODES="200000", LRDOCTOR_MAX_ITEMS="200000"):
        try:
            obj = safeload.load_bytes(data, "refs.pt")
        except UnusableInput as exc:
            assert str(exc).startswith("refs.pt: ") and "\n" not in str(exc)
            return
        # what loaded is walkable within the budget it was checked against
        limits.check_tree(obj, "refs.pt", children=safeload._children)


def test_the_reference_generator_reaches_billion_laughs():
    """The generator is not toothless: a 12-step program of it is refused by the call bound."""
    steps = [("list", [0] * 10)] + [("list", [i] * 10) for i in range(1, 10)] \
        + [("call", (0, 10))]
    with pytest.raises(UnusableInput, match="LRDOCTOR_MAX_NODES"):
        safeload.load_bytes(hostile.reference_program(steps), "refs.pt")


# ------------------------------------------------------------------ config extremes

EXAMPLES = sorted(p for p in (REPO / "examples").glob("*.yaml"))


def _int_keys(doc, prefix=()) -> list[tuple]:
    """Every integer leaf of a config: the keys that can size something."""
    out = []
    if isinstance(doc, dict):
        for k, v in doc.items():
            out += _int_keys(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            out += _int_keys(v, (*prefix, i))
    elif type(doc) is int:
        out.append(prefix)
    return out


SIZING = [(p.name, key) for p in EXAMPLES
          for key in _int_keys(yaml.safe_load(p.read_text()))]


def _set(doc, key, value):
    d = doc
    for k in key[:-1]:
        d = d[k]
    d[key[-1]] = value


def test_every_example_has_sizing_keys():
    assert len({f for f, _ in SIZING}) >= 8 and len(SIZING) > 100


@FUZZ
@given(case=st.sampled_from(SIZING), value=st.sampled_from(EXTREMES))
def test_config_values_at_their_extremes_load_and_replay_or_refuse(case, value):
    """Any framework's config (verl, SkyRL, NeMo-RL, ROLL, OpenRLHF-free YAMLs, lrdoctor's own)
    with one integer key at an extreme: replayed within the limits, or one line."""
    from lrdoctor.replay import ReplayOptions, replay_full

    name, key = case
    src = REPO / "examples" / name
    doc = yaml.safe_load(src.read_text())
    _set(doc, key, value)
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / name
        p.write_text(yaml.safe_dump(doc))
        for f in src.parent.glob("batchlogs"):  # relative batch-log paths keep resolving
            (Path(d) / f.name).symlink_to(f)
        with _env(LRDOCTOR_MAX_REPLAY_STEPS="2000", LRDOCTOR_MAX_REPLAY_SAMPLES="200000",
                  LRDOCTOR_MAX_REPLAY_RANKS="256"):
            try:
                replay_full(str(p), None, None, ReplayOptions(engine="fast"))
            except UnusableInput as exc:
                assert "\n" not in str(exc) and (str(p) in str(exc) or "--" in str(exc)), exc


@pytest.mark.parametrize("value", EXTREMES)
@pytest.mark.parametrize("key", ["last_epoch", "_step_count"])
def test_scheduler_counter_extremes_in_an_hf_checkpoint(tmp_path, key, value):
    """HF Trainer checkpoint without training_args.bin (the schedule is fitted to the log):
    a counter of 2**31 once made the fit try 2**31 warmups."""
    import torch

    from lrdoctor.inspect_api import inspect_path

    run = tmp_path / "run"
    shutil.copytree(REPO / "sample_checkpoints" / "hf-healthy", run)
    for ck in run.iterdir():
        (ck / "training_args.bin").unlink()
    f = run / "checkpoint-20" / "scheduler.pt"
    sd = torch.load(f, weights_only=False)
    sd[key] = value
    torch.save(sd, f)
    try:
        reps = inspect_path(run)
    except UnusableInput as exc:
        assert "\n" not in str(exc) and str(run) in str(exc)
        return
    json.dumps([r.to_dict() for r in reps], allow_nan=False)


@pytest.mark.parametrize("value", EXTREMES)
def test_trainer_state_step_extremes(tmp_path, value):
    from lrdoctor.inspect_api import inspect_path

    run = tmp_path / "run"
    shutil.copytree(REPO / "sample_checkpoints" / "hf-healthy", run)
    ts = run / "checkpoint-20" / "trainer_state.json"
    doc = json.loads(ts.read_text())
    doc["global_step"] = value if not (isinstance(value, float) and not math.isfinite(value)) \
        else str(value)
    doc["log_history"][-1]["step"] = value if isinstance(value, int) else 20
    ts.write_text(json.dumps(doc))
    try:
        inspect_path(run)
    except UnusableInput as exc:
        assert "\n" not in str(exc)
