"""OneVision-Encoder's stage-2 launch script at its shipped size (8,000,001 micro-steps:
``--num_sampled_data 1280000000``, 8 GPUs, ``--list_batch_sizes 10 10``), replayed as a
user runs it (``lrdoctor replay -c shells/ov_encoder_large_stage2_residual_8gpus.sh``,
the whole command with its imports; goal <= 30 s on 2 cores), after and before PR 82; and,
side by side on the same 400,001-micro-step run, the run-length path
(:class:`lrdoctor.replay.planning.StepRuns`: one plan per dp size, numpy-tiled columns)
against the per-step path it replaces, as a ratio.

Run: ``python benchmarks/bench_onevision.py``. Prints figures; asserts nothing.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "tests" / "data" / "launch_scripts" / "onevision" / "shells" / \
    "ov_encoder_large_stage2_residual_8gpus.sh"


def _cli(*sets: str) -> float:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    args = [a for s in sets for a in ("--set", s)]
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "lrdoctor", "replay", "-c", str(SCRIPT), *args,
                    "-q"], env=env, check=False, capture_output=True)
    return time.perf_counter() - t


def _paths(num_sampled: int) -> tuple[float, float, int]:
    from lrdoctor.replay import engine
    from lrdoctor.replay.config import load_config
    from lrdoctor.replay.planning import plan_steps
    from lrdoctor.replay.samples import load_samples

    cfg = load_config(SCRIPT, (f"train.num_sampled_data={num_sampled}",))
    t = time.perf_counter()
    runs = plan_steps(cfg, load_samples(cfg))
    engine.simulate(cfg, runs)
    fast = time.perf_counter() - t
    t = time.perf_counter()
    steps = list(runs)  # what planning held before: one StepInfo per step
    engine.simulate(cfg, steps)
    slow = time.perf_counter() - t
    return fast, slow, len(steps)


def main() -> None:
    for label, sets in (("after PR 82", ()), ("before PR 82", ("onevision.train_py=before-pr82",))):
        sec = _cli(*sets)
        print(f"shipped size, {label}: {sec:.1f} s for 8,000,001 micro-steps "
              f"({sec / 30:.2f}x the 30 s goal)")
    fast, slow, n = _paths(64_000_000)
    print(f"{n:,} micro-steps planned + simulated: run-length {fast:.2f} s, per-step "
          f"{slow:.2f} s: {slow / fast:.1f}x faster")


if __name__ == "__main__":
    main()
