"""Writer for torch.distributed.checkpoint (DCP) folders: every layout ``inspect`` reads.

Megatron ``torch_dist`` (megatron-core 0.19 ``common_state/shard_0_1`` bytes item, and
the older ``common.pt`` beside the ``.distcp`` files), ``torch_dcp`` / ``fsdp_dtensor``
(flattened ``opt_param_scheduler.num_steps`` leaves), torchtitan ``step-N``
(``lr_scheduler.last_epoch``, per-parameter ``optimizer.param_groups.<fqn>.lr``),
NeMo-RL's optimizer DCP and any other DCP folder: the fields are found in the items as
the reader re-nests them (:func:`lrdoctor.read.bytes.dcp.load`), by content, never by the
layout's name.

Why a new storage file: ``.metadata`` records the file, byte offset and length of every
item, so an item cannot grow or shrink in place. Only the non-tensor (bytes) items that
change are written again, back to back into :data:`NEW_FILE` in the output folder, and
``.metadata`` is rewritten with torch's own DCP metadata classes so their entries point at
it (torch is needed for this path only). Every other file (the tensor ``.distcp`` files,
``metadata.json``, ``common.pt`` when unchanged) is hard-linked where the filesystem
allows, else copied, and never rewritten; the input is only read.

The items are rewritten by :mod:`lrdoctor.repair.torchzip` (the item is a ``torch.save``
zip: data.pkl is re-pickled with the planned numbers, every global kept by name, nothing
imported or run); an item that is a bare number is saved again with ``torch.save``.
"""

from __future__ import annotations

import io
import os
import pickle
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.repair import Builder, Change, FormatPlan, Key, Refusal, Target, get_at, walk
from lrdoctor.core.state import RunState

NEW_FILE = "__lrdoctor_fix.distcp"
METADATA = ".metadata"
COMMON_FILE = "common.pt"  # megatron-core < 0.19 torch_dist: the common state, a torch.save
TORCH_EXTRA = "rewriting a torch.distributed.checkpoint (fix)"


# ---------------------------------------------------------------- plan

def folders(state: RunState) -> list[Path]:
    """The DCP folders the state was read from (each ``.metadata`` among its files)."""
    from lrdoctor.read.bytes import dcp as reader

    out: list[Path] = []
    for f in state.files:
        p = Path(f)
        if p.name == METADATA and reader.is_dcp(p.parent) and p.parent not in out:
            out.append(p.parent)
    ck = Path(state.path)
    if not out and reader.is_dcp(ck):
        out.append(ck)
    return out


def plan(path: Path, state: RunState, target: Target) -> FormatPlan:
    from lrdoctor.read.bytes import dcp as reader
    from lrdoctor.repair.writer import load_pickle

    path = Path(path)
    dirs = folders(state)
    if not dirs:
        raise Refusal("no torch.distributed.checkpoint folder among the files inspect read",
                      str(path))
    ckpt = Path(state.path) if Path(state.path).is_dir() else dirs[0]
    root, files = _output(path, ckpt, dirs + [f.parent for f in _pickles(state, dirs)])
    trees: list[tuple[str, dict[str, Any], dict[str, tuple]]] = []
    pickles: list[tuple[str, Any]] = []
    for d in dirs:
        ds = reader.load(d)
        rel = _rel(root, d / METADATA)
        trees.append((rel, ds.tree, _paths(d, ds)))
    for f in _pickles(state, dirs):  # common.pt, an HF scheduler.pt beside optimizer_0/ ...
        try:
            pickles.append((_rel(root, f), load_pickle(f)))
        except UnusableInput:
            if f.name == COMMON_FILE:
                raise
            # training_args.bin (a class off the allow-list): no field fix edits lives there;
            # a scheduler that did would be missed and the plan refused, never guessed.
            continue
    objs: list[tuple[str, Any]] = [(rel, tree) for rel, tree, _ in trees] + pickles
    by_rel = {rel: paths for rel, _, paths in trees}
    named, named_lrs = _named(state, root, by_rel)
    changes, notes = _plan_objects(objs, target, named, named_lrs)
    ref = state.scheduler_progress.ref if state.scheduler_progress is not None else None
    if ref is not None and named is None:  # never silent: say the narrowing was lost
        notes.append(f"the field the reader named ({ref}) is not among this folder's items: "
                     "the scheduler state was found by shape instead")
    out: list[Change] = []
    for c in changes:
        if c.file in by_rel:
            fqn, sub = _item_of(c.key, by_rel[c.file], c.file)
            out.append(Change(c.file, (fqn, *sub), c.before, c.after, kind="dcp", why=c.why))
        else:
            out.append(c)
    if not out:
        raise Refusal(f"no scheduler state with progress {target.progress_before:g} in the "
                      "items of " + ", ".join(str(d) for d in dirs), str(path))
    builders: dict[str, Builder] = {rel: _Builder(rel) for rel in by_rel
                                    if any(c.file == rel for c in out)}
    if builders:
        notes.append("DCP: the changed items are written to " + NEW_FILE + " and .metadata "
                     "points at them; every other file is hard-linked (or copied) unchanged")
    else:
        notes.append("DCP: only " + ", ".join(sorted({c.file for c in out})) + " changes; the "
                     "DCP files are hard-linked (or copied) unchanged")
    return FormatPlan(root=root, files=files, changes=out, notes=notes, link=True,
                      builders=builders)


