"""lrdoctor: find, prove and repair LR-scheduler / gradient-accumulation step-accounting bugs.

The metadata path (``lrdoctor inspect``) must never import torch, pandas or
matplotlib: keep heavy imports inside the functions that need them.
"""

from types import ModuleType
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:  # what type checkers and editors see; at run time each resolves on first use
    from lrdoctor.inspect_api import inspect_path, read_state
    from lrdoctor.repair.engine import plan_fix, write_fix
    from lrdoctor.runtime.callbacks import hf_callback, lightning_callback
    from lrdoctor.runtime.guard import (
        LoopWatch,
        LRDoctorWarning,
        NormalizedStepper,
        SchedulerStepError,
        StepGuard,
    )
    from lrdoctor.runtime.record import BatchLogRecorder

# The library API, resolved on first use so ``import lrdoctor`` stays light: each name is
# imported from its home module by :func:`__getattr__` (static imports, no module names
# as strings). (``diagnose`` is not here: the submodule of that name would shadow it.)
_API = frozenset({
    "inspect_path", "read_state", "plan_fix", "write_fix", "NormalizedStepper", "StepGuard",
    "LoopWatch", "SchedulerStepError", "LRDoctorWarning", "BatchLogRecorder", "hf_callback",
    "lightning_callback",
})


# Written out (not built from _API) so that type checkers and completion read it statically;
# tests/runtime/test_api_guard.py keeps it equal to _API's names.
__all__ = [
    "BatchLogRecorder", "LRDoctorWarning", "LoopWatch", "NormalizedStepper", "SchedulerStepError",
    "StepGuard", "__version__", "hf_callback", "inspect_path", "lightning_callback", "plan_fix",
    "read_state", "replay", "write_fix",
]


def __dir__() -> list[str]:
    """What completion offers: the API names, resolved lazily by :func:`__getattr__`."""
    return sorted({*globals(), *__all__})


def __getattr__(name: str) -> Any:
    home: ModuleType
    match name:
        case "inspect_path" | "read_state":
            from lrdoctor import inspect_api as home
        case "plan_fix" | "write_fix":
            from lrdoctor.repair import engine as home
        case ("NormalizedStepper" | "StepGuard" | "LoopWatch" | "SchedulerStepError"
              | "LRDoctorWarning"):
            from lrdoctor.runtime import guard as home
        case "BatchLogRecorder":
            from lrdoctor.runtime import record as home
        case "hf_callback" | "lightning_callback":
            from lrdoctor.runtime import callbacks as home
        case "replay":  # the subpackage: lrdoctor.replay.run(config, batch_log=...)
            # Not ``from lrdoctor import replay``: that asks this __getattr__ first.
            import lrdoctor.replay as replay

            return replay
        case _:
            raise AttributeError(f"module 'lrdoctor' has no attribute {name!r}")
    return getattr(home, name)
