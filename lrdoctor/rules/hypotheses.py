"""Hypotheses tested against every item of evidence, with the numbers.

Pure functions of a :class:`~lrdoctor.core.state.RunState` and its evidence. Each candidate
explanation predicts a number the checkpoint holds (the horizon, the scheduler's
counter); the one whose prediction equals the saved number explains the evidence, and
every other candidate is ruled out by its own prediction. A finding names both, so a
reader sees why this explanation and not another.

- :func:`comparisons`: the scheduler's counter against an independent counter of the
  trainer (the reader's nominal count, the optimizer's own step). "Agree" is said only
  after one of these was made.
- :func:`~lrdoctor.rules.horizon_hypotheses.horizon_tests` (in its own module, with the
  table of explanations, :data:`~lrdoctor.rules.horizon_hypotheses.HYPOTHESES`): where
  the decay ends against where training is planned to end:
  the planned end itself (healthy), or the planned end counted in another unit
  (micro-batches, processes, batches per epoch, epochs, samples; in RL trainers rollout
  steps against optimizer updates, prompts against responses), minus the warmup, or a
  horizon unset or negative.
- :func:`projection`: harm ahead. At the scheduler's rate so far, the trainer step at
  which the horizon will be reached, from the first checkpoint holding both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lrdoctor.core.evidence import EvidenceItem, of
from lrdoctor.core.evidence import Quantity as Q
from lrdoctor.core.evidence import Role as R
from lrdoctor.core.numbers import number
from lrdoctor.core.state import RunState, Unit

REL_TOL = 0.01   # counters that differ by less agree (a rounding step)
EXACT = 1e-3     # a hypothesis fits when it predicts the saved number this closely
MAX_K = 65536    # the largest whole k a unit mistake makes (processes x accumulation)


def _fits(predicted: float, saved: float) -> bool:
    return abs(predicted - saved) <= max(0.5, EXACT * abs(saved))


# ------------------------------------------------------------------ comparisons

@dataclass(frozen=True)
class Comparison:
    """The scheduler's counter against an independent one, in the same unit."""

    scheduler: str
    scheduler_value: float
    other: str
    other_value: float
    unit: str

    @property
    def ratio(self) -> float | None:
        return self.scheduler_value / self.other_value if self.other_value > 0 else None

    @property
    def agree(self) -> bool:
        return abs(self.scheduler_value - self.other_value) <= max(1.0, REL_TOL
                                                                   * self.other_value)

    def describe(self) -> str:
        return (f"{self.scheduler} = {number(self.scheduler_value)} vs {self.other} = "
                f"{number(self.other_value)} {self.unit}")

    def to_dict(self) -> dict[str, Any]:
        return {"scheduler": self.scheduler, "scheduler_value": self.scheduler_value,
                "other": self.other, "other_value": self.other_value, "unit": self.unit,
                "agree": self.agree}


def evidence(st: RunState) -> list[EvidenceItem]:
    """The state's evidence; for a state built by hand (no reader ran), its own facts."""
    if st.evidence:
        return st.evidence
    from lrdoctor.read.evidence.attach import from_state

    return from_state(st)


def _updates_counter(st: RunState) -> EvidenceItem | None:
    """The trainer's own count of optimizer updates: the optimizer's step, else the loop's
    global step or iteration."""
    for q in (Q.OPTIMIZER_STEPS, Q.ITERATIONS):
        e = next((x for x in of(evidence(st), R.PROGRESS, q) if x.value > 0), None)
        if e is not None:
            return e
    return None


def comparisons(st: RunState) -> list[Comparison]:
    """Every comparison of the scheduler's counter with an independent counter that the
    checkpoint allows (empty: nothing was compared, so nothing may be called agreeing)."""
    prog, nominal = st.scheduler_progress, st.nominal_progress
    if prog is None:
        return []
    out = []
    if nominal is not None:
        out.append(Comparison(prog.name, prog.value, nominal.source or nominal.name,
                              nominal.value, prog.unit.value))
        return out
    spec = st.schedule
    unit = spec.unit if spec is not None else prog.unit
    upd = _updates_counter(st)
    if upd is None:
        return out
    if unit is Unit.UPDATES:
        out.append(Comparison(prog.name, prog.value, upd.where, upd.value, unit.value))
    elif unit is Unit.SAMPLES and st.samples_per_update:
        out.append(Comparison(prog.name, prog.value,
                              f"{upd.where} x global batch {number(st.samples_per_update)}",
                              upd.value * st.samples_per_update, unit.value))
    return out


