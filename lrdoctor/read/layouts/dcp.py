"""Any torch.distributed.checkpoint (DCP) folder: the layout, read by content.

The decoding (``.metadata`` through the safe reader, items by offset) is
:mod:`lrdoctor.read.bytes.dcp`; this module finds DCP folders and reads one through
content-first discovery, like a ``torch.save`` dict.
"""

from __future__ import annotations

from pathlib import Path

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.facts import Storage
from lrdoctor.core.state import RunState
from lrdoctor.read import layouts
from lrdoctor.read.bytes.dcp import METADATA, SUFFIX, is_dcp
from lrdoctor.read.layouts import CONTAINER, _common
from lrdoctor.read.scan.view import ScanView

NAME = "dcp"


def _dcp_children(path: Path, depth: int = 2) -> list[Path]:
    """DCP folders among ``path``'s sub-folders, else one level further down (a run folder
    holding ``checkpoints/step_N/``); the nearest level that holds any wins. Symlinked
    folders are not followed."""
    level = [path]
    for _ in range(depth):
        subs: list[Path] = []
        for d in level:
            try:
                subs += [c for c in d.iterdir() if c.is_dir() and not c.is_symlink()]
            except OSError:
                continue
        kids = [c for c in subs if is_dcp(c)]
        if kids:
            return sorted(kids, key=lambda c: (_last_number(c.name), c.name))
        level = subs[:256]  # bounded: a run folder may hold many sub-folders
    return []


def _last_number(name: str) -> int:
    import re

    nums = re.findall(r"\d+", name)
    return int(nums[-1]) if nums else -1


def claims(scan: ScanView) -> int:
    """How well this layout claims the input: CONTAINER, or 0 when it is not one."""
    return CONTAINER if _is_layout(scan.path) else 0


def detect(path: Path) -> bool:
    """Whether this layout reads ``path``: its claim is the best of the registry's."""
    return layouts.claimed_as(path) == "dcp"


def _is_layout(path: Path) -> bool:
    """A DCP folder, or a folder of them (``step-100/``, ``checkpoint_5/``, ...)."""
    path = _common.as_path(path)
    return is_dcp(path) or (path.is_dir() and bool(_dcp_children(path)))


def find_checkpoints(path: Path) -> list[Path]:
    path = _common.as_path(path)
    if is_dcp(path):
        return [path]
    return _common.listed(_dcp_children(path), "no torch.distributed.checkpoint folders "
                          "(.metadata + *.distcp) here", path)


def read(path: Path) -> RunState:
    """Any DCP checkpoint, through content-first discovery: its items re-nested and
    classified like a ``torch.save`` dict's (scheduler, optimizer and counters found by
    shape; a framework refiner applies where its layout matches)."""
    from lrdoctor.read.layouts import torchsave
    from lrdoctor.read.scan import grouping

    ckpt = find_checkpoints(_common.as_path(path))[-1]
    found = next((c for c in grouping.run_checkpoints(ckpt)
                  if ckpt / METADATA in c.files), None)
    if found is None:
        raise UnusableInput("no .metadata found by discovery", str(ckpt))
    st = torchsave.read_checkpoint(found)
    st.format = NAME if st.format == torchsave.NAME else st.format
    st.files = [f for f in st.files if f != str(ckpt / METADATA)] + _data_files(ckpt, st)
    st.facts.storage = Storage.DCP
    return st


def _data_files(ckpt: Path, st: RunState) -> list[str]:
    """.metadata and the data files, for the report's list of files used."""
    return [str(ckpt / METADATA)] + sorted(str(p) for p in ckpt.iterdir()
                                           if p.suffix == SUFFIX and str(p) not in st.files)
