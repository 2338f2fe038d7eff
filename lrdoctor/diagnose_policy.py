"""The repair a diagnosis calls for: which policy (the one recommendation per checkpoint)
and what the scheduler state *should* be under it (the :class:`Target`), decided on the
RunState and its findings alone.

Framework-blind on purpose, and below both users: :mod:`lrdoctor.diagnose` words every
repairable finding's fix with it (the command that applies the recommendation, or why
``fix`` would refuse it), and ``lrdoctor fix`` (:mod:`lrdoctor.repair.policies`, which
reads the user's options: a replay report, ``--schedule``) decides through the same
:func:`decide`, so the text never recommends what ``fix`` refuses. Each layout's repair
only translates a Target into concrete fields. When the checkpoint cannot say what was
intended, the policy refuses with the option to give; it never guesses.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from lrdoctor.core.findings import Finding, Severity
from lrdoctor.core.repair import Refusal, Target
from lrdoctor.core.state import RunState, ScheduleSpec, Unit
from lrdoctor.rules.common import ProgressEvidence, fmt
from lrdoctor.schedules import lr_or_none, repair_refused, with_horizon

POLICIES = ("nominal", "rescale", "extend-horizon")

# What `lrdoctor fix` does without --policy is `recommend`: one recommendation per
# checkpoint, the same one the findings' fix texts name.
# Findings each policy must make disappear (checked on the written output).
RESOLVES = {
    "nominal": ("LRD101", "LRD103", "LRD104", "LRD105", "LRD108", "LRD109", "LRD112", "LRD113",
                "LRD116"),
    "rescale": ("LRD103", "LRD105"),
    "extend-horizon": ("LRD101", "LRD105"),
    "sync-lr": ("LRD105",),
}


@dataclass(frozen=True)
class Recommendation:
    """The one repair a checkpoint's findings call for, and the other one that works.

    One per checkpoint, so that every finding's fix text and ``lrdoctor fix`` without
    ``--policy`` say the same thing: LRD101 past the horizon is usually a consequence
    of LRD103/LRD104/LRD109 and must not recommend a different repair than its cause.
    """

    policy: str  # nominal | rescale | extend-horizon | sync-lr
    because: tuple[str, ...]  # the finding codes this repair resolves, the cause first
    k: float | None = None  # rescale: the whole number of scheduler steps per update
    alternative: str | None = None  # the other option, as `lrdoctor fix` flags
    why: str = ""  # one clause: why this policy over the alternative

    @property
    def flags(self) -> str:
        """``--policy rescale --k 4``: what `lrdoctor fix` does without --policy."""
        f = f"--policy {self.policy}"
        return f + (f" --k {fmt(self.k)}" if self.k is not None else "")

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "k": self.k, "because": list(self.because),
                "alternative": self.alternative, "why": self.why}


def recommend(findings: list[Finding]) -> Recommendation | None:
    """The repair the findings call for; None when none of them calls for one.

    A scheduler k times too fast (whole k) is rescaled; a non-whole ratio (dynamic
    micro-batching, ROLL issue 442) goes back to the nominal budget, as that issue
    proposes; Megatron's and DeepSpeed's own invariants (LRD104/LRD109) name the right
    count, so nominal; LRD101 alone (no nominal count known) keeps the progress and
    moves the horizon; an LR that only disagrees with the schedule (LRD105) is synced.
    """
    # An LR the schedule explains one call behind its counter (LRD105 info) needs no sync.
    by = {f.code: f for f in findings
          if not (f.code == "LRD105" and f.severity < Severity.WARNING)}
    codes = [c for c in ("LRD103", "LRD104", "LRD109", "LRD101", "LRD105") if c in by]
    resume = tuple(c for c in ("LRD112", "LRD113", "LRD116") if c in by)
    if resume and not {"LRD103", "LRD104", "LRD109"} & set(codes):
        # A run whose scheduler lost continuity at a resume (restarted, stepped again, a
        # changed rate): the trainer's counters say where it should be.
        return Recommendation(
            "nominal", resume + tuple(c for c in codes if c in ("LRD101", "LRD105")),
            alternative="--policy extend-horizon",
            why="the run's checkpoints show the scheduler lost continuity at a resume: back "
                "to the trainer's counters")
    if not codes:
        return None
    if "LRD103" in by:
        k = _whole_k(by["LRD103"])
        if k is not None:
            return Recommendation(
                "rescale", _with("LRD103", codes, ("LRD101", "LRD105")), k=k,
                alternative="--policy nominal",
                why=f"the scheduler ran a whole {fmt(k)} times too fast")
        return Recommendation(
            "nominal", _with("LRD103", codes, ("LRD101", "LRD105")),
            alternative="--policy extend-horizon",
            why="a non-whole ratio means the updates per step varied (dynamic "
                "micro-batching): back to the trainer's nominal count")
    for code in ("LRD104", "LRD109"):
        if code in by:
            k = _whole_k(by[code])
            return Recommendation(
                "nominal", _with(code, codes, ("LRD101", "LRD105")),
                alternative=f"--policy rescale --k {fmt(k)}" if k else "--policy extend-horizon",
                why="the framework's own counters say where the scheduler should be")
    if "LRD101" in by:
        return Recommendation(
            "extend-horizon", _with("LRD101", codes, ("LRD105",)),
            alternative="--policy nominal --progress N",
            why="the checkpoint has no nominal count to move progress back to")
    return Recommendation("sync-lr", ("LRD105",),
                          why="only the param-group lr disagrees with the schedule")


def _with(cause: str, codes: Sequence[str], consequences: tuple[str, ...]) -> tuple[str, ...]:
    return (cause,) + tuple(c for c in codes if c in consequences)


def _whole_k(f: Finding) -> float | None:
    """The whole number of scheduler steps per update a progress finding names."""
    k = f.evidence.k if isinstance(f.evidence, ProgressEvidence) else None
    if k is not None and k >= 2 and float(k).is_integer():
        return float(k)
    return None


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


def check_policy(policy: str | None) -> None:
    """A :class:`Refusal` for a policy ``fix`` does not have (``sync-lr`` is what the
    findings may recommend, never a ``--policy``)."""
    if policy is not None and policy not in POLICIES:
        raise Refusal(f"unknown policy {policy!r} (one of {', '.join(POLICIES)})")


def decide(state: RunState, findings: list[Finding], *, policy: str | None = None,
           k: float | None = None, progress: float | None = None, ratio: float | None = None,
           given_schedule: Callable[[Unit], ScheduleSpec | None] | None = None
           ) -> Target | None:
    """The Target the findings (or the given ``policy``) call for; None when nothing calls
    for a fix (already healthy); a :class:`Refusal` when the checkpoint cannot say what
    was intended.

    ``progress``/``k``: the user's numbers; ``ratio``: a replay's actual/nominal progress;
    ``given_schedule(unit)``: the schedule the user gave (``--schedule``, a replay
    report's), asked only once a fix is called for. ``lrdoctor fix`` reaches this through
    :func:`lrdoctor.repair.policies.make_target` (which reads those options); the
    findings' fix texts (:mod:`lrdoctor.diagnose`) call it bare, so they never recommend
    what ``fix`` refuses."""
    check_policy(policy)
    chosen, codes, rec = choose_policy(findings, policy)
    if chosen is None:
        return None
    sp = state.scheduler_progress
    if sp is None:
        raise Refusal("the checkpoint holds no scheduler progress to repair", state.path)
    spec = state.schedule
    given = given_schedule(sp.unit) if given_schedule is not None else None
    if given is not None:
        spec = given
    refused = repair_refused(spec) if spec is not None else None
    if refused is not None:
        raise Refusal(refused, state.path)
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


def _integral(x: float) -> float | int:
    """Counters are integers in every framework; keep floats only when they are not."""
    r = round(x)
    return int(r) if abs(x - r) < 1e-9 * max(1.0, abs(x)) else x


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
