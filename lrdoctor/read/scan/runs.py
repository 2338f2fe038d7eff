"""Every checkpoint under a folder, at any depth, and the folder each one belongs to.

Users point ``inspect`` at the folder they have (``outputs/``, ``runs/``, an experiment
root), and frameworks nest their checkpoints deep (AReaL:
``checkpoints/<user>/<exp>/<trial>/default/recover_checkpoint``). :func:`checkpoint_units`
finds each checkpoint by names and first bytes only (no pickle is read), once, in one
bounded walk:

- a **step folder** (``checkpoint-N``, ``iter_N``, ``global_step_N``; the one definition is
  :data:`lrdoctor.read.scan.grouping.STEP_DIR`) holding state files is one checkpoint, and
  the *outermost* one counts: ROLL's ``checkpoint-100/iter_0000001`` is part of
  ``checkpoint-100``, never a second checkpoint of its own;
- outside any step folder, a folder holding state files directly (a DCP folder with its
  ``.metadata``, a torch loop's ``ckpt_100.pt`` files, Lightning's ``*.ckpt``) is one
  checkpoint unit.

Each unit has a **root**, the folder that holds it as one run: a step folder's parent, else
the unit's own folder. State files in a plain folder below a root of step folders
(torchtune's ``recipe_state/``, an HF output dir's final weights) belong to that root's run,
as :func:`~lrdoctor.read.scan.grouping.run_checkpoints` reads them. Which roots make one run
and where a framework's reader reads it is the layouts' call
(:mod:`lrdoctor.read.layouts._runs`): this module knows no framework.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lrdoctor.read.scan.grouping import STEP_DIR, file_step
from lrdoctor.read.scan.listing import is_pickle, plural

# Bounds of the walk: a folder of runs is wide and a framework's nesting deep, but a
# mistaken `inspect /` must still end fast. AReaL's checkpoint files sit 7 levels below the
# run root (checkpoints/<user>/<exp>/<trial>/default/recover_checkpoint/<file>); a run of
# ROLL under a folder of runs, 6.
RUN_DEPTH = 10          # folder levels below the input
RUN_FOLDERS = 20_000    # folders listed per input
RUN_FILES = 200_000     # file names looked at per input


@dataclass(frozen=True)
class Unit:
    """One checkpoint found by the walk: ``path`` (a step folder, or a folder of state
    files), the folder ``root`` that holds it as a run, and the step its name carries."""

    path: Path
    root: Path
    step: int | None


@dataclass
class Units:
    """What the walk found: the units, breadth-first, and the bound that cut it (if one did)."""

    units: list[Unit] = field(default_factory=list)
    cut: str | None = None

    def roots(self) -> list[Path]:
        """The distinct roots, in the order first found."""
        return list(dict.fromkeys(u.root for u in self.units))


def is_step_dir(d: Path) -> bool:
    return STEP_DIR.match(d.name) is not None


def _step(d: Path) -> int | None:
    m = STEP_DIR.match(d.name)
    return int(m.group(1)) if m else None


def _is_state(f: Path) -> bool:
    """A file that may hold training state: a pickle / torch.save (by name or first bytes)
    or a torch.distributed.checkpoint ``.metadata``."""
    return f.name == ".metadata" or (not f.name.startswith(".") and is_pickle(f))


def checkpoint_units(path: Path, depth: int = RUN_DEPTH, max_folders: int = RUN_FOLDERS,
                     max_files: int = RUN_FILES) -> Units:
    """The checkpoint units under the folder ``path`` (see the module's docstring), in one
    breadth-first walk bounded by ``depth`` levels, ``max_folders`` folders and
    ``max_files`` names; hidden folders and symlinked folders are not walked."""
    found = Units()
    owners: dict[Path, Unit] = {}   # a step folder (or plain folder) -> its unit
    loose: dict[Path, int | None] = {}  # plain folders holding state files -> a step
    # (folder, the outermost step folder it is in, or None)
    level: list[tuple[Path, Path | None]] = [(path, None)]
    folders = files = 0
    for lvl in range(depth + 1):
        nxt: list[tuple[Path, Path | None]] = []
        for d, owner in level:
            folders += 1
            try:
                kids = sorted(d.iterdir())
            except OSError:
                continue
            for k in kids:
                files += 1
                if files > max_files:
                    found.cut = f"stopped after {max_files} names"
                    return _finish(found, owners, loose, path)
                try:
                    if k.is_symlink() and k.is_dir():
                        continue  # a linked folder could loop or leave the tree
                    if k.is_dir():
                        if k.name.startswith("."):
                            continue
                        inner = owner if owner is not None else (k if is_step_dir(k) else None)
                        nxt.append((k, inner))
                        continue
                    if not k.is_file() or not _is_state(k):
                        continue
                except OSError:
                    continue
                if owner is not None:
                    if owner not in owners:
                        owners[owner] = Unit(owner, owner.parent, _step(owner))
                elif d not in loose:
                    loose[d] = file_step(k)
                elif loose[d] != file_step(k):
                    loose[d] = None  # numbered files of several steps: no one step
        if folders + len(nxt) > max_folders:
            found.cut = f"stopped after {max_folders} folders"
            break
        level = nxt
        if not level:
            break
        if lvl == depth:
            found.cut = (f"{plural(len(level), 'folder')} deeper than {depth} levels "
                         "not looked at")
    return _finish(found, owners, loose, path)


def _finish(found: Units, owners: dict[Path, Unit], loose: dict[Path, int | None],
            top: Path) -> Units:
    """The units, a plain folder's state files given to the nearest root of step folders
    above it (torchtune's ``recipe_state/`` describes its run's newest checkpoint)."""
    step_roots = {u.root for u in owners.values()}
    units = list(owners.values())
    for d, step in loose.items():
        root = next((a for a in (d, *d.parents) if a in step_roots), None)
        if root is None or (top != root and top not in root.parents):
            root = d
        units.append(Unit(d, root, step))
    found.units = sorted(units, key=lambda u: (len(u.path.parts), str(u.path)))
    return found


def under(p: Path, folder: Path) -> bool:
    """Whether ``p`` is ``folder`` or inside it (by parts: no listing, no resolving)."""
    parts, top = p.parts, folder.parts
    return len(parts) >= len(top) and parts[:len(top)] == top
