"""Diagnose a normalized :class:`RunState`: framework-blind rules, one per finding code.

Each rule looks at the counters a reader filled in and either stays silent or
returns findings with the numbers that prove them. A healthy checkpoint of
any supported framework must produce no warning or error.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lrdoctor.core.numbers import number
from lrdoctor.core.state import RunState, Unit
from lrdoctor.findings import Finding, Severity, finding
from lrdoctor.schedules import lr_or_none

# Counters may legitimately differ by a rounding step; beyond this they disagree.
REL_TOL = 0.01
LR_RTOL = 1e-6
# torch schedulers commonly stepped once per epoch, where "behind" is by design.
_EPOCH_STYLE = {"StepLR", "MultiStepLR", "ExponentialLR", "ReduceLROnPlateau"}


def diagnose(state: RunState) -> list[Finding]:
    out: list[Finding] = []
    from lrdoctor.epochs import findings as epoch_end
    from lrdoctor.rules import CHECKPOINT

    for rule in (_config, _progress_ratio, _horizon, _decay_unfinished, _optimizer_lr,
                 _lr_log_unused, epoch_end):
        out.extend(rule(state))
    for checked in CHECKPOINT:  # the rules whose check lives in their own file
        out.extend(checked.check(state, out))
    out.extend(_not_judged(state, out))
    _agree(out, dcp=(state.extras or {}).get("storage") == "dcp")
    return out


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
        return f + (f" --k {_fmt(self.k)}" if self.k is not None else "")

    def to_dict(self) -> dict:
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
    by = {f.code: f for f in findings}
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
                why=f"the scheduler ran a whole {_fmt(k)} times too fast")
        return Recommendation(
            "nominal", _with("LRD103", codes, ("LRD101", "LRD105")),
            alternative="--policy extend-horizon",
            why="a non-whole ratio means dynamic micro-batching: back to the nominal "
                "budget, as ROLL issue 442 proposes")
    for code in ("LRD104", "LRD109"):
        if code in by:
            k = _whole_k(by[code])
            return Recommendation(
                "nominal", _with(code, codes, ("LRD101", "LRD105")),
                alternative=f"--policy rescale --k {_fmt(k)}" if k else "--policy extend-horizon",
                why="the framework's own counters say where the scheduler should be")
    if "LRD101" in by:
        return Recommendation(
            "extend-horizon", _with("LRD101", codes, ("LRD105",)),
            alternative="--policy nominal --progress N",
            why="the checkpoint has no nominal count to move progress back to")
    return Recommendation("sync-lr", ("LRD105",),
                          why="only the param-group lr disagrees with the schedule")


def _with(cause: str, codes: list[str], consequences: tuple[str, ...]) -> tuple[str, ...]:
    return (cause,) + tuple(c for c in codes if c in consequences)


def _whole_k(f: Finding) -> float | None:
    k = f.evidence.get("k")
    if isinstance(k, (int, float)) and not isinstance(k, bool) and k >= 2 \
            and float(k).is_integer():
        return float(k)
    return None


def _agree(findings: list[Finding], dcp: bool = False) -> None:
    """End every repairable finding's fix with the checkpoint's one recommendation.

    ``dcp``: a torch.distributed.checkpoint; ``fix`` rewrites those too (its changed
    items go to a new storage file), so the text is the same."""
    rec = recommend(findings)
    if rec is None or rec.policy == "sync-lr":
        return
    repair = (f"repair this checkpoint with `lrdoctor fix --out NEW` (it applies "
              f"`{rec.flags}`"
              + (f"; the alternative: `{rec.alternative}`" if rec.alternative else "") + ").")
    cause = rec.because[0]
    for f in findings:
        if f.code not in rec.because:
            continue
        if f.code == cause:
            f.fix = f"{f.fix.rstrip('.')}; {repair}"
        else:
            f.fix = f"Follows from {cause} (fix that at the source); {repair}"


def horizon_is_budget(spec) -> bool:
    """Whether the schedule's horizon is, by its framework's convention, the training budget.

    Megatron's ``lr_decay_steps`` defaults to the run's length (ROLL: ``max_steps``), HF's
    ``num_training_steps`` is ``max_steps``, DeepSpeed's ``total_num_steps`` and OneCycleLR's
    ``total_steps`` are the run. A torch ``LinearLR``/``CosineAnnealingLR`` horizon is
    whatever the author chose: ending at half the run can be the plan.
    """
    return spec.family in ("megatron", "hf", "deepspeed") or spec.kind == "OneCycleLR"


def _not_judged(state: RunState, found: list[Finding]) -> list[Finding]:
    """Never silent: say what was scanned when there was nothing to judge progress by."""
    if any(f.severity >= Severity.WARNING and f.code != "LRD111" for f in found):
        return []
    prog, spec = state.scheduler_progress, state.schedule
    scanned = ", ".join(state.files[:8]) + (" ..." if len(state.files) > 8 else "") \
        if state.files else state.path
    if prog is None:
        # What each file was found to hold, where the reader said (formats.torchsave).
        contents = state.extras.get("contents") or {}
        if contents:
            scanned = "; ".join(f"{f} ({what})" for f, what in list(contents.items())[:4]) \
                + (f"; +{len(state.files) - 4} more" if len(state.files) > 4 else "")
        evidence: dict = {"scanned": state.files or [state.path]}
        if contents:
            evidence["contents"] = contents
        return [finding("LRD111", f"No LR scheduler state was found, so scheduler progress "
                        f"could not be checked; scanned: {scanned}.",
                        evidence, location=state.path)]
    if state.nominal_progress is not None:  # compared (a ratio, or both still at 0)
        return []
    if spec is not None and spec.horizon and horizon_is_budget(spec):
        return []
    if state.planned_end is not None and spec is not None and spec.horizon:
        return []
    return [finding("LRD111", f"{prog.name} = {_fmt(prog.value)} was found but nothing to "
                    "compare it with (no optimizer step, loop counter or budget was saved), so "
                    f"it could not be judged; scanned: {scanned}.",
                    {"scheduler_progress": prog.value, "scanned": state.files or [state.path]},
                    location=state.path)]


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


def _fmt(x: float) -> str:
    return number(x)


def _config(state: RunState) -> list[Finding]:
    spec = state.schedule
    if spec is None:
        why = "; ".join(state.notes) or "the checkpoint does not save the schedule"
        return [finding("LRD107", f"No schedule could be rebuilt: {why}.",
                        {"format": state.format})]
    from lrdoctor.schedules import problems

    out = [finding("LRD106", msg, {"schedule": spec.kind, "source": spec.source})
           for msg in problems(spec)]
    if spec.source and "fitted" in spec.source:
        out.append(finding("LRD107", f"Schedule {spec.kind!r} was {spec.source}; "
                           "the schedule LRs reported rest on that fit.", {"source": spec.source}))
    return out


def _progress_ratio(state: RunState) -> list[Finding]:
    prog, nominal = state.scheduler_progress, state.nominal_progress
    ratio = progress_ratio(state)
    if ratio is None:
        return []
    ev = {"scheduler_progress": prog.value, "scheduler_counter": prog.name,
          "nominal_progress": nominal.value, "nominal_from": nominal.source,
          "unit": prog.unit.value, "ratio": round(ratio, 6)}
    diff = prog.value - nominal.value
    unit = prog.unit.value
    if state.format == "megatron" and diff != 0:
        why = ""
        ex = state.extras or {}
        try:
            micro = ex["global_batch_size"] // (ex["micro_batch_size"] * ex["data_parallel_size"])
        except (KeyError, TypeError, ZeroDivisionError):
            micro = None
        if micro and micro > 1 and abs(ratio - micro) <= 1e-9 * micro:
            ev["k"] = micro
            why = (f": one scheduler step per micro-batch ({micro} micro-batches per "
                   "iteration) instead of one per iteration")
        return [finding(
            "LRD104",
            f"{prog.name} is {_fmt(prog.value)} {unit} but {nominal.source} is "
            f"{_fmt(nominal.value)} {unit} ({ratio:.3g}x){why}.", ev)]
    if state.format == "deepspeed" and diff != 0:
        return [finding(
            "LRD109",
            f"{prog.name} is {_fmt(prog.value)} {unit} but {nominal.source} is "
            f"{_fmt(nominal.value)} {unit} ({ratio:.3g}x)"
            + (": engine.step() already steps the scheduler it was given, so the script "
               "steps it again" if ratio > 1 else "") + ".", ev)]
    if abs(diff) <= max(1.0, REL_TOL * nominal.value):
        return []
    if ratio > 1:
        k = round(ratio)
        near_int = k >= 2 and abs(ratio - k) <= 0.02 * k
        causes = _k_causes(state, k) if near_int else (
                  "the scheduler is stepped per dynamic micro-batch window while the budget "
                  "was computed from nominal batches")
        ev["k"] = k if near_int else round(ratio, 4)
        fix = (f"Advance the scheduler by nominal/actual = {1 / ratio:.4g} per update, or make "
               "the budget follow the real update count.")
        if near_int:
            fix = (f"Step the scheduler only when the optimizer steps (or divide its budget by "
                   f"{k}).")
            if _accelerate_multiplier(state, k):
                fix = (f"Size the scheduler's budget in num_processes x updates (x {k}, as "
                       "accelerate's examples do) or prepare with split_batches=True.")
        # accelerate's multiplier is intended when the budget was multiplied too, and
        # the checkpoint cannot tell which: warn rather than fail.
        severity = Severity.WARNING if near_int and _accelerate_multiplier(state, k) else None
        return [finding(
            "LRD103",
            f"{prog.name} = {_fmt(prog.value)} is {ratio:.3g}x {nominal.source} = "
            f"{_fmt(nominal.value)}: likely {causes}.", ev, fix=fix, severity=severity)]
    severity = None
    if state.schedule is not None and state.schedule.kind in _EPOCH_STYLE:
        severity = Severity.INFO
    return [finding(
        "LRD108",
        f"{prog.name} = {_fmt(prog.value)} is only {ratio:.3g}x {nominal.source} = "
        f"{_fmt(nominal.value)}.", ev, severity=severity)]


def _accelerate_multiplier(state: RunState, k: int) -> bool:
    return state.format == "accelerate" and (state.extras or {}).get("num_processes") == k


def _k_causes(state: RunState, k: int) -> str:
    """The likely reason for k scheduler steps per update, as far as the format tells."""
    ex = state.extras or {}
    if _accelerate_multiplier(state, k):
        return (f"accelerate's AcceleratedScheduler steps it num_processes={k} times per "
                "call (split_batches=False) while its budget counts optimizer updates (that is "
                f"intended only if the budget was multiplied by {k} too)")
    if state.format == "lightning" and ex.get("lightning.extra_scheduler_calls"):
        return ("the scheduler is stepped by hand (e.g. in training_step) on top of "
                "Lightning's own step")
    why = f"stepped on every micro-batch of a gradient-accumulation window of {k}"
    if ex.get("num_processes") and ex["num_processes"] > 1:
        why += f", or stepped num_processes={ex['num_processes']} times per call"
    return "the scheduler is " + why


def _decay_unfinished(state: RunState) -> list[Finding]:
    """LRD118: the decay horizon lies past the planned end, so training ends with the LR
    still above its floor (a horizon of iterations x the final global batch under a
    batch-size ramp-up; a horizon sized for another run length)."""
    spec, end = state.schedule, state.planned_end
    planned = planned_end_in_schedule_units(state)
    if spec is None or end is None or planned is None or not spec.horizon or planned <= 0:
        return []
    # Where the scheduler will be at the planned end: a scheduler stepped k times per
    # update (LRD103's to report) gets there k times as far, the same pace
    # `fix --policy extend-horizon` sizes the horizon by.
    ratio = progress_ratio(state)
    pace = ratio if ratio is not None and ratio > 1 + REL_TOL else 1.0
    planned *= pace
    horizon = float(spec.horizon)
    if horizon <= planned * (1 + 1e-9):
        return []
    lr_end = lr_or_none(spec, planned)
    span = spec.max_lr - spec.min_lr
    if lr_end is None or span <= 0 or lr_end - spec.min_lr <= 0.01 * span:
        return []
    unit = spec.unit.value
    ev = {"horizon": horizon, "planned_end": planned, "planned_end_from": end.source,
          "unit": unit, "lr_at_planned_end": lr_end, "min_lr": spec.min_lr,
          "decay_left_fraction": round((lr_end - spec.min_lr) / span, 6)}
    if pace != 1.0:
        ev["scheduler_pace"] = round(pace, 6)
    ramp = (state.extras or {}).get("rampup")
    why = ""
    fix = None
    if ramp and ramp.get("samples_at_train_iters") is not None:
        ev["rampup"] = ramp
        why = (f": {end.source.split(':')[-1]} takes {_fmt(planned)} samples, while the "
               f"horizon counts lr_decay_iters x the final global batch "
               f"{ramp['global_batch_size']}")
        fix = ("With a batch-size ramp-up train by samples (--train-samples, "
               "--lr-decay-samples), so the horizon counts what the ramp really consumes, or "
               f"set the decay horizon to {_fmt(planned)} samples; `lrdoctor fix --policy "
               "extend-horizon` rewrites a checkpoint's horizon.")
    return [finding(
        "LRD118",
        f"The decay horizon ({_fmt(horizon)} {unit}) lies past the planned end of training "
        f"({end.name} = {_fmt(planned / pace)} {unit}"
        + (f", where the scheduler, stepped {pace:.4g}x per update, reaches {_fmt(planned)}"
           if pace != 1.0 else "")
        + f"){why}: training ends at LR {lr_end:.6g}, "
        f"{ev['decay_left_fraction']:.0%} of the decay not done (min_lr {spec.min_lr:g}).",
        ev, fix=fix)]


def _horizon(state: RunState) -> list[Finding]:
    spec, prog = state.schedule, state.scheduler_progress
    if spec is None or prog is None or not spec.horizon or spec.horizon <= 0:
        return []
    horizon = float(spec.horizon)
    end_lr = lr_or_none(spec, horizon)
    if end_lr is not None and spec.max_lr > 0 and end_lr >= spec.max_lr * (1 - 1e-9):
        # Nothing decays by the horizon (a warmup-only LinearLR, ConstantLR, a constant
        # style): running past it changes nothing; k x stepping is LRD103's to report.
        return []
    planned = planned_end_in_schedule_units(state)
    ratio = progress_ratio(state)
    consistent = ratio is not None and abs(ratio - 1) <= REL_TOL
    unit = prog.unit.value
    if planned is not None and horizon < planned * (1 - 1e-9) and (consistent or ratio is None):
        tail = 1 - horizon / planned
        ev = {"horizon": horizon, "planned_end": planned, "tail_fraction": round(tail, 6)}
        lr_end = lr_or_none(spec, planned)
        what = f"runs at min_lr {spec.min_lr:g} by configuration"
        if lr_end is not None and not math.isclose(lr_end, spec.min_lr, rel_tol=1e-6,
                                                    abs_tol=1e-15):
            ev["lr_at_planned_end"] = lr_end
            what = (f"is past the horizon, where {spec.kind} does not hold min_lr "
                    f"{spec.min_lr:g} (it gives {lr_end:.6g} at the planned end)")
        return [finding(
            "LRD102",
            f"The decay horizon ({_fmt(horizon)} {unit}) ends before the planned end of "
            f"training ({_fmt(planned)} {unit}): the last {tail:.0%} {what}.", ev)]
    if prog.value <= horizon:
        return []
    at_floor = (prog.value - horizon) / prog.value
    lr_now = lr_or_none(spec, prog.value)
    # Megatron/HF/DeepSpeed hold min_lr past the horizon; torch's CosineAnnealingLR climbs back.
    holds = lr_now is None or math.isclose(lr_now, spec.min_lr, rel_tol=1e-6, abs_tol=1e-15)
    ev = {"scheduler_progress": prog.value, "horizon": horizon, "unit": unit,
          "progress_over_horizon": round(prog.value / horizon, 6),
          "fraction_of_progress_at_min_lr": round(at_floor, 6), "min_lr": spec.min_lr,
          "lr_at_scheduler_progress": lr_now}
    if consistent and planned is not None:
        # Trainer and scheduler agree; training simply ran past its plan.
        return [finding("LRD110", f"{prog.name} {_fmt(prog.value)} is past the horizon "
                        f"{_fmt(horizon)} {unit}, as are the trainer's counters.", ev)]
    if planned is None and not horizon_is_budget(spec) and (consistent or ratio is None):
        # The planned end is unknown and this horizon is the author's choice (a LinearLR that
        # ends at half the run): being past it proves nothing; k x stepping is LRD103's.
        return [finding("LRD110", f"{prog.name} {_fmt(prog.value)} is past the {spec.kind} "
                        f"horizon {_fmt(horizon)} {unit}; the planned end of training is not "
                        "saved, so lrdoctor cannot tell whether that was the plan.", ev)]
    trainer = state.trainer_progress
    where = ""
    if trainer is not None and state.planned_end is not None and state.planned_end.value:
        frac = trainer.value / state.planned_end.value
        ev["training_fraction_done"] = round(frac, 6)
        where = (f" at {trainer.name} {_fmt(trainer.value)} of {_fmt(state.planned_end.value)}"
                 f" planned ({frac:.0%} of training)")
        # Where in training the floor was reached, if progress grew linearly.
        reached = frac * horizon / prog.value
        ev["floor_reached_at_training_fraction"] = round(reached, 6)
        where += (f"; the LR reached its floor at about {reached:.0%} of training" if holds
                  else f"; the planned decay ended at about {reached:.0%} of training")
    if ratio is not None and ratio > 1:
        ev["ratio_to_nominal"] = round(ratio, 6)
    tail = (f"{at_floor:.0%} of the scheduler's progress ran at min_lr {spec.min_lr:g}"
            if holds else
            f"{at_floor:.0%} of the scheduler's progress lies past the horizon, where "
            f"{spec.kind} does not hold min_lr {spec.min_lr:g} (the LR is {lr_now:.6g} now)")
    return [finding(
        "LRD101",
        f"{prog.name} = {_fmt(prog.value)} is {prog.value / horizon:.2f}x the decay horizon "
        f"{_fmt(horizon)} {unit}{where}: {tail}.", ev)]


def _lrs_unread(state: RunState) -> list[Finding]:
    """Never silent: the reader saw that param-group LRs were saved (Megatron's distributed
    optimizer) but could not read them all (``extras["optimizer_lrs_unread"]``)."""
    unread = (state.extras or {}).get("optimizer_lrs_unread")
    if not isinstance(unread, dict) or state.scheduler_progress is None:
        return []
    what = ("Some of the optimizer's param-group LRs are in this checkpoint but could not be "
            "read" if state.optimizer_lrs else
            "The optimizer's param-group LRs should be in this checkpoint but could not be read")
    checked = (f"; those read ({len(state.optimizer_lrs)}) were" if state.optimizer_lrs
               else ", so they were not")
    return [finding(
        "LRD111",
        f"{what} ({unread.get('reason')}){checked} compared with the schedule (LRD105); "
        f"scanned: {', '.join(state.files[:8]) or state.path}.",
        {"optimizer_lrs_unread": unread, "optimizer_lrs_read": list(state.optimizer_lrs),
         "scanned": state.files or [state.path]},
        fix="Read the named item with the framework's own loader to check its param-group "
            "`lr` against the schedule (lrdoctor unpickles only allow-listed classes and "
            "bounded item sizes), or save the optimizer state in a form lrdoctor reads.",
        location=state.path)]


def _lr_log_unused(state: RunState) -> list[Finding]:
    """Never silent: a logged-LR file beside the checkpoint (Lightning's metrics.csv or a
    TensorBoard event file) that the reader could not use to fit the schedule
    (``extras["lr_log_unused"]``)."""
    unused = (state.extras or {}).get("lr_log_unused")
    if not isinstance(unused, list) or not unused:
        return []
    what = "; ".join(f"{u.get('file')}: {u.get('reason')}" for u in unused[:4])
    used = (state.extras or {}).get("lr_log")
    then = (f"{used['file']} was used instead" if isinstance(used, dict)
            else "so the LambdaLR's schedule was not fitted from it and the scheduler's LR "
                 "could not be judged")
    return [finding(
        "LRD111", f"A metrics log beside the checkpoint could not be used ({what}); {then}.",
        {"lr_log_unused": unused, "scanned": state.files or [state.path]},
        fix="Log the LR with Lightning's LearningRateMonitor to a CSVLogger (a 'step' and an "
            "'lr-<Optimizer>' column) or a TensorBoardLogger (an 'lr-<Optimizer>' scalar), "
            "or give the schedule in a run config.",
        location=state.path)]


def _optimizer_lr(state: RunState) -> list[Finding]:
    spec, prog = state.schedule, state.scheduler_progress
    out = _lrs_unread(state)
    if spec is None or prog is None or not state.optimizer_lrs:
        return out
    expected = lr_or_none(spec, prog.value)
    if expected is None:
        return []
    close = [math.isclose(lr, expected, rel_tol=LR_RTOL, abs_tol=1e-15)
             for lr in state.optimizer_lrs]
    if any(close):
        return out
    return out + [finding(
        "LRD105",
        f"The optimizer's param-group lr is {', '.join(f'{x:.6g}' for x in state.optimizer_lrs)} "
        f"but the {spec.kind} schedule gives {expected:.6g} at {prog.name} = {_fmt(prog.value)}.",
        {"optimizer_lrs": state.optimizer_lrs, "schedule_lr": expected,
         "scheduler_progress": prog.value})]
