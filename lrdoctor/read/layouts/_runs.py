"""Which folders under an input are runs, each read by its own layout and judged apart.

:func:`lrdoctor.read.scan.runs.checkpoint_units` found every checkpoint at any depth and
the folder holding each (its root). This module decides, by the checkpoints' own evidence,
which roots make one run and which folder a reader reads for it (:func:`find_runs`):

- **one root** under a folder: that run is read at the folder on the way up from its root
  whose layout claims it best (:func:`~lrdoctor.read.layouts.claim`). A framework's layout
  that claims a folder higher up (ROLL's run root over ``actor_train/``) is its layout root
  and reads it there, provided its checkpoints there are this run's; the framework-blind
  read has no layout root and reads the folder that holds the checkpoints. So one folder
  above a run gives the run's own verdict: ``runs/a/iter_N`` is Megatron's at ``runs/a``,
  not a generic read of ``runs``.
- **several roots** under a folder are one run only when a framework's layout claims that
  folder and lists as its checkpoints every checkpoint found there, none two at the same
  step (counters that continue: a resumed Lightning run's ``version_0``/``version_1``).
  Otherwise each part is planned on its own: a folder of runs is split into its runs.

Where a layout claims a folder that also holds a checkpoint it does not list (another
run's, a plain folder of weights), the folder is still read as its layout's run and the
rest is planned apart, so each checkpoint has one reader.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.read import layouts
from lrdoctor.read.scan.runs import Unit, Units, checkpoint_units, is_step_dir, under
from lrdoctor.read.scan.view import ScanView


@dataclass
class Runs:
    """The folders to read as runs, in the order found, and the walk's bound note."""

    roots: list[Path] = field(default_factory=list)
    cut: str | None = None
    # A folder read as a run that also holds other runs' folders: its own checkpoints, the
    # only ones its reader may take (never a second reader for the other runs' files).
    only: dict[Path, list[Path]] = field(default_factory=dict)
    # Every checkpoint the walk found: a run's reader may list fewer (a copy `fix` left
    # beside the run's checkpoints under a name its layout does not list), and what it
    # does not read is said (:func:`unread`), never dropped in silence.
    units: list[Unit] = field(default_factory=list)


class _Planner:
    def __init__(self, units: Units, forced: str | None) -> None:
        self.units = units.units
        self.forced = forced
        self._claims: dict[Path, tuple[layouts.Entry | None, int]] = {}
        self.only: dict[Path, list[Path]] = {}

    def claim(self, d: Path) -> tuple[layouts.Entry | None, int]:
        if d not in self._claims:
            if self.forced:
                entry = layouts._entry(layouts.ALIASES.get(self.forced, self.forced))
                self._claims[d] = (entry, 1)
            else:
                scan = ScanView(d)
                best = layouts.claim(scan)
                self._claims[d] = (best, best.layout().claims(scan) if best else 0)
        return self._claims[d]

    def listed(self, entry: layouts.Entry, d: Path) -> list[Path]:
        """The paths of the checkpoints ``entry``'s layout lists in ``d`` (none when it
        finds none there)."""
        try:
            found: Any = entry.layout().find_checkpoints(d)
        except UnusableInput:
            return []
        return [ckpt_path(c) for c in found]

    def covers(self, entry: layouts.Entry, d: Path, units: list[Unit]) -> list[Unit]:
        """The units among ``units`` that the layout's checkpoints in ``d`` hold (a unit
        inside a listed checkpoint, or a listed checkpoint, a file, inside a unit)."""
        listed = self.listed(entry, d)
        return [u for u in units if any(holds(c, [u.path]) for c in listed)]

    def plan(self, d: Path, units: list[Unit]) -> list[Path]:
        """The folders to read as runs under ``d``, whose units are ``units``."""
        roots = list(dict.fromkeys(u.root for u in units))
        if not roots:
            return []
        if len(roots) == 1:
            return [self.climb(roots[0], d, units)]
        entry, score = self.claim(d)
        rest: list[Unit] = units
        out: list[Path] = []
        if entry is not None and entry.on_names and (self.forced or score > layouts.GENERIC):
            held = self.covers(entry, d, units)
            whole = {u.root for u in held}
            # A root is never split: every unit of a root in `held` must be held.
            if held and all(u in held for u in units if u.root in whole) and _continues(held):
                out.append(d)
                rest = [u for u in units if u.root not in whole]
        if d in roots and d not in out:
            out.append(d)  # d's own checkpoints, beside other runs' folders below it
            self.only[d] = [u.path for u in units if u.root == d]
            rest = [u for u in rest if u.root != d]
        below: dict[Path, list[Unit]] = {}
        for u in rest:
            below.setdefault(d / u.root.parts[len(d.parts)], []).append(u)
        for child in sorted(below):
            out.extend(self.plan(child, below[child]))
        return out

    def climb(self, root: Path, top: Path, units: list[Unit]) -> Path:
        """The folder from ``root`` up to ``top`` that reads this run: the best claim, a
        named layout's tie going up to its layout root, the generic read's staying down."""
        best, best_score = root, self.claim(root)[1]
        d = root
        while d != top:
            d = d.parent
            entry, score = self.claim(d)
            if entry is None or score < best_score:
                continue
            if score == best_score and score <= layouts.GENERIC and not self.forced:
                continue
            if len(self.covers(entry, d, units)) == len(units):
                best, best_score = d, score
        return best


