"""Live fixes for a running training loop.

- :class:`NormalizedStepper` advances a scheduler by ``nominal / actual`` per
  optimizer update, so its progress follows the budget even when dynamic
  micro-batching takes more (or fewer) updates than the budget assumed
  (ROLL issue 442's direction). Megatron-style schedulers get a fractional
  ``step(increment=...)``; torch schedulers keep a float progress and the LR is
  set from the schedule's closed form (or its lambda) at that progress.
- :class:`StepGuard` wraps an optimizer and a scheduler and complains when the
  scheduler is stepped more than once per optimizer step (per micro-batch
  stepping, accelerate's per-process stepping, stepping on a skipped update).

Neither imports torch at module level; both work on the objects you pass.
"""

from __future__ import annotations

import functools
import math
import warnings
from typing import Any


class SchedulerStepError(RuntimeError):
    """The scheduler was stepped more often than the optimizer."""


class NormalizedStepper:
    """Step a scheduler by ``nominal_steps / actual_steps`` per optimizer update.

    >>> guard = NormalizedStepper(scheduler, nominal_steps=1024, actual_steps=2048)
    >>> guard.step()          # once per optimizer update
    >>> guard.rebase(4, 7)    # a new train batch: 4 budgeted updates, 7 taken

    ``increment``: the scheduler's own unit per update (Megatron: the global batch
    size, since its ``num_steps`` counts samples). ``schedule``: an
    :class:`lrdoctor.model.ScheduleSpec` to take the LR from (needed for torch
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
            from lrdoctor.repair.policies import group_lr

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


class StepGuard:
    """Raise (or warn) when the scheduler steps more than ``per_update`` times per update.

    >>> with StepGuard(optimizer, scheduler):   # or guard = StepGuard(...); guard.close()
    ...     train()

    It patches ``optimizer.step`` and ``scheduler.step`` on these two instances
    only, counts both, and restores them on close.
    """

    def __init__(self, optimizer: Any, scheduler: Any, *, action: str = "raise",
                 per_update: int = 1):
        if action not in ("raise", "warn"):
            raise ValueError("action must be 'raise' or 'warn'")
        self.optimizer, self.scheduler = optimizer, scheduler
        self.action, self.per_update = action, per_update
        self.optimizer_steps = 0
        self.scheduler_steps = 0
        self.violations = 0
        self._since_update = 0
        self._orig_opt = optimizer.__dict__.get("step")
        self._orig_sched = scheduler.__dict__.get("step")
        opt_step, sched_step = optimizer.step, scheduler.step

        # functools.wraps keeps torch's own step-tracking marks (``_wrapped_by_lr_sched``).
        @functools.wraps(opt_step)
        def opt_wrapped(*a, **kw):
            out = opt_step(*a, **kw)
            self.optimizer_steps += 1
            self._since_update = 0
            return out

        @functools.wraps(sched_step)
        def sched_wrapped(*a, **kw):
            self._since_update += 1
            self.scheduler_steps += 1
            if self._since_update > self.per_update:
                self._violation()
            return sched_step(*a, **kw)

        optimizer.step = opt_wrapped
        scheduler.step = sched_wrapped

    def _violation(self) -> None:
        self.violations += 1
        msg = (f"scheduler stepped {self._since_update} times since the last optimizer step "
               f"(optimizer steps {self.optimizer_steps}, scheduler steps "
               f"{self.scheduler_steps}): step it only when the optimizer steps (inside the "
               "gradient-accumulation branch, and not on skipped updates) [lrdoctor LRD103]")
        if self.action == "raise":
            raise SchedulerStepError(msg)
        if self.violations == 1:
            warnings.warn(msg, RuntimeWarning, stacklevel=3)

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
