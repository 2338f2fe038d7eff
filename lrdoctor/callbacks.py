"""The trainer callbacks live in :mod:`lrdoctor.runtime.callbacks`; this documented path
stays (``HFCallback``/``LightningCallback`` resolve there, on first use)."""

from typing import Any

from lrdoctor.runtime.callbacks import hf_callback, lightning_callback

__all__ = ["HFCallback", "LightningCallback", "hf_callback", "lightning_callback"]  # noqa: F822


def __getattr__(name: str) -> Any:
    from lrdoctor.runtime import callbacks

    return getattr(callbacks, name)
