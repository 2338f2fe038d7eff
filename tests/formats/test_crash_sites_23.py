"""One test per crash site issue 23's fuzz run found (tracebacks and a memory blow-up); the
reproducers live in the corpus (``tests.helpers.hostile.crash_reproducers``), which
``benchmarks/fuzz_hostile.py`` runs too. Each one ends in exit 2 with one stderr line
naming the input, and writes nothing."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import hostile
from tests.helpers.paths import REPO

NAMES = ["bad_crc_fix", "nemo_milestones_int", "nemo_kwargs_int", "nemo_inf_product",
         "nemo_inf_total_iters", "nemo_cp_zero", "verl_max_tokens_2_63", "rlinf_increment_inf",
         "roll_ga_zero",
         "synthetic_negative_seed",
         f"skyrl_gpus_{2**31}", f"skyrl_gpus_{2**63 - 1}"]
SAYS = {"bad_crc_fix": "Bad CRC-32", "nemo_milestones_int": "milestones 50",
        "nemo_kwargs_int": "kwargs 7", "nemo_inf_product": "is inf",
        "nemo_inf_total_iters": "total_iters is inf",
        "nemo_cp_zero": "context_parallel_size is 0",
        "verl_max_tokens_2_63": "beyond 1e15", "rlinf_increment_inf": "scheduler.increment",
        "roll_ga_zero": "gradient_accumulation_steps is 0",
        "synthetic_negative_seed": "seed -5",
        f"skyrl_gpus_{2**31}": "LRDOCTOR_MAX_REPLAY_RANKS",
        f"skyrl_gpus_{2**63 - 1}": "policy_num_gpus_per_node"}


def _lrdoctor(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lrdoctor", *argv], cwd=cwd, text=True,
                          capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.fixture(scope="module")
def repro(tmp_path_factory) -> dict:
    return hostile.crash_reproducers(tmp_path_factory.mktemp("crash23"))


@pytest.mark.parametrize("name", NAMES)
def test_crash_site_is_one_line(repro, name, tmp_path):
    argv, inp = repro[name]
    p = _lrdoctor(argv, tmp_path)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2, p.stderr
    assert len(lines) == 1 and str(inp) in lines[0] and SAYS[name] in lines[0], p.stderr
    assert "Traceback" not in p.stderr and "please report" not in p.stderr
    if name == "bad_crc_fix":  # nothing published, no temporary copy left behind
        assert not list(inp.parent.glob("bad_crc-fixed*"))
        assert not list(inp.parent.glob(".bad_crc-fixed*"))


def test_the_synthetic_seed_is_checked_in_the_library():
    from lrdoctor.core.errors import UnusableInput
    from lrdoctor.replay.batchlog import synthetic

    with pytest.raises(UnusableInput, match="seed -1"):
        synthetic("fixed:8", 2, 2, seed=-1)
    assert len(synthetic("fixed:8", 2, 2, seed=3)) == 4


def test_nemo_rl_scheduler_of_the_wrong_shape_is_one_line():
    from lrdoctor.core.errors import UnusableInput
    from lrdoctor.replay.translate.common import Reader
    from lrdoctor.replay.translate.nemo_rl import _torch_schedule

    for bad in ([{"milestones": 5}], [{"milestones": ["a"]}],
                [{"name": "torch.optim.lr_scheduler.LinearLR", "kwargs": [1]}]):
        with pytest.raises(UnusableInput):
            _torch_schedule(Reader({"policy": {"scheduler": bad}}), 1e-3)


def test_a_last_epoch_of_2_31_does_not_size_the_fit(tmp_path):
    """HF Trainer checkpoint, schedule fitted to log_history (no training_args.bin): the
    fit's warmup candidates are bounded (FIT_MAX_WARMUPS), whatever the counter says."""
    from lrdoctor.inspect_api import inspect_path
    from lrdoctor.read.layouts import _logfit

    assert len(_logfit._warmups(5, 2**31, 1.0)) <= _logfit.FIT_MAX_WARMUPS + 2
    assert _logfit._warmups(1, 3, 4.0) == list(range(0, 13))  # small spans: every step
    assert len(_logfit._warmups(1, 3, 2.0**31)) <= 8  # a huge scale: the k x step points
    [rep] = inspect_path(hostile.hf_last_epoch(tmp_path))[-1:]
    assert rep.findings  # judged (the scheduler ran 10**8 times too far), not a hang


def test_replay_sizes_are_checked_against_the_machines_memory(tmp_path, monkeypatch):
    """Before planning: a config whose rows would not fit in half the machine's memory is
    one line naming the file (here the machine is made small, the config is ordinary)."""
    from lrdoctor.core.errors import UnusableInput
    from lrdoctor.read.bytes import limits
    from lrdoctor.replay.config import load_config

    p = tmp_path / "run.yaml"
    p.write_text("train: {steps: 1000, samples_per_step: 1000}\n"
                 "schedule: {kind: cosine, max_lr: 1.0e-3}\n")
    assert load_config(p).train.steps == 1000
    monkeypatch.setattr(limits, "machine_memory", lambda: 64 << 20)
    with pytest.raises(UnusableInput, match="more than half of this machine's") as info:
        load_config(p)
    assert str(info.value).startswith(str(p))
