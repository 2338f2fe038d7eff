"""Safe, metadata-only loading of torch checkpoints.

INTERIM implementation (torch.load with weights_only=True); to be replaced by
lrdoctor's own allow-list unpickler that never imports torch. The public API
below is the contract the readers use.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class TensorRef:
    """A tensor seen without its payload: enough to report shape and dtype."""

    dtype: str  # torch dtype name without the "torch." prefix, e.g. "float32"
    shape: tuple[int, ...]
    path: str  # the checkpoint file it lives in
    storage_key: str  # the zip member name under <archive>/data/
    storage_offset: int = 0  # in elements
    stride: tuple[int, ...] = ()

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n


@dataclass
class Opaque:
    """An allow-listed object we keep as data, never instantiate (e.g. HF TrainingArguments)."""

    cls: str  # "module.qualname"
    state: Any = None
    args: tuple = ()


def load(path: str | Path) -> Any:
    """Unpickle ``path`` with tensors turned into :class:`TensorRef`.

    argparse.Namespace comes back as a ``dict`` under the key-space of the
    namespace wrapped in ``Opaque("argparse.Namespace", state=dict)``.
    Raises UnusableInput / UnsafePickle with a one-line message.
    """
    import torch

    from lrdoctor.errors import UnusableInput

    path = Path(path)
    try:
        import argparse

        with torch.serialization.safe_globals([argparse.Namespace]):
            obj = torch.load(path, weights_only=True, mmap=True, map_location="cpu")
    except Exception as exc:  # noqa: BLE001 - turned into one line
        raise UnusableInput(f"cannot load: {str(exc).splitlines()[0][:200]}", str(path)) from None
    return _convert(obj, str(path))


def _convert(obj: Any, path: str) -> Any:
    import argparse

    import torch

    if isinstance(obj, torch.Tensor):
        return TensorRef(str(obj.dtype).removeprefix("torch."), tuple(obj.shape), path, "?",
                         obj.storage_offset(), tuple(obj.stride()))
    if isinstance(obj, dict):
        return {k: _convert(v, path) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_convert(v, path) for v in obj]
    if isinstance(obj, tuple):
        return tuple(_convert(v, path) for v in obj)
    if isinstance(obj, argparse.Namespace):
        return Opaque("argparse.Namespace", state=_convert(vars(obj), path))
    return obj


def read_values(ref: TensorRef, limit: int = 64) -> list[float]:
    """The values of a small tensor (an optimizer's ``step``); refuses big ones."""
    import torch

    from lrdoctor.errors import UnusableInput

    if ref.numel > limit:
        raise UnusableInput(f"refusing to read a {ref.numel}-element tensor", ref.path)
    raise NotImplementedError("interim loader: values not kept")  # replaced by safeload helper
    torch  # noqa: B018
