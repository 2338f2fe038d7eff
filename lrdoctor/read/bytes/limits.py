"""Resource limits on untrusted input, enforced while it is read (docs/security.md).

Checkpoints, sidecars, batch logs and configs come from wherever the user found
them. Every reader charges what it materialises against the limits here, so a
hostile or corrupt file ends in one line naming it, not in a hang, a memory
blow-up or a ``RecursionError``. Each limit has a named default, generous for
real checkpoints (their pickled metadata is KBs to a few MBs), and an
environment variable to raise it for the rare real file that needs more::

    LRDOCTOR_MAX_PICKLE_OPS=50000000 lrdoctor inspect huge-ckpt/

The error a limit raises names the variable, so the way out is in the message.
Pure standard library: imported by ``inspect``'s light path.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar, overload

from lrdoctor.core.errors import LimitExceeded, UnusableInput

__all__ = ["LIMITS", "Limit", "get", "over", "check_tree", "check_size", "machine_memory"]


@dataclass(frozen=True)
class Limit:
    """One named limit: its default, the environment variable that overrides it, what it bounds."""

    name: str
    default: int
    what: str

    @property
    def env(self) -> str:
        return f"LRDOCTOR_MAX_{self.name.upper()}"


_MiB = 1 << 20

LIMITS: dict[str, Limit] = {lim.name: lim for lim in [
    Limit("pickle_bytes", 128 * _MiB,
          "bytes of pickled metadata in one file (a torch data.pkl or a plain pickle)"),
    Limit("pickle_ops", 2_000_000, "pickle opcodes executed for one file (a torch.save "
                                   "costs ~30 per tensor)"),
    Limit("pickle_memo", 1_000_000, "pickle memo entries of one file"),
    Limit("pickle_int_bytes", 128, "bytes of one pickled integer (2**1024 and beyond is refused)"),
    Limit("items", 2_000_000,
          "container elements materialised while reading one file (pickle, JSON, YAML)"),
    Limit("nodes", 10_000_000,
          "values a full walk of one file's data visits, a shared value counted at every "
          "place it appears (the 'billion laughs' of repeated references)"),
    Limit("depth", 100, "nesting depth of containers in one file (pickle, JSON, YAML, TOML)"),
    Limit("zip_members", 200_000, "members of one zip checkpoint"),
    Limit("deflated_bytes", 64 * _MiB,
          "bytes inflated to reach a value in a deflated zip record (a tensor storage), or "
          "to copy one: torch writes storages stored, where a read costs what it reads"),
    Limit("dcp_item_bytes", 64 * _MiB,
          "bytes of one torch.distributed.checkpoint bytes item (a scheduler, args, "
          "common_state: KiBs); a reading leaves a bigger one unread and says so, fix's "
          "check of its output refuses it"),
    Limit("dcp_bytes", 1024 * _MiB, "bytes of all the bytes items of one DCP folder read "
                                    "together"),
    Limit("json_bytes", 64 * _MiB, "bytes of one JSON sidecar (trainer_state.json, ...)"),
    Limit("csv_bytes", 64 * _MiB, "bytes of one CSV metrics log (Lightning CSVLogger's "
                                  "metrics.csv)"),
    Limit("tfevents_bytes", 64 * _MiB, "bytes of one TensorBoard event file "
                                       "(events.out.tfevents.*, TensorBoardLogger's log)"),
    Limit("jsonl_line_bytes", 16 * _MiB, "bytes of one line of a JSONL batch log"),
    Limit("config_bytes", 1 * _MiB, "bytes of one YAML or TOML config"),
    Limit("replay_steps", 10_000_000, "optimizer steps one replay simulates (train.steps, "
                                      "--synthetic steps)"),
    Limit("replay_samples", 50_000_000, "samples one replay materialises (steps x samples "
                                        "per step, batch-log rows)"),
    Limit("replay_ranks", 65_536, "data-parallel ranks one replay simulates (dp.size, "
                                  "nodes x GPUs per node / model parallel)"),
]}


def machine_memory() -> int | None:
    """Bytes of physical memory of this machine (None where the platform does not say)."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def get(name: str) -> int:
    """The limit ``name``: its environment override if set, else the default."""
    lim = LIMITS[name]
    raw = os.environ.get(lim.env)
    if raw is None or not raw.strip():
        return lim.default
    try:
        value = int(raw.strip().replace("_", ""))
    except ValueError:
        value = 0
    if value < 1:
        raise UnusableInput(f"{lim.env}={raw!r}: not a positive integer")
    return value


