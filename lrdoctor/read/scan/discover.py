"""Content-first checkpoint discovery: what the files hold, not what they are called.

Readers picked by file names read one file and miss evidence spread over
several (ROLL's bare ``scheduler.pt`` beside ``optimizer.pt``, verl's
``extra_state_*.pt``, ``model.pt``/``optimizer.pt``/``scheduler.pt`` in one
folder). This module:

1. enumerates the checkpoint files under a path (torch zip, legacy pickle,
   JSON/YAML sidecars; bounded in count, depth and size; symlinks are never
   followed out of the tree): :func:`candidate_files`;
2. groups them into checkpoints (a step folder, a numbered file, a rank set):
   :func:`run_checkpoints` yields them oldest first;
3. reads each file metadata-only through :mod:`lrdoctor.read.bytes.safeload` and
   classifies every object found anywhere in it by its *shape*: torch
   LRScheduler state, megatron-core OptimizerParamScheduler state, DeepSpeed
   scheduler state, torch optimizer state, trainer counters, config/args:
   :func:`scan`.

:func:`lrdoctor.read.layouts.content.build` turns a :class:`Scan` into the
framework-blind :class:`~lrdoctor.core.state.RunState`; framework modules refine it.
No torch import here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from lrdoctor.core.errors import UnsafePickle, UnusableInput
from lrdoctor.read.bytes.storage import as_path
from lrdoctor.read.evidence import seen

# Bounds: a run folder can hold thousands of files; discovery stays cheap and finite.
MAX_FILES = 4096          # enumerated per input
MAX_READ = 512            # pickles/sidecars read per checkpoint
MAX_DEPTH = 6             # folder levels below the input
MAX_SIDECAR_BYTES = 8 << 20
MAX_WALK_NODES = 200_000  # objects visited per file when classifying

PICKLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".pkl", ".tar", ".pickle")
SIDECAR_SUFFIXES = (".json", ".yaml", ".yml")
# Never checkpoint state: skipped without reading (weights in other formats, tokenizers).
SKIP_SUFFIXES = (".safetensors", ".distcp", ".model", ".txt", ".md", ".log", ".py", ".sh",
                 ".png", ".jpg", ".parquet", ".jsonl", ".csv", ".gguf", ".npz", ".npy")
SKIP_NAMES = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
              "vocab.json", "generation_config.json", "added_tokens.json",
              "model.safetensors.index.json", "pytorch_model.bin.index.json",
              "preprocessor_config.json", "chat_template.json"}

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


def _wanted(p: Path) -> bool:
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
    # A torch zip (zip local-file header) or a pickle (PROTO opcode, protocol 2..5; the
    # legacy torch format starts with a pickled magic number, protocol 2).
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


def _walk(path: Path, max_files: int = MAX_FILES, refuse: bool = True) -> Walked:
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
                    if _wanted(c) or c.name == ".metadata":
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
            w.cut = f"{_n(len(level), 'folder')} deeper than {MAX_DEPTH} levels not looked at"
    return w


def candidate_files(path: Path, max_files: int = MAX_FILES) -> list[Path]:
    """Checkpoint-looking files under ``path`` (or ``[path]``), breadth-first, bounded.

    Hidden names, tokenizer files and weights in non-pickle formats are
    skipped. More than ``max_files`` is refused: the input is not a run.
    """
    path = as_path(path)
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise UnusableInput("no such file or directory", str(path))
    return _walk(path, max_files).files


def has_candidates(path: Path) -> bool:
    try:
        return bool(candidate_files(path))
    except UnusableInput:
        return False


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
    path = as_path(path)
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


# ---------------------------------------------------------------- classification

SCHED_TORCH = "torch_scheduler"
SCHED_MEGATRON = "megatron_scheduler"
SCHED_DEEPSPEED = "deepspeed_scheduler"
OPTIMIZER = "optimizer"
COUNTER = "counter"
SETTING = "setting"  # a number inside a config/args object: a budget or a knob, not progress
CONFIG = "config"
SCHEDULER_KINDS = (SCHED_MEGATRON, SCHED_TORCH, SCHED_DEEPSPEED)

# Trainer counters by key (last path component), what they count.
COUNTER_NAMES = {
    "global_step", "global_steps", "globalstep", "iteration", "iterations", "iter", "step",
    "steps", "steps_run", "current_step", "num_updates", "update", "updates", "optimizer_step",
    "micro_step", "micro_steps", "epoch", "epochs", "epochs_run", "current_epoch",
    "consumed_samples", "consumed_train_samples", "skipped_train_samples", "global_samples",
    "skipped_steps", "samples", "sample", "tokens", "token", "batch", "batches",
    "batch_in_epoch", "ntokens_seen", "consumed_tokens", "total_steps", "max_steps",
    "train_iters", "train_samples", "total_training_steps", "num_training_steps",
    "lr_decay_iters", "total_epochs", "max_steps_per_epoch", "max_epochs", "num_epochs",
    "total_num_steps", "warmup_num_steps", "micro_batch_size", "global_batch_size",
    "gradient_accumulation_steps", "world_size", "num_processes",
}
# Keys under which a number is not a progress counter even if its name says so.
_NOT_COUNTER_PARENTS = {"param_groups", "rng", "rng_state", "rng_states", "rng_tracker_states"}
# Keys whose value is configuration: numbers below them are settings (budgets), not progress.
CONFIG_KEYS = {"config", "cfg", "args", "hparams", "hyper_parameters", "training_args",
               "job_config", "trainer_config", "ds_config", "hyperparameters"}


@dataclass
class Found:
    """One object recognised in a checkpoint file: what, where (file, key path), the value."""

    kind: str
    file: str
    key: str
    value: Any
    # The key path as a tuple (dict keys, list indexes): what a FieldRef and a repair use;
    # ``key`` is its display form.
    path: tuple[str | int, ...] = ()

    @property
    def where(self) -> str:
        return f"{self.file}:{self.key}" if self.key else self.file


@dataclass
class Scan:
    """Everything discovery read in one checkpoint."""

    checkpoint: Checkpoint
    found: list[Found] = field(default_factory=list)
    files_read: list[str] = field(default_factory=list)
    objects: dict[str, Any] = field(default_factory=dict)  # file -> top-level object
    notes: list[str] = field(default_factory=list)
    # Parts of files left unread ("file:key" -> why): DCP items too large for what their
    # key says they hold, or past a bound. Never silent: the report carries it.
    skipped: dict[str, str] = field(default_factory=dict)
    # Files that could not be read at all (file -> why: truncated, corrupt, not a pickle):
    # a file the checkpoint needs to resume is then missing, which is an error (LRD130).
    unread: dict[str, str] = field(default_factory=dict)

    def of(self, kind: str) -> list[Found]:
        return [f for f in self.found if f.kind == kind]

    def counters(self) -> list[Found]:
        return self.of(COUNTER)

    def first(self, kind: str) -> Found | None:
        hits = self.of(kind)
        return hits[0] if hits else None

    def file_names(self) -> set[str]:
        return {Path(f).name for f in self.files_read}

    def what(self, file: str) -> str:
        """What one file read here was found to hold, in a few words (never silent: a
        checkpoint without a scheduler says what each of its files is instead)."""
        suffix = Path(file).suffix.lower()
        kind = {".json": "JSON", ".yaml": "YAML", ".yml": "YAML"}.get(suffix, "a torch pickle")
        if Path(file).name == ".metadata":
            kind = "a DCP checkpoint"
        return _describe(self.objects[file], [f for f in self.found if f.file == file], kind)


def is_megatron_scheduler(obj: Any) -> bool:
    from lrdoctor.read.layouts.megatron import scheduler_field

    return (isinstance(obj, dict) and scheduler_field(obj, "num_steps") is not None
            and scheduler_field(obj, "lr_decay_steps") is not None
            and scheduler_field(obj, "max_lr") is not None)


def is_torch_scheduler(obj: Any) -> bool:
    if not isinstance(obj, dict):
        return False
    if "_schedulers" in obj:
        return True
    return "last_epoch" in obj and ("base_lrs" in obj or "_step_count" in obj
                                    or "lr_lambdas" in obj or "_last_lr" in obj)


def is_deepspeed_scheduler(obj: Any) -> bool:
    return isinstance(obj, dict) and "last_batch_iteration" in obj and "last_epoch" not in obj


def is_optimizer(obj: Any) -> bool:
    return isinstance(obj, dict) and isinstance(obj.get("param_groups"), list)


def _scalar(v: Any) -> float | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, (int, float)):
        return v
    from lrdoctor.read.bytes.safeload import TensorRef

    if isinstance(v, TensorRef) and v.numel == 1:
        from lrdoctor.read.layouts._common import number

        return number(v)
    return None


def classify(obj: Any, file: str, prefix: str = "", config: bool = False) -> list[Found]:
    """Every scheduler/optimizer/counter/config object in ``obj``, by shape, with its key path.

    A recognised state is not walked into (its own counters belong to it);
    ``Opaque`` records (argparse.Namespace, OmegaConf configs) are walked
    through their fields and reported as configs.
    """
    from lrdoctor.read.bytes.safeload import Opaque

    out: list[Found] = []
    budget = [MAX_WALK_NODES]

    def walk(o: Any, key: str, parent: str, depth: int, cfg: bool,
             path: tuple[str | int, ...]) -> None:
        budget[0] -= 1
        if budget[0] <= 0 or depth > 12:
            return
        if isinstance(o, Opaque):
            fields = _opaque_fields(o)
            if fields is not None:
                out.append(Found(CONFIG, file, key, fields, path))
                walk_dict(fields, key, depth, True, path)
            return
        if isinstance(o, dict):
            if is_megatron_scheduler(o):
                out.append(Found(SCHED_MEGATRON, file, key, o, path))
                return
            if is_torch_scheduler(o):
                out.append(Found(SCHED_TORCH, file, key, o, path))
                return
            if is_deepspeed_scheduler(o):
                out.append(Found(SCHED_DEEPSPEED, file, key, o, path))
                return
            if is_optimizer(o):
                out.append(Found(OPTIMIZER, file, key, o, path))
                return
            name = key.rsplit(".", 1)[-1]
            if name in CONFIG_KEYS:
                out.append(Found(CONFIG, file, key, o, path))
            walk_dict(o, key, depth, cfg or name in CONFIG_KEYS, path)
            return
        if isinstance(o, (list, tuple)) and len(o) <= 64:
            for i, item in enumerate(o):
                if isinstance(item, (dict, list, tuple, Opaque)):
                    walk(item, f"{key}[{i}]", parent, depth + 1, cfg, path + (i,))
            return
        v = _scalar(o)
        last = key.rsplit(".", 1)[-1]
        if v is not None and last in COUNTER_NAMES and parent not in _NOT_COUNTER_PARENTS:
            out.append(Found(SETTING if cfg else COUNTER, file, key, v, path))

    def walk_dict(d: dict, key: str, depth: int, cfg: bool,
                  path: tuple[str | int, ...]) -> None:
        last = key.rsplit(".", 1)[-1] if key else ""
        if last in _NOT_COUNTER_PARENTS:
            return
        for k, v in list(d.items())[:4096]:
            if not isinstance(k, str):
                continue
            walk(v, f"{key}.{k}" if key else k, last, depth + 1, cfg, path + (k,))

    walk(obj, prefix, "", 0, config, tuple(prefix.split(".")) if prefix else ())
    return out


def _opaque_fields(o: Any) -> dict | None:
    """The data fields of an inert record (Namespace, dataclass, OmegaConf DictConfig)."""
    state = o.state
    if isinstance(state, tuple) and state and isinstance(state[0], dict):
        state = state[0]
    if not isinstance(state, dict):
        return None
    # OmegaConf: DictConfig.__getstate__ -> {"_content": {key: node}, "_metadata": ..., ...}
    if "_content" in state:
        return _omegaconf_plain(state)
    return state


def _omegaconf_plain(state: Any, depth: int = 0) -> Any:
    """An OmegaConf container's content as plain dicts/lists (values of its nodes)."""
    from lrdoctor.read.bytes.safeload import Opaque

    if depth > 24:
        return None
    if isinstance(state, Opaque):
        return _omegaconf_plain(state.state, depth + 1)
    if isinstance(state, dict) and "_content" in state:
        content = state["_content"]
        if isinstance(content, dict):
            return {str(k): _omegaconf_plain(v, depth + 1) for k, v in content.items()}
        if isinstance(content, list):
            return [_omegaconf_plain(v, depth + 1) for v in content]
        return content if isinstance(content, (str, int, float, bool)) else None
    if isinstance(state, dict) and "_val" in state:
        return state["_val"]
    return state


