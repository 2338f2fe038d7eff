"""Stand-ins for the framework classes a rewritten file holds, so ``fix`` never imports them.

A Megatron rank file's ``args`` hold enums (``AttnBackend``, ``ModelType``) and a
ZeRO optimizer file holds DeepSpeed's loss scaler. Loading those with torch
would import ``megatron.core`` / ``deepspeed`` (whose import can build CUDA
ops with gcc), and asking torch's error message which class to import next lets
the file choose the module. Instead every name ``fix`` may meet is mapped here,
in code, to an inert stand-in class: torch's ``weights_only`` unpickler builds
stand-ins by name (``safe_globals([(StandIn, "megatron....AttnBackend")])``, no
import), and :data:`PICKLE_MODULE` writes them back under the same global name
with the same arguments, so the framework loads the repaired file as its own.

Names are the safe reader's allow-list (``lrdoctor.read.bytes.safeload``): enums become
:class:`EnumStandIn` (their value, immutable), plain data classes
:class:`PlainStandIn` (their ``__dict__``). A name outside these lists is
refused, never resolved.
"""

from __future__ import annotations

import copyreg
import pickle
import types
from typing import TYPE_CHECKING, Any, ClassVar

# Plain data classes (no __setstate__/__reduce__ of their own): NEWOBJ + BUILD(__dict__).
PLAIN_NAMES = ("deepspeed.runtime.fp16.loss_scaler.LossScaler",
               "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler",
               "deepspeed.runtime.fp16.loss_scaler.LossScalerBase",
               "deepspeed.utils.tensor_fragment.fragment_address")


class StandIn:
    """Base of the stand-ins; ``_lrd_name`` is the global name it pickles as."""

    _lrd_name: ClassVar[str] = ""


class EnumStandIn(StandIn):
    """An enum member as its value: ``Enum.__reduce_ex__`` is ``(cls, (value,))``, so is ours."""

    __slots__ = ("value",)
    value: Any  # set once in __new__ (the class is immutable after)

    def __new__(cls, value: Any = None) -> EnumStandIn:
        obj = object.__new__(cls)
        object.__setattr__(obj, "value", value)
        return obj

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self._lrd_name} stand-in is immutable")

    def __reduce__(self) -> tuple:
        return (type(self), (self.value,))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EnumStandIn) and type(other) is type(self) \
            and bool(other.value == self.value)

    def __hash__(self) -> int:
        return hash((self._lrd_name, self.value))

    def __repr__(self) -> str:
        return f"<{self._lrd_name}: {self.value!r}>"


class PlainStandIn(StandIn):
    """A plain data object as its ``__dict__``; pickled back as NEWOBJ + BUILD like the original."""

    def __reduce_ex__(self, protocol: Any) -> tuple:
        return (copyreg.__newobj__, (type(self),), dict(self.__dict__))  # type: ignore[attr-defined]

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.__dict__ == self.__dict__

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<{self._lrd_name} {self.__dict__!r}>"


def _make(base: type, name: str) -> type:
    body: dict[str, Any] = {"_lrd_name": name, "__module__": __name__}
    if base is EnumStandIn:
        body["__slots__"] = ()
    return type(name.rpartition(".")[2], (base,), body)


def _enum_names() -> list[str]:
    from lrdoctor.read.bytes.safeload import _ENUMS

    return [f"{mod}.{n}" for mod, names in _ENUMS.items() for n in names]


_CLASSES: dict[str, type] | None = None


def classes() -> dict[str, type]:
    """Global name -> stand-in class, for every name ``fix`` may rebuild (built once)."""
    global _CLASSES
    if _CLASSES is None:
        out = {n: _make(EnumStandIn, n) for n in _enum_names()}
        out.update({n: _make(PlainStandIn, n) for n in PLAIN_NAMES})
        _CLASSES = out
    return _CLASSES


def safe_globals() -> list[tuple[type, str]]:
    """The ``(stand-in, "module.name")`` pairs for ``torch.serialization.safe_globals``."""
    return [(cls, name) for name, cls in classes().items()]


if TYPE_CHECKING:
    class _PurePickler(pickle._Pickler):
        """The pure-Python pickler's internals that typeshed does not declare (they are
        stable CPython API of ``pickle._Pickler``, which this module extends)."""

        proto: int
        memo: dict[int, tuple[int, Any]]

        def save(self, obj: Any, save_persistent_id: bool = True) -> None: ...
        def save_global(self, obj: Any, name: str | None = None) -> None: ...
        def write(self, data: bytes) -> int: ...
        def memoize(self, obj: Any) -> None: ...
        def get(self, i: int) -> bytes: ...
else:
    _PurePickler = pickle._Pickler


class _Pickler(_PurePickler):
    """The pure-Python pickler, writing a stand-in class under its original global name
    (the stdlib pickler would import the module to check the name: the import we avoid)."""

    def save_global(self, obj: Any, name: str | None = None) -> None:
        full = obj._lrd_name if isinstance(obj, type) and issubclass(obj, StandIn) else ""
        if not full:
            super().save_global(obj, name)
            return
        module, _, qual = full.rpartition(".")
        if self.proto >= 4:
            self.save(module)
            self.save(qual)
            self.write(pickle.STACK_GLOBAL)
        else:
            self.write(pickle.GLOBAL + module.encode("utf-8") + b"\n" + qual.encode("utf-8")
                       + b"\n")
        self.memoize(obj)


def _dump(obj: Any, file: Any, protocol: int | None = None, **kw: Any) -> None:
    _Pickler(file, protocol, **kw).dump(obj)


# What torch.save(..., pickle_module=PICKLE_MODULE) uses (it reads .Pickler, .dump, .__name__).
PICKLE_MODULE = types.SimpleNamespace(__name__="lrdoctor.repair.standins", Pickler=_Pickler,
                                      dump=_dump, Unpickler=pickle.Unpickler, load=pickle.load)