def _named(state: RunState, root: Path, by_rel: dict[str, dict[str, tuple]]
           ) -> tuple[tuple[str, Key] | None, list[tuple[str, Key]]]:
    """Where the reader's refs point, as (file, key path) in the objects :func:`plan` walks
    (relative to ``root``): the scheduler state holding the progress ``Counter.ref`` names,
    and the optimizer LR fields of ``optimizer_lr_refs``. A ref into a DCP folder names the
    item (its fqn) and the key inside it; the item's re-nested path is put in front, so the
    repair narrows to exactly the fields the reader read. None / [] where it named none."""
    prog = state.scheduler_progress
    sched = _tree_ref(prog.ref, root, by_rel) if prog is not None and prog.ref else None
    lrs = [t for t in (_tree_ref(r, root, by_rel) for r in state.optimizer_lr_refs)
           if t is not None]
    return ((sched[0], sched[1][:-1]) if sched is not None and sched[1] else None), lrs


def _tree_ref(ref: FieldRef, root: Path, by_rel: dict[str, dict[str, tuple]]
              ) -> tuple[str, Key] | None:
    """(file relative to ``root``, key path in the object walked) of one ref: for a DCP
    item, the item's re-nested path then the key inside it; None where it is outside."""
    f, r = Path(ref.file).resolve(), root.resolve()
    if not f.is_relative_to(r):
        return None
    rel = _rel(r, f)
    if not ref.item:
        return rel, tuple(ref.key)
    at = by_rel.get(rel, {}).get(ref.item)
    return None if at is None else (rel, tuple(at) + tuple(ref.key))


def _pickles(state: RunState, dirs: list[Path]) -> list[Path]:
    """The torch.save files the state was read from besides the DCP items (Megatron's
    ``common.pt``, an HF/accelerate ``scheduler.pt`` next to an FSDP ``optimizer_0/``)."""
    from lrdoctor.read.bytes.safeload import PICKLE_SUFFIXES

    out = [d / COMMON_FILE for d in dirs if (d / COMMON_FILE).is_file()]
    for f in map(Path, state.files):
        if f.is_file() and f.suffix.lower() in PICKLE_SUFFIXES and f not in out:
            out.append(f)
    return out


def _rel(root: Path, p: Path) -> str:
    return p.name if root == p else str(p.relative_to(root))


def _output(path: Path, ckpt: Path, dirs: list[Path]) -> tuple[Path, list[str] | None]:
    """The output's root and files: the checkpoint folder as it is, or, for a run folder,
    its top-level files (a tracker) and the repaired checkpoint folder only."""
    from lrdoctor.core.repair import tree_files

    inside = all(d == ckpt or d.is_relative_to(ckpt) for d in dirs)
    if path.is_dir() and ckpt != path and ckpt.is_relative_to(path) and inside:
        top = [p.name for p in path.iterdir() if p.is_file() and not p.is_symlink()]
        return path, sorted(top) + [str((ckpt / f).relative_to(path)) for f in tree_files(ckpt)]
    if inside:
        return ckpt, None
    import os.path

    root = Path(os.path.commonpath([str(ckpt), *(str(d) for d in dirs)]))
    return root, None


def _paths(folder: Path, ds: Any) -> dict[str, tuple]:
    """fqn -> the key path the reader re-nested it at (its planner path, else the dots)."""
    from lrdoctor.read.bytes import dcp as reader

    planner = reader.read_metadata(folder).get("planner_data")
    out = {}
    for fqn in ds.flat:
        p = planner.get(fqn) if isinstance(planner, dict) else None
        if not (isinstance(p, tuple) and p and all(isinstance(x, (str, int)) for x in p)):
            p = tuple(fqn.split("."))
        out[fqn] = p
    return out


