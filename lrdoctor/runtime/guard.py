"""Live fixes for a running training loop.

- :class:`NormalizedStepper` advances a scheduler by ``nominal / actual`` per
  optimizer update, so its progress follows the budget even when dynamic
  micro-batching takes more (or fewer) updates than the budget assumed
  (ROLL issue 442's direction). Megatron-style schedulers get a fractional
  ``step(increment=...)``; torch schedulers keep a float progress and the LR is
  set from the schedule's closed form (or its lambda) at that progress.
- :class:`StepGuard` wraps an optimizer and a scheduler and complains when the
  scheduler is stepped more than once per optimizer step (per micro-batch
  stepping, accelerate's per-process stepping, stepping on a skipped update),
  when the LR changes inside an accumulation window (with :meth:`StepGuard.micro_batch`)
  and when the scheduler passes its horizon before ``max_steps``.
- :class:`LoopWatch` makes the same checks from a framework's hooks, without
  patching anything (the HF Trainer and Lightning callbacks in
  :mod:`lrdoctor.runtime.callbacks` feed it).

None of them imports torch at module level; they work on the objects you pass.
Every complaint names its lrdoctor finding code (LRD103, LRD205, LRD101; LRD112 /
LRD113 when a resumed loop's scheduler did not continue from the restored progress).
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import TYPE_CHECKING, Any

from lrdoctor.schedules import horizon_fields

if TYPE_CHECKING:
    from types import FrameType

    from lrdoctor.rules.common import LiveEvidence


class SchedulerStepError(RuntimeError):
    """The scheduler and the optimizer disagree while training runs (strict mode)."""


class LRDoctorWarning(RuntimeWarning):
    """What the guards warn with, so a loop can filter or escalate them."""


_PROGRESS = ("last_epoch", "num_steps", "last_batch_iteration")


def _unwrap(scheduler: Any) -> Any:
    """accelerate's ``AcceleratedScheduler`` keeps the real one in ``.scheduler``."""
    inner = getattr(scheduler, "scheduler", None)
    if inner is not None and not any(hasattr(scheduler, a) for a in _PROGRESS):
        return inner
    return scheduler


def scheduler_progress(scheduler: Any) -> float | None:
    """The scheduler's own step counter (torch ``last_epoch``, Megatron ``num_steps``,
    DeepSpeed ``last_batch_iteration``), through an accelerate wrapper."""
    scheduler = _unwrap(scheduler)
    for attr in _PROGRESS:
        v = getattr(scheduler, attr, None)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
    return None


def _decays(name: str, scheduler: Any) -> bool:
    """Whether a scheduler with a horizon field decays over it: ConstantLR's ends a
    constant factor, and a LinearLR that rises (a warm-up) ends at its peak."""
    if name == "ConstantLR":
        return False
    if name == "LinearLR":
        return bool(scheduler.end_factor < scheduler.start_factor)
    return True


def scheduler_horizon(scheduler: Any) -> float | None:
    """Where a decaying schedule ends, in the scheduler's own steps; None when unknown
    or when the schedule does not decay (a warm-up-only ``LinearLR``, ``ConstantLR``).

    The field that holds it comes from :mod:`lrdoctor.schedules.horizon_fields`, the
    table the checkpoint readers use too, so a class either knows the other knows."""
    scheduler = _unwrap(scheduler)
    name = type(scheduler).__name__
    if hasattr(scheduler, horizon_fields.MEGATRON[0]) and hasattr(scheduler, "num_steps"):
        return float(getattr(scheduler, horizon_fields.MEGATRON[0]))
    field = horizon_fields.field_of(name)
    if field is not None:
        value = getattr(scheduler, field, None)
        return float(value) if value is not None and _decays(name, scheduler) else None
    if name == "LambdaLR":  # HF get_scheduler: functools.partial(..., num_training_steps=N)
        ends = []
        warm, stable, decay = horizon_fields.HF_WSD_PHASES
        for fn in getattr(scheduler, "lr_lambdas", []):
            kw = getattr(fn, "keywords", None) or {}
            if horizon_fields.HF_TRAINING_STEPS in kw:
                ends.append(float(kw[horizon_fields.HF_TRAINING_STEPS]))
            elif decay in kw:  # warmup_stable_decay
                ends.append(float(kw.get(warm, 0) + kw.get(stable, 0) + kw[decay]))
        return min(ends) if ends else None
    if name == "SequentialLR":
        last = scheduler_horizon(scheduler._schedulers[-1])
        return None if last is None else float(scheduler._milestones[-1]) + last
    return None