_E = TypeVar("_E", bound=UnusableInput)


@overload
def over(name: str, path: str | None, detail: str) -> LimitExceeded: ...
@overload
def over(name: str, path: str | None, detail: str, cls: type[_E]) -> _E: ...


def over(name: str, path: str | None, detail: str,
         cls: type[UnusableInput] = LimitExceeded) -> UnusableInput:
    """The one-line refusal for limit ``name``: what was too big, and how to raise it."""
    exc = cls(f"{detail}: over lrdoctor's limit {LIMITS[name].env}={get(name)} "
              "(raise it for a file you trust)", path)
    if isinstance(exc, LimitExceeded):
        exc.env = LIMITS[name].env
    return exc


def check_size(name: str, size: int, path: str | None, what: str) -> None:
    """Refuse ``size`` bytes of ``what`` when it exceeds the byte limit ``name``."""
    if size > get(name):
        raise over(name, path, f"{what} is {size:,} bytes")


def plain_children(obj: Any) -> Iterable[Any] | None:
    """The values a container holds (None for a leaf): what a copy, a ``str`` or a hash visits."""
    if isinstance(obj, dict):
        return [*obj.keys(), *obj.values()]
    if isinstance(obj, (list, tuple, set, frozenset)):
        return obj
    return None


def check_tree(obj: Any, path: str | None, *, what: str = "data",
               children: Callable[[Any], Iterable[Any] | None] = plain_children) -> None:
    """Refuse ``obj`` if its nesting is deeper than ``depth``, if a full walk of it would
    visit more than ``nodes`` values (shared references expanded), or if it holds a cycle.

    Iterative and memoised by identity, so it costs one visit per distinct container
    however deep or shared the structure is. Run it before anything walks ``obj``
    recursively (``to_dict``, a search for a config key, the writer's key paths).
    """
    max_depth, max_nodes = get("depth"), get("nodes")
    # id -> (expanded node count, depth) of finished containers; ids on the path: cycles.
    done: dict[int, tuple[int, int]] = {}
    on_path: set[int] = set()
    keep: list[Any] = []  # keeps visited objects alive so ids stay unique
    kids0 = children(obj)
    if kids0 is None:
        return
    stack: list[tuple[Any, Any, list[int]]] = [(obj, iter(list(kids0)), [1, 1])]
    on_path.add(id(obj))
    while stack:
        node, it, acc = stack[-1]
        pushed = False
        for child in it:
            cid = id(child)
            if cid in done:
                n, d = done[cid]
                if len(stack) + d > max_depth:
                    raise over("depth", path, f"{what} nests more than {max_depth} levels")
            else:
                kids = children(child)
                if kids is None:
                    n, d = 1, 0
                else:
                    if cid in on_path:
                        raise UnusableInput(f"{what} refers to itself (a reference cycle)", path)
                    if len(stack) >= max_depth:
                        raise over("depth", path, f"{what} nests more than {max_depth} levels")
                    keep.append(child)
                    on_path.add(cid)
                    stack.append((child, iter(list(kids)), [1, 1]))
                    pushed = True
                    break
            acc[0] += n
            acc[1] = max(acc[1], d + 1)
            if acc[0] > max_nodes:
                raise over("nodes", path, f"{what} expands to more than {max_nodes:,} values "
                                          "through repeated references")
        if pushed:
            continue
        stack.pop()
        on_path.discard(id(node))
        done[id(node)] = (acc[0], acc[1])
        if stack:
            parent = stack[-1][2]
            parent[0] += acc[0]
            parent[1] = max(parent[1], acc[1] + 1)
            if parent[0] > max_nodes:
                raise over("nodes", path, f"{what} expands to more than {max_nodes:,} values "
                                          "through repeated references")
