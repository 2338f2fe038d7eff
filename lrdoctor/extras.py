"""Optional dependencies: what each extra brings, and the one line a missing one gives.

The core install (``pip install lrdoctor``) reads, diagnoses, repairs and replays
(``--fast``) without torch or matplotlib; the torch replay engine and user models
come with ``lrdoctor[torch]``, figures with ``lrdoctor[plots]``, both with
``lrdoctor[all]``. A feature whose extra is missing is unusable input (exit 2) with
one line naming the ``pip install`` to run, never an ImportError traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from lrdoctor.core.errors import UnusableInput

# import name -> the extra that installs it
EXTRA = {"torch": "torch", "matplotlib": "plots",
         # checkpoints at URLs (lrdoctor.read.bytes.storage) and --executor ray (lrdoctor.parallel)
         "fsspec": "s3", "s3fs": "s3", "gcsfs": "gcs", "adlfs": "azure", "aiohttp": "http",
         "ray": "ray"}


class MissingExtra(UnusableInput):
    """A feature needs an optional dependency that is not installed."""

    def __init__(self, module: str, what: str):
        self.module = module
        self.extra = EXTRA.get(module.split(".")[0], "all")
        super().__init__(f"{what} needs {module.split('.')[0]}, which is not installed: "
                         f"{install_hint(self.extra)}")


def install_hint(extra: str) -> str:
    return f"pip install 'lrdoctor[{extra}]'"


def need(module: str, what: str) -> ModuleType:
    """``module`` imported, or :class:`MissingExtra` saying which extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        if exc.name and module.split(".")[0] != exc.name.split(".")[0]:
            raise  # the module is there but one of its own imports is broken
        raise MissingExtra(module, what) from None


def have(module: str) -> bool:
    """Whether ``module`` can be imported (without importing it)."""
    from importlib.util import find_spec

    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False
