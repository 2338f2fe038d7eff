"""The real execution behind a fast replay: torch runs a sample, checked against the trace.

Why: the fast path (:mod:`.engine`) is arithmetic; the torch path (:mod:`.torch_exec`)
executes the loop (forward/backward on the real shapes, ``optimizer.step()``,
``scheduler.step()``) but runs a few hundred micro-batches a second on a CPU. A
replay that answers in seconds runs the fast path over the whole run and torch over
a sample that covers every path the run takes: its first train steps, and a segment
starting at each change of path (a dp size change, a failed update). Each segment
resumes the real loop where the fast trace says the run is (micro-steps, updates,
scheduler progress), like a run resumed from a checkpoint, and every micro-batch's
window, update, scheduler progress, LR and loss weight must agree.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np

# Micro-batches torch runs for the cross-check (the first steps get most of them).
SAMPLE_MICRO_BATCHES = 64
# Micro-batches at most in one later segment (a path change deep in a run).
SEGMENT_MICRO_BATCHES = 32
EXACT = ("window", "window_size", "is_update", "applied", "update_index", "failed",
         "samples", "dp")
CLOSE = ("scheduler_progress", "lr", "loss_weight")
RTOL = 1e-9


def _clean_starts(fast_trace: dict[str, np.ndarray], steps: np.ndarray) -> dict[int, int]:
    """Train step -> first trace row, for steps that start with no window open."""
    ts = fast_trace["train_step"]
    firsts = np.searchsorted(ts, steps) if len(ts) else np.zeros(0, np.int64)
    out = {}
    for s, r in zip(steps.tolist(), firsts.tolist(), strict=True):
        if r >= len(ts) or ts[r] != s:
            continue
        # Clean: the row before closed its window (the new step opens a fresh one).
        if r == 0 or bool(fast_trace["is_update"][r - 1]):
            out[s] = r
    return out


def plan_segments(fast_trace: dict[str, np.ndarray], infos: Sequence[Any], epochs: int,
                  failed_updates: list[int]) -> tuple[list[tuple[int, int, str]], list[str]]:
    """[(first info index, end info index, why)] to run in torch, and what is left out."""
    steps = np.asarray([i.step for i in infos])
    sizes = [len(i.plan.micro_batches) * epochs for i in infos]
    clean = _clean_starts(fast_trace, steps)
    segs: list[tuple[int, int, str]] = []
    skipped: list[str] = []

    def extend(a: int, budget: int) -> int:
        """End (exclusive) after a: at least one step, then while within budget."""
        b, used = a + 1, sizes[a]
        while b < len(infos) and used + sizes[b] <= budget:
            used += sizes[b]
            b += 1
        return b

    if infos:
        segs.append((0, extend(0, SAMPLE_MICRO_BATCHES), "first train steps"))
    # Paths that start later in the run: each dp size, each failed update.
    marks: list[tuple[int, str]] = []
    for a in range(1, len(infos)):
        if infos[a].dp != infos[a - 1].dp:
            marks.append((a, f"dp {infos[a - 1].dp} -> {infos[a].dp}"))
    if failed_updates and len(fast_trace["update_index"]):
        ups = fast_trace["update_index"]
        for u in sorted(set(failed_updates)):
            rows = np.nonzero(ups == u)[0]
            if len(rows):
                step = int(fast_trace["train_step"][rows[0]])
                marks.append((int(np.searchsorted(steps, step)), f"failed update {u}"))
    for a, why in sorted(marks):
        if any(x <= a < y for x, y, _ in segs):
            continue  # already inside a segment
        b0 = a
        while b0 > 0 and steps[b0] not in clean and a - b0 < 8:
            b0 -= 1
        if steps[b0] not in clean:
            skipped.append(f"{why}: no step nearby starts with no accumulation window open")
            continue
        segs.append((b0, extend(b0, SEGMENT_MICRO_BATCHES), why))
    return sorted(segs), skipped


def cross_check(cfg, infos: Sequence[Any], fast, *, device: str = "cpu") -> dict[str, Any]:
    """Run torch over a sample of the run and compare it with the fast trace ``fast``.

    Returns a JSON-ready summary: what ran, how many micro-batches agreed, the first
    disagreement (none expected: the two engines are tested equal), the throughput.
    """
    from lrdoctor.replay import torch_exec
    from lrdoctor.replay.nominal import samples_per_step

    F = fast.trace
    epochs = cfg.train.epochs_per_step
    segs, skipped = plan_segments(F, infos, epochs, list(cfg.scheduler.failed_updates))
    sps = samples_per_step(cfg, infos)
    first_row = (np.searchsorted(F["train_step"], [i.step for i in infos]) if infos
                 else np.zeros(0, dtype=np.int64))
    checked = ran = 0
    loop_seconds = 0.0
    mismatches: list[str] = []
    segments = []
    t0 = time.perf_counter()
    backend = None
    warned: list[dict] = []
    for a, b, why in segs:
        r0 = int(first_row[a])
        n = sum(len(i.plan.micro_batches) for i in infos[a:b]) * epochs
        start = {"samples_per_step": sps, "global_step": r0,
                 "update_index": int(F["is_update"][:r0].sum()),
                 "progress": float(F["scheduler_progress"][r0 - 1]) if r0 else 0.0}
        rep = torch_exec.replay_torch(cfg, infos[a:b], device=device, start=start,
                                      framework_scheduler=False)
        backend = rep.notes.get("scheduler_class")
        if r0 == 0:  # a later segment restarts the optimizer: its step order is not the run's
            warned = rep.notes.get("torch_warnings") or []
        loop_seconds += rep.notes.get("torch_seconds") or 0.0
        ran += n
        T = rep.trace
        if len(T["lr"]) != n:
            bad, m = [f"torch ran {len(T['lr'])} micro-batches where the fast trace has {n}"], 0
        else:
            # A window still open where the segment ends is sized and weighted by what
            # comes after it: compare up to the segment's last update.
            ups = np.nonzero(T["is_update"])[0]
            m = int(ups[-1]) + 1 if len(ups) else n
            bad = _compare(F, T, r0, m)
        checked += m
        segments.append({"steps": [int(infos[a].step), int(infos[b - 1].step)],
                         "micro_batches": m, "why": why, "agree": not bad})
        mismatches += bad
    seconds = time.perf_counter() - t0
    total = len(F["lr"])
    return {"ran": bool(segs), "micro_batches": checked, "of": int(total),
            "segments": segments, "not_covered": skipped, "agree": not mismatches,
            "mismatches": mismatches[:5], "device": torch_exec.pick_device(device),
            "scheduler_class": backend, "seconds": round(seconds, 3),
            "torch_warnings": warned,
            # The loop alone (the first optimizer also imports torch._dynamo: seconds).
            "micro_batches_per_second": round(ran / loop_seconds, 1) if loop_seconds else None}


def _compare(F: dict, T: dict, r0: int, n: int) -> list[str]:
    """Disagreements between the fast trace rows r0..r0+n and the torch segment."""
    out = []
    sl = slice(r0, r0 + n)
    for col in EXACT:
        a, b = F[col][sl], T[col][:n]
        if not np.array_equal(a, b):
            i = int(np.nonzero(np.asarray(a) != np.asarray(b))[0][0])
            out.append(f"{col} at trace row {r0 + i}: fast {a[i]}, torch {b[i]}")
    for col in CLOSE:
        a, b = np.asarray(F[col][sl], float), np.asarray(T[col][:n], float)
        ok = np.isclose(a, b, rtol=RTOL, atol=0) | (np.isnan(a) & np.isnan(b))
        if not ok.all():
            i = int(np.nonzero(~ok)[0][0])
            out.append(f"{col} at trace row {r0 + i}: fast {a[i]:.12g}, torch {b[i]:.12g}")
    return out
