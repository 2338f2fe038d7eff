"""How fast does the CLI answer, next to ``python -c 'import typer'``? (issue 29, items 20-21)

Three commands, each in a fresh interpreter, interleaved round by round so that a busy
machine slows all of them alike:

1. ``python -c 'import typer'``                       (the floor any typer CLI pays)
2. ``python -m lrdoctor --help``                       (goal: <= 1.3x the floor)
3. ``python -m lrdoctor inspect sample_checkpoints/hf-healthy -q``
   (goal: <= 0.3 s and <= 2.5x the floor)

Each process gets a fresh ``PYTHONPYCACHEPREFIX`` (bytecode written by one warm-up run
of each command first), so the figures are those of an installed package, not of
compiling sources under ``PYTHONDONTWRITEBYTECODE``. Printed: the medians of wall time
and of CPU time (user + system; steadier than wall on a shared machine) and their ratios.

    .venv/bin/python benchmarks/bench_startup.py [--rounds 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable
SAMPLE = ROOT / "sample_checkpoints" / "hf-healthy"

HELP_RATIO_GOAL = 1.3
INSPECT_RATIO_GOAL, INSPECT_GOAL_S = 2.5, 0.3

COMMANDS: dict[str, list[str]] = {
    "import typer": [PY, "-c", "import typer"],
    "lrdoctor --help": [PY, "-m", "lrdoctor", "--help"],
    "inspect hf-healthy -q": [PY, "-m", "lrdoctor", "inspect", str(SAMPLE), "-q"],
}


def _env(cache: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = cache
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("GITHUB_ACTIONS", None)
    return env


def _once(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds user+system) of one run of ``cmd``."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True, check=False)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} exited {done.returncode}: {done.stderr.strip()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def measure(rounds: int) -> dict[str, list[tuple[float, float]]]:
    """(wall, CPU) seconds of each command, ``rounds`` times, the commands interleaved."""
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in COMMANDS}
    with tempfile.TemporaryDirectory(prefix="lrd-bench-pyc-") as cache:
        env = _env(cache)
        for cmd in COMMANDS.values():  # warm-up: writes the bytecode, fills the OS cache
            _once(cmd, env)
        for _ in range(rounds):
            for name, cmd in COMMANDS.items():
                times[name].append(_once(cmd, env))
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    args = ap.parse_args()
    times = measure(args.rounds)
    wall = {n: statistics.median(t[0] for t in ts) for n, ts in times.items()}
    cpu = {n: statistics.median(t[1] for t in ts) for n, ts in times.items()}
    print(f"{args.rounds} rounds, medians; load average {os.getloadavg()[0]:.1f} "
          f"on {os.cpu_count()} CPUs")
    print(f"{'command':<24} {'wall s':>7} {'x typer':>8} {'CPU s':>7} {'x typer':>8}")
    for n in times:
        print(f"{n:<24} {wall[n]:>7.3f} {wall[n] / wall['import typer']:>8.2f} "
              f"{cpu[n]:>7.3f} {cpu[n] / cpu['import typer']:>8.2f}")
    for what, med in (("wall", wall), ("CPU", cpu)):
        floor = med["import typer"]
        h, i = med["lrdoctor --help"] / floor, med["inspect hf-healthy -q"]
        print(f"{what}: --help {h:.2f}x import typer (goal <= {HELP_RATIO_GOAL}x: "
              f"{'met' if h <= HELP_RATIO_GOAL else 'NOT met'}); inspect -q {i:.3f} s, "
              f"{i / floor:.2f}x (goal <= {INSPECT_GOAL_S} s and <= {INSPECT_RATIO_GOAL}x: "
              f"{'met' if i <= INSPECT_GOAL_S and i / floor <= INSPECT_RATIO_GOAL else 'NOT met'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
