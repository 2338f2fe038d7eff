"""The README demo: diagnose the bundled sample checkpoints, repair the broken ones,
and show that the repaired copies are clean. Exits non-zero if any step does not
behave as documented in sample_checkpoints/README.md."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_checkpoints"
OUT = ROOT / "out" / "demo"


def run(*args: str, expect: int) -> None:
    cmd = [sys.executable, "-m", "lrdoctor", *args]
    print(f"\n$ lrdoctor {' '.join(args)}", flush=True)
    rc = subprocess.call(cmd, cwd=ROOT)
    if rc != expect:
        sys.exit(f"demo: expected exit code {expect}, got {rc}")


def main() -> None:
    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    rel = lambda p: str(p.relative_to(ROOT))  # noqa: E731
    print("== 1. Healthy runs: no findings ==")
    run("inspect", rel(SAMPLES / "megatron-healthy"), expect=0)
    run("inspect", rel(SAMPLES / "hf-healthy"), "--all", expect=0)
    print("\n== 2. Broken runs: lrdoctor says what went wrong and by how much ==")
    run("inspect", rel(SAMPLES / "roll-overshoot"), "--all", "--plot",
        rel(OUT / "roll-overshoot.png"), expect=1)
    run("inspect", rel(SAMPLES / "torch-microstep"), expect=1)
    print("\n== 3. Repair: a fixed copy to resume from (inputs untouched) ==")
    roll_mid = SAMPLES / "roll-overshoot" / "actor_train" / "checkpoint-100"
    # With or without torch: torch.save files are rewritten by lrdoctor's own zip writer
    # (lrdoctor.repair.torchzip), so the light install repairs them too.
    run("fix", rel(SAMPLES / "torch-microstep"), "--out",
        rel(OUT / "torch-microstep-fixed"), "--dry-run", expect=0)
    run("fix", rel(SAMPLES / "torch-microstep"), "--out",
        rel(OUT / "torch-microstep-fixed"), expect=0)
    run("fix", rel(roll_mid), "--out", rel(OUT / "roll-checkpoint-100-fixed"),
        "--policy", "nominal", expect=0)
    print("\n== 4. The repaired copies inspect clean ==")
    run("inspect", rel(OUT / "torch-microstep-fixed"), expect=0)
    run("inspect", rel(OUT / "roll-checkpoint-100-fixed"), expect=0)
    print("\n== 5. Before the run: replay ROLL's own config with real dynamic batching ==")
    run("replay", "--config", "examples/roll-sokoban-dynamic.yaml",
        "--batch-log", "examples/batchlogs/roll-sokoban.csv", expect=1)
    print(f"\ndemo OK: outputs in {rel(OUT)}")


if __name__ == "__main__":
    main()
