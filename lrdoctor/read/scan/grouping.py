"""Grouping listed files into checkpoints: a step folder, a numbered file, a rank set.

:func:`run_checkpoints` yields the checkpoints under a path, oldest first; each
:class:`Checkpoint` knows its step, its files and the run's sidecars.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from lrdoctor.read.bytes.storage import reader_path
from lrdoctor.read.scan.listing import candidate_files, is_pickle

# A folder whose name carries the step: checkpoint-400, global_step_40, step-100, iter_0001200,
# step_5, epoch=3-step=300 (Lightning names files that way; folders rarely), ep1-ba200.
STEP_DIR = re.compile(
    r"^(?:checkpoint|global_step|globalstep|step|steps|iter|iteration|ckpt|epoch)[-_=]?(\d+)$",
    re.IGNORECASE)
COMPOSER_NAME = re.compile(r"ep(\d+)-ba(\d+)")
# Parts of a file name that name a rank, not a step (removed before reading a step number).
RANK_PART = re.compile(
    r"(?:world_size_\d+_)?rank[_-]?\d+|mp_rank_\d+(?:_\d+)*|_\d+_\d+\.distcp$|"
    r"(?:random_states|rng_state)_\d+", re.IGNORECASE)



# ---------------------------------------------------------------- grouping

@dataclass
class Checkpoint:
    """One checkpoint: the folder or file that is it, its step, and its files."""

    path: Path
    step: int | None
    files: list[Path] = field(default_factory=list)
    # Sidecars outside the checkpoint that describe the whole run (trackers, configs).
    run_files: list[Path] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name

    # A checkpoint stands where a path is expected (reports name it by its path).
    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)


def _dir_step(d: Path) -> int | None:
    m = STEP_DIR.match(d.name)
    if m:
        return int(m.group(1))
    m = COMPOSER_NAME.search(d.name)
    return int(m.group(2)) if m else None


def file_step(p: Path) -> int | None:
    """The step a file's name carries, ranks removed (``ckpt_400.pt``, ``ep1-ba200-rank0.pt``)."""
    m = COMPOSER_NAME.search(p.name)
    if m:
        return int(m.group(2))
    stem = RANK_PART.sub("", p.name)
    stem = re.sub(r"\.[A-Za-z]+$", "", stem)
    nums = re.findall(r"\d+", stem)
    return int(nums[-1]) if nums else None


def _step_dir_of(f: Path, root: Path) -> Path | None:
    """The innermost step-named folder between ``root`` (inclusive) and ``f``."""
    d = f.parent
    while True:
        if _dir_step(d) is not None:
            return d
        if d == root or root not in d.parents:
            return None
        d = d.parent


def run_checkpoints(path: str | Path) -> list[Checkpoint]:
    """The checkpoints under ``path``, oldest first (by step, then name).

    A file is one checkpoint. A folder: its step-named sub-folders (``checkpoint-N``,
    ``global_step_N``, ``step-N``, ``iter_N``...) each make one checkpoint with every
    file below them; failing those, numbered files (``ckpt_100.pt``; rank numbers
    ignored) each make one; failing those, the folder is one checkpoint (``model.pt`` +
    ``optimizer.pt`` + ``scheduler.pt``). Files outside any step folder are run-level
    sidecars, shared by every checkpoint (``run_files``).
    """
    path = reader_path(path)
    if path.is_file():
        return [Checkpoint(path=path, step=file_step(path), files=[path])]
    files = candidate_files(path)
    if _dir_step(path) is not None:
        return [Checkpoint(path=path, step=_dir_step(path), files=files)]
    by_dir: dict[Path, list[Path]] = {}
    loose: list[Path] = []
    for f in files:
        d = _step_dir_of(f, path)
        if d is None:
            loose.append(f)
        else:
            by_dir.setdefault(d, []).append(f)
    if by_dir:
        ckpts = [Checkpoint(path=d, step=_dir_step(d), files=fs, run_files=list(loose))
                 for d, fs in by_dir.items()]
        ckpts.sort(key=lambda c: (c.step if c.step is not None else -1, str(c.path)))
        # State saved once per run beside the step folders (torchtune's recipe_state/,
        # overwritten at every save) describes the newest checkpoint.
        ckpts[-1].files += [f for f in loose if is_pickle(f)]
        return ckpts
    pickles = [f for f in loose if is_pickle(f)]
    numbered: dict[int, list[Path]] = {}
    for f in pickles:
        n = file_step(f)
        if n is not None and f.parent == path:
            numbered.setdefault(n, []).append(f)
    if len(numbered) > 1:
        rest = [f for f in loose if f.parent != path or file_step(f) is None]
        return [Checkpoint(path=fs[0] if len(fs) == 1 else path, step=n, files=fs,
                           run_files=rest) for n, fs in sorted(numbered.items())]
    if not loose:
        return []
    if len(pickles) == 1 and pickles[0].parent == path:  # one file: it is the checkpoint
        return [Checkpoint(path=pickles[0], step=file_step(pickles[0]), files=loose)]
    # One step for every file (a rank set: ep0-ba200-rank0..3.pt): that is its step.
    step = next(iter(numbered)) if len(numbered) == 1 and sum(map(len, numbered.values())) \
        == len(pickles) else None
    return [Checkpoint(path=path, step=step, files=loose)]