# ---------------------------------------------------------------- reading

def _read_sidecar(f: Path) -> Any:
    return _sidecar(f)[0]


def _sidecar(f: Path) -> tuple[Any, str | None]:
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
        return None, str(exc).split(": ", 1)[-1]


class Loaded(NamedTuple):
    """One file as :func:`load_file` read it."""

    obj: Any               # the object (None: not read; ``notes`` says why)
    notes: list[str]
    skipped: dict[str, str]  # "file:key" -> why a part of it was left unread (DCP items)


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
        return Loaded(None, [f"{f}: not read ({str(exc).split(': ', 1)[-1]})"], {})
    unknown = sorted(safeload.opaque_classes(obj))
    notes = []
    if unknown:
        notes.append(f"{f}: kept as opaque values (classes lrdoctor does not know, not run): "
                     + ", ".join(unknown[:6]) + (" ..." if len(unknown) > 6 else ""))
    return Loaded(obj, notes, {})


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
    from lrdoctor.read.layouts.megatron import DIST_OPT_GROUPS

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
    from lrdoctor.read.layouts import dcp

    if not dcp.is_dcp(f.parent):
        return Loaded(None, [f"{f}: not read (a .metadata without *.distcp beside it)"], {})
    try:
        ds = dcp.load(f.parent, leave=_dcp_leave, unknown_as_opaque=True)
        if ds.left and not any(h.kind in SCHEDULER_KINDS for h in classify(ds.tree, str(f))):
            ds = dcp.load(f.parent, unknown_as_opaque=True)
    except UnsafePickle:
        raise
    except UnusableInput as exc:
        return Loaded(None, [f"{f}: not read ({str(exc).split(': ', 1)[-1]})"], {})
    notes = []
    if ds.left:
        names = [f"{k} ({n:,} bytes)" for k, n in list(ds.left.items())[:4]]
        more = len(ds.left) - len(names)
        notes.append(f"{f.parent}: {_n(len(ds.left), 'large DCP item')} not read "
                     f"({sum(ds.left.values()):,} bytes; over {DCP_SMALL_ITEM >> 10} KiB, "
                     "keys naming no scheduler, param-group, trainer, config or common "
                     "state): " + ", ".join(names) + (f", +{more} more" if more else ""))
    notes += [f"{f.parent}: DCP item {k} not read ({why})" for k, why in
              list(ds.skipped.items()) if k not in ds.left][:6]
    return Loaded(ds.tree, notes, {f"{f}:{k}": why for k, why in ds.skipped.items()})


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
    for f, (obj, notes, skipped) in zip(files, loaded, strict=True):
        sc.notes.extend(notes)
        sc.skipped.update(skipped)
        if obj is None:
            why = next((n.split(": not read ", 1)[1] for n in notes if ": not read " in n), "")
            sc.unread[str(f)] = why.strip("()") or "not read"
            continue
        sc.files_read.append(str(f))
        sc.objects[str(f)] = obj
        seen.note(f, obj)  # the evidence collector walks what was loaded (lrdoctor.evidence)
        # A YAML sidecar is configuration; JSON sidecars hold state (trainer_state.json).
        sc.found.extend(classify(obj, str(f), config=f.suffix.lower() in (".yaml", ".yml")))
    return sc