def ckpt_path(c: Any) -> Path:
    """The path of a checkpoint a layout listed (a Path, a grouping Checkpoint, a view)."""
    return Path(os.fspath(c)) if isinstance(c, (str, os.PathLike)) else Path(str(c))


def holds(c: Any, units: list[Path]) -> bool:
    """Whether the listed checkpoint ``c`` is (inside) one of ``units``, or holds one."""
    p = ckpt_path(c)
    return any(under(p, u) or under(u, p) for u in units)


def _continues(units: list[Unit]) -> bool:
    """No two roots' checkpoints at the same step: one run's counters continue across its
    folders, two runs saved at the same steps are two runs."""
    seen: dict[int, Path] = {}
    for u in units:
        if u.step is None:
            continue
        if seen.setdefault(u.step, u.root) != u.root:
            return False
    return True


def find_runs(path: Path, forced: str | None = None) -> Runs:
    """The folders under ``path`` to read as runs (see the module's docstring); ``[path]``
    itself when it is one file, one checkpoint or one run's own folder."""
    if is_step_dir(path) or (path / ".metadata").is_file():
        return Runs([path])  # one checkpoint
    units = checkpoint_units(path)
    plan = _Planner(units, forced)
    roots = units.roots()
    if not roots or roots == [path]:
        return Runs([path], units.cut, units=units.units)
    return Runs(plan.plan(path, units.units) or [path], units.cut, plan.only, units.units)


def unread(run: Path, runs: list[Path], units: list[Unit], read: list[Any]) -> list[str]:
    """A note for each checkpoint the walk found in ``run`` that its reader did not list
    in ``read`` and no other run in ``runs`` reads: its path and why it was left out (a
    copy ``lrdoctor fix`` wrote, by its record; else a name the run's layout does not
    list as a checkpoint), and the command that inspects it on its own."""
    from lrdoctor.read.layouts._fixmanifest import MANIFEST

    others = [r for r in runs if r != run and under(r, run)]
    notes = []
    for u in units:
        if u.path == run or not under(u.path, run) or any(under(u.path, o) for o in others):
            continue
        if holds(u.path, [ckpt_path(c) for c in read]) or any(
                under(ckpt_path(c), u.path) for c in read):
            continue
        if (u.path / MANIFEST).is_file():
            why = f"a copy `lrdoctor fix` wrote (its {MANIFEST})"
        elif is_step_dir(u.path):
            why = "the run's reader does not list it as one of its checkpoints"
        else:  # a plain folder of state files below the run's step folders (torchtune's
            continue  # recipe_state/): the run's reader reads it with the run
        notes.append(f"{u.path}: not read with this run: {why}; inspect it on its own: "
                     f"`lrdoctor inspect {shlex.quote(str(u.path))}`")
    return notes


#: Folders tried by :func:`forced_elsewhere` (each failed try surveys its files).
FORCED_TRIES = 32


def forced_elsewhere(path: Path, forced: str) -> Path | None:
    """The shallowest folder below ``path`` in which the layout ``--format`` forces finds
    its checkpoints, or None: where a forced format found none at ``path`` itself, the
    error says where its files are (``iter_N/`` one level down: point at its parent)
    instead of listing them as if they were not there."""
    entry = layouts._entry(layouts.ALIASES.get(forced, forced))
    if entry is None:
        return None
    folders: set[Path] = set()
    for u in checkpoint_units(path).units:
        d = u.path
        while d != path and under(d, path):
            folders.add(d)
            d = d.parent
    for d in sorted(folders, key=lambda p: (len(p.parts), str(p)))[:FORCED_TRIES]:
        try:
            if entry.layout().find_checkpoints(d):
                return d
        except UnusableInput:
            continue
    return None