def _item_of(key: Key, paths: dict[str, tuple], file: str) -> tuple[str, Key]:
    """(fqn, key inside the item) of a field at ``key`` in the re-nested tree."""
    best: tuple[str, int] | None = None
    for fqn, p in paths.items():
        if len(p) <= len(key) and all(str(a) == str(b) for a, b in zip(p, key, strict=False)):
            if best is None or len(p) > best[1]:
                best = (fqn, len(p))
    if best is None:
        raise Refusal(f"no DCP item holds {key}", file)
    return best[0], tuple(key[best[1]:])


# ---------------------------------------------------------------- fields, by content

def _is_torch_sched(d: Any, progress: float) -> bool:
    """A torch LRScheduler state at the progress inspect read (``last_epoch``); torchtitan's
    container saves ``{"last_epoch": N}`` alone."""
    le = d.get("last_epoch") if isinstance(d, dict) else None
    return isinstance(le, (int, float)) and not isinstance(le, bool) and le == progress


def _flat_groups(d: Any) -> bool:
    """torchtitan's flattened param groups: ``param_groups`` -> {param fqn: {"lr": ...}}
    (nested further by the dots of the fqn)."""
    return isinstance(d, dict) and bool(d) and all(isinstance(v, dict) for v in d.values())


def _lr_leaves(node: Any, key: Key) -> Iterator[tuple[Key, dict]]:
    if isinstance(node, dict):
        if isinstance(node.get("lr"), (int, float)) and not isinstance(node.get("lr"), bool):
            yield key, node
            return
        for k, v in node.items():
            yield from _lr_leaves(v, key + (k,))


def _plan_objects(objs: list[tuple[str, Any]], target: Target,
                  named: tuple[str, Key] | None = None,
                  named_lrs: list[tuple[str, Key]] | None = None,
                  ) -> tuple[list[Change], list[str]]:
    """The edits: the scheduler state the reader named (``named``), else every one found by
    shape at the progress inspect read; the optimizers whose LRs the reader named
    (``named_lrs``, the ``lr`` fields), else every one found by shape."""
    from lrdoctor.read.scan.shapes import is_megatron_scheduler
    from lrdoctor.repair.torchstate import (
        group_lrs,
        is_optimizer,
        optimizer_changes,
        scheduler_changes,
        scheduler_edits,
    )
    from lrdoctor.schedules import group_lr

    changes: list[Change] = []
    opts: list[tuple[str, Key]] = []
    flat: list[tuple[str, Key, dict]] = []
    scheds: list[tuple[str, Key, str]] = []
    for rel, obj in objs:
        for k, v in walk(obj, depth=16):
            if is_optimizer(v):
                opts.append((rel, k))
            elif k and k[-1] == "param_groups" and _flat_groups(v):
                flat += [(rel, k + sub, leaf) for sub, leaf in _lr_leaves(v, ())]
            if is_megatron_scheduler(v):
                scheds.append((rel, k, "megatron"))
            elif _is_torch_sched(v, target.progress_before) and not (
                    k and k[-1] == "_schedulers"):
                scheds.append((rel, k, "torch"))
    notes: list[str] = []
    if named is not None and any((rel, k) == named for rel, k, _ in scheds):
        scheds = [t for t in scheds if (t[0], t[1]) == named]  # exactly the field read
    elif len(scheds) > 1:
        notes.append(f"the reader named no scheduler field: all {len(scheds)} scheduler "
                     f"states at progress {target.progress_before:g} are edited (found by shape)")
    mine = [(rel, k) for rel, k in opts if any(
        r == rel and tuple(nk[:len(k) + 1]) == tuple(k) + ("param_groups",)
        for r, nk in named_lrs or [])]
    if mine:
        opts = mine  # the optimizers whose LRs the reader read, not every one by shape
    lrs = None
    first = next(((rel, k) for rel, k in opts), None)
    if first is not None:
        lrs = group_lrs(get_at(dict(objs)[first[0]], first[1]), target)
    elif flat:
        one = [group_lr(target.schedule, target.progress, flat[0][2])]
        lrs = None if one[0] is None else [float(one[0])]
    objd = dict(objs)
    for rel, k, kind in scheds:
        sd = get_at(objd[rel], k)
        if kind == "megatron":
            changes += scheduler_edits(rel, k, sd, target)
            continue
        changes += scheduler_changes(rel, objd[rel], k, target,
                                     lrs if lrs is not None and isinstance(
                                         sd.get("_last_lr"), list)
                                     and len(sd["_last_lr"]) == len(lrs) else None)
        changes += _sequential_children(rel, k, sd, target)
    for rel, k in opts:
        changes += optimizer_changes(rel, objd[rel], k, group_lrs(get_at(objd[rel], k), target))
    for rel, k, leaf in flat:
        lr = group_lr(target.schedule, target.progress, leaf)
        if lr is not None and float(leaf["lr"]) != float(lr):
            changes.append(Change(rel, k + ("lr",), leaf["lr"], float(lr),
                                  why="schedule's LR at the new progress"))
    return changes, notes