# ---------------------------------------------------------------- survey
# Never silent: when no reader recognises a path, the error says what was scanned and
# what each of the most telling files was found to be (through the reading and
# classification above: one scanner).

SURVEY_READ = 8    # files read and described per survey (the JSON record lists them)
SURVEY_NAMED = 4   # of those, named in the one-line message
WEIGHT_SUFFIXES = (".safetensors", ".gguf")
DATA_SUFFIXES = (".parquet", ".jsonl", ".csv", ".npz", ".npy")
NOTHING = "no scheduler/optimizer/trainer state"


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
        head = (f"scanned {_n(self.files, 'file')} in {_n(self.folders, 'folder')}"
                if self.files else f"scanned {_n(self.folders, 'folder')}: no files")
        # Files found to be the same thing (a model's weight shards) share one entry.
        groups: dict[str, list[str]] = {}
        for name, what in self.seen:
            groups.setdefault(what, []).append(name)
        shown = list(groups.items())[:SURVEY_NAMED]
        parts = [f"{_cap(names[0], 60)}" + (f" (+{len(names) - 1} alike)" if len(names) > 1
                                            else "") + f": {what}" for what, names in shown]
        more = self.files - sum(len(names) for _, names in shown)
        if parts and more > 0:
            parts.append(f"+{more} more")
        if self.hidden:
            parts.append(f"{_n(self.hidden, 'hidden name')} skipped")
        if self.cut:
            parts.append(f"scan cut by a bound: {self.cut}")
        return head + (": " + "; ".join(parts) if parts else "")

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "files": self.files, "folders": self.folders,
                "hidden": self.hidden, "cut_by_bound": self.cut,
                "seen": [{"file": n, "found": w} for n, w in self.seen],
                "not_described": max(0, self.files - len(self.seen))}


