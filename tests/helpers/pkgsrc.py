"""Load one source file of an installed framework package, for tests that compare with it.

timm, torchtune and torchtitan install from PyPI, but their package ``__init__`` pulls
dependencies that have no CPU wheel here (timm and Composer import torchvision, whose
PyPI build needs CUDA torch; torchtune needs torchao; torchtitan needs spmd_types). The
scheduler modules themselves only need torch. :func:`load` imports the real module file
under its real name with its parent packages as bare namespace modules (their
``__init__`` is not run) and with the few names it imports from elsewhere in the package
given as stand-ins; the code under test is the framework's own.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest


def load(dotted: str, stubs: dict[str, dict[str, Any]] | None = None) -> types.ModuleType:
    """The module ``dotted`` of an installed package, parents not initialised.

    ``stubs``: module name -> attributes, for modules of the package that the file
    imports and that cannot be imported here. Skips the test when the package is absent.
    """
    top = dotted.split(".")[0]
    spec = importlib.util.find_spec(top)
    if spec is None or spec.origin is None:
        pytest.skip(f"{top} is not installed")
    root = Path(spec.origin).parent
    saved = {k: v for k, v in sys.modules.items() if k == top or k.startswith(top + ".")}
    try:
        for k in saved:
            del sys.modules[k]
        parts = dotted.split(".")
        for i in range(1, len(parts)):
            name = ".".join(parts[:i])
            pkg = types.ModuleType(name)
            pkg.__path__ = [str(root.joinpath(*parts[1:i]))]
            sys.modules[name] = pkg
        for name, attrs in (stubs or {}).items():
            mod = types.ModuleType(name)
            mod.__dict__.update(attrs)
            sys.modules[name] = mod
        return importlib.import_module(dotted)
    finally:
        for k in [k for k in sys.modules if k == top or k.startswith(top + ".")]:
            del sys.modules[k]
        sys.modules.update(saved)
