"""Repair policies: what the scheduler state *should* be, decided on the RunState alone.

Framework-blind on purpose: a policy turns a :class:`RunState` (plus what the user
said) into a :class:`~lrdoctor.core.repair.Target` — new scheduler progress, maybe a new
horizon, the LR the schedule gives there. Each layout's repair (``repair`` in
``lrdoctor.read.layouts.<framework>``, reached through the layout registry) only
translates a Target into concrete fields. When the checkpoint cannot say what
was intended, the policy refuses with the option to give; it never guesses.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import NotParsed, UnusableInput
from lrdoctor.core.findings import Finding
from lrdoctor.core.repair import Refusal, Target
from lrdoctor.core.state import RunState, ScheduleSpec, Unit
from lrdoctor.diagnose import Recommendation, recommend
from lrdoctor.schedules import lr_or_none, with_horizon

__all__ = ["POLICIES", "RESOLVES", "Refusal", "Target", "make_target", "read_replay"]

POLICIES = ("nominal", "rescale", "extend-horizon")

# What `lrdoctor fix` does without --policy is lrdoctor.diagnose.recommend: one
# recommendation per checkpoint, the same one the findings' fix texts name.
# Findings each policy must make disappear (checked on the written output).
RESOLVES = {
    "nominal": ("LRD101", "LRD103", "LRD104", "LRD105", "LRD108", "LRD109", "LRD112", "LRD113",
                "LRD116"),
    "rescale": ("LRD103", "LRD105"),
    "extend-horizon": ("LRD101", "LRD105"),
    "sync-lr": ("LRD105",),
}


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


def _integral(x: float) -> float | int:
    """Counters are integers in every framework; keep floats only when they are not."""
    r = round(x)
    return int(r) if abs(x - r) < 1e-9 * max(1.0, abs(x)) else x


def choose_policy(findings: list[Finding], policy: str | None
                  ) -> tuple[str | None, list[str], Recommendation | None]:
    """The policy to run, the finding codes that motivate it, and what the findings
    recommend (None: nothing calls for a fix, or the policy was given).

    Returns (None, [], None) when nothing calls for a fix.
    """
    if policy is not None:
        return policy, [f.code for f in findings if f.code in RESOLVES[policy]], None
    rec = recommend(findings)
    if rec is None:
        return None, [], None
    return rec.policy, list(rec.because), rec


def make_target(state: RunState, findings: list[Finding], *, policy: str | None = None,
                k: float | None = None, progress: float | None = None,
                replay: Path | None = None, schedule: str | None = None) -> Target | None:
    """Decide the Target; None when nothing calls for a fix (already healthy).

    ``schedule``: the ``--schedule`` text (see :mod:`lrdoctor.repair.schedule_option`);
    it replaces the schedule the checkpoint gave, and a ``--from-replay`` report's
    schedule is used where the checkpoint has none, so the param-group LR is exact
    for a LambdaLR too."""
    if policy is not None and policy not in POLICIES:
        raise Refusal(f"unknown policy {policy!r} (one of {', '.join(POLICIES)})")
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
    chosen, codes, rec = choose_policy(findings, policy)
    if chosen is None:
        return None
    sp = state.scheduler_progress
    if sp is None:
        raise Refusal("the checkpoint holds no scheduler progress to repair", state.path)
    spec = state.schedule
    given = _given_schedule(sp.unit, schedule, replay_doc if spec is None else None, replay)
    if given is not None:
        spec = given
    horizon = spec.horizon if spec is not None else None
    t = Target(policy=chosen, progress_before=sp.value, progress=sp.value, unit=sp.unit,
               horizon_before=horizon, schedule=spec, motivated_by=codes,
               lr_before=lr_or_none(spec, sp.value))
    if given is not None:
        t.reasons.append(f"schedule: {given.family} {given.kind} from {given.source}")
    if rec is not None:
        t.chosen_by, t.alternative, t.why = "findings", rec.alternative, rec.why
        if rec.k is not None and k is None:
            k = rec.k

    if chosen == "sync-lr":
        t.reasons.append("param-group lr set to the schedule's value at the saved progress")
    elif chosen == "nominal":
        if progress is not None:
            t.progress = _integral(float(progress))
            t.reasons.append(f"scheduler progress set to --progress {t.progress}")
        elif ratio is not None:
            t.progress = _integral(sp.value / ratio)
            t.reasons.append(f"replay: actual/nominal progress = {ratio:.6g}; "
                             f"scheduler progress divided by it")
        elif state.nominal_progress is not None:
            t.progress = _integral(state.nominal_progress.value)
            src = state.nominal_progress.source or state.nominal_progress.name
            t.reasons.append(f"scheduler progress set to the nominal progress ({src})")
        else:
            raise Refusal("the checkpoint does not say where the scheduler should be: give "
                          "--progress N or --from-replay report.json", state.path)
    elif chosen == "rescale":
        t.k = k if k is not None else _infer_k(state, findings)
        if t.k is None or t.k <= 0:
            raise Refusal("cannot tell how many times too fast the scheduler ran: give --k N",
                          state.path)
        t.progress = _integral(sp.value / t.k)
        t.reasons.append(f"scheduler counters divided by k = {t.k:g}")
    elif chosen == "extend-horizon":
        t.horizon = _extended_horizon(state, spec, ratio)
        if spec is not None:
            try:
                t.schedule = with_horizon(spec, t.horizon)
            except ValueError as exc:
                raise Refusal(f"{exc}: --policy extend-horizon cannot move it (use --policy "
                              "nominal)", state.path) from None
        pace = _pace(state)
        t.reasons.append(f"horizon moved {horizon:g} -> {t.horizon:g} so the remaining "
                         "schedule ends at the planned end"
                         + (f" with the scheduler kept at {pace:.4g} calls per update, as "
                            "the run steps it" if pace is not None else ""))
    t.lr = lr_or_none(t.schedule, t.progress)
    if t.progress < 0:
        raise Refusal(f"the repaired progress would be negative ({t.progress})", state.path)
    return t


def _given_schedule(unit: Unit, text: str | None, replay_doc: Any,
                    replay: Path | None) -> ScheduleSpec | None:
    from lrdoctor.repair import schedule_option

    if text is not None:
        return schedule_option.parse(text, unit)
    if replay_doc is not None and replay is not None:
        return schedule_option.from_replay(replay_doc, unit, str(replay))
    return None


def _infer_k(state: RunState, findings: list[Finding]) -> float | None:
    """k from the LRD103 evidence, or progress / nominal when that is a clean integer."""
    for f in findings:
        if f.code == "LRD103":
            v = f.evidence.get("k")
            if isinstance(v, (int, float)) and v >= 2 and float(v).is_integer():
                return float(v)
    sp, nom = state.scheduler_progress, state.nominal_progress
    if sp is None or nom is None or nom.value <= 0:
        return None
    ratio = sp.value / nom.value
    if ratio >= 2 and abs(ratio - round(ratio)) < 1e-9:
        return float(round(ratio))
    return None


def _pace(state: RunState) -> float | None:
    """Scheduler progress per nominal progress when the run does not step 1:1 (None)."""
    from lrdoctor.rules.common import REL_TOL, progress_ratio

    r = progress_ratio(state)
    return r if r is not None and abs(r - 1) > REL_TOL else None


def _extended_horizon(state: RunState, spec: ScheduleSpec | None, ratio: float | None) -> float:
    """progress + remaining planned work (converted to the schedule's unit) x observed pace."""
    sp = state.scheduler_progress
    if sp is None:  # make_target refused this already
        raise Refusal("the checkpoint holds no scheduler progress to repair", state.path)
    if spec is None or spec.horizon is None:
        raise Refusal("the checkpoint's schedule has no horizon to move (use --policy "
                      "nominal, or change the horizon in the training config)", state.path)
    if state.planned_end is None or state.trainer_progress is None:
        raise Refusal("the checkpoint does not say where training is planned to end: "
                      "use --policy nominal with --progress N", state.path)
    done, end = state.trainer_progress.value, state.planned_end.value
    if end - done <= 0 or done <= 0:
        raise Refusal(f"training is at {done:g} of {end:g} planned: no horizon to extend",
                      state.path)
    # Schedule units per trainer unit, had the loop followed its budget.
    nom = state.nominal_progress
    if nom is not None and nom.value > 0:
        rate = nom.value / done
    elif state.planned_end.unit == spec.unit:
        rate = 1.0
    elif (state.planned_end.unit == Unit.UPDATES and spec.unit == Unit.SAMPLES
          and state.samples_per_update):
        rate = float(state.samples_per_update)
    else:
        raise Refusal(f"cannot convert the planned end ({state.planned_end.unit.value}) to the "
                      f"schedule's unit ({spec.unit.value}): use --policy nominal with "
                      "--progress N", state.path)
    # Observed pace (actual / nominal scheduler progress), or the replay's.
    pace = ratio if ratio is not None else sp.value / (done * rate)
    if not (pace and math.isfinite(pace)):
        pace = 1.0
    new = end * rate * pace
    if new <= spec.warmup:
        raise Refusal(f"the extended horizon {new:g} would not pass the warmup "
                      f"{spec.warmup:g}", state.path)
    return float(_integral(round(new)))
