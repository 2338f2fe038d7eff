"""How long the CI gate takes: ``lrdoctor check`` on the test projects, and the three
machine formats on many findings.

1. ``lrdoctor check`` in tests/projects/ok and bad (a real Megatron checkpoint and
   a replay on the fast path), each output format, in a fresh subprocess;
2. ``render.document`` of N targets x 10 findings in sarif / junit / github;
3. ``lrdoctor check --report`` (matplotlib figures included).

Goals: a check of a small project in CI < 3 s; rendering 10,000 findings < 3 s.
Prints wall and CPU seconds (CPU is the fairer figure on a shared machine);
asserts nothing.

    .venv/bin/python benchmarks/bench_check.py [--targets 1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXE = Path(sys.executable).with_name("lrdoctor")


def _child_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_cli(args: list[str], cwd: Path, repeat: int) -> tuple[float, float, int]:
    best_wall, best_cpu, rc = float("inf"), float("inf"), -1
    env = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    for _ in range(repeat):
        cpu0, t0 = _child_cpu(), time.perf_counter()
        rc = subprocess.run([str(EXE), *args], cwd=cwd, env=env, capture_output=True).returncode
        best_wall = min(best_wall, time.perf_counter() - t0)
        best_cpu = min(best_cpu, _child_cpu() - cpu0)
    return best_wall, best_cpu, rc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", type=int, default=1000)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()

    print(f"{'command':<48} {'wall s':>7} {'cpu s':>7} {'exit':>5}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("ok", "bad"):
            proj = Path(tmp) / name
            shutil.copytree(ROOT / "tests" / "projects" / name, proj)
            (proj / ".git").mkdir()
            for fmt in ("text", "json", "sarif", "junit", "github"):
                wall, cpu, rc = run_cli(["check", "--output-format", fmt], proj, a.repeat)
                label = f"{name}: check --output-format {fmt}"
                print(f"{label:<48} {wall:7.2f} {cpu:7.2f} {rc:5d}")
            wall, cpu, rc = run_cli(["check", "--report", "rep"], proj, a.repeat)
            label = f"{name}: check --report"
            print(f"{label:<48} {wall:7.2f} {cpu:7.2f} {rc:5d}")

    sys.path.insert(0, str(ROOT))
    from lrdoctor.core.report import Report
    from lrdoctor.findings import finding
    from lrdoctor.render import document

    reps = [Report("inspect", f"ckpt/run-{i}", "torchsave",
                   findings=[finding("LRD103", f"k = {j}", {"k": j}) for j in range(10)])
            for i in range(a.targets)]
    n = a.targets * 10
    print(f"\nrender {n:,} findings over {a.targets:,} targets")
    for fmt in ("sarif", "junit", "github"):
        best, size = float("inf"), 0
        for _ in range(a.repeat):
            t0 = time.process_time()
            size = len(document(reps, fmt))
            best = min(best, time.process_time() - t0)
        print(f"  {fmt:<7} {best:6.2f} s cpu  {size / 2**20:6.1f} MiB")


if __name__ == "__main__":
    main()
