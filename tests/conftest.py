"""Session fixtures: one healthy run per framework, built once by the factories in
:mod:`tests.helpers.factories` for every test that only needs to read one."""

from __future__ import annotations

import pytest

from tests.helpers.factories import Truth, hf_run, megatron_run, roll_run


@pytest.fixture(scope="session")
def hf_run_dir(tmp_path_factory) -> Truth:
    """One real healthy HF Trainer run (cosine, warmup 3, 12 steps, saves every 4)."""
    return hf_run(tmp_path_factory.mktemp("hf") / "out")


@pytest.fixture(scope="session")
def megatron_run_dir(tmp_path_factory) -> Truth:
    """One healthy Megatron-LM run (cosine, train_iters 40, gbs 16, saves at 10 and 20)."""
    return megatron_run(tmp_path_factory.mktemp("megatron") / "ckpt")


@pytest.fixture(scope="session")
def roll_run_dir(tmp_path_factory) -> Truth:
    """A healthy ROLL run: 10 pipeline steps x 4 updates, checkpoints at steps 4 and 9."""
    return roll_run(tmp_path_factory.mktemp("roll") / "output")
