"""Event-indexed cyclical parameter schedulers (a cosine per cycle) as pure functions.

The saved state these model is recognised by its keys alone
(:func:`lrdoctor.read.scan.shapes.is_cyclical_scheduler`): ``event_index`` (calls since
the current cycle began; it restarts at 0 each cycle), ``cycle`` (cycles finished),
``start_value``, ``end_value``, ``cycle_size``, ``cycle_mult``, ``start_value_mult``,
``end_value_mult``, ``warmup_duration``. PyTorch-Ignite 0.5's ``CosineAnnealingScheduler``
saves this state; the arithmetic below is its ``CyclicalScheduler.__call__`` and
``get_param`` step for step: each call sets the value for the cycle position, then
advances ``event_index``; a cycle of ``cycle_size`` calls anneals ``start_value`` towards
``end_value`` (never reaching it: the next call restarts the cycle), then
``warmup_duration`` calls climb linearly back; each new cycle is ``int(size x
cycle_mult)`` long and its values are multiplied by their ``*_mult``.

A piecewise-linear scheduler (``event_index``, ``milestones``, ``values``: PyTorch-Ignite's
``PiecewiseLinear``) is kind ``"piecewise"`` here: ``params`` = ``milestones``, ``values``;
it holds its last value past its last milestone (no wrap).

ScheduleSpec mapping (family ``"cyclical"``): ``kind`` ``"cosine"`` (``CosineAnnealingScheduler``),
``"linear"`` or ``"linear-monotonic"`` (``LinearCyclicalScheduler``; same saved keys); ``max_lr`` =
``start_value`` and ``min_lr`` = ``end_value`` of the first cycle; ``horizon`` = the first
cycle's ``cycle_size`` (where its decay ends); ``params`` = ``cycle_size``,
``cycle_mult``, ``start_value_mult``, ``end_value_mult``, ``warmup_duration`` of the first
cycle. Progress = calls made (events the scheduler was attached to), and ``lr_at(t)`` is
the value in force after ``t`` calls, i.e. the one call ``t - 1`` set (after 0 calls:
``start_value``), which is the LR an optimizer saved beside the state holds.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lrdoctor.core.state import ScheduleSpec

MAX_CYCLES = 1_000_000
# ``lrdoctor fix`` moves torch/megatron/DeepSpeed counters; a cyclical state would need its
# event_index, cycle, cycle_size and values rewritten together: not done, so refused.
REPAIR_REFUSED = ("an event-indexed param scheduler's state (event_index, cycle, milestones, "
                  "start_value) is not rewritten by lrdoctor fix; fix the training loop and "
                  "restart the scheduler from its first cycle")


def _cosine(start: float, end: float, event_index: int, size: int) -> float:
    return start + ((end - start) / 2) * (1 - math.cos(math.pi * (event_index / size)))


def _linear(start: float, end: float, event_index: int, size: int) -> float:
    """Down to ``end`` at mid-cycle and back (PyTorch-Ignite's LinearCyclicalScheduler)."""
    return end + (start - end) * abs(event_index / size - 0.5) * 2


def _linear_monotonic(start: float, end: float, event_index: int, size: int) -> float:
    return start + (end - start) * (event_index / size)


#: The shapes one cycle can take; the saved state does not say which (the same keys), so
#: the reader asks the saved LR (:func:`lrdoctor.read.layouts.torchsave` ``_read_cyclical``).
SHAPES = {"cosine": _cosine, "linear": _linear, "linear-monotonic": _linear_monotonic}


def value_of_call(p: dict[str, Any], start: float, end: float, k: int,
                  kind: str = "cosine") -> float:
    """The value call ``k`` (0-based, counted over the whole run) sets."""
    one = SHAPES[kind]
    size, warm = int(p["cycle_size"]), int(p.get("warmup_duration", 0) or 0)
    mult, smult, emult = (float(p.get("cycle_mult", 1.0)), float(p.get("start_value_mult", 1.0)),
                          float(p.get("end_value_mult", 1.0)))
    for _ in range(MAX_CYCLES):
        if size < 1:
            raise ValueError(f"cycle_size shrank to {size}: the scheduler divides by it")
        if k < size + warm:
            if k < size:
                return one(start, end, k, size)
            start *= smult  # at event_index == cycle_size the start value moves first
            if k == size:
                return one(start, end, k, size)
            return end + (start - end) * ((k - size) / warm)
        k -= size + warm
        start *= smult
        end *= emult
        size, warm = int(size * mult), int(warm * mult)
    raise ValueError(f"more than {MAX_CYCLES} cycles")


def piecewise_value(milestones: list[Any], values: list[Any], k: int) -> float:
    """The value a piecewise-linear scheduler (``milestones``/``values`` pairs, PyTorch-Ignite's
    ``PiecewiseLinear``) sets at its call ``k``: the first value before the first milestone,
    the last from the last one on, else the line through the segment holding ``k``."""
    if milestones[0] > k:
        return float(values[0])
    if milestones[-1] <= k:
        return float(values[-1])
    i = max(j for j in range(len(milestones) - 1) if milestones[j] <= k)
    m0, m1, v0, v1 = milestones[i], milestones[i + 1], values[i], values[i + 1]
    return float(v0 + (v1 - v0) * (k - m0) / (m1 - m0))


def lr_at(spec: ScheduleSpec, progress: float) -> float:
    """The value in force after ``progress`` calls. A cyclical scheduler concatenated after
    others (``params["offset"]`` calls of them first, a piecewise-linear warm-up in
    ``params["before"]``) takes over at call ``offset``."""
    calls = max(0, int(math.floor(progress)))
    p = spec.params
    if spec.kind == "piecewise":
        return piecewise_value(p["milestones"], p["values"], max(calls - 1, 0))
    offset = int(p.get("offset", 0))
    if calls <= offset and offset:
        before = p.get("before")
        if before is None:
            raise ValueError(f"the {offset} calls before this scheduler are not modelled")
        return piecewise_value(before["milestones"], before["values"], max(calls - 1, 0))
    if calls == 0:
        return spec.max_lr
    return value_of_call(p, spec.max_lr, spec.min_lr, calls - offset - 1, spec.kind)


def floor_progress(spec: ScheduleSpec) -> float | None:
    if spec.kind == "piecewise":  # the last value holds from the call at the last milestone
        return float(spec.params["milestones"][-1]) + 1
    return None  # each cycle restarts before its end value is reached


def wraps(spec: ScheduleSpec) -> bool:
    return spec.kind != "piecewise"  # a cycle restarts at start_value; a piecewise holds


def problems(spec: ScheduleSpec) -> list[str]:
    p, out = spec.params, []
    if spec.kind == "piecewise":
        m = spec.params.get("milestones") or []
        return [] if m and all(a <= b for a, b in zip(m, m[1:], strict=False)) else [
            f"piecewise milestones {m} are not increasing"]
    if spec.kind not in SHAPES:
        out.append(f"cyclical kind {spec.kind!r} is not one of {', '.join(SHAPES)}")
    if int(p.get("cycle_size", 0)) < 2:
        out.append(f"cycle_size={p.get('cycle_size')} is below 2")
    if int(p.get("warmup_duration", 0) or 0) < 0:
        out.append(f"warmup_duration={p.get('warmup_duration')} is negative")
    return out


def concatenated(parent: Any, state: dict[str, Any]) -> tuple[int, dict[str, Any] | None] | None:
    """Where ``state`` sits in a concatenation (a dict with ``schedulers``, ``durations``,
    ``_scheduler_index``: PyTorch-Ignite's ``ConcatScheduler``, which
    ``create_lr_scheduler_with_warmup`` builds): (the calls the schedulers before it took,
    the piecewise-linear warm-up before it or None). (0, None) when not concatenated; None
    when it is not the scheduler now driving (its own calls are then not the run's)."""
    if not (isinstance(parent, dict) and isinstance(parent.get("schedulers"), list)
            and isinstance(parent.get("durations"), list) and "_scheduler_index" in parent):
        return 0, None
    subs, durations = parent["schedulers"], parent["durations"]
    j = next((i for i, sd in enumerate(subs) if sd is state), None)
    if j is None or j != parent["_scheduler_index"] or j > len(durations):
        return None
    before = None
    if j == 1:
        first = subs[0]
        if isinstance(first, dict) and isinstance(first.get("schedulers"), list) and len(
                first["schedulers"]) == 1:  # a param-group wrapper: [(name, state)]
            pair = first["schedulers"][0]
            first = pair[1] if isinstance(pair, (list, tuple)) and len(pair) == 2 else None
        if isinstance(first, dict) and "milestones" in first and "values" in first:
            before = {"milestones": list(first["milestones"]), "values": list(first["values"])}
    return int(sum(int(d) for d in durations[:j])), before


def total_calls(state: dict[str, Any]) -> tuple[int, dict[str, Any], float, float] | None:
    """From a saved state: (calls made over the whole run, the first cycle's parameters,
    its start_value, its end_value), or None when the finished cycles cannot be sized
    exactly (``cycle_mult`` != 1 with a truncation that more than one first size fits)."""
    ei, cycle = int(state["event_index"]), int(state.get("cycle", 0) or 0)
    size, warm = int(state["cycle_size"]), int(state.get("warmup_duration", 0) or 0)
    mult = float(state.get("cycle_mult", 1.0))
    smult, emult = float(state.get("start_value_mult", 1.0)), float(state.get("end_value_mult",
                                                                              1.0))
    # start_value was multiplied once per finished cycle, plus once when this cycle's
    # event_index passed cycle_size (the warm-up part)
    s_times = cycle + (1 if ei > size else 0)
    start = float(state["start_value"]) / smult ** s_times
    end = float(state["end_value"]) / emult ** cycle
    firsts = [(size, warm)] if cycle == 0 or mult == 1.0 else _first_sizes(size, warm, mult,
                                                                           cycle)
    if len(firsts) != 1:
        return None
    s0, w0 = firsts[0]
    done, s, w = 0, s0, w0
    for _ in range(cycle):
        done += s + w
        s, w = int(s * mult), int(w * mult)
    params = {"cycle_size": s0, "cycle_mult": mult, "start_value_mult": smult,
              "end_value_mult": emult, "warmup_duration": w0}
    return done + ei, params, start, end


def _first_sizes(size: int, warm: int, mult: float, cycles: int) -> list[tuple[int, int]]:
    """Every first (cycle_size, warmup_duration) that ``cycles`` truncated growths by
    ``mult`` turn into the saved ones."""
    if mult <= 0 or cycles > 64:
        return []
    out = []
    for cand_s in _candidates(size, mult, cycles):
        for cand_w in _candidates(warm, mult, cycles) if warm else [0]:
            s, w = cand_s, cand_w
            for _ in range(cycles):
                s, w = int(s * mult), int(w * mult)
            if (s, w) == (size, warm):
                out.append((cand_s, cand_w))
    return out


def _candidates(now: int, mult: float, cycles: int) -> list[int]:
    guess = now / mult ** cycles
    lo, hi = max(1, int(guess) - 2), int(guess) + 3 + int(2 / mult ** cycles)
    return list(range(lo, min(hi, lo + 10_000)))
