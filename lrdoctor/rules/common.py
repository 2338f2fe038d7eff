"""What several checkpoint rules compute alike: the progress ratio, the planned end in
the schedule's unit, whether a horizon is the run's budget, tolerances.

Why one place: LRD101/LRD102/LRD110 and LRD103/LRD104/LRD108/LRD109 judge the same
numbers from different sides; computing them once keeps the rules consistent.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from lrdoctor.core.facts import Invariant
from lrdoctor.core.findings import Evidence, Finding, optional
from lrdoctor.core.numbers import number
from lrdoctor.core.state import Counter, RunState, ScheduleSpec, Unit

# Counters may legitimately differ by a rounding step; beyond this they disagree.
REL_TOL = 0.01
LR_RTOL = 1e-6


def fmt(x: float) -> str:
    """A count or a value as a person reads it."""
    return number(x)


def scanned(state: RunState) -> list[str]:
    """The files a checkpoint's findings say were scanned."""
    return state.files or [state.path]


def progress_ratio(state: RunState) -> float | None:
    """Scheduler progress over the progress the trainer's counters imply."""
    prog, nominal = state.scheduler_progress, state.nominal_progress
    if prog is None or nominal is None or nominal.value <= 0:
        return None
    return prog.value / nominal.value


def planned_end_in_schedule_units(state: RunState) -> float | None:
    """The planned end of training converted to the scheduler's unit, if possible."""
    end, spec = state.planned_end, state.schedule
    if end is None or spec is None:
        return None
    if end.unit == spec.unit:
        return end.value
    spu = state.samples_per_update
    if spu and end.unit == Unit.UPDATES and spec.unit == Unit.SAMPLES:
        return end.value * spu
    if spu and end.unit == Unit.SAMPLES and spec.unit == Unit.UPDATES:
        return end.value / spu
    return None


def horizon_is_budget(spec: ScheduleSpec) -> bool:
    """Whether the schedule's horizon is, by its framework's convention, the training budget.

    Megatron's ``lr_decay_steps`` defaults to the run's length (ROLL: ``max_steps``), HF's
    ``num_training_steps`` is ``max_steps``, DeepSpeed's ``total_num_steps`` and OneCycleLR's
    ``total_steps`` are the run. A torch ``LinearLR``/``CosineAnnealingLR`` horizon is
    whatever the author chose: ending at half the run can be the plan.
    """
    return spec.family in ("megatron", "hf", "deepspeed") or spec.kind == "OneCycleLR"


def consistent(state: RunState) -> bool:
    """Scheduler and trainer agree on the progress (within :data:`REL_TOL`)."""
    ratio = progress_ratio(state)
    return ratio is not None and abs(ratio - 1) <= REL_TOL


def judged(found: Sequence[Finding]) -> bool:
    """Whether a warning or error other than "not judged" (LRD111) was reported."""
    from lrdoctor.core.findings import Severity

    return any(f.severity >= Severity.WARNING and f.code != "LRD111" for f in found)


class ProgressEvidence(Evidence):
    """Scheduler progress against the trainer's counters (LRD103, LRD104, LRD108, LRD109)."""

    scheduler_progress: float
    scheduler_counter: str
    nominal_progress: float
    nominal_from: str
    unit: str
    ratio: float
    # The whole number of scheduler steps per update, or the ratio when it is not whole.
    k: float | None = optional()
    # Where, at this rate, the floor will come (rules.evidence_checks.harm_ahead).
    harm_ahead: Mapping[str, Any] | None = optional()

    #: What the scheduler's progress is measured against, for the verdict line; each
    #: rule's evidence names its own (None: no headline, the title stands).
    against: ClassVar[str | None] = None

    def headline(self) -> str | None:
        return None if self.against is None else f"{self.ratio:.3g}x {self.against}"


def progress_evidence(state: RunState) -> ProgressEvidence | None:
    """The scheduler's and the trainer's progress side by side; None when not comparable."""
    prog, nominal = state.scheduler_progress, state.nominal_progress
    ratio = progress_ratio(state)
    if prog is None or nominal is None or ratio is None:
        return None
    return ProgressEvidence(
        scheduler_progress=prog.value, scheduler_counter=prog.name,
        nominal_progress=nominal.value, nominal_from=nominal.source,
        unit=state.unit_of(prog), ratio=round(ratio, 6))


