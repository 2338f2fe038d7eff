"""Schedules that save no position of their own, found by content and rebuilt.

timm's schedulers are stateless by design: ``state_dict()`` is their ``__dict__`` (the
knobs, ``base_values``, ``t_in_epochs``) and the loop passes the epoch or update count
on every call. A checkpoint holding one (under any key, in any file) gets its schedule
rebuilt (family ``timm``) with no scheduler progress: ``RunState.stateless`` says so, and
LRD133 solves the position from the saved LR and the trainer's counters
(``lr == f(k * step)``). Read by content: no file or key name is assumed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from lrdoctor.core.state import RunState, ScheduleSpec, Unit
from lrdoctor.read.layouts import _common
from lrdoctor.read.scan import discover
from lrdoctor.schedules import timm

_MAX_DEPTH = 4


def _dicts(obj: Any, key: str = "", depth: int = 0) -> Iterator[tuple[str, dict[str, Any]]]:
    """(dotted key, dict) for every dict within ``_MAX_DEPTH`` levels, breadth-first."""
    if not isinstance(obj, dict) or depth > _MAX_DEPTH:
        return
    yield key, obj
    for k, v in list(obj.items())[:256]:
        if isinstance(v, dict):
            yield from _dicts(v, f"{key}.{k}" if key else str(k), depth + 1)


def _plain(sd: dict[str, Any]) -> dict[str, Any]:
    """The scheduler's knobs that are plain values (numbers, strings, lists of numbers)."""
    out: dict[str, Any] = {}
    for k, v in sd.items():
        if isinstance(v, (bool, int, float, str)) or v is None:
            out[str(k)] = v
        elif isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v):
            out[str(k)] = list(v)
    return out


def attach(sc: discover.Scan, st: RunState) -> None:
    """Rebuild a timm scheduler found anywhere in the scan, when nothing else was found."""
    if st.schedule is not None or st.scheduler_progress is not None:
        return
    for file, obj in sc.objects.items():
        for key, d in _dicts(obj):
            kind = timm.kind_of(d)
            if kind is None:
                continue
            where = f"{discover.relpath(file, sc.checkpoint.path if sc.checkpoint.path.is_dir() else sc.checkpoint.path.parent)}:{key or 'top level'}"
            base = _common.number((d.get("base_values") or [None])[0])
            if kind not in timm.KINDS or base is None:
                st.notes.append(f"{where}: timm {kind} is not modelled by lrdoctor; its "
                                "position is not saved, so nothing can be judged from it")
                return
            params = _plain(d)
            unit = Unit.EPOCHS if d.get("t_in_epochs", True) else Unit.UPDATES
            st.schedule = ScheduleSpec(family="timm", kind=kind, max_lr=base, unit=unit,
                                       min_lr=float(params.get("lr_min") or 0.0),
                                       warmup=float(params.get("warmup_t") or 0),
                                       horizon=timm.cycle_length(params), params=params,
                                       source=where)
            st.stateless = (f"timm {kind} state ({where}): timm schedulers keep no position; "
                            "it is solved from the saved LR")
            st.notes = [n for n in st.notes if not n.startswith("no LR scheduler state found")]
            st.facts.contents = {}
            used = st.facts.files_used if st.facts.files_used is not None else []
            if file not in used:
                st.facts.files_used = [*used, file]
            return
