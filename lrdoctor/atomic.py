"""Atomic file writes: a temporary sibling, fsync, the mode a plain ``open()`` would
give, then ``os.replace`` over the target.

Every file lrdoctor writes goes through here, so a reader never sees half a file
(a crash or a full disk leaves the old file, or none, and no temp behind) and an
output is as readable as any file the user makes (``mkstemp`` alone gives 0600).
A directory written as a whole (``fix``'s output) is the repair writer's own
affair; its single files come here too. Every writer refuses to write into a
checkpoint folder through the one guard here (:func:`refuse_checkpoint`).
"""

from __future__ import annotations

import itertools
import os
import re
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def plain_mode(path: str | os.PathLike) -> None:
    """Give ``path`` the mode ``open()`` would: 0666 less the process umask."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


#: How many folders above a written file are checked for being a checkpoint
#: (``X/checkpoint-20/index.html``, ``iter_0000400/mp_rank_00/x.png``, ``ckpt/sub/new/x``).
GUARD_LEVELS = 3
_GUARD_MAX_ENTRIES = 4096  # a folder with more direct entries is no single checkpoint
# Sub-folders a framework puts inside one step folder: Megatron's and DeepSpeed's rank
# folders (mp_rank_00, mp_rank_00_001), DeepSpeed's global_stepN inside an HF checkpoint-N.
_RANK_DIR = re.compile(r"^(?:mp_rank_\d+(?:_\d+)*|rank[_-]?\d+|global_step\d+)$", re.IGNORECASE)


@dataclass(frozen=True)
class Holding:
    """A checkpoint folder an output would land in, and what in it makes it one (the
    names the refusal gives, so the reason can be checked by listing the folder)."""

    folder: Path
    because: tuple[str, ...]


def checkpoint_holding(path: str | os.PathLike) -> Path | None:
    """The checkpoint folder ``path`` (a file or folder about to be written) would land in,
    or None (:func:`checkpoint_reason` says why)."""
    held = checkpoint_reason(path)
    return held.folder if held is not None else None


def checkpoint_reason(path: str | os.PathLike) -> Holding | None:
    """The checkpoint folder ``path`` would land in, with the entries that make it one.

    Only the output's own ancestors are looked at (:data:`GUARD_LEVELS` of them), each by
    one listing of its own entries and the first bytes of the files that may be state;
    nothing below an ancestor is listed, so the cost is the depth, never the size of the
    trees around the output (a guard that ran discovery under each ancestor took minutes
    below a busy temporary folder). What the entries hold decides, as in discovery:

    - a step-named folder (``checkpoint-N``, ``iter_N``, ``global_stepN``) holding state
      files, sidecars, or a rank / step sub-folder (Megatron's ``iter_N/mp_rank_00``);
    - a DCP folder (its ``.metadata``);
    - any other folder holding two or more state files (torch zip or pickle by their
      first bytes: ``model.pt`` + ``optimizer.pt``, a rank set) and no sub-folder but rank
      folders and the one the output goes through, unless the files are numbered
      checkpoints of their own (``ckpt_100.pt``, ``ckpt_200.pt``). A folder with other
      sub-folders is a run folder or a workspace (``/tmp`` holding someone's pickles);
      a file ``fix`` wrote (its ``NAME.lrdoctor-fix.json`` beside it) is a checkpoint of
      its own, not a part.

    A text file named ``x.pt`` or an empty one is no state file (discovery calls it "not
    a checkpoint" too)."""
    from lrdoctor.read.scan import grouping

    # abspath, not Path.absolute(): '..' must be resolved before walking up, or the walk
    # from 'ckpt/../out/x.pt' would climb back into 'ckpt' (a path's textual parent).
    via = Path(os.path.abspath(path))
    d = via.parent
    for _ in range(GUARD_LEVELS):
        held = _holding(d, via.name, grouping)
        if held is not None:
            return held
        if d.parent == d:
            break
        d, via = d.parent, d
    return None


def _holding(d: Path, via: str, grouping) -> Holding | None:
    """Whether the folder ``d`` is itself one checkpoint, judged by its own entries only
    (``via``: the entry the output goes through, which the output's own making may add)."""
    from lrdoctor.read.scan import listing

    try:
        with os.scandir(d) as it:
            entries = list(itertools.islice(it, _GUARD_MAX_ENTRIES + 1))
    except OSError:  # missing, not a folder, unreadable: nothing is there to protect
        return None
    if len(entries) > _GUARD_MAX_ENTRIES:
        return None
    dirs, files = [], []
    for e in entries:
        try:
            if e.is_dir(follow_symlinks=False):
                dirs.append(e.name)
            elif e.is_file(follow_symlinks=False):
                files.append(e.name)
        except OSError:
            continue
    if ".metadata" in files:
        return Holding(d, (".metadata",))
    step_named = grouping._dir_step(d) is not None
    if step_named:
        subs = sorted(n for n in dirs if _RANK_DIR.match(n) or grouping.STEP_DIR.match(n))
        if subs:
            return Holding(d, tuple(subs[:3]))
        side = sorted(n for n in files if not n.startswith(".")
                      and n.lower().endswith(listing.SIDECAR_SUFFIXES)
                      and n not in listing.SKIP_NAMES)
    elif any(n != via and not _RANK_DIR.match(n) for n in dirs):
        return None  # a run folder (its step folders below) or a workspace, not one checkpoint
    from lrdoctor.read.layouts._fixmanifest import MANIFEST

    # A file with its own fix record beside it is a whole checkpoint `fix` wrote, not a part
    # of the folder's (two earlier outputs in a scratch folder make no checkpoint of it).
    names = set(files)
    state = sorted(n for n in files if f"{n}.{MANIFEST}" not in names
                   and _is_state(d / n, listing))
    if step_named:
        found = state or side
        return Holding(d, tuple(found[:3])) if found else None
    if len(state) < 2:
        return None  # one checkpoint file in a folder: the file is the checkpoint
    steps = {grouping.file_step(Path(n)) for n in state}
    if len(steps) > 1 and None not in steps:
        return None  # numbered checkpoints, each a file of its own (ckpt_100.pt, ckpt_200.pt)
    return Holding(d, tuple(state[:3]))


def _is_state(p: Path, listing) -> bool:
    """A file that may hold training state, by its first bytes whatever its name says: a
    torch zip or a pickle (:func:`lrdoctor.read.scan.listing.is_pickle` trusts a ``.pt``
    name; a guard that refuses must not). Weights, logs and sidecars are not opened."""
    suffix = p.suffix.lower()
    if p.name.startswith(".") or p.name in listing.SKIP_NAMES \
            or suffix in listing.SKIP_SUFFIXES or suffix in listing.SIDECAR_SUFFIXES:
        return False
    try:
        with p.open("rb") as fh:
            return listing.state_head(fh.read(4))
    except (OSError, ValueError):
        return False


def refuse_checkpoint(path: str | os.PathLike) -> None:
    """The one guard of every writer (:func:`replacing`, ``fix``'s output, the report
    folder): lrdoctor reads checkpoints and never writes into one. One line, exit 2.
    Commands call it before their work too, so a refusal never comes after minutes."""
    from lrdoctor.core.errors import UnusableInput

    held = checkpoint_reason(path)
    if held is not None:
        raise UnusableInput(f"refused to write here: it lies in the checkpoint folder "
                            f"{held.folder} (it holds {', '.join(held.because)}), and lrdoctor "
                            "never writes into a checkpoint (choose a folder of its own)",
                            str(path))


def refuse_inside_inputs(out: str | os.PathLike, inputs: Iterable[str | os.PathLike]) -> None:
    """A page or folder of outputs about some inputs never goes inside one of them (an
    input folder is read, never added to): ``report --out`` and ``check --report`` both
    call this through the writer (:func:`lrdoctor.render.html.write_report_files`).
    URLs and inputs that are not local folders are skipped. One line, exit 2."""
    from lrdoctor.core.errors import UnusableInput

    out_r = Path(out).resolve()
    for given in inputs:
        if "://" in str(given) or any(c in str(given) for c in "*?["):
            continue
        p = Path(given).resolve()
        if p.is_dir() and (out_r == p or out_r.is_relative_to(p)):
            raise UnusableInput(f"refused to write here: it lies inside the input {given}, "
                                "and lrdoctor never writes into its input (choose a folder "
                                "of its own)", str(out))


@contextmanager
def replacing(path: str | os.PathLike, *, suffix: str | None = None,
              parents: bool = False) -> Iterator[Path]:
    """Yield a temporary sibling of ``path`` to write (by name, for libraries that take
    one: ``savefig``, ``to_parquet``); on a clean exit it is synced, given the plain
    mode and renamed over ``path``; on any error it is removed and the error raised.

    ``suffix`` defaults to ``path``'s own, so writers that go by the name's ending
    write the right format. ``parents`` creates missing parent directories first.
    OSError is left to the caller, which knows which option named the file.
    """
    path = Path(path)
    refuse_checkpoint(path)
    parent = path.parent if str(path.parent) else Path(".")
    if parents:
        parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.",
                                suffix=path.suffix if suffix is None else suffix, dir=parent)
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        plain_mode(tmp)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_bytes(path: str | os.PathLike, data: bytes, *, parents: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically; returns ``path``."""
    with replacing(path, parents=parents) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | os.PathLike, text: str, *, parents: bool = False,
               encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` atomically; returns ``path``."""
    return write_bytes(path, text.encode(encoding), parents=parents)
