"""megatron-core's own state, shared by every layout that saves through it.

Megatron-LM, ROLL's mcore_adapter and verl's Megatron backend all save megatron-core's
``OptimizerParamScheduler.state_dict()``; a content read finds it by its shape
(:func:`lrdoctor.read.scan.shapes.is_megatron_scheduler`). Turning that state into a
schedule, and megatron-core's batch-size ramp-up calculator, live here so that no layout
imports another framework's layout for them.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from lrdoctor.core.facts import Rampup
from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.repair import Change, FormatPlan, Refusal, RepairTools, Target, tree_files
from lrdoctor.core.state import Counter, RunState, ScheduleSpec, Unit
from lrdoctor.read.layouts import _common
from lrdoctor.read.scan.shapes import scheduler_field, scheduler_key

# ScheduleSpec parameter -> megatron-core scheduler field, for the refs a repair writes.
SPEC_FIELDS = (("horizon", "lr_decay_steps"), ("warmup", "lr_warmup_steps"),
               ("max_lr", "max_lr"), ("min_lr", "min_lr"))


def scheduler_refs(at: FieldRef, sched: dict[str, Any]) -> tuple[FieldRef, dict[str, FieldRef]]:
    """(progress ref, schedule refs) of the megatron-core scheduler state held at ``at``."""
    return (at.child(scheduler_key(sched, "num_steps")),
            {name: at.child(scheduler_key(sched, key)) for name, key in SPEC_FIELDS
             if scheduler_field(sched, key) is not None})


def schedule_from_state(sched: dict[str, Any], src: str, unit: Unit,
                        progress_src: str | None = None) -> tuple[ScheduleSpec, Counter]:
    """(schedule, progress) of a bare megatron-core ``OptimizerParamScheduler.state_dict()``.

    Used where the scheduler state was found by its shape (ROLL's ``scheduler.pt``,
    verl's ``lr_scheduler``), without Megatron's ``args`` beside it.
    """
    params: dict[str, Any] = {k: sched[k] for k in ("start_wd", "end_wd", "wd_incr_steps", "wd_incr_style",
                                     "wsd_decay_steps", "lr_wsd_decay_style") if k in sched}
    spec = ScheduleSpec(
        family="megatron", kind=str(_common.plain(scheduler_field(sched, "lr_decay_style"))),
        max_lr=float(scheduler_field(sched, "max_lr")),
        min_lr=float(scheduler_field(sched, "min_lr") or 0.0),
        init_lr=float(sched.get("init_lr", 0.0) or 0.0),
        warmup=float(scheduler_field(sched, "lr_warmup_steps") or 0.0),
        horizon=float(scheduler_field(sched, "lr_decay_steps")),
        unit=unit, params=params, source=src)
    progress = Counter("scheduler.num_steps", float(scheduler_field(sched, "num_steps")), unit,
                       progress_src or f"{src}.num_steps")
    return spec, progress


def weight_decay_end(sched: dict[str, Any], at: FieldRef, src: str,
                     unit: Unit) -> Counter | None:
    """megatron-core's weight-decay horizon ``wd_incr_steps`` as the planned end, for a
    scheduler state found without its trainer's plan: the frameworks that build an
    ``OptimizerParamScheduler`` size it to the whole run in the scheduler's own unit
    (Megatron-LM ``train_iters`` x global batch or ``train_samples``, verl
    ``total_training_steps``, AReaL ``total_train_steps``), whatever ``lr_decay_steps``
    says; the rules then test the decay horizon against it (LRD119: AReaL PR 1289's
    ``lr_decay_steps`` = total - warmup). None when it is not saved or not positive."""
    value = _common.number(sched.get("wd_incr_steps"))
    if value is None or value <= 0:
        return None
    return Counter("scheduler.wd_incr_steps (the run's length, megatron-core convention)",
                   value, unit, f"{src}.wd_incr_steps", at.child("wd_incr_steps"))


def rampup_global_batch(consumed: float, rampup: list[int], global_batch_size: int) -> int:
    """megatron-core's ``RampupBatchsizeNumMicroBatchesCalculator``: the global batch of the
    iteration that starts after ``consumed`` samples, for ``--rampup-batch-size start incr
    samples``: ``start + int(consumed / (samples / n_increments)) * incr`` up to
    ``samples``, the full batch after."""
    start, incr, ramp_samples = (int(x) for x in rampup)
    if consumed > ramp_samples:
        return global_batch_size
    n_incr = (global_batch_size - start) // incr
    if n_incr <= 0:
        return global_batch_size
    return min(global_batch_size, start + int(consumed / (ramp_samples / n_incr)) * incr)


def rampup_samples(iterations: int, rampup: list[int], global_batch_size: int
                   ) -> tuple[int, list[dict[str, int]]]:
    """Samples consumed by ``iterations`` iterations along the ramp, and the ramp as
    segments ``{"first_iteration", "last_iteration", "global_batch"}`` (1-based)."""
    consumed, segs = 0, []
    it = 0
    while it < iterations:
        b = rampup_global_batch(consumed, rampup, global_batch_size)
        if b == global_batch_size:  # the rest of the run at the full batch
            segs.append({"first_iteration": it + 1, "last_iteration": iterations,
                         "global_batch": b})
            consumed += (iterations - it) * b
            break
        it += 1
        consumed += b
        if segs and segs[-1]["global_batch"] == b:
            segs[-1]["last_iteration"] = it
        else:
            segs.append({"first_iteration": it, "last_iteration": it, "global_batch": b})
    return consumed, segs


def rampup_budget(st: RunState, args: dict[str, Any], src: str, unit: Unit) -> None:
    """With ``--rampup-batch-size`` the early iterations take smaller global batches.
    Iteration-based training sizes the decay horizon as ``lr_decay_iters x
    global_batch_size`` (the final batch) while ``train_iters`` iterations consume fewer
    samples: the planned end in samples is what the ramp really consumes (Megatron-Bridge
    issue 2609), which the framework-blind rules then compare with the horizon."""
    ramp, gbs = args.get("rampup_batch_size"), args.get("global_batch_size")
    if not (isinstance(ramp, (list, tuple)) and len(ramp) == 3 and isinstance(gbs, int)):
        return
    try:
        ramp = [int(x) for x in ramp]
    except (TypeError, ValueError):
        return
    if ramp[1] <= 0 or ramp[0] <= 0 or ramp[0] > gbs:
        return
    train_iters = args.get("train_iters")
    info = Rampup(start_global_batch=ramp[0], increment=ramp[1], rampup_samples=ramp[2],
                  global_batch_size=gbs)
    it = st.counter("megatron.iteration")
    if it is not None:
        done, segs = rampup_samples(int(it.value), ramp, gbs)
        info = replace(info, samples_at_iteration=done, segments_so_far=segs)
    if isinstance(train_iters, int) and train_iters > 0 and unit is Unit.SAMPLES:
        real, segs = rampup_samples(train_iters, ramp, gbs)
        info = replace(info, samples_at_train_iters=real, segments=segs,
                       train_iters_x_global_batch=train_iters * gbs)
        st.planned_end = Counter(
            "samples consumed by train_iters along the ramp-up", real, Unit.SAMPLES,
            f"{src}:args.train_iters {train_iters} with args.rampup_batch_size {ramp} "
            "(megatron-core's ramp-up calculator)")
        consumed = st.counter("consumed_train_samples")
        st.trainer_progress = consumed
        st.notes.append(
            f"ramp-up: train_iters {train_iters} iterations consume {real:,} samples, not "
            f"train_iters x global_batch_size = {train_iters * gbs:,}")
    st.facts.rampup = info


# ---------------------------------------------------------------- repair (lrdoctor fix)

EXTEND_NOTE = ("Megatron-LM checks the checkpoint's lr_decay_steps against the command line on "
               "resume: resume with --use-checkpoint-opt_param-scheduler (or pass the matching "
               "--lr-decay-samples {h:g})")


def rank_file_repair(path: Path, ckpt: Path | None, files: list[Path], tracker: str,
                     target: Target, tools: RepairTools) -> FormatPlan:
    """The edits of ``lrdoctor fix`` for Megatron-LM ``torch``-format rank files
    (``model_optim_rng.pt``), the repair of :mod:`lrdoctor.read.layouts.megatron`.

    Every rank file of the fixed iteration gets the same edit: the scheduler's
    ``num_steps`` (samples) and, for extend-horizon, ``lr_decay_steps``; the optimizer's
    param-group ``lr`` follows the schedule. megatron-core recomputes the param-group LR in
    ``load_state_dict`` anyway (it calls ``step(num_steps)``), but keeping it consistent
    makes the output inspect clean. A run dir gives a run dir with the tracker and the
    fixed iteration only. Here, beside megatron-core's other shared state, because the
    megatron layout module is at the size limit."""
    root = path

    def rel_of(f: Path) -> str:
        return f.name if root.is_file() else str(f.relative_to(root))

    out_files: list[str] | None = None
    if path.is_file():
        out_files = [path.name]
    elif ckpt is not None and path != ckpt and ckpt.parent == path:
        out_files = ([tracker] if (path / tracker).is_file() else []) + [
            f"{ckpt.name}/{f}" for f in tree_files(ckpt)]
    changes: list[Change] = []
    any_opt = False
    for f in files:
        sd = tools.load(f)
        key = next((k for k in ("opt_param_scheduler", "lr_scheduler")
                    if isinstance(sd.get(k), dict)), None)
        if key is None:
            raise Refusal("no opt_param_scheduler in this file", str(f))
        rel = rel_of(f)
        changes += tools.megatron_scheduler(rel, (key,), sd[key], target)
        if isinstance(sd.get("optimizer"), dict):
            ch, found = tools.optimizers(rel, sd, ("optimizer",), target)
            changes += ch
            any_opt = any_opt or found
        del sd
    notes = []
    if target.horizon is not None:
        notes.append(EXTEND_NOTE.format(h=target.horizon))
    if not any_opt:
        notes.append("no optimizer param groups in these files (distributed optimizer?): "
                     "megatron-core sets the LR from num_steps when it loads the scheduler")
    return FormatPlan(root=root, files=out_files, changes=changes, notes=notes)