@dataclass(frozen=True)
class ProgressGap:
    """Scheduler progress apart from the counter it should equal: a framework's own law
    (``state.facts.invariant``) the saved counters break (LRD104, LRD109), or the nominal
    progress with no law to judge by (LRD103 ahead, LRD108 behind). The evidence, the
    two counters and their ratio."""

    evidence: ProgressEvidence
    progress: Counter
    nominal: Counter
    ratio: float
    # What each counts (RunState.unit_of): the scheduler's counter may count calls.
    progress_unit: str = ""
    nominal_unit: str = ""

    def head(self) -> str:
        """``num_steps is 96,000 samples but consumed - skipped is 48,000 samples (2x)``."""
        p, n = self.progress, self.nominal
        pu, nu = self.progress_unit or p.unit.value, self.nominal_unit or n.unit.value
        return (f"{p.name} is {fmt(p.value)} {pu} but {n.source} is {fmt(n.value)} {nu} "
                f"({self.ratio:.3g}x)")


def _gap(state: RunState) -> ProgressGap | None:
    ev = progress_evidence(state)
    prog, nominal = state.scheduler_progress, state.nominal_progress
    if ev is None or prog is None or nominal is None or prog.value == nominal.value:
        return None
    return ProgressGap(ev, prog, nominal, prog.value / nominal.value,
                       state.unit_of(prog), state.unit_of(nominal))


def law_broken(state: RunState, law: Invariant) -> ProgressGap | None:
    """The comparison when ``law`` is the state's and its counters break it, else None."""
    return _gap(state) if state.facts.invariant is law else None


def off_nominal_gap(state: RunState) -> ProgressGap | None:
    """The comparison when scheduler progress is off the nominal progress and no
    framework law covers the pair (:func:`off_nominal`), else None."""
    return _gap(state) if off_nominal(state) else None


def off_nominal(state: RunState) -> bool:
    """Scheduler progress and the nominal progress differ beyond rounding, and no
    framework law (LRD104, LRD109) covers the pair: LRD103's or LRD108's to judge."""
    prog, nominal = state.scheduler_progress, state.nominal_progress
    if prog is None or nominal is None or progress_ratio(state) is None:
        return False
    diff = prog.value - nominal.value
    if state.facts.invariant is not None and diff != 0:
        return False
    return abs(diff) > max(1.0, REL_TOL * nominal.value)


@dataclass(frozen=True)
class Horizon:
    """Where the scheduler stands against a horizon it decays over (LRD101/102/110).

    ``tail``: the horizon ends before the planned end on purpose (LRD102's);
    otherwise the scheduler may be past it (LRD101's or LRD110's)."""

    spec: ScheduleSpec
    progress: Counter
    horizon: float
    planned: float | None
    ratio: float | None
    consistent: bool
    # What the progress and the horizon count (RunState.unit_of / horizon_counts), the
    # labels every message gives them: T_max and last_epoch count scheduler calls.
    progress_unit: str = ""
    horizon_unit: str = ""

    @property
    def tail(self) -> bool:
        return (self.planned is not None and self.horizon < self.planned * (1 - 1e-9)
                and (self.consistent or self.ratio is None))

    @property
    def past(self) -> bool:
        return not self.tail and self.progress.value > self.horizon

    @property
    def planned_run(self) -> bool:
        """Being past the horizon was the plan, or cannot be told from it (LRD110): the
        trainer agrees and training simply ran past its plan, or the planned end is not
        saved and the horizon is the author's choice (a LinearLR ending at half the run)."""
        if self.consistent and self.planned is not None:
            return True
        return (self.planned is None and not horizon_is_budget(self.spec)
                and (self.consistent or self.ratio is None))


def horizon(state: RunState) -> Horizon | None:
    """The scheduler against its horizon; None when there is no decaying horizon."""
    from lrdoctor.schedules import lr_or_none

    spec, prog = state.schedule, state.scheduler_progress
    if spec is None or prog is None or not spec.horizon or spec.horizon <= 0:
        return None
    h = float(spec.horizon)
    end_lr = lr_or_none(spec, h)
    if end_lr is not None and spec.max_lr > 0 and end_lr >= spec.max_lr * (1 - 1e-9):
        # Nothing decays by the horizon (a warmup-only LinearLR, ConstantLR, a constant
        # style): running past it changes nothing; k x stepping is LRD103's to report.
        return None
    return Horizon(spec=spec, progress=prog, horizon=h,
                   planned=planned_end_in_schedule_units(state),
                   ratio=progress_ratio(state), consistent=consistent(state),
                   progress_unit=state.unit_of(prog),
                   horizon_unit=state.horizon_counts() or spec.unit.value)


