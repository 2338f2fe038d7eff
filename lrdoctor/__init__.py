"""lrdoctor: find, prove and repair LR-scheduler / gradient-accumulation step-accounting bugs.

The metadata path (``lrdoctor inspect``) must never import torch, pandas or
matplotlib: keep heavy imports inside the functions that need them.
"""

__version__ = "0.1.0"

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


def __getattr__(name: str):
    if name in _API:
        import importlib

        return getattr(importlib.import_module(_API[name]), name)
    if name == "replay":  # the subpackage: lrdoctor.replay.run(config, batch_log=...)
        import importlib

        return importlib.import_module("lrdoctor.replay")
    raise AttributeError(f"module 'lrdoctor' has no attribute {name!r}")
