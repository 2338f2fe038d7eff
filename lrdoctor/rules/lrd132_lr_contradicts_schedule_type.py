"""LRD132 `lr-contradicts-schedule-type`: The logged learning rates contradict the configured scheduler type

The configured schedule (HF ``lr_scheduler_type`` in ``training_args.bin``, a saved
scheduler's class) is checked against the LRs the run logged, at both logging offsets
(transformers 5 logs ``lambda(step - 1)``, older versions and Lightning ``lambda(step)``)
and at the scheduler's own pace (k calls per step, LRD103's business). When none fits,
the logged LR wins: it is the LR that was used. A log that falls to the floor and climbs
back to the peak while the configured type only decays is an error (a cycled schedule, a
cosine whose ``T_max`` is one epoch, a scheduler other than the configured one); any
other disagreement is said at info level.

## Explanation
The LRs the run logged cannot come from the scheduler type its configuration names, at
either logging offset or at the scheduler's own pace: the logged LR is the one that was
used, so it wins. When it falls to the floor and climbs back to the peak while the
configured type only decays (a cycled or restarted schedule, a cosine whose `T_max` is one
epoch, another scheduler passed to the trainer than the one its arguments name), that is an
error; any other disagreement is info.

## Example
args say `lr_scheduler_type` linear over 16 steps, but the logged LR is 0 at step 6 and back
at 9.0e-4 at step 10.

## Fix
Build the scheduler with the horizon the run really takes (`T_max` = all updates, not one
epoch), or name the cycled schedule in the configuration if it is intended.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lrdoctor.core.evidence import logged_at
from lrdoctor.core.findings import Evidence, Finding, Rule, Severity, optional
from lrdoctor.core.numbers import number

if TYPE_CHECKING:
    from lrdoctor.core.state import RunState, ScheduleSpec

FIT_RTOL = 1e-6
MAX_K = 8  # whole scheduler calls per logged step tried
LOW = 0.05  # a logged LR at or below this share of the peak is at the floor
BACK = 0.9  # and climbing back to this share of the peak is a new cycle


class LogContradiction(Evidence):
    configured: str  # "hf linear (training_args.bin)"
    log: str
    peak_lr: float
    peak_step: float
    worst_step: float  # the logged step the configured schedule is furthest from
    worst_logged_lr: float
    worst_configured_lr: float | None
    low_step: float | None = optional()
    low_lr: float | None = optional()
    back_step: float | None = optional()
    back_lr: float | None = optional()
    # The fields the floor and the climb back were logged in (file:key).
    low_from: str | None = optional()
    back_from: str | None = optional()

    def headline(self) -> str | None:
        if self.low_step is None:
            return None
        return f"LR {number(self.low_lr)} at step {number(self.low_step)}, back up at " \
               f"{number(self.back_step)}"


RULE = Rule.from_module(__name__, Severity.ERROR, evidence=(LogContradiction,))

_CYCLED = ("cosine_with_restarts", "CosineAnnealingWarmRestarts", "CyclicLR")


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    from lrdoctor.schedules import lr_or_none

    spec, log = state.schedule, sorted(p.point for p in state.lr_log)
    if spec is None or len(log) < 3 or spec.source.startswith("fitted") or spec.kind in _CYCLED:
        return []
    peak = max(lr for _, lr in log)
    if peak <= 0:
        return []
    # The log at the scheduler's own pace too: k scheduler calls per logged step is
    # LRD103's finding (and a repaired checkpoint keeps the log of its k-fast past).
    scales = {float(k) for k in range(1, MAX_K + 1)}
    sp, nom = state.scheduler_progress, state.nominal_progress
    if sp is not None and nom is not None and nom.value > 0 and sp.value > 0:
        scales.add(sp.value / nom.value)
    worst: tuple[float, float, float, float | None] | None = None  # (err, step, lr, want)
    for scale in scales:
        for off in {0.0, 1.0, scale}:
            errs = []
            for s, lr in log:
                want = lr_or_none(spec, max(0.0, s * scale - off))
                err = math.inf if want is None else abs(lr - want) / peak
                errs.append((err, s, lr, want))
            e = max(errs)
            if e[0] <= FIT_RTOL:
                return []
            if worst is None or e[0] < worst[0]:
                worst = e
    assert worst is not None
    ev: dict[str, Any] = dict(configured=f"{spec.family} {spec.kind} ({spec.source or 'as read'})",
              log=state.lr_log_source, peak_lr=peak,
              peak_step=next(s for s, lr in log if lr == peak), worst_step=worst[1],
              worst_logged_lr=worst[2], worst_configured_lr=worst[3])
    cycle = _cycle(log, peak)
    if cycle is None or _cycle(_configured(spec, log), peak) is not None:
        return [RULE.finding(
            f"The logged LR ({state.lr_log_source}) is not the configured {spec.family} "
            f"{spec.kind} ({spec.source or 'as read'}): at step {number(worst[1])} it is "
            f"{number(worst[2])} where the configured schedule gives "
            f"{number(worst[3]) if worst[3] is not None else '?'}; the logged LR is the one "
            "that was used.", LogContradiction(**ev), severity=Severity.INFO,
            location=state.lr_log_source or None)]
    (ls, llr), (bs, blr) = cycle
    if _restarted(spec, log, ls, peak):
        return []  # the configured schedule again from a resume: LRD112's finding, run-level
    end = state.planned_end
    low, back = logged_at(state.lr_log, ls), logged_at(state.lr_log, bs)
    low_from, back_from = (str(low.ref) if low else None), (str(back.ref) if back else None)
    return [RULE.finding(
        f"The configuration says {spec.family} {spec.kind} ({spec.source or 'as read'}), which "
        f"only decays, but the logged LR ({state.lr_log_source}) falls to {number(llr)} at step "
        f"{number(ls)}" + (f" ({low_from})" if low_from else "")
        + f" and climbs back to {number(blr)} at step {number(bs)}"
        + (f" ({back_from})" if back_from else "")
        + (f" of {number(end.value)}" if end is not None else "")
        + ": the run was driven by a cycled schedule (a cosine whose T_max is shorter than the "
        "run, a restart, or another scheduler than the configured one).",
        LogContradiction(**ev, low_step=ls, low_lr=llr, back_step=bs, back_lr=blr,
                         low_from=low_from, back_from=back_from),
        location=state.lr_log_source or None)]


def _restarted(spec: ScheduleSpec, log: list[tuple[float, float]], low_step: float, peak: float) -> bool:
    """Whether the log from ``low_step`` on is the configured schedule started afresh
    (a scheduler restarted at a resume), at either logging offset."""
    from lrdoctor.schedules import lr_or_none

    tail = [(s, lr) for s, lr in log if s >= low_step]
    for s0 in (low_step - 1, low_step, low_step + 1):
        for off in (0.0, 1.0):
            ok = True
            for s, lr in tail:
                want = lr_or_none(spec, max(0.0, s - s0 - off))
                if want is None or abs(lr - want) > FIT_RTOL * peak:
                    ok = False
                    break
            if ok:
                return True
    return False


def _configured(spec: ScheduleSpec, log: list[tuple[float, float]]) -> list[tuple[float, float]]:
    from lrdoctor.schedules import lr_or_none

    out = []
    for s, _ in log:
        v = lr_or_none(spec, s)
        if v is not None:
            out.append((s, v))
    return out


def _cycle(log: list[tuple[float, float]], peak: float
           ) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """(the floor point, the point back near the peak) after the peak, or None."""
    if not log:
        return None
    start = next(i for i, (_, lr) in enumerate(log) if lr >= BACK * peak) \
        if any(lr >= BACK * peak for _, lr in log) else None
    if start is None:
        return None
    low = None
    for s, lr in log[start + 1:]:
        if lr <= LOW * peak and low is None:
            low = (s, lr)
        elif low is not None and lr >= BACK * peak:
            return low, (s, lr)
    return None