class PastHorizon(Evidence):
    """The scheduler past its horizon (LRD101, LRD110)."""

    scheduler_progress: float
    horizon: float
    unit: str
    progress_over_horizon: float
    fraction_of_progress_at_min_lr: float
    min_lr: float
    lr_at_scheduler_progress: float | None
    training_fraction_done: float | None = optional()
    floor_reached_at_training_fraction: float | None = optional()
    ratio_to_nominal: float | None = optional()

    def headline(self) -> str | None:
        return f"{self.progress_over_horizon:.3g}x the decay horizon"


def past_horizon(h: Horizon) -> PastHorizon:
    from lrdoctor.schedules import lr_or_none

    prog = h.progress.value
    return PastHorizon(
        scheduler_progress=prog, horizon=h.horizon, unit=h.progress_unit or h.progress.unit.value,
        progress_over_horizon=round(prog / h.horizon, 6),
        fraction_of_progress_at_min_lr=round((prog - h.horizon) / prog, 6),
        min_lr=h.spec.min_lr, lr_at_scheduler_progress=lr_or_none(h.spec, prog))


class ReplayBudget(Evidence):
    """The replayed scheduler progress against its budget (LRD201, LRD202), and the
    corrections that would make them meet."""

    horizon: float
    scheduler_progress_end: float
    ratio: float
    nominal_updates: float
    budget_updates: float
    actual_updates: int
    updates_per_step: dict[str, float]
    floor_step: int | None
    train_steps: int
    corrected_progress_scale: float | None
    corrected_increment: float | None
    corrected_horizon: float
    # verl issue 991: the budget counts generation batches, the scheduler train steps.
    generation_batches: float | None = optional()
    generation_batches_per_train_step: float | None = optional()

    def headline(self) -> str | None:
        return f"{self.ratio:.3g}x the scheduler's budget"


class IntervalEvidence(Evidence, kw_only=True):
    """Scheduler progress between two checkpoints of one run against the updates between
    them (LRD112, LRD113, LRD116): the counters as ``{counter, from, to, delta, unit}``."""

    from_checkpoint: str
    to_checkpoint: str
    scheduler: dict[str, Any]
    updates: dict[str, Any]
    expected_scheduler_delta: float
    run_rate: float
    lr_at_scheduler: float | None = optional()
    lr_at_updates: float | None = optional()
    resumed_from: str | None = optional()
    restarted_near: float | None = optional()
    excess: float | None = optional()
    excess_matches: dict[str, Any] | None = optional()
    interval_ratios: list[dict[str, Any]] | None = optional()
    ratio_before: float | None = optional()
    ratio_in_interval: float | None = optional()


class LiveEvidence(Evidence, kw_only=True):
    """What the live guard (:mod:`lrdoctor.runtime.guard`) saw in the training loop; one
    finding per code, ``occurrences`` counting how often it was seen."""

    occurrences: int = 1


class LiveResume(LiveEvidence, kw_only=True):
    """At the first update after a resume the scheduler is not where the restored updates
    put it (LRD112 behind, LRD113 ahead)."""

    scheduler_progress: float
    restored_updates: float
    expected_progress: float
    progress_per_update: float
    difference: float


def lr_matches(lrs: Sequence[float], expected: float) -> bool:
    """Whether any of ``lrs`` is ``expected`` (to LR_RTOL)."""
    import math

    return any(math.isclose(lr, expected, rel_tol=LR_RTOL, abs_tol=1e-15) for lr in lrs)


def set_then_advanced_lr(state: RunState) -> float | None:
    """The schedule's LR one call behind the saved counter, when the saved torch state shows
    the counter was advanced without ``step()`` (``_step_count`` <= 1 while ``last_epoch``
    >= 1): a wrapper set the LR from ``get_lr()`` and then incremented ``last_epoch``."""
    from lrdoctor.schedules import lr_or_none

    spec, prog = state.schedule, state.scheduler_progress
    calls = state.extras.get("scheduler._step_count")
    if (spec is None or prog is None or isinstance(calls, bool)
            or not isinstance(calls, (int, float)) or calls > 1 or prog.value < 1):
        return None
    return lr_or_none(spec, prog.value - 1)
