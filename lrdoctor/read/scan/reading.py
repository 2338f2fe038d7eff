"""Reading one checkpoint's files metadata-only and classifying them: :func:`scan`.

Pickles go through :mod:`lrdoctor.read.bytes.safeload` (an allow-list unpickler that runs
no code), DCP folders through :mod:`lrdoctor.read.bytes.dcp`, sidecars through
:mod:`lrdoctor.read.bytes.safetext`; what each holds is classified by
:mod:`lrdoctor.read.scan.shapes`. An unreadable file is a note, not a failure.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from lrdoctor.core.errors import UnsafePickle, UnusableInput
from lrdoctor.read.bytes import seen
from lrdoctor.read.scan.grouping import Checkpoint, run_checkpoints
from lrdoctor.read.scan.listing import MAX_READ, MAX_SIDECAR_BYTES, SIDECAR_SUFFIXES, plural
from lrdoctor.read.scan.shapes import DIST_OPT_GROUPS, SCHEDULER_KINDS, Found, Scan, classify

if TYPE_CHECKING:
    from lrdoctor.read.bytes.dcp import DcpState

# ---------------------------------------------------------------- reading

def _read_sidecar(f: Path) -> Any:
    return sidecar(f)[0]


def sidecar(f: Path) -> tuple[Any, str | None]:
    """A JSON/YAML sidecar's content, or (None, why it was not read)."""
    try:
        if f.stat().st_size > MAX_SIDECAR_BYTES:
            return None, f"larger than the {MAX_SIDECAR_BYTES >> 20} MiB read for a sidecar"
        text = f.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        return None, "not UTF-8 text"
    except OSError as exc:
        return None, exc.strerror or type(exc).__name__
    from lrdoctor.read.bytes import safetext

    try:  # nesting, container and alias limits (lrdoctor.read.bytes.limits): a hostile sidecar is skipped
        if f.suffix.lower() == ".json":
            return safetext.json_loads(text, str(f)), None
        return safetext.yaml_loads(text, str(f)), None
    except UnusableInput as exc:
        return None, exc.message


class Loaded(NamedTuple):
    """One file as :func:`load_file` read it."""

    obj: Any               # the object (None: not read; ``notes`` says why)
    notes: list[str]
    skipped: dict[str, str]  # "file:key" -> why a part of it was left unread (DCP items)
    why: str = ""  # why the file was not read at all (``obj`` None)
    # A DCP folder's items as read (``obj`` is their tree): traces a field back to its item.
    dcp: DcpState | None = None


def load_file(f: Path) -> Loaded:
    """One file metadata-only, unknown inert classes kept opaque; (object, notes, skipped).

    A code-execution primitive anywhere refuses the whole input (UnsafePickle);
    an unreadable file is a note, not a failure: discovery reads what it can.
    """
    from lrdoctor.read.bytes import safeload

    if f.suffix.lower() in SIDECAR_SUFFIXES:
        return Loaded(_read_sidecar(f), [], {})
    if f.name == ".metadata":
        return _load_dcp(f)
    try:
        obj = safeload.load(f, unknown_as_opaque=True)
    except UnsafePickle:
        raise
    except UnusableInput as exc:
        return Loaded(None, [f"{f}: not read ({exc.message})"], {}, exc.message)
    return Loaded(obj, safeload.opaque_notes(obj, str(f)), {})


# Which DCP bytes items discovery reads. Every one up to DCP_SMALL_ITEM bytes as stored
# (a scheduler, param-group, counter or args item is a leaf of a few KiB), and a larger
# one only when its key names state lrdoctor judges: megatron-core's distributed
# optimizer ``param_state`` or a dataloader's state can be tens of MiB per item and
# holds nothing a schedule check uses. Decided from ``.metadata`` (key and length), so a
# skipped item's bytes are never touched; every one skipped is named (``Scan.skipped``).
DCP_SMALL_ITEM = 1 << 20
_DCP_STATE_PARTS = re.compile(
    r"sched|^param_groups$|^common|^(train|trainer|training|loop|recipe)_?state$|^args$|"
    r"^(config|cfg|hparams|hyper_parameters|training_args|job_config|trainer_config)$",
    re.IGNORECASE)


def dcp_item_matters(fqn: str) -> bool:
    """Whether a DCP item's key marks it as scheduler, optimizer param-group, trainer,
    config or common state (whatever its size)."""
    if DIST_OPT_GROUPS.match(fqn):  # the distributed optimizer's param-group object
        return True
    return any(_DCP_STATE_PARTS.search(part) for part in re.split(r"[./]", fqn))


