"""Repair policies as ``lrdoctor fix`` takes them: the user's options (``--policy``,
``--k``, ``--progress``, ``--from-replay``, ``--schedule``) checked and read, then the
decision itself, :func:`lrdoctor.diagnose_policy.decide`.

A policy turns a :class:`RunState` (plus what the user said) into a
:class:`~lrdoctor.core.repair.Target` — new scheduler progress, maybe a new horizon, the
LR the schedule gives there. The decision lives below ``diagnose`` (which words every
finding's fix with it), so the findings never recommend what ``fix`` refuses. Each
layout's repair (``repair`` in ``lrdoctor.read.layouts.<framework>``, reached through the
layout registry) only translates a Target into concrete fields.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lrdoctor.core.errors import NotParsed, UnusableInput
from lrdoctor.core.findings import Finding
from lrdoctor.core.repair import Refusal, Target
from lrdoctor.core.state import RunState, ScheduleSpec, Unit
from lrdoctor.diagnose_policy import POLICIES, RESOLVES, check_policy, decide

__all__ = ["POLICIES", "RESOLVES", "Refusal", "Target", "make_target", "read_replay"]


def read_replay(path: Path) -> tuple[float, float]:
    """(nominal, actual) scheduler progress from ``lrdoctor replay --json``."""
    return _replay_progress(_replay_doc(path), path)


def _replay_doc(path: Path) -> Any:
    """The parsed ``lrdoctor replay --json`` document (one line if it is not one)."""
    from lrdoctor.read.bytes import safetext

    try:
        text = safetext.read_text(path, "json_bytes", "a replay report")
    except UnusableInput as exc:
        raise UnusableInput(f"cannot read replay report: {exc.message}",
                            str(path)) from None
    try:
        doc = safetext.json_loads(text, str(path), "replay report")
    except NotParsed:
        raise UnusableInput("not JSON: expected the output of `lrdoctor replay --json`",
                            str(path)) from None
    return doc


def _replay_progress(doc: Any, path: Path) -> tuple[float, float]:
    if isinstance(doc, list) and doc:
        doc = doc[0]
    summary = doc.get("summary") if isinstance(doc, dict) else None
    if not isinstance(summary, dict):
        raise UnusableInput("no 'summary' object (expected the output of "
                            "`lrdoctor replay --json`)", str(path))
    nominal = _first_number(summary, ("nominal_progress", "nominal_updates", "nominal",
                                      "nominal_steps", "budget"))
    actual = _first_number(summary, ("actual_progress", "actual_updates", "actual",
                                     "actual_steps", "scheduler_progress"))
    if nominal is None or actual is None or nominal <= 0 or actual <= 0:
        raise UnusableInput("summary has no positive nominal/actual progress "
                            f"(keys: {', '.join(sorted(summary))})", str(path))
    return nominal, actual


def _first_number(d: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    for key in keys:
        v = d.get(key)
        if isinstance(v, dict):  # {"value": N, ...}
            v = v.get("value")
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def make_target(state: RunState, findings: list[Finding], *, policy: str | None = None,
                k: float | None = None, progress: float | None = None,
                replay: Path | None = None, schedule: str | None = None) -> Target | None:
    """Decide the Target; None when nothing calls for a fix (already healthy).

    ``schedule``: the ``--schedule`` text (see :mod:`lrdoctor.repair.schedule_option`);
    it replaces the schedule the checkpoint gave, and a ``--from-replay`` report's
    schedule is used where the checkpoint has none, so the param-group LR is exact
    for a LambdaLR too."""
    check_policy(policy)
    if progress is not None and replay is not None:
        raise Refusal("give --progress or --from-replay, not both")
    if k is not None and policy not in (None, "rescale"):
        raise Refusal("--k only goes with --policy rescale")
    if progress is not None and policy not in (None, "nominal"):
        raise Refusal("--progress only goes with --policy nominal")
    if progress is not None and policy is None:
        policy = "nominal"
    if k is not None and policy is None:
        policy = "rescale"
    ratio = None
    replay_doc = None
    if replay is not None:
        replay_doc = _replay_doc(replay)
        if policy != "rescale":  # with rescale the report gives its schedule only
            nominal, actual = _replay_progress(replay_doc, replay)
            ratio = actual / nominal
        if policy is None:
            policy = "nominal"
    return decide(state, findings, policy=policy, k=k, progress=progress, ratio=ratio,
                  given_schedule=lambda unit: _given_schedule(
                      unit, schedule, replay_doc if state.schedule is None else None, replay))


def _given_schedule(unit: Unit, text: str | None, replay_doc: Any,
                    replay: Path | None) -> ScheduleSpec | None:
    from lrdoctor.repair import schedule_option

    if text is not None:
        return schedule_option.parse(text, unit)
    if replay_doc is not None and replay is not None:
        return schedule_option.from_replay(replay_doc, unit, str(replay))
    return None
