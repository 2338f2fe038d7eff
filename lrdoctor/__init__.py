"""lrdoctor: find, prove and repair LR-scheduler / gradient-accumulation step-accounting bugs.

The metadata path (``lrdoctor inspect``) must never import torch, pandas or
matplotlib: keep heavy imports inside the functions that need them.
"""

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

# The library API, resolved on first use so ``import lrdoctor`` stays light.
# (``diagnose`` is not here: the submodule of that name would shadow the function.)
_API = {
    "inspect_path": "lrdoctor.inspect_api",
    "read_state": "lrdoctor.inspect_api",
    "plan_fix": "lrdoctor.repair.engine",
    "write_fix": "lrdoctor.repair.engine",
    "NormalizedStepper": "lrdoctor.runtime.guard",
    "StepGuard": "lrdoctor.runtime.guard",
    "LoopWatch": "lrdoctor.runtime.guard",
    "SchedulerStepError": "lrdoctor.runtime.guard",
    "LRDoctorWarning": "lrdoctor.runtime.guard",
    "BatchLogRecorder": "lrdoctor.runtime.record",
    "hf_callback": "lrdoctor.runtime.callbacks",
    "lightning_callback": "lrdoctor.runtime.callbacks",
}


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
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    if name == "replay":  # the subpackage: lrdoctor.replay.run(config, batch_log=...)
        import importlib

        return importlib.import_module("lrdoctor.replay")
    raise AttributeError(f"module 'lrdoctor' has no attribute {name!r}")
