"""Never silent: when nothing is recognised, say what was scanned and what the telling
files were found to be (:func:`nothing_found`), and refuse code-execution primitives
in files a reader did not open itself (:func:`refuse_code`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import NotRecognised, UnsafePickle, UnusableInput
from lrdoctor.read.bytes.storage import reader_path
from lrdoctor.read.scan.grouping import Checkpoint
from lrdoctor.read.scan.listing import (
    MAX_FILES,
    MAX_READ,
    SIDECAR_SUFFIXES,
    SKIP_NAMES,
    SKIP_SUFFIXES,
    candidate_files,
    clip,
    is_pickle,
    plural,
    walk,
    wanted,
)
from lrdoctor.read.scan.reading import load_file, relpath, sidecar
from lrdoctor.read.scan.shapes import NOTHING, Scan, classify, describe

# ---------------------------------------------------------------- survey
# Never silent: when no reader recognises a path, the error says what was scanned and
# what each of the most telling files was found to be (through the reading and
# classification above: one scanner).

SURVEY_READ = 8    # files read and described per survey (the JSON record lists them)
SURVEY_NAMED = 4   # of those, named in the one-line message
WEIGHT_SUFFIXES = (".safetensors", ".gguf")
DATA_SUFFIXES = (".parquet", ".jsonl", ".csv", ".npz", ".npy")


@dataclass
class Survey:
    """What discovery looked at under a path in which it found no checkpoint."""

    path: str
    files: int
    folders: int
    hidden: int = 0
    cut: str | None = None
    seen: list[tuple[str, str]] = field(default_factory=list)  # (name, what it was found to be)

    def line(self) -> str:
        """One readable clause: counts, the first few files and what each is, the bound."""
        if self.folders == 0:  # one file: what it was found to be
            return f"looked at 1 file: {self.seen[0][1]}" if self.seen else "nothing read"
        head = (f"scanned {plural(self.files, 'file')} in {plural(self.folders, 'folder')}"
                if self.files else f"scanned {plural(self.folders, 'folder')}: no files")
        # Files found to be the same thing (a model's weight shards) share one entry.
        groups: dict[str, list[str]] = {}
        for name, what in self.seen:
            groups.setdefault(what, []).append(name)
        shown = list(groups.items())[:SURVEY_NAMED]
        parts = [f"{clip(names[0], 60)}" + (f" (+{len(names) - 1} alike)" if len(names) > 1
                                            else "") + f": {what}" for what, names in shown]
        more = self.files - sum(len(names) for _, names in shown)
        if parts and more > 0:
            parts.append(f"+{more} more")
        if self.hidden:
            parts.append(f"{plural(self.hidden, 'hidden name')} skipped")
        if self.cut:
            parts.append(f"scan cut by a bound: {self.cut}")
        return head + (": " + "; ".join(parts) if parts else "")

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "files": self.files, "folders": self.folders,
                "hidden": self.hidden, "cut_by_bound": self.cut,
                "seen": [{"file": n, "found": w} for n, w in self.seen],
                "not_described": max(0, self.files - len(self.seen))}


def _relevance(f: Path) -> int:
    """Which files the survey describes first: state-bearing kinds before the rest."""
    suffix = f.suffix.lower()
    if f.name == ".metadata" or is_pickle(f):
        return 0
    if suffix in WEIGHT_SUFFIXES or suffix == ".distcp":
        return 1
    if suffix in SIDECAR_SUFFIXES and f.name not in SKIP_NAMES:
        return 2
    if suffix in SIDECAR_SUFFIXES or suffix == ".model":
        return 4  # tokenizer and index files
    if suffix in SKIP_SUFFIXES:
        return 5
    return 3  # an unknown kind of file: say what its first bytes are not


def survey(path: str | Path, max_files: int = MAX_FILES) -> Survey:
    """What the bounded walk of :func:`candidate_files` saw under ``path``, and, for the
    most telling few files, what :func:`load_file` and :func:`classify` found each to be."""
    path = reader_path(path)
    if path.is_file():
        return Survey(str(path), files=1, folders=0, seen=[(path.name, what_is(path))])
    w = walk(path, max_files, refuse=False)
    ranked = sorted(w.files + w.others, key=_relevance)  # stable: breadth-first within a kind
    seen = [(relpath(str(f), path), what_is(f)) for f in ranked[:SURVEY_READ]]
    return Survey(str(path), files=w.n_files, folders=w.n_folders, hidden=w.hidden,
                  cut=w.cut, seen=seen)


def nothing_found(message: str, path: str | Path) -> UnusableInput:
    """The error for a path under which no checkpoint (of the kind looked for) was found:
    ``message``, then what was scanned (:meth:`Survey.line`), with the survey as its
    structured record. Every reader's "none here" goes through this, so that none is silent."""
    try:
        seen = survey(path)
    except UnusableInput:  # gone, or refused by a bound: the message alone
        return NotRecognised(message, str(path))
    return NotRecognised(f"{message}: {seen.line()}", str(path),
                         detail={"scanned": seen.to_dict()})