# ------------------------------------------------------------------ harm ahead

@dataclass(frozen=True)
class Projection:
    """Where the horizon falls on the trainer's own clock, at the scheduler's rate so far."""

    rate: float            # scheduler units per trainer step, so far
    floor_at: float        # trainer step at which the scheduler reaches the horizon
    planned: float         # the planned end, in trainer steps
    unit: str              # the trainer's unit
    trainer: str           # the trainer counter the rate was measured on
    lr_at_planned_end: float | None
    decay_left: float | None  # share of the decay not done at the planned end (0: done)

    def to_dict(self) -> dict[str, Any]:
        return {"scheduler_rate_per_step": round(self.rate, 6),
                "floor_at_step": round(self.floor_at, 3), "planned_end": self.planned,
                "unit": self.unit, "measured_on": self.trainer,
                "lr_at_planned_end": self.lr_at_planned_end,
                "decay_left_at_planned_end": self.decay_left}

    def sentence(self) -> str:
        f, e = number(round(self.floor_at, 1)), number(self.planned)
        one = self.unit[:-1] if self.unit.endswith("s") else self.unit
        if self.floor_at < self.planned:
            return (f"At the scheduler's rate so far ({number(round(self.rate, 4))} per "
                    f"{one}, measured on {self.trainer}), its decay ends at {one} {f} of {e} "
                    f"planned: the last {1 - self.floor_at / self.planned:.0%} of training "
                    "runs at the floor.")
        left = f", {self.decay_left:.0%} of the decay not done" if self.decay_left else ""
        return (f"At the scheduler's rate so far ({number(round(self.rate, 4))} per {one}, "
                f"measured on {self.trainer}) its decay would end at {one} {f}, after the "
                f"planned end {e}{left}.")


def projection(st: RunState) -> Projection | None:
    """The step at which the horizon will be reached, if the scheduler keeps its rate."""
    from lrdoctor.schedules import lr_or_none

    spec, prog, end = st.schedule, st.scheduler_progress, st.planned_end
    if spec is None or prog is None or end is None or not spec.horizon or spec.horizon <= 0:
        return None
    trainer = st.trainer_progress
    if trainer is None or trainer.unit != end.unit:
        nominal = st.nominal_progress
        upd = _updates_counter(st)
        if end.unit is Unit.UPDATES and upd is not None:
            trainer_name, t = upd.where, upd.value
        elif nominal is not None and nominal.unit == end.unit:
            trainer_name, t = nominal.source or nominal.name, nominal.value
        else:
            return None
    else:
        trainer_name, t = trainer.source or trainer.name, trainer.value
    if t <= 0 or prog.value <= 0 or end.value <= 0:
        return None
    rate = prog.value / t
    floor_at = spec.horizon / rate
    lr_end = lr_or_none(spec, rate * end.value)
    left = None
    span = spec.max_lr - spec.min_lr
    if lr_end is not None and span > 0:
        left = max(0.0, round((lr_end - spec.min_lr) / span, 6))
    return Projection(rate, floor_at, float(end.value), end.unit.value, trainer_name,
                      lr_end, left)


# ------------------------------------------------------------------ the catalog page

