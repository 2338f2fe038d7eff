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

import os
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
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


def checkpoint_holding(path: str | os.PathLike) -> Path | None:
    """The checkpoint folder ``path`` (a file or folder about to be written) would land in,
    or None. A folder is a checkpoint when discovery, reading by content, takes the
    folder itself as one checkpoint (:func:`lrdoctor.read.scan.grouping.run_checkpoints`): an HF
    ``checkpoint-N``, a Megatron ``iter_N``, a DCP folder, ``model.pt`` + ``optimizer.pt``.
    A run folder (its checkpoints below it) or a folder holding one checkpoint file is not.
    Only existing folders, :data:`GUARD_LEVELS` up, are looked at."""
    from lrdoctor.core.errors import UnusableInput
    from lrdoctor.read.scan import grouping

    # abspath, not Path.absolute(): '..' must be resolved before walking up, or the walk
    # from 'ckpt/../out/x.pt' would climb back into 'ckpt' (a path's textual parent).
    d = Path(os.path.abspath(path)).parent
    for _ in range(GUARD_LEVELS):
        if d.is_dir():
            try:
                small = sum(1 for _ in zip(range(_GUARD_MAX_ENTRIES + 1), d.iterdir(),
                                           strict=False)) <= _GUARD_MAX_ENTRIES
                if small and any(c.path == d and _holds_state(c, d)
                                 for c in grouping.run_checkpoints(d)):
                    return d
            except (OSError, UnusableInput):
                pass
        if d.parent == d:
            break
        d = d.parent
    return None


def _holds_state(ckpt: object, d: Path) -> bool:
    """The folder holds the checkpoint's state files itself (pickles, DCP's .metadata: all of
    them, none in a sub-folder), or it is a step folder with checkpoint files below it
    (Megatron's iter_N/mp_rank_XX/). Not a folder that merely has a checkpoint folder, or a
    stray pickle, inside it."""
    from lrdoctor.read.scan import grouping, listing

    files = getattr(ckpt, "files", [])
    if grouping._dir_step(d) is not None:
        return bool(files)
    state = [f for f in files if f.name == ".metadata" or listing.is_pickle(f)]
    return bool(state) and all(f.parent == d for f in state)


def refuse_checkpoint(path: str | os.PathLike) -> None:
    """The one guard of every writer (:func:`replacing`, ``fix``'s output, the report
    folder): lrdoctor reads checkpoints and never writes into one. One line, exit 2."""
    from lrdoctor.core.errors import UnusableInput

    ckpt = checkpoint_holding(path)
    if ckpt is not None:
        raise UnusableInput(f"refused to write here: it lies in the checkpoint folder {ckpt}, "
                            "and lrdoctor never writes into a checkpoint (choose a folder "
                            "of its own)", str(path))


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