def what_is(f: Path) -> str:
    """What one file was found to be, in a few words: a file skipped by its kind, or
    what reading it metadata-only and classifying its objects found."""
    suffix = f.suffix.lower()
    if not (wanted(f) or f.name == ".metadata"):
        if suffix in WEIGHT_SUFFIXES:
            return f"weights only ({suffix[1:]}), {NOTHING}"
        if suffix == ".distcp":
            return "DCP tensor data (a DCP checkpoint needs its .metadata beside it)"
        if f.name in SKIP_NAMES or suffix == ".model":
            return "a tokenizer, index or model-config file, not checkpoint state"
        if suffix in DATA_SUFFIXES:
            return f"data ({suffix}), not checkpoint state"
        if suffix in SKIP_SUFFIXES:
            return f"not checkpoint state ({suffix})"
        return "not torch/pickle, JSON or YAML (by its first bytes)"
    if suffix in SIDECAR_SUFFIXES:
        obj, why = sidecar(f)
        kind = "JSON" if suffix == ".json" else "YAML"
        if obj is None:
            return f"unreadable {kind}: {why}"
        return describe(obj, classify(obj, str(f), config=kind == "YAML"), kind)
    try:
        loaded = load_file(f)
        obj, notes = loaded.obj, loaded.notes
    except UnsafePickle as exc:
        from lrdoctor.read.bytes.unsafe_globals import HostileRecord

        if isinstance(exc, HostileRecord):  # a gadget record: no global to name
            return f"refused: {exc.why} (torch never writes it; nothing run)"
        return f"refused: asks for {exc.global_name!r} (not on the allow-list; nothing run)"
    except UnusableInput as exc:
        return "unreadable: " + exc.message
    if obj is None:
        why = notes[0].split(": not read ", 1)[-1] if notes else "no content"
        return f"unreadable: {why.strip('()')}"
    sc = Scan(Checkpoint(f, None, [f]), found=classify(obj, str(f)), objects={str(f): obj})
    return sc.what(str(f))



def refuse_code(ckpt: str | Path, already_read: Iterable[str] = ()) -> list[str]:
    """Refuse a checkpoint folder in which any pickle names a code-execution primitive.

    A framework reader reads only its own files; a hostile ``rng_state.pth`` beside
    them would run code when the run resumes with ``torch.load``. Every other pickle
    of the folder gets the verdict ``fix`` asks of its output (:func:`lrdoctor.read.bytes.vet.vet`:
    the safe reader, unknown classes kept opaque), so that
    :class:`~lrdoctor.core.errors.UnsafePickle` names it. An unreadable file is not ours to
    judge, but never silent: the notes returned name each one that could not be checked.
    """
    from lrdoctor.read.bytes.vet import vet

    ckpt = reader_path(ckpt)
    if not ckpt.is_dir():
        return []
    done = {str(reader_path(f)) for f in already_read}
    try:
        files = candidate_files(ckpt)
    except UnusableInput:
        return []
    todo = [f for f in files if is_pickle(f) and str(f) not in done]
    notes = []
    for f in todo[:MAX_READ]:
        try:
            why = vet(f)
        except UnsafePickle:
            raise
        except UnusableInput as exc:
            why = exc.message
        if why is not None:
            notes.append(f"{f}: not checked for code-execution globals, it could not be read "
                         f"({why}); fix will not copy it")
    return notes