def _n(k: int, word: str) -> str:
    return f"{k} {word}" + ("" if k == 1 else "s")


def _cap(text: str, width: int) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


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
    path = as_path(path)
    if path.is_file():
        return Survey(str(path), files=1, folders=0, seen=[(path.name, what_is(path))])
    w = _walk(path, max_files, refuse=False)
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
        return UnusableInput(message, str(path))
    return UnusableInput(f"{message}: {seen.line()}", str(path),
                         detail={"scanned": seen.to_dict()})


def what_is(f: Path) -> str:
    """What one file was found to be, in a few words: a file skipped by its kind, or
    what reading it metadata-only and classifying its objects found."""
    suffix = f.suffix.lower()
    if not (_wanted(f) or f.name == ".metadata"):
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
        obj, why = _sidecar(f)
        kind = "JSON" if suffix == ".json" else "YAML"
        if obj is None:
            return f"unreadable {kind}: {why}"
        return _describe(obj, classify(obj, str(f), config=kind == "YAML"), kind)
    try:
        obj, notes, _ = load_file(f)
    except UnsafePickle as exc:
        return f"refused: asks for {exc.global_name!r} (not on the allow-list; nothing run)"
    except UnusableInput as exc:
        return "unreadable: " + str(exc).split(": ", 1)[-1]
    if obj is None:
        why = notes[0].split(": not read ", 1)[-1] if notes else "no content"
        return f"unreadable: {why.strip('()')}"
    sc = Scan(Checkpoint(f, None, [f]), found=classify(obj, str(f)), objects={str(f): obj})
    return sc.what(str(f))


