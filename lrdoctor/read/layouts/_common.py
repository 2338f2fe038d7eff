"""Helpers shared by the checkpoint readers (no torch import here).

Readers see checkpoints only through :func:`lrdoctor.read.bytes.safeload.load`, so the
objects here are plain dicts/lists/numbers plus ``TensorRef`` and ``Opaque``.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict, TypeVar, overload

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.fieldref import Key
from lrdoctor.read.bytes import seen
from lrdoctor.read.scan import refusal
from lrdoctor.read.scan.shapes import (
    number as number,  # re-exported: the layouts call _common.number
)

if TYPE_CHECKING:
    from lrdoctor.core.state import RunState
    from lrdoctor.read.bytes.dcp import DcpState
    from lrdoctor.read.bytes.storage import RemotePath
    from lrdoctor.read.scan.view import ScanView

CHECKPOINT_N = re.compile(r"^checkpoint-(\d+)$")

# A dict unpickled from a checkpoint: its keys and values are whatever the file held
# (untrusted), so a reader narrows each value with isinstance before it uses it.
Loaded = dict[Any, Any]
# A JSON object a sidecar file held: str keys, untrusted values.
JsonObject = dict[str, Any]


def as_path(path: str | os.PathLike[str] | RemotePath) -> Path:
    """A local :class:`Path`, or for a URL a :class:`~lrdoctor.read.bytes.storage.RemotePath`.

    Typed as ``Path`` on purpose: ``RemotePath`` implements the part of pathlib the layouts
    use (``/``, ``name``, ``parent``, ``is_file``, ``is_dir``, ``iterdir``, ``glob``,
    ``stat``, ``read_text``), so each layout is written once for local and remote inputs.
    The one cast lives in :func:`lrdoctor.read.bytes.storage.reader_path` (the scan uses it too).
    """
    from lrdoctor.read.bytes.storage import reader_path

    return reader_path(path)


def load(path: Path) -> Any:
    """Unpickle a checkpoint file metadata-only; every failure is one line naming it."""
    from lrdoctor.read.bytes import safeload

    if not path.is_file():
        raise UnusableInput("missing file", str(path))
    try:
        obj = safeload.load(path)
    except UnusableInput:
        raise
    except Exception as exc:  # noqa: BLE001 - corrupt input must not give a traceback
        line = (str(exc).splitlines() or [type(exc).__name__])[0][:200]
        raise UnusableInput(f"cannot read: {line}", str(path)) from None
    seen.note(path, obj)  # the evidence collector walks what was loaded (lrdoctor.evidence)
    return obj


def load_dict(path: Path, what: str = "a dict") -> Loaded:
    obj = load(path)
    if not isinstance(obj, dict):
        raise UnusableInput(f"expected {what}, found {type(obj).__name__}", str(path))
    return obj


def read_json(path: Path) -> JsonObject:
    from lrdoctor.read.bytes import safetext

    if not path.is_file():
        raise UnusableInput("missing file", str(path))
    obj = safetext.read_json(path)  # size, container and depth limits; one line on failure
    seen.note(path, obj)
    if not isinstance(obj, dict):
        raise UnusableInput("expected a JSON object", str(path))
    return obj


def as_fields(obj: Any) -> Loaded | None:
    """The attribute dict of a pickled object (argparse.Namespace, a dataclass), or None."""
    from lrdoctor.read.bytes.safeload import Opaque

    if isinstance(obj, dict):
        return obj
    if isinstance(obj, Opaque):
        state = obj.state
        # setstate may be (dict, slots) for classes with __slots__.
        if isinstance(state, tuple) and state and isinstance(state[0], dict):
            state = state[0]
        if isinstance(state, dict):
            return state
    if hasattr(obj, "__dict__") and not isinstance(obj, type):
        return dict(vars(obj))
    return None


def mapping(value: Any) -> Loaded:
    """``value`` when it is a dict, else an empty one: a config section read from an
    untrusted file may be missing or of any other type."""
    return value if isinstance(value, dict) else {}


def dig(obj: Any, *keys: str) -> Any:
    """The value at ``keys`` through nested dicts (a saved config, hparams), or None where
    a step is missing or not a dict: an untrusted file may hold any shape."""
    for k in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(k)
    return obj


def plain(value: Any) -> Any:
    """An enum-like pickled value (Opaque with one arg) as its plain value."""
    from lrdoctor.read.bytes.safeload import Opaque

    if isinstance(value, Opaque):
        if value.args and len(value.args) == 1 and isinstance(value.args[0], (str, int, float)):
            return value.args[0]
        if isinstance(value.state, (str, int, float)):
            return value.state
        return None
    if hasattr(value, "value") and not isinstance(value, (str, int, float, bool)):
        return value.value  # a live enum, if a loader ever returns one
    return value


# ---------------------------------------------------------------- the validation boundary

MAX_MAGNITUDE = 1e15  # no step, sample count, horizon or LR of a real run comes near


@overload
def num(value: Any, file: object, key: str, *, count: bool = False,
        required: Literal[True] = True) -> float: ...


@overload
def num(value: Any, file: object, key: str, *, count: bool = False,
        required: bool) -> float | None: ...


def num(value: Any, file: object, key: str, *, count: bool = False,
        required: bool = True) -> float | None:
    """A number read from a checkpoint, sidecar or config, checked where it enters the model.

    Accepts an int, a float or a one-element tensor (``AdamW(lr=torch.tensor(1e-3))``);
    it must be finite and below :data:`MAX_MAGNITUDE` in size, and with ``count`` a
    whole number >= 0. A value that fails is a one-line :class:`UnusableInput` naming
    ``file`` and ``key``, or, with ``required=False``, None (the caller notes it).
    ``None`` itself is "absent": an error only when required.
    """
    problem = _num_problem(value, count)
    v = number(value) if problem is None else None
    if v is not None:
        return float(v)
    if required:
        raise UnusableInput(f"{key}: {problem}", str(file))
    return None


def _num_problem(value: Any, count: bool) -> str | None:
    if value is None:
        return "missing"
    try:
        v = number(value)
    except UnusableInput as exc:  # an unreadable tensor
        return f"unreadable ({exc.message})"
    if v is None or isinstance(v, complex):
        return f"expected a number, found {_describe(value)}"
    if isinstance(v, float) and not math.isfinite(v):
        return f"{v} is not a finite number"
    if abs(v) > MAX_MAGNITUDE:
        return f"{_describe(v)} is out of range (more than {MAX_MAGNITUDE:.0e})"
    if count and (v < 0 or v != int(v)):
        return f"{v!r} is not a whole count >= 0"
    return None


def _describe(value: Any) -> str:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**18:
        return f"an integer of {len(str(abs(value))) if value.bit_length() < 13000 else 'over 4000'} digits"
    text = repr(value) if isinstance(value, (str, int, float, bool)) else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "..."


def side_num(st: RunState, value: Any, file: object, key: str, *, count: bool = False) -> float | None:
    """:func:`num` for a side value: a bad one is noted on ``st`` and ignored (None)."""
    if value is None:
        return None
    out = num(value, file, key, count=count, required=False)
    if out is None:
        st.notes.append(f"{file}: {key} ignored: {_num_problem(value, count)}")
    return out


# ---------------------------------------------------------------- optimizers

def torch_optimizer_dicts(obj: Any) -> list[Loaded]:
    """Every torch-optimizer-like state dict (has ``param_groups``) nested in ``obj``."""
    return [d for _, d in optimizer_dicts_at(obj)]


def optimizer_dicts_at(obj: Any, depth: int = 0, at: tuple[Key, ...] = ()
                       ) -> list[tuple[tuple[Key, ...], Loaded]]:
    """(key path in ``obj``, dict) of every torch-optimizer-like state dict in ``obj``.

    Megatron wraps the torch dict as ``{"optimizer": {...}, "grad_scaler": ...}``
    and chains several as a list; DeepSpeed and others nest one more level.
    """
    if depth > 4:
        return []
    if isinstance(obj, dict):
        if isinstance(obj.get("param_groups"), list):
            return [(at, obj)]
        found: list[tuple[tuple[Key, ...], Loaded]] = []
        for key in ("optimizer", "optimizer_state_dict", "base_optimizer_state", "state"):
            if key in obj:
                found += optimizer_dicts_at(obj[key], depth + 1, (*at, key))
        return found
    if isinstance(obj, (list, tuple)):
        found = []
        for i, item in enumerate(obj):
            found += optimizer_dicts_at(item, depth + 1, (*at, i))
        return found
    return []


def _side(value: Any, count: bool = False) -> float | None:
    """A side value of an optimizer: a number passing :func:`num`, else None (not counted)."""
    return num(value, "", "", count=count, required=False)


class OptimizerSummary(TypedDict):
    """What a torch optimizer state says about the run (:func:`optimizer_summary`)."""

    found: bool  # any optimizer state dict (``param_groups``) at all
    lrs: list[float]  # every param group's ``lr``
    lr_keys: list[tuple[Key, ...]]  # where each of ``lrs`` lives in the state
    initial_lrs: list[float]  # ``initial_lr``: set by any torch LRScheduler built on it
    step: float | None  # the optimizer step (max over parameters and groups)
    step_key: tuple[Key, ...] | None  # the first field holding that max: its FieldRef key
    steps_distinct: list[float]
    unreadable_steps: int  # step tensors the loader could not read
    params_with_state: int
    group_max_lr: list[float]  # per-group peaks (OneCycleLR, Megatron overrides)
    group_min_lr: list[float]


def optimizer_summary(opt_sd: Any) -> OptimizerSummary:
    """Param-group LRs and the optimizer step of a (possibly wrapped) optimizer state.

    ``step`` is the max over per-parameter ``state[i]["step"]`` (AdamW keeps a
    0-d tensor) and param-group ``step`` (Megatron's distributed optimizer and
    Apex/TE FusedAdam keep it there). ``unreadable_steps`` counts the step tensors
    the loader could not read.
    """
    lrs: list[float] = []
    lr_keys: list[tuple[Key, ...]] = []  # where each of ``lrs`` lives in ``opt_sd``
    initial_lrs: list[float] = []
    extra: dict[str, list[float]] = {"group_max_lr": [], "group_min_lr": []}
    steps: list[float] = []
    step_keys: list[tuple[Key, ...]] = []  # where each of ``steps`` lives in ``opt_sd``
    unreadable = 0
    n_state = 0
    dicts_at = optimizer_dicts_at(opt_sd)
    dicts = [d for _, d in dicts_at]
    for at, d in dicts_at:
        groups = d.get("param_groups")
        for gi, g in enumerate(groups if isinstance(groups, list) else []):
            if not isinstance(g, dict):
                continue
            lr = _side(g.get("lr"))  # a 0-d tensor LR is read as its value
            if lr is not None:
                lrs.append(lr)
                lr_keys.append((*at, "param_groups", gi, "lr"))
            ilr = _side(g.get("initial_lr"))
            if ilr is not None:
                initial_lrs.append(ilr)
            for key in ("max_lr", "min_lr"):  # OneCycleLR, Megatron per-group overrides
                v = _side(g.get(key))
                if v is not None:
                    extra[f"group_{key}"].append(v)
            if "step" in g:
                s = _side(g["step"], count=True)
                if s is not None:
                    steps.append(s)
                    step_keys.append((*at, "param_groups", gi, "step"))
        state = d.get("state")
        if isinstance(state, dict):
            for pid, pstate in state.items():
                if isinstance(pstate, dict) and "step" in pstate:
                    n_state += 1
                    s = _side(pstate["step"], count=True)
                    if s is None:
                        unreadable += 1
                    else:
                        steps.append(float(s))
                        step_keys.append((*at, "state", pid, "step"))
    return {
        "found": bool(dicts),
        "lrs": lrs,
        "lr_keys": lr_keys,
        "initial_lrs": initial_lrs,
        "step": max(steps) if steps else None,
        # The first field holding that max: the optimizer step's FieldRef key.
        "step_key": step_keys[steps.index(max(steps))] if steps else None,
        "steps_distinct": sorted(set(steps)),
        "unreadable_steps": unreadable,
        "params_with_state": n_state,
        "group_max_lr": extra["group_max_lr"],
        "group_min_lr": extra["group_min_lr"],
    }


# ---------------------------------------------------------------- ranks

def compare_ranks(st: RunState, others: Iterable[Path], what: str,
                  differs: Callable[[Loaded], dict[str, tuple[Any, Any]]]
                  ) -> list[dict[str, Any]]:
    """Load every other rank's file and record which disagree with the one read.

    ``differs(other)`` gives ``{key: (ours, theirs)}`` for one rank's dict. Each
    file joins ``st.files``; ``ranks_agree`` / ``rank_disagreement`` go in
    ``st.extras``. Returns the disagreements so the reader can word its note.
    """
    from lrdoctor.parallel import threads

    others = list(others)
    disagree: list[dict[str, Any]] = []
    # Rank files are independent reads (remote ones wait on the network): read them
    # side by side on a bounded thread pool, then compare in rank order.
    loaded = threads(lambda f: load_dict(f, what), others)
    for f, other in zip(others, loaded, strict=True):
        diffs = differs(other)
        if diffs:
            disagree.append({"file": str(f), "differs": diffs})
        st.files.append(str(f))
    st.extras["ranks_agree"] = not disagree
    if disagree:
        st.extras["rank_disagreement"] = disagree
    return disagree


# ---------------------------------------------------------------- run dirs

def _first_group(m: re.Match[str]) -> int:
    return int(m.group(1) or 0)


def numbered_children(folder: Path, pattern: re.Pattern[str], keep: Callable[[Path], bool],
                      number: Callable[[re.Match[str]], int | tuple[int, ...]] = _first_group
                      ) -> list[Path]:
    """The children of ``folder`` named like ``pattern`` that ``keep`` accepts, by their number.

    Every layout numbers its saves in names (``checkpoint-N``, ``iter_N``, ``scheduler_N.bin``);
    ``number`` reads it from the match (default: the first group, 0 when it matched nothing;
    a tuple where a name holds several numbers, e.g. DeepSpeed's dp and mp ranks).
    A folder that cannot be listed has no such children.
    """
    found: list[tuple[Any, Path]] = []
    try:
        children = list(folder.iterdir())
    except OSError:
        return []
    for child in children:
        m = pattern.match(child.name)
        if m and keep(child):
            found.append((number(m), child))
    return [p for _, p in sorted(found)]


def checkpoint_n_dirs(path: Path, marker: str | Iterable[str]) -> list[Path]:
    """``checkpoint-N`` subdirectories of ``path`` holding ``marker``, by N ascending."""
    markers = [marker] if isinstance(marker, str) else list(marker)
    return numbered_children(path, CHECKPOINT_N, lambda child: child.is_dir() and any(
        (child / mk).exists() for mk in markers))


_Ckpt = TypeVar("_Ckpt")


def claim_by_path(score: int, is_layout: Callable[[Path], bool]) -> Callable[[ScanView], int]:
    """A path layout's ``claims``: ``score`` when ``is_layout`` accepts the input's path, else 0."""
    def claims(scan: ScanView) -> int:
        return score if is_layout(scan.path) else 0

    return claims


def detector(name: str) -> Callable[[Path], bool]:
    """A layout's ``detect``: whether the registry's best claim on a path is layout ``name``'s."""
    def detect(path: Path) -> bool:
        from lrdoctor.read import layouts

        return layouts.claimed_as(path) == name

    return detect


def listed(found: list[_Ckpt], missing: str, path: Path) -> list[_Ckpt]:
    """A layout's ``find_checkpoints`` result: ``found``, never empty (an input with none is
    refused, naming what was looked for in ``path`` and what the scan saw instead)."""
    if not found:
        raise refusal.nothing_found(missing, path)
    return found


def checkpoint_number(path: Path) -> int | None:
    m = CHECKPOINT_N.match(path.name)
    return int(m.group(1)) if m else None


class StepFolders:
    """A layout of numbered step folders (torchtitan ``step-N/``, NeMo-RL ``step_N/``):
    a framework module's ``detect`` and ``find_checkpoints`` from its folder test, so each
    such module states only what makes a folder one of its checkpoints.

    ``bases``: sub-folders of a run folder that may hold the step folders (the first one
    that holds any wins); symlinked folders are not followed.
    """

    def __init__(self, pattern: re.Pattern[str], is_step: Callable[[Path], bool],
                 missing: str, bases: tuple[str, ...] = ("",)):
        self.pattern, self.is_step, self.missing, self.bases = pattern, is_step, missing, bases

    def dirs(self, path: Path) -> list[Path]:
        for sub in self.bases:
            base = path / sub if sub else path
            found = numbered_children(base, self.pattern, lambda c: c.is_dir()
                                      and not c.is_symlink() and self.is_step(c)) \
                if base.is_dir() else []
            if found:
                return found
        return []

    def detect(self, path: Path) -> bool:
        return self.is_step(path) or (path.is_dir() and bool(self.dirs(path)))

    def find(self, path: Path) -> list[Path]:
        return [path] if self.is_step(path) else listed(self.dirs(path), self.missing, path)

    def is_layout(self, path: Path) -> bool:
        """``detect`` on any input the registry hands over (a local path or a URL)."""
        return self.detect(as_path(path))

    def find_checkpoints(self, path: Path) -> list[Path]:
        """The layout's ``find_checkpoints``: the step folders, oldest first."""
        return self.find(as_path(path))


def note_skipped(st: RunState, ds: DcpState) -> None:
    """Say which items were left unread, so a missing counter is never silent."""
    if ds.skipped:
        some = "; ".join(f"{k}: {v}" for k, v in list(ds.skipped.items())[:3])
        st.notes.append(f"{len(ds.skipped)} DCP item(s) left unread ({some})")
        st.extras["dcp_skipped"] = dict(ds.skipped)