def how_findings_are_reached() -> str:
    """The catalog's section on reasoning (docs/findings.md), made from the tables the
    code uses: the units items are read in and the hypotheses tested."""
    from lrdoctor.core.evidence import Quantity, Role
    from lrdoctor.rules.horizon_hypotheses import HYPOTHESES

    roles = ", ".join(f"*{r.value}*" for r in Role)
    units = ", ".join(q.value for q in Quantity)
    hyps = "\n".join(f"- **{name}**: predicts {what}." for name, what in HYPOTHESES)
    return "\n".join([
        "## How a finding is reached", "",
        "lrdoctor first reads every number the checkpoint holds about progress, a horizon or "
        "an LR into one *evidence item* with its value, its unit and the field it came from "
        "(`file:key`, a `FieldRef`). Items come from what the readers loaded (scheduler and "
        "optimizer state, trainer counters, objects registered for checkpointing such as an "
        "`argparse.Namespace` or an OmegaConf config kept inert) and from the YAML, JSON and "
        "TOML config files beside the checkpoint. Names and value shapes decide what a number "
        "means, never the file's name: `step` inside an optimizer's per-parameter state counts "
        "optimizer updates, `last_epoch` inside a scheduler's state counts scheduler calls, "
        "`T_max` there is a horizon in scheduler calls. `inspect --json` lists the items under "
        "`state.evidence`.", "",
        f"Roles: {roles}. Units: {units}.", "",
        "Findings are hypotheses tested against all the items with the numbers. The "
        "scheduler's counter is compared with an independent counter (the trainer's nominal "
        "count, else the optimizer's own step, times the global batch when the scheduler "
        "counts samples; a nominal counter saved as 0 while both moved is taken as never "
        "filled). The ratio names the rate: k scheduler calls per update (LRD103, with k from "
        "the accumulation, the process count or the micro-batches), behind (LRD108), a "
        "restart or double count at a resume (LRD112/LRD113, over a run's checkpoints). The "
        "saved horizon is compared with the planned end through every explanation below; "
        "the one that predicts the saved number exactly is reported (LRD119) with the "
        "number every other one would have predicted, as the hypotheses ruled out; floor vs "
        "ceil at an epoch end is LRD117's. From the first checkpoint holding the scheduler's "
        "counter, a trainer counter, the horizon and the planned end, the step where the "
        "floor will come is given (harm ahead): a decay that ends before the planned end, or "
        "is unfinished at it, is an error.", "",
        hyps, "",
        "The report says the scheduler and the trainer agree only after two independent "
        "counters were compared, and names them. When nothing could be compared, LRD111 "
        "(warning) says what was scanned and what is missing.", "",
        how_severity_is_decided()])


def how_severity_is_decided() -> str:
    """The catalog's section on severity (docs/findings.md): which evidence makes an
    error, what stays a warning. One place, beside the reasoning it describes."""
    return "\n".join([
        "## How severity is decided", "",
        "A false error is worse than a miss: a CI gate that fails healthy runs gets switched "
        "off. So severity follows entailment, not plausibility.", "",
        "- **Error**: every number in the explanation was read from a file or derived from "
        "numbers read from files, and the text names where each came from (`file:key`). "
        "Examples: the scheduler's counter is k times the optimizer's step and k is a saved "
        "accumulation (LRD103); the horizon equals the planned end times a saved factor "
        "(LRD119); the horizon equals a saved counter of another unit while the scheduler "
        "follows a counter a saved factor smaller (LRD119: DeepSpeed's `total_num_steps` = "
        "the loop's micro-batch `step`, Fabric's `total_steps` = `iter_num`, Composer's "
        "`T_max` = `timestamp.batch` while `last_epoch` = `timestamp.epoch`); a setting the "
        "schedule model cannot run, named with its field (LRD106: a SequentialLR whose last "
        "child's `T_max` = total - warmup is negative names the warmup longer than the run).",
        "- **Warning**: the explanation needs a number no file holds. The finding names that "
        "number, so the reader knows what would decide it: a horizon that is a whole "
        "multiple k of the planned end while no saved accumulation, process count or batch "
        "size is k (LRD119 as a warning: \"a saved gradient accumulation or process count of "
        "k would confirm it\"); a scheduler behind the trainer without a planned end to "
        "show the harm (LRD108); nothing to compare the scheduler's counter with (LRD111).",
        "- **No finding**: a number that is part of the schedule's position is not a setting "
        "(CosineAnnealingWarmRestarts' `T_cur`/`T_i` move at every restart), a child of a "
        "SequentialLR counts from its milestone (its own `T_max`, `last_epoch` and stale "
        "`_last_lr` are not the schedule's), and a plan in samples is the saved one "
        "(`train_samples`, or `train_iters` along a batch-size ramp-up), never planned "
        "iterations times the final global batch.", "",
        "\"Ruled out\" lists only hypotheses that were tested: each with the number it "
        "would have predicted from saved numbers. A schedule is judged through its exact "
        "model (`lrdoctor.schedules`: `lr(t)`, where the decay ends, where the floor comes, "
        "whether it wraps): a schedule the model cannot rebuild, or that has no horizon "
        "(ExponentialLR, ReduceLROnPlateau), gets no horizon borrowed from another field.",
        ""])