def _keys(d: dict, k: int = 5) -> str:
    names = [_cap(str(x), 32) for x in list(d)[:k]]
    return "[" + ", ".join(names) + (f", +{len(d) - k} more" if len(d) > k else "") + "]"


def _leaves(obj: Any) -> tuple[int, int]:
    """(tensors, other values) among the leaves of ``obj``, bounded."""
    from lrdoctor.read.bytes.safeload import TensorRef

    tensors = others = 0
    stack, budget = [(obj, 0)], 10_000
    while stack and budget > 0:
        o, depth = stack.pop()
        budget -= 1
        if isinstance(o, TensorRef):
            tensors += 1
        elif isinstance(o, dict) and depth < 8:
            stack.extend((v, depth + 1) for v in list(o.values())[:4096])
        elif isinstance(o, (list, tuple)) and depth < 8:
            stack.extend((v, depth + 1) for v in o[:4096])
        else:
            others += 1
    return tensors, others


def _describe(obj: Any, found: list[Found], what: str) -> str:
    """``what`` (a torch pickle, JSON) and what it holds, for a file with no checkpoint."""
    kinds = {f.kind for f in found}
    states = sorted(k for k in kinds if k in SCHEDULER_KINDS or k == OPTIMIZER)
    if states:
        at = next(f.key for f in found if f.kind in states) or "top level"
        return f"{what} holding {', '.join(s.replace('_', ' ') for s in states)} state at {at}"
    if COUNTER in kinds:
        names = sorted({f.key.rsplit(".", 1)[-1] for f in found if f.kind == COUNTER})
        return (f"{what} with trainer counters ({', '.join(names[:4])}) but no scheduler or "
                "optimizer state")
    tensors, others = _leaves(obj)
    if tensors and not others:
        return f"weights only: {what} holding {_n(tensors, 'tensor')}, {NOTHING}"
    if isinstance(obj, dict):
        if not obj:
            return f"{what} holding an empty dict, {NOTHING}"
        cfg = " (configuration)" if CONFIG in kinds or SETTING in kinds else ""
        return f"{what} with keys {_keys(obj)}{cfg}, {NOTHING}"
    from lrdoctor.read.bytes.safeload import Opaque

    name = obj.cls if isinstance(obj, Opaque) else type(obj).__name__
    return f"{what} holding a {_cap(name, 48)}, {NOTHING}"


def refuse_code(ckpt: str | Path, already_read: Iterable[str] = ()) -> None:
    """Refuse a checkpoint folder in which any pickle names a code-execution primitive.

    A framework reader reads only its own files; a hostile ``rng_state.pth`` beside
    them would run code when the run resumes with ``torch.load``. Every other pickle
    of the folder is unpickled inertly (unknown classes kept opaque) so that
    :class:`~lrdoctor.core.errors.UnsafePickle` names it; unreadable files are not ours to judge.
    """
    from lrdoctor.read.bytes import safeload

    ckpt = as_path(ckpt)
    if not ckpt.is_dir():
        return
    done = {str(as_path(f)) for f in already_read}
    try:
        files = candidate_files(ckpt)
    except UnusableInput:
        return
    todo = [f for f in files if is_pickle(f) and str(f) not in done]
    for f in todo[:MAX_READ]:
        try:
            safeload.load(f, unknown_as_opaque=True)
        except UnsafePickle:
            raise
        except UnusableInput:
            continue


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
