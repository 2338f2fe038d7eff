"""Sweeps and fleets on an executor: the same table in-process, on a process pool, on Ray."""

from __future__ import annotations

import importlib.util
import json

import pytest
from typer.testing import CliRunner

from lrdoctor import parallel
from lrdoctor.cli import app
from lrdoctor.core.errors import UnusableInput

runner = CliRunner()

CONFIG = """
schedule: {family: megatron, kind: cosine, max_lr: 1.0e-6, min_lr: 0.0}
budget: {formula: roll}
train: {steps: 4, samples_per_step: 32, micro_batch_size: 2, gradient_accumulation: 4}
dp: {size: 2}
batching: {strategy: token_budget, max_tokens_per_microbatch: 8192}
"""
# 50 values of the memory knob: progress moves with it (what the sweep table shows)
VALUES = ",".join(str(4096 + 512 * i) for i in range(50))


def _sweep(tmp_path, *extra: str) -> tuple[list[dict], str]:
    cfg = tmp_path / "run.yaml"
    cfg.write_text(CONFIG)
    args = ["replay", "--config", str(cfg), "--synthetic", "uniform:512:8192", "--seed", "3", "--fast",
            "--sweep", f"batching.max_tokens_per_microbatch={VALUES}", "--fail-on", "never"]
    js = runner.invoke(app, [*args, "--json", *extra])
    assert js.exit_code == 0, js.output
    text = runner.invoke(app, [*args, *extra])
    assert text.exit_code == 0, text.output
    return json.loads(js.stdout)["sweep"]["rows"], text.stdout


def test_sweep_on_a_process_pool_gives_the_same_table(tmp_path):
    rows1, text1 = _sweep(tmp_path)
    rows2, text2 = _sweep(tmp_path, "--jobs", "2")
    assert len(rows1) == 50
    assert len({r["actual_updates"] for r in rows1}) > 1  # the knob moves progress
    assert rows2 == rows1
    assert text2 == text1


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ray") is None, reason="ray not installed")
def test_sweep_on_ray_gives_the_same_table_as_the_process_pool(tmp_path):
    import ray

    rows_pool, text_pool = _sweep(tmp_path, "--jobs", "2")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    try:
        rows_ray, text_ray = _sweep(tmp_path, "--jobs", "2", "--executor", "ray")
    finally:
        ray.shutdown()
    assert len(rows_ray) == 50
    assert rows_ray == rows_pool
    assert text_ray == text_pool


def test_run_map_keeps_input_order_on_a_pool():
    # later items finish first on a pool; the results still come back in input order
    out = parallel.run_map(_slow_square, [3, 2, 1, 0], jobs=2)
    assert out == [9, 4, 1, 0]


def _slow_square(x: int) -> int:
    import time

    time.sleep(0.05 * x)
    return x * x


def test_unknown_executor_and_bad_jobs_are_one_line():
    with pytest.raises(UnusableInput, match="allowed: process, ray"):
        parallel.run_map(_slow_square, [1], executor="dask")
    with pytest.raises(UnusableInput, match="--jobs 0"):
        parallel.run_map(_slow_square, [1], jobs=0)
    res = runner.invoke(app, ["check", "--inspect", "x", "--executor", "dask"])
    assert res.exit_code == 2
    assert res.stderr.strip() == "lrdoctor: error: --executor 'dask': allowed: process, ray"


def test_threads_bounded_and_ordered():
    import threading

    seen: set[str] = set()

    def work(i: int) -> int:
        seen.add(threading.current_thread().name)
        return -i

    assert parallel.threads(work, list(range(100))) == [-i for i in range(100)]
    assert len(seen) <= parallel.MAX_IO_THREADS