def _sequential_children(rel: str, key: Key, sd: dict, target: Target) -> list[Change]:
    """A SequentialLR's children count locally: torch's ``step()`` steps only the active
    child, restarting it with ``step(0)`` at its milestone, so child ``i`` stops at
    ``milestone[i] - 1 - milestone[i-1]`` and the ones not reached stay at 0. Their
    ``last_epoch`` are moved to what that gives at the new progress."""
    from bisect import bisect_right

    kids, ms = sd.get("_schedulers"), sd.get("_milestones")
    if not isinstance(kids, list) or not isinstance(ms, list) or not kids:
        return []
    new = int(round(target.progress))
    old = int(round(target.progress_before))

    def local(p: int) -> list[int]:
        idx = bisect_right(ms, p)
        out = []
        for i in range(len(kids)):
            start = 0 if i == 0 else ms[i - 1]
            if i < idx:
                out.append(ms[i] - 1 - start)
            elif i == idx:
                out.append(p - start)
            else:
                out.append(0)
        return out

    before, after = local(old), local(new)
    out = []
    for i, child in enumerate(kids):
        if not isinstance(child, dict) or not isinstance(child.get("last_epoch"), int):
            continue
        if child["last_epoch"] != before[i]:
            raise Refusal(f"SequentialLR child {i} has last_epoch {child['last_epoch']}, "
                          f"not the {before[i]} its milestones give: cannot move it safely", rel)
        if after[i] != before[i]:
            out.append(Change(rel, key + ("_schedulers", i, "last_epoch"), before[i], after[i],
                              why="SequentialLR child, local to its milestone"))
    return out


# ---------------------------------------------------------------- write

class _Builder:
    """Writes one DCP folder's ``.metadata`` and :data:`NEW_FILE` into the output."""

    def __init__(self, meta_rel: str):
        self.meta_rel = meta_rel

    def __call__(self, src_root: Path, dst_root: Path, changes: list[Change]) -> list[str]:
        src_dir = (src_root / self.meta_rel).parent
        dst_dir = (dst_root / self.meta_rel).parent
        return write_folder(src_dir, dst_dir, changes,
                            str(Path(self.meta_rel).parent / NEW_FILE)
                            if Path(self.meta_rel).parent != Path(".") else NEW_FILE)


def _torch() -> Any:
    from lrdoctor.extras import need

    return need("torch", TORCH_EXTRA)


