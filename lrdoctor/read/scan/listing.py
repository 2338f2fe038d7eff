"""Listing the files under an input: bounded, symlinks never followed out of the tree.

Two listings: :func:`list_tree` (every name, no file opened) is what the layout registry's
cheap hints (:class:`Hint`) are matched against before any layout module is imported;
:func:`candidate_files` keeps the files that may hold training state (pickles by name or
by their first bytes, JSON/YAML sidecars) for content-first discovery.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from lrdoctor.core.errors import NotFound, UnusableInput

# The byte readers (safeload, storage) are imported where a listing is made, not here: the
# layouts registry imports this module for Hint, and ``lrdoctor --help`` lists the layouts.

TREE_DEPTH = 5        # folder levels below the input (ROLL: output/worker/checkpoint-N/x/file)
TREE_ENTRIES = 20_000  # names listed per input


@dataclass(frozen=True)
class Tree:
    """The names of the files and folders under ``path`` (``path``'s own name included)."""

    path: Path  # a local path, or a RemotePath (same interface) for a URL
    names: frozenset[str]
    complete: bool  # False when a bound cut the listing short: every hint then matches


def list_tree(path: str | Path, depth: int = TREE_DEPTH, limit: int = TREE_ENTRIES) -> Tree:
    """The bounded listing of ``path`` (symlinked folders are not walked)."""
    from lrdoctor.read.bytes.storage import reader_path

    root = reader_path(path)
    names = {root.name}
    level: list[Path] = [root]
    complete = True
    for _ in range(depth):
        nxt: list[Path] = []
        for d in level:
            try:
                if not d.is_dir():
                    continue
                kids = list(d.iterdir())
            except OSError:
                continue
            for k in kids:
                names.add(k.name)
                if len(names) >= limit:
                    return Tree(root, frozenset(names), False)
                try:
                    if k.is_dir() and not k.is_symlink():
                        nxt.append(k)
                except OSError:
                    continue
        level = nxt
        if not level:
            break
    else:
        complete = not level
    return Tree(root, frozenset(names), complete)


@dataclass(frozen=True)
class Hint:
    """What a layout's files are called: exact ``names`` and ``patterns`` (regular
    expressions on one name). ``always`` for a layout read by content (any file may be one)."""

    names: frozenset[str] = frozenset()
    patterns: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()  # on the key paths a content scan found (content stage)
    always: bool = False

    # Compiled when first matched, not when the registry is built: ``lrdoctor --help``
    # imports the registry for --format's names and matches nothing.
    @cached_property
    def _compiled(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(p) for p in self.patterns)

    @cached_property
    def _keys(self) -> tuple[re.Pattern[str], ...]:
        return tuple(re.compile(p) for p in self.keys)

    def matches(self, names: frozenset[str], keys: frozenset[str] = frozenset(),
                complete: bool = True) -> bool:
        """Whether a layout with this hint may be there (the listing's ``names``, a content
        scan's ``keys``); an incomplete listing matches every hint."""
        if self.always or not complete or self.names & names:
            return True
        return (any(p.search(n) for p in self._compiled for n in names)
                or any(p.search(k) for p in self._keys for k in keys))


# Bounds: a run folder can hold thousands of files; discovery stays cheap and finite.
MAX_FILES = 4096          # enumerated per input
MAX_READ = 512            # pickles/sidecars read per checkpoint
MAX_DEPTH = 6             # folder levels below the input
MAX_SIDECAR_BYTES = 8 << 20

SIDECAR_SUFFIXES = (".json", ".yaml", ".yml")
# Never checkpoint state: skipped without reading (weights in other formats, tokenizers).
SKIP_SUFFIXES = (".safetensors", ".distcp", ".model", ".txt", ".md", ".log", ".py", ".sh",
                 ".png", ".jpg", ".parquet", ".jsonl", ".csv", ".gguf", ".npz", ".npy")
SKIP_NAMES = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
              "vocab.json", "generation_config.json", "added_tokens.json",
              "model.safetensors.index.json", "pytorch_model.bin.index.json",
              "preprocessor_config.json", "chat_template.json"}


# ---------------------------------------------------------------- enumeration

def _safe_children(d: Path, root: Path) -> list[Path]:
    """Children of ``d``; symlinks only when they resolve inside ``root``."""
    try:
        children = sorted(d.iterdir())
    except OSError:
        return []
    out = []
    for c in children:
        if c.is_symlink():
            try:
                target = c.resolve(strict=True)
                target.relative_to(root.resolve())
            except (OSError, ValueError, RuntimeError):
                continue
            if target.is_dir():  # a linked folder could loop: not walked
                continue
        out.append(c)
    return out