def _lrs(optimizer: Any) -> list[float]:
    return [float(g["lr"]) for g in optimizer.param_groups]


def _same(a: list[float] | None, b: list[float]) -> bool:
    return a is None or all(math.isclose(x, y, rel_tol=1e-12, abs_tol=0.0)
                            for x, y in zip(a, b, strict=False))


def user_stacklevel() -> int:
    """The ``stacklevel`` that points a warning at the user's line: the first frame
    outside lrdoctor and outside torch (the guard runs inside the scheduler's and the
    optimizer's step hooks), counted from the caller of this function. A fixed number
    pointed at ``guard.py`` whenever the call came through another hook or wrapper."""
    import os
    import sys

    skip = [os.path.dirname(os.path.dirname(os.path.abspath(__file__)))]
    torch_file: str | None = getattr(sys.modules.get("torch"), "__file__", None)
    if torch_file:
        skip.append(os.path.dirname(os.path.abspath(torch_file)))
    frame: FrameType | None = sys._getframe(1)  # the caller of this function (the one that warns)
    level = 1
    while frame is not None:
        name = os.path.abspath(frame.f_code.co_filename)
        if not any(name.startswith(d + os.sep) for d in skip):
            return level
        frame = frame.f_back
        level += 1
    return 2


class _Reporter:
    """Raise or warn with the finding code; keep one Finding per code with its count."""

    strict: bool
    ignore: frozenset[str]

    def _init_reporter(self, strict: bool, ignore: Any) -> None:
        self.strict = strict
        self.ignore = frozenset(ignore or ())
        self._found: dict[str, Any] = {}

    @property
    def findings(self) -> list[Any]:
        """What was caught, as :class:`lrdoctor.core.findings.Finding` (one per code)."""
        return list(self._found.values())

    def _report(self, code: str, message: str, evidence: LiveEvidence) -> None:
        if code in self.ignore:
            return
        from lrdoctor.findings import finding

        text = f"lrdoctor {code}: {message}"
        if code in self._found:
            f = self._found[code]
            f.evidence = f.evidence.replaced(occurrences=f.evidence["occurrences"] + 1)
        else:
            self._found[code] = finding(code, message, evidence)
        if self.strict:
            raise SchedulerStepError(text)
        if self._found[code].evidence["occurrences"] == 1:
            warnings.warn(text, LRDoctorWarning, stacklevel=user_stacklevel())

    def _check_resume(self, scheduler: Any, restored: float | None, rate: float) -> None:
        """On the first update after a resume, the scheduler must sit where the restored
        updates put it: behind means it restarted (state not saved or not restored,
        LRD112), ahead means the resume stepped it again (LRD113, slime's extra
        ``scheduler.step(iteration * global_batch_size)`` after load)."""
        if not restored or restored <= 0:
            return
        now = scheduler_progress(scheduler)
        if now is None:
            return
        # DeepSpeed's last_batch_iteration starts at -1: one below the updates taken.
        offset = -1.0 if hasattr(_unwrap(scheduler), "last_batch_iteration") and not hasattr(
            _unwrap(scheduler), "last_epoch") else 0.0
        expected = restored * rate + offset
        if abs(now - expected) <= max(1e-6, 1e-6 * abs(expected)):
            return
        from lrdoctor.rules.common import LiveResume

        ev = LiveResume(scheduler_progress=now, restored_updates=restored,
                        expected_progress=expected, progress_per_update=rate,
                        difference=now - expected)
        if now < expected:
            self._report(
                "LRD112",
                f"resumed at {restored:g} optimizer updates but the scheduler is at {now:g} "
                f"(expected {expected:g}): it restarted instead of continuing; restore its "
                "state_dict with the optimizer's",
                ev)
        else:
            self._report(
                "LRD113",
                f"resumed at {restored:g} optimizer updates but the scheduler is at {now:g} "
                f"(expected {expected:g}, {now - expected:g} ahead): the resume stepped the "
                "restored scheduler again; its state already holds the progress",
                ev)

    def _check_horizon(self, progress: float | None, horizon: float | None, updates: int,
                       max_steps: float | None) -> None:
        from lrdoctor.rules.lrd101_past_decay_horizon import LiveHorizon

        if (progress is None or horizon is None or max_steps is None or "LRD101" in self._found
                or progress < horizon - 1e-9 or updates >= max_steps):
            return
        self._report(
            "LRD101",
            f"the scheduler reached its horizon {horizon:g} at progress {progress:g} after "
            f"{updates} of {max_steps:g} optimizer updates: the remaining {max_steps - updates:g} "
            "updates run past the schedule (at its floor, or for a cosine, climbing back). "
            "Size the horizon in optimizer updates (the budget the loop really takes) or "
            "advance the scheduler by nominal/actual per update (NormalizedStepper)",
            LiveHorizon(scheduler_progress=progress, horizon=horizon, optimizer_updates=updates,
                        max_steps=max_steps))

    def _window_changed(self, before: list[float], now: list[float], micro: int,
                        updates: int) -> None:
        from lrdoctor.rules.lrd205_lr_changes_inside_window import LiveLrChange

        self._report(
            "LRD205",
            f"the LR changed from {before[0]:.6g} to {now[0]:.6g} inside an accumulation "
            f"window (seen at micro-batch {micro + 1} of optimizer update {updates + 1}): the "
            "scheduler is stepped per micro-batch or out of line with the optimizer step. "
            "Step it only right after optimizer.step()",
            LiveLrChange(lr_before=before, lr_after=now, micro_batch_in_window=micro,
                         optimizer_update=updates + 1))