def write_folder(src: Path, dst: Path, changes: list[Change], new_rel: str) -> list[str]:
    """Rewrite the changed bytes items of ``src`` into ``dst/NEW_FILE`` and write
    ``dst/.metadata`` pointing at them. Returns the output files written (relative to the
    output root, as ``new_rel`` and its ``.metadata`` sibling)."""
    _torch()
    from lrdoctor.read.bytes import dcp as reader

    reader.read_metadata(src)  # the safe reader's checks first: nothing runs
    md = _load_metadata(src / METADATA)
    by_fqn: dict[str, list[Change]] = {}
    for c in changes:
        by_fqn.setdefault(str(c.key[0]), []).append(c)
    infos = {k.fqn: (k, v) for k, v in md.storage_data.items()}
    blobs: dict[str, bytes] = {}
    for fqn, cs in by_fqn.items():
        if fqn not in infos:
            raise UnusableInput(f"no storage entry for item {fqn!r}", str(src / METADATA))
        meta = md.state_dict_metadata.get(fqn)
        if type(meta).__name__ != "BytesStorageMetadata":
            raise Refusal(f"item {fqn!r} is a tensor: fix rewrites only non-tensor items",
                          str(src / METADATA))
        _, info = infos[fqn]
        if getattr(info, "transform_descriptors", None):
            raise Refusal(f"item {fqn!r} is stored through transforms lrdoctor cannot write",
                          str(src / METADATA))
        with open(reader._inside(src, info.relative_path), "rb") as f:
            f.seek(info.offset)
            data = f.read(info.length)
        blobs[fqn] = _rewrite_item(data, [Change(c.file, tuple(c.key[1:]), c.before, c.after,
                                                 why=c.why) for c in cs], f"{src}[{fqn}]")
    from torch.distributed.checkpoint.filesystem import _StorageInfo

    dst.mkdir(parents=True, exist_ok=True)
    name = Path(new_rel).name
    offset = 0
    with open(dst / name, "wb") as out:
        for fqn, blob in blobs.items():
            key, _ = infos[fqn]
            md.storage_data[key] = _StorageInfo(relative_path=name, offset=offset,
                                                length=len(blob))
            out.write(blob)
            offset += len(blob)
        out.flush()
        os.fsync(out.fileno())
    tmp = dst / (METADATA + ".tmp")
    with open(tmp, "wb") as f:
        pickle.dump(md, f)  # as FileSystemWriter.finish writes it
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, dst / METADATA)
    meta_rel = str(Path(new_rel).parent / METADATA) if Path(new_rel).parent != Path(".") \
        else METADATA
    return [meta_rel, new_rel]


def _rewrite_item(data: bytes, changes: list[Change], label: str) -> bytes:
    """A bytes item with ``changes`` applied: a torch.save zip through torchzip (globals
    kept by name), a bare value (empty key) saved again with torch.save."""
    root = [c for c in changes if not c.key]
    if root:
        torch = _torch()
        from lrdoctor.read.bytes import safeload

        current = safeload.load_bytes(data, label)
        if current != root[0].before:
            raise UnusableInput(f"item is {current!r}, expected {root[0].before!r}", label)
        buf = io.BytesIO()
        torch.save(root[0].after, buf)
        return buf.getvalue()
    if data[:2] != b"PK":
        raise Refusal("the item is not a torch.save zip: lrdoctor cannot rewrite it", label)
    from lrdoctor.repair import torchzip

    with tempfile.TemporaryDirectory(prefix="lrdoctor-dcp-") as tmp:
        a, b = Path(tmp) / "in.pt", Path(tmp) / "out.pt"
        a.write_bytes(data)
        torchzip.rewrite(a, b, changes)
        return b.read_bytes()


# The classes a DCP ``.metadata`` pickle holds: torch's own, so pickle.dump writes them as
# FileSystemWriter does. Anything else is refused (the safe reader checked it first too).
_MODULES = ("torch.distributed.checkpoint.metadata", "torch.distributed.checkpoint.filesystem",
            "torch.distributed.checkpoint.planner", "torch.distributed.checkpoint._extension")


class _MetadataUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        torch = _torch()
        if module in _MODULES:
            import importlib

            obj = getattr(importlib.import_module(module), name, None)
            if isinstance(obj, type) and obj.__module__ == module:
                return obj
        elif module == "torch":
            obj = getattr(torch, name, None)
            if obj is torch.Size or isinstance(obj, (torch.dtype, torch.layout,
                                                     torch.memory_format)):
                return obj
        elif (module, name) == ("torch.serialization", "_get_layout"):
            return torch.serialization._get_layout  # torch.strided's reduce: a name lookup
        elif module == "collections" and name == "OrderedDict":
            import collections

            return collections.OrderedDict
        elif (module, name) in (("builtins", "set"), ("builtins", "frozenset"),
                                ("builtins", "slice"), ("builtins", "complex")):
            import builtins

            return getattr(builtins, name)
        elif module == "pathlib" and name in ("PosixPath", "PurePosixPath", "WindowsPath",
                                              "PureWindowsPath", "Path"):
            import pathlib

            return getattr(pathlib, name)
        raise UnusableInput(f"DCP metadata asks for {module}.{name}, which lrdoctor does not "
                            "write back")


def _load_metadata(path: Path) -> Any:
    with open(path, "rb") as f:
        md = _MetadataUnpickler(f).load()
    if type(md).__name__ != "Metadata" or not isinstance(md.storage_data, dict):
        raise UnusableInput("not a DCP Metadata record", str(path))
    return md