def _dcp_leave(fqn: str, length: int) -> str | None:
    if length <= DCP_SMALL_ITEM or dcp_item_matters(fqn):
        return None
    return (f"{length:,} bytes, over the {DCP_SMALL_ITEM >> 10} KiB read for an item whose "
            "key names no scheduler, param-group, trainer, config or common state")


def _load_dcp(f: Path) -> Loaded:
    """A torch.distributed.checkpoint folder's items, re-nested (``formats.dcp``), so that
    its scheduler, optimizer and counters are classified like a torch.save dict's.

    Large items whose key says they cannot matter are left unread (:func:`_dcp_leave`).
    If the items read hold no scheduler state, the large ones are read after all: the
    verdict (or the "no scheduler" finding) is then the one a full read gives."""
    from lrdoctor.read.bytes import dcp

    if not dcp.is_dcp(f.parent):
        return Loaded(None, [f"{f}: not read (a .metadata without *.distcp beside it)"], {},
                      "a .metadata without *.distcp beside it")
    try:
        ds = dcp.load(f.parent, leave=_dcp_leave, unknown_as_opaque=True)
        if ds.left and not any(h.kind in SCHEDULER_KINDS for h in classify(ds.tree, str(f))):
            ds = dcp.load(f.parent, unknown_as_opaque=True)
    except UnsafePickle:
        raise
    except UnusableInput as exc:
        return Loaded(None, [f"{f}: not read ({exc.message})"], {}, exc.message)
    notes = list(ds.notes)
    if ds.left:
        names = [f"{k} ({n:,} bytes)" for k, n in list(ds.left.items())[:4]]
        more = len(ds.left) - len(names)
        notes.append(f"{f.parent}: {plural(len(ds.left), 'large DCP item')} not read "
                     f"({sum(ds.left.values()):,} bytes; over {DCP_SMALL_ITEM >> 10} KiB, "
                     "keys naming no scheduler, param-group, trainer, config or common "
                     "state): " + ", ".join(names) + (f", +{more} more" if more else ""))
    notes += [f"{f.parent}: DCP item {k} not read ({why})" for k, why in
              list(ds.skipped.items()) if k not in ds.left][:6]
    return Loaded(ds.tree, notes, {f"{f}:{k}": why for k, why in ds.skipped.items()}, dcp=ds)


def scan(ckpt: Checkpoint) -> Scan:
    """Read every file of ``ckpt`` (and the run's sidecars) and classify what it holds."""
    sc = Scan(checkpoint=ckpt)
    files = list(ckpt.files) + [f for f in ckpt.run_files if f.suffix.lower() in SIDECAR_SUFFIXES]
    if len(files) > MAX_READ:
        sc.notes.append(f"{len(files)} files: only the first {MAX_READ} read")
        files = files[:MAX_READ]
    from lrdoctor.parallel import threads

    # Rank files are independent reads (remote ones wait on the network): read side by
    # side on a bounded thread pool, classified in file order.
    loaded = threads(load_file, files)
    for f, (obj, notes, skipped, why, ds) in zip(files, loaded, strict=True):
        sc.notes.extend(notes)
        if ds is not None:
            sc.dcp[str(f)] = ds
        sc.skipped.update(skipped)
        if obj is None:
            sc.unread[str(f)] = why or "not read"
            continue
        sc.files_read.append(str(f))
        sc.objects[str(f)] = obj
        seen.note(f, obj)  # the evidence collector walks what was loaded (lrdoctor.read.evidence)
        # A YAML sidecar is configuration; JSON sidecars hold state (trainer_state.json).
        sc.found.extend(classify(obj, str(f), config=f.suffix.lower() in (".yaml", ".yml")))
    return sc



def iter_scans(path: str | Path) -> Iterator[Scan]:
    """:func:`scan` of each checkpoint of :func:`run_checkpoints`, oldest first."""
    for c in run_checkpoints(path):
        yield scan(c)


def files_used(found: list[Found]) -> list[str]:
    seen: list[str] = []
    for f in found:
        if f.file not in seen:
            seen.append(f.file)
    return seen


def relpath(p: str, root: Path) -> str:
    if not isinstance(root, Path):  # a URL (lrdoctor.read.bytes.storage.RemotePath)
        base = str(root).rstrip("/") + "/"
        return p[len(base):] if p.startswith(base) else p
    try:
        return os.path.relpath(p, root)
    except ValueError:
        return p