class NormalizedStepper:
    """Step a scheduler by ``nominal_steps / actual_steps`` per optimizer update.

    >>> guard = NormalizedStepper(scheduler, nominal_steps=1024, actual_steps=2048)
    >>> guard.step()          # once per optimizer update
    >>> guard.rebase(4, 7)    # a new train batch: 4 budgeted updates, 7 taken

    ``increment``: the scheduler's own unit per update (Megatron: the global batch
    size, since its ``num_steps`` counts samples). ``schedule``: an
    :class:`lrdoctor.core.state.ScheduleSpec` to take the LR from (needed for torch
    schedulers without a closed form, e.g. a recursive custom one).
    """

    def __init__(self, scheduler: Any, nominal_steps: float, actual_steps: float, *,
                 increment: float = 1.0, schedule: Any = None):
        self.scheduler = scheduler
        self.increment = float(increment)
        self.schedule = schedule
        self.megatron = hasattr(scheduler, "num_steps") and hasattr(scheduler, "get_lr") \
            and not hasattr(scheduler, "last_epoch")
        if self.megatron:
            self.progress = float(scheduler.num_steps)
        else:
            self.progress = float(scheduler.last_epoch)
            self._lr_fn = self._torch_lr_fn()
        self.rebase(nominal_steps, actual_steps)

    @property
    def ratio(self) -> float:
        return self._ratio

    def rebase(self, nominal_steps: float, actual_steps: float) -> None:
        """Set the pace for the updates that follow (e.g. per train batch)."""
        if nominal_steps < 0 or actual_steps <= 0:
            raise ValueError(f"need nominal_steps >= 0 and actual_steps > 0, got "
                             f"{nominal_steps}, {actual_steps}")
        self._ratio = float(nominal_steps) / float(actual_steps)

    def step(self) -> list[float]:
        """Advance by one optimizer update's worth of nominal progress; returns the LRs."""
        inc = self.increment * self._ratio
        if self.megatron:
            self.scheduler.step(increment=inc)
            self.progress = float(self.scheduler.num_steps)
            return [g["lr"] for g in self.scheduler.optimizer.param_groups]
        self.progress += inc
        lrs = self._lr_fn(self.progress)
        s = self.scheduler
        for g, lr in zip(s.optimizer.param_groups, lrs, strict=True):
            g["lr"] = lr
        # Whole steps only, so a saved state_dict stays a normal one (inspect reads it).
        s.last_epoch = int(math.floor(self.progress + 1e-9))
        s._step_count = getattr(s, "_step_count", 0) + 1
        s._last_lr = list(lrs)
        return lrs

    def state_dict(self) -> dict[str, float]:
        return {"progress": self.progress, "ratio": self._ratio, "increment": self.increment}

    def load_state_dict(self, sd: dict[str, float]) -> None:
        """Restore the exact fractional progress (call after the scheduler's own load)."""
        self.progress = float(sd["progress"])
        self._ratio = float(sd["ratio"])
        self.increment = float(sd.get("increment", self.increment))
        if self.megatron:
            self.scheduler.num_steps = self.progress

    # -- torch schedulers -------------------------------------------------
    def _torch_lr_fn(self):
        s = self.scheduler
        groups = s.optimizer.param_groups
        if self.schedule is not None:
            from lrdoctor.schedules import group_lr

            spec = self.schedule
            return lambda p: [group_lr(spec, p, g) for g in groups]
        name = type(s).__name__
        if name == "LambdaLR":
            return lambda p: [base * fn(p) for base, fn in zip(s.base_lrs, s.lr_lambdas,
                                                                strict=True)]
        if hasattr(s, "_get_closed_form_lr") or name == "OneCycleLR":
            compute = s._get_closed_form_lr if hasattr(s, "_get_closed_form_lr") else s.get_lr

            def closed(p: float) -> list[float]:
                kept = s.last_epoch
                s.last_epoch = p
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        return [float(x) for x in compute()]
                finally:
                    s.last_epoch = kept
            return closed
        raise TypeError(f"{name} has no closed form to evaluate at a fractional step: pass "
                        "schedule=ScheduleSpec(...) to NormalizedStepper")