def wanted(p: Path) -> bool:
    name = p.name
    if name in SKIP_NAMES or name.startswith("."):
        return False
    suffix = p.suffix.lower()
    if suffix in SKIP_SUFFIXES:
        return False
    return suffix in SIDECAR_SUFFIXES or is_pickle(p)


def is_pickle(p: Path) -> bool:
    """A torch.save / pickle file, by its name where the name says so, else by its first
    bytes: users name checkpoints ``fixed``, ``state.latest`` or ``ckpt.step100``, and
    what a file holds decides, not its name."""
    from lrdoctor.read.bytes.safeload import PICKLE_SUFFIXES

    suffix = p.suffix.lower()
    if suffix in PICKLE_SUFFIXES:
        return True
    if suffix in SKIP_SUFFIXES or suffix in SIDECAR_SUFFIXES or p.name == ".metadata":
        return False  # DCP's .metadata is a pickle too, but read through formats.dcp
    try:
        with p.open("rb") as fh:
            head = fh.read(4)
    except (OSError, ValueError):
        return False
    return state_head(head)


def state_head(head: bytes) -> bool:
    """Whether a file's first bytes are a torch zip (zip local-file header) or a pickle
    (PROTO opcode, protocol 2..5; the legacy torch format starts with a pickled magic
    number, protocol 2)."""
    return head.startswith(b"PK\x03\x04") or (
        len(head) >= 2 and head[0] == 0x80 and 2 <= head[1] <= 5)


@dataclass
class Walked:
    """What one bounded walk under a folder looked at: the checkpoint-looking files, and
    enough about the rest for :func:`survey` to say what was scanned when none is a
    checkpoint."""

    files: list[Path] = field(default_factory=list)   # checkpoint-looking, breadth-first
    others: list[Path] = field(default_factory=list)  # other files seen (first MAX_OTHERS)
    n_files: int = 0     # every file looked at (hidden names not counted)
    n_folders: int = 0   # folders listed, the input included
    hidden: int = 0      # hidden names skipped without a look
    cut: str | None = None  # the bound that stopped the walk, if one did


MAX_OTHERS = 256  # non-checkpoint files remembered per walk (for the survey's examples)


def walk(path: Path, max_files: int = MAX_FILES, refuse: bool = True) -> Walked:
    """Breadth-first, bounded walk of the folder ``path`` (the one enumeration of discovery).

    More than ``max_files`` checkpoint-looking files is refused (``refuse``), else the
    walk stops there; folders deeper than :data:`MAX_DEPTH` are not listed; either
    bound is recorded in ``cut``.
    """
    w = Walked()
    level = [path]
    for depth in range(MAX_DEPTH + 1):
        nxt = []
        for d in level:
            w.n_folders += 1
            for c in _safe_children(d, path):
                if c.name.startswith(".") and c.name != ".metadata":
                    w.hidden += 1
                    continue
                if c.is_dir():
                    nxt.append(c)
                elif c.is_file():
                    w.n_files += 1
                    if wanted(c) or c.name == ".metadata":
                        w.files.append(c)
                        if len(w.files) > max_files:
                            if refuse:
                                raise UnusableInput(
                                    f"more than {max_files} checkpoint-looking files under "
                                    "this folder; point lrdoctor at one run or one "
                                    "checkpoint", str(path))
                            w.files.pop()
                            w.cut = f"stopped after {max_files} checkpoint-looking files"
                            return w
                    elif len(w.others) < MAX_OTHERS:
                        w.others.append(c)
        level = nxt
        if not level:
            break
        if depth == MAX_DEPTH:
            w.cut = f"{plural(len(level), 'folder')} deeper than {MAX_DEPTH} levels not looked at"
    return w


def candidate_files(path: Path, max_files: int = MAX_FILES) -> list[Path]:
    """Checkpoint-looking files under ``path`` (or ``[path]``), breadth-first, bounded.

    Hidden names, tokenizer files and weights in non-pickle formats are
    skipped. More than ``max_files`` is refused: the input is not a run.
    """
    from lrdoctor.read.bytes.storage import reader_path

    path = reader_path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise NotFound("no such file or directory", str(path))
    return walk(path, max_files).files


def has_candidates(path: Path) -> bool:
    try:
        return bool(candidate_files(path))
    except UnusableInput:
        return False


def plural(k: int, word: str) -> str:
    return f"{k} {word}" + ("" if k == 1 else "s")


def clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."
