"""lrdoctor: find, prove and repair LR-scheduler / gradient-accumulation step-accounting bugs.

The metadata path (``lrdoctor inspect``) must never import torch, pandas or
matplotlib: keep heavy imports inside the functions that need them.
"""

from collections.abc import Callable
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

# The library API, resolved on first use so ``import lrdoctor`` stays light: each name's
# home module, imported statically by the loader it maps to (no module names as strings).
# (``diagnose`` is not here: the submodule of that name would shadow the function.)


def _inspect_api() -> ModuleType:
    from lrdoctor import inspect_api

    return inspect_api


def _repair_engine() -> ModuleType:
    from lrdoctor.repair import engine

    return engine


def _guard() -> ModuleType:
    from lrdoctor.runtime import guard

    return guard


def _record() -> ModuleType:
    from lrdoctor.runtime import record

    return record


def _callbacks() -> ModuleType:
    from lrdoctor.runtime import callbacks

    return callbacks


def _replay() -> ModuleType:
    # Not ``from lrdoctor import replay``: that asks this module's __getattr__ first.
    import lrdoctor.replay as replay

    return replay


_API: dict[str, Callable[[], ModuleType]] = {
    "inspect_path": _inspect_api,
    "read_state": _inspect_api,
    "plan_fix": _repair_engine,
    "write_fix": _repair_engine,
    "NormalizedStepper": _guard,
    "StepGuard": _guard,
    "LoopWatch": _guard,
    "SchedulerStepError": _guard,
    "LRDoctorWarning": _guard,
    "BatchLogRecorder": _record,
    "hf_callback": _callbacks,
    "lightning_callback": _callbacks,
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
        return getattr(_API[name](), name)
    if name == "replay":  # the subpackage: lrdoctor.replay.run(config, batch_log=...)
        return _replay()
    raise AttributeError(f"module 'lrdoctor' has no attribute {name!r}")