class StepGuard(_Reporter):
    """Raise (or warn) when the scheduler steps more than ``per_update`` times per update.

    >>> with StepGuard(optimizer, scheduler, max_steps=1000,
    ...                resumed_updates=start_step) as guard:   # after loading a checkpoint
    ...     for i, batch in enumerate(loader):
    ...         guard.micro_batch()        # optional: enables the LRD205 window check
    ...         ...

    It patches ``optimizer.step`` and ``scheduler.step`` on these two instances
    only, counts both, and restores them on close. ``max_steps`` (the planned
    optimizer updates) enables the horizon check (LRD101); ``horizon`` overrides
    the one read from the scheduler. ``ignore``: finding codes to stay quiet about.
    ``resumed_updates``: the optimizer updates a resumed loop restored; on the first
    update the scheduler must be at ``resumed_updates x progress_per_update`` (LRD112
    when it restarted, LRD113 when the resume stepped it again).
    """

    def __init__(self, optimizer: Any, scheduler: Any, *, action: str = "raise",
                 per_update: int = 1, max_steps: float | None = None,
                 horizon: float | None = None, ignore: Any = (),
                 resumed_updates: float | None = None, progress_per_update: float = 1.0):
        if action not in ("raise", "warn"):
            raise ValueError("action must be 'raise' or 'warn'")
        self._init_reporter(action == "raise", ignore)
        # A resumed loop: the optimizer updates restored from the checkpoint, and how far
        # the scheduler moves per update (1; the global batch for a Megatron scheduler).
        self._resume = (resumed_updates, progress_per_update)
        self.optimizer, self.scheduler = optimizer, scheduler
        self.action, self.per_update = action, per_update
        self.max_steps = max_steps
        self.horizon = horizon if horizon is not None else scheduler_horizon(scheduler)
        self.optimizer_steps = 0
        self.scheduler_steps = 0
        self.violations = 0
        self._since_update = 0
        self._window_lr: list[float] | None = None
        self._window_micro = 0
        self._orig_opt = optimizer.__dict__.get("step")
        self._orig_sched = scheduler.__dict__.get("step")
        opt_step, sched_step = optimizer.step, scheduler.step

        # functools.wraps keeps torch's own step-tracking marks (``_wrapped_by_lr_sched``).
        @functools.wraps(opt_step)
        def opt_wrapped(*a, **kw):
            state = getattr(optimizer, "gradient_state", None)  # accelerate's wrapper
            if state is not None and not getattr(state, "sync_gradients", True):
                return opt_step(*a, **kw)  # inside an accumulation window: a no-op
            if self._window_micro >= 2:  # the LR the window's last micro-batch ran with
                self._check_window()
            if self.optimizer_steps == 0 and self._resume[0]:
                self._check_resume(scheduler, *self._resume)
            out = opt_step(*a, **kw)
            self.optimizer_steps += 1
            self._since_update = 0
            self._window_lr, self._window_micro = None, 0
            return out

        # accelerate's wrapper steps the real scheduler k times per call (k processes) or
        # not at all (inside an accumulation window): count what its counter moved.
        # A plain scheduler is counted per call, before it steps, so "raise" stops the
        # extra step from happening.
        inner = _unwrap(scheduler)
        by_counter = inner is not scheduler and hasattr(inner, "last_epoch")

        @functools.wraps(sched_step)
        def sched_wrapped(*a, **kw):
            if not by_counter:
                self._count(1)
                out = sched_step(*a, **kw)
            else:
                before = scheduler_progress(scheduler)
                out = sched_step(*a, **kw)
                after = scheduler_progress(scheduler)
                # A counter that cannot be read counts as one call, like a plain scheduler.
                moved = round(after - before) if after is not None and before is not None \
                    else 1
                if moved > 0:
                    self._count(moved)
            self._check_horizon(scheduler_progress(scheduler), self.horizon,
                                self.optimizer_steps, self.max_steps)
            return out

        optimizer.step = opt_wrapped
        scheduler.step = sched_wrapped

    def _count(self, moved: int) -> None:
        self._since_update += moved
        self.scheduler_steps += moved
        if self._since_update > self.per_update:
            self._violation()

    def micro_batch(self) -> None:
        """Call at the start of every micro-batch: the LR must not change inside a window."""
        self._window_micro += 1
        if self._window_micro == 1:
            self._window_lr = _lrs(self.optimizer)
        else:
            self._check_window()

    def _check_window(self) -> None:
        now = _lrs(self.optimizer)
        if self._window_lr is not None and not _same(self._window_lr, now):
            self._window_changed(self._window_lr, now, self._window_micro - 1,
                                 self.optimizer_steps)
            self._window_lr = now

    def _violation(self) -> None:
        from lrdoctor.rules.lrd103_scheduler_k_times_fast import LiveSteppedBetweenUpdates

        self.violations += 1
        self._report(
            "LRD103",
            f"scheduler stepped {self._since_update} times since the last optimizer step "
            f"(optimizer steps {self.optimizer_steps}, scheduler steps "
            f"{self.scheduler_steps}): step it only when the optimizer steps (inside the "
            "gradient-accumulation branch, and not on skipped updates)",
            LiveSteppedBetweenUpdates(scheduler_steps=self.scheduler_steps,
                                      optimizer_steps=self.optimizer_steps,
                                      since_last_update=self._since_update))

    def close(self) -> None:
        for obj, orig in ((self.optimizer, self._orig_opt), (self.scheduler, self._orig_sched)):
            if orig is None:
                obj.__dict__.pop("step", None)
            else:
                obj.step = orig

    def __enter__(self) -> StepGuard:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class LoopWatch(_Reporter):
    """The guard's checks fed from a framework's hooks; patches nothing.

    Call :meth:`start` once the optimizer and scheduler exist, :meth:`micro_batch`
    at the start of each micro-batch (``first=True`` for a window's first),
    :meth:`before_update` right before ``optimizer.step()``, :meth:`after_update`
    once the update (and the framework's scheduler step) is done, :meth:`end` at
    the end. Progress is read from the scheduler's own counter, so extra steps
    from anywhere (a callback, the model, a wrapper) are seen.
    """

    def __init__(self, *, strict: bool = False, max_steps: float | None = None,
                 horizon: float | None = None, per_update: float = 1.0, ignore: Any = ()):
        self._init_reporter(strict, ignore)
        self.max_steps, self.horizon, self.per_update = max_steps, horizon, per_update
        self.scheduler: Any = None
        self.optimizer: Any = None
        self.updates = 0
        self.scheduler_steps = 0.0
        self._last: float | None = None
        self._window_lr: list[float] | None = None
        self._window_micro = 0
        self._resumed: float | None = None

    def start(self, scheduler: Any, optimizer: Any = None, *,
              max_steps: float | None = None, resumed_updates: float | None = None
              ) -> LoopWatch:
        """``resumed_updates``: the updates a resumed run restored (the trainer's global
        step); the first update then checks the scheduler continues from there."""
        self.scheduler = scheduler
        if resumed_updates:
            self.updates = int(resumed_updates)
        self._resumed = resumed_updates
        self.optimizer = optimizer if optimizer is not None else scheduler.optimizer
        if max_steps is not None:
            self.max_steps = max_steps
        if self.horizon is None:
            self.horizon = scheduler_horizon(scheduler)
        self._last = scheduler_progress(scheduler)
        return self

    def micro_batch(self, first: bool) -> None:
        if self.optimizer is None:
            return
        now = _lrs(self.optimizer)
        if first or self._window_lr is None:
            self._window_lr, self._window_micro = now, 1
            return
        self._window_micro += 1
        if not _same(self._window_lr, now):
            self._window_changed(self._window_lr, now, self._window_micro - 1, self.updates)
            self._window_lr = now

    def before_update(self) -> None:
        if self.scheduler is None:
            return
        if self._window_micro >= 2:
            self.micro_batch(first=False)
            self._window_micro -= 1
        self._window_lr, self._window_micro = None, 0
        if self._resumed:
            self._check_resume(self.scheduler, self._resumed, self.per_update)
            self._resumed = None
            self._last = scheduler_progress(self.scheduler)
        self._advance(f"between optimizer updates {self.updates} and {self.updates + 1}")
        self.updates += 1

    def after_update(self, updates: int | None = None) -> None:
        if self.scheduler is None:
            return
        if updates is not None:
            self.updates = updates
        self._check_horizon(scheduler_progress(self.scheduler), self.horizon, self.updates,
                            self.max_steps)

    def end(self) -> None:
        if self.scheduler is not None:
            self._advance(f"after the last optimizer update ({self.updates})")

    def _advance(self, where: str) -> None:
        now = scheduler_progress(self.scheduler)
        if now is None or self._last is None:
            return
        d, self._last = now - self._last, now
        self.scheduler_steps += d
        if d > self.per_update + 1e-9:
            from lrdoctor.rules.lrd103_scheduler_k_times_fast import LiveAdvance

            self._report(
                "LRD103",
                f"scheduler advanced {d:g} steps {where} (expected at most {self.per_update:g}; "
                f"scheduler progress {now:g} after {self.updates} optimizer updates): something "
                "steps it again (per micro-batch, a second callback, a manual step next to the "
                "framework's). Step it only when the optimizer steps",
                LiveAdvance(scheduler_progress=now, optimizer_updates=self.updates, advance=d,
                            max_advance=d))
            found = self._found.get("LRD103")
            if found is not None:
                found.evidence = found.evidence.replaced(
                    max_advance=max(found.evidence["max_advance"], d))
