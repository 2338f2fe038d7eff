"""What do the exact schedule models add to ``lrdoctor inspect`` of a sample checkpoint?

Goal (issue 27): building and evaluating the schedule models (``lrdoctor.schedules``: every
``lr_at``, ``problems``, ``floor_progress`` the readers and rules ask for, and
:func:`lrdoctor.schedules.shape`) adds at most 20 ms to one ``inspect``.

One process, side by side, for each checkpoint in ``sample_checkpoints/`` plus two torch
composites written here by torch itself (a SequentialLR warmup -> cosine and a
ChainedScheduler warmup x exponential, 2000 steps each, the longest exact replays): each
``inspect_path`` is run ``--repeat`` times with every family module's entry points
wrapped in a timer (outermost call only, so nested calls count once) and the replay
caches emptied before each run, as in a fresh process. The table gives the
median inspect time, the median time spent inside the models, and their ratio.

    .venv/bin/python benchmarks/bench_schedule_models.py [--repeat 15]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GOAL_MS = 20.0
ENTRY_POINTS = ("lr_at", "problems", "floor_progress", "wraps", "with_horizon")


class Clock:
    """Time spent inside the wrapped functions, outermost calls only."""

    def __init__(self) -> None:
        self.total = 0.0
        self.depth = 0
        self.calls = 0

    def wrap(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def timed(*a: Any, **kw: Any) -> Any:
            if self.depth:
                return fn(*a, **kw)
            self.depth += 1
            self.calls += 1
            t = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.total += time.perf_counter() - t
                self.depth -= 1
        return timed


def instrument(clock: Clock) -> None:
    """Wrap every family module's entry points (looked up per call by
    :mod:`lrdoctor.schedules`, so every caller goes through the wrappers)."""
    import lrdoctor.schedules as S
    from lrdoctor.core.state import ScheduleSpec, Unit

    for fam in S.FAMILIES:  # the one lookup of family modules
        mod = S._family(ScheduleSpec(fam, "", 1.0, Unit.UPDATES))
        for name in ENTRY_POINTS:
            fn = getattr(mod, name, None)
            if fn is not None:
                setattr(mod, name, clock.wrap(fn))
    S.shape = clock.wrap(S.shape)  # type: ignore[method-assign]


def torch_composites(tmp: Path) -> list[Path]:
    """Two hand-written torch loops whose schedules the models replay step by step."""
    import torch
    from torch.optim.lr_scheduler import (
        ChainedScheduler,
        CosineAnnealingLR,
        ExponentialLR,
        LinearLR,
        SequentialLR,
    )

    out = []
    for name in ("sequential", "chained"):
        p = torch.nn.Parameter(torch.zeros(4))
        opt = torch.optim.AdamW([p], lr=1e-3)
        if name == "sequential":
            sched: Any = SequentialLR(opt, [LinearLR(opt, start_factor=0.01, total_iters=100),
                                            CosineAnnealingLR(opt, T_max=2900)],
                                      milestones=[100])
        else:
            sched = ChainedScheduler([LinearLR(opt, start_factor=0.1, total_iters=100),
                                      ExponentialLR(opt, gamma=0.999)], optimizer=opt)
        for _ in range(2000):
            p.grad = torch.ones_like(p)
            opt.step()
            sched.step()
        d = tmp / name
        d.mkdir()
        torch.save({"optimizer": opt.state_dict(), "scheduler": sched.state_dict(),
                    "step": 2000, "config": {"max_steps": 3000}}, d / "ckpt.pt")
        out.append(d)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    from lrdoctor.inspect_api import inspect_path
    from lrdoctor.schedules import torch_steps

    clock = Clock()
    instrument(clock)
    samples = sorted(p for p in (ROOT / "sample_checkpoints").iterdir() if p.is_dir())
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        targets = samples + torch_composites(Path(tmp))
        print(f"{'checkpoint':<22} {'inspect ms':>11} {'models ms':>10} {'share':>7} {'calls':>6}")
        for target in targets:
            inspect_path(target)  # warm: imports, first reads
            totals, inside, calls = [], [], 0
            for _ in range(args.repeat):
                for cache in (torch_steps._replay, torch_steps._chain_replay):
                    cache.cache_clear()  # each inspect as a fresh process would run it
                clock.total, clock.calls = 0.0, 0
                t = time.perf_counter()
                inspect_path(target)
                totals.append(time.perf_counter() - t)
                inside.append(clock.total)
                calls = clock.calls
            tot, mod = statistics.median(totals) * 1e3, statistics.median(inside) * 1e3
            worst = max(worst, mod)
            print(f"{target.name:<22} {tot:>11.1f} {mod:>10.2f} {mod / tot:>7.1%} {calls:>6}")
    ok = worst <= GOAL_MS
    print(f"models add at most {worst:.2f} ms to one inspect (goal <= {GOAL_MS:g} ms): "
          f"{'OK' if ok else 'OVER'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
