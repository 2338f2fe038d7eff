"""The live guard lives in :mod:`lrdoctor.runtime.guard`; this documented path stays."""

from lrdoctor.runtime.guard import (
    LoopWatch,
    LRDoctorWarning,
    NormalizedStepper,
    SchedulerStepError,
    StepGuard,
    scheduler_horizon,
    scheduler_progress,
)

__all__ = ["LRDoctorWarning", "LoopWatch", "NormalizedStepper", "SchedulerStepError",
           "StepGuard", "scheduler_horizon", "scheduler_progress"]
