"""The one list of pickle globals that load, evaluate, import or run code (docs/security.md).

A checkpoint's pickle names the callables the unpickler should call. lrdoctor never
calls one that is not on its allow-list of data constructors, but a name from this
list is more than unknown: it is how a pickle runs code in whoever loads the file with
``torch.load(weights_only=False)`` (Megatron and DeepSpeed resume that way). So it is
a verdict on the whole checkpoint folder: every reader refuses it with one line naming
the file, the global and why it is dangerous (:class:`CodeExecutionGlobal`), no
unknown class is kept as an inert stand-in under such a name, and ``fix`` never writes
an output that holds one (it reads every pickle of its output with the same reader
before publishing it: :mod:`lrdoctor.read.bytes.vet`).

A reference alone is refused too, not only a call: a loader that keeps the value calls it
later (a pickled DataLoader whose ``collate_fn`` is ``os.system`` runs a command per batch
once it is iterated). So the list names code-execution primitives precisely: the data
helpers a plain DataLoader pickles (its collate function, samplers, datasets) are under
``torch.utils`` but are :data:`INERT`, and an unknown class is an opaque value.

A user who knows the file (their own class under a module that shadows one of these
names, say) can let one name through with ``--allow-unsafe-global NAME``: it is then
read as an inert value (still never called), and ``fix`` prints the name in its
manifest. Pure standard library: imported by ``inspect``'s light path.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from functools import cache
from struct import error as struct_error
from typing import Any

from lrdoctor.core.errors import UnsafePickle, UnusableInput
from lrdoctor.read.bytes import limits

__all__ = ["DANGEROUS", "INERT", "ALLOW_ENV", "danger", "allowed", "allow",
           "CodeExecutionGlobal", "HostileRecord", "globals_in_pickle", "dangerous_in_pickle",
           "resolves_a_global"]

_RUNS = "runs commands, writes or deletes files"
_IMPORTS = "imports any module the file names"
_LOADS = "unpickles nested bytes, a second load that no allow-list guards"
_CODE = "turns text or bytes into code and runs it"

#: A global (or every global under a module: ``os`` covers ``os.system``) -> why a pickle
#: that names it can run code. Longest matching prefix wins; :data:`INERT` names the
#: exceptions. Every entry has a test (tests/formats/test_unsafe_globals.py).
DANGEROUS: dict[str, str] = {
    # nested loads: a second unpickler that no allow-list guards
    "torch.storage._load_from_bytes": "runs torch.load on bytes inside the pickle: " + _LOADS,
    "torch.load": "loads another pickle: " + _LOADS,
    "torch.serialization": "loads or saves other files: " + _LOADS,
    "torch._weights_only_unpickler": "loads other pickles: " + _LOADS,
    "pickle": _LOADS, "_pickle": _LOADS, "dill": _LOADS, "cloudpickle": _LOADS,
    "joblib": _LOADS, "numpy.load": _LOADS, "shelve": _LOADS,
    "copyreg": "registers reducers that change how later objects are unpickled",
    "marshal": "turns bytes into code objects (" + _CODE + ")",
    "yaml": "constructs arbitrary Python objects from YAML tags",
    # evaluation
    "builtins.eval": "evaluates a Python expression (" + _CODE + ")",
    "builtins.exec": "runs Python source (" + _CODE + ")",
    "builtins.compile": "compiles source into a code object (" + _CODE + ")",
    "builtins.getattr": "reaches any attribute of any object (os.system through a module)",
    "builtins.setattr": "changes any attribute of any object (a class, a function)",
    "builtins.__import__": _IMPORTS,
    "builtins.open": "opens, truncates or writes any file",
    "builtins.breakpoint": "starts a debugger, which runs code",
    "builtins.input": "reads from the terminal",
    "builtins": "calls a builtin other than the data constructors of the allow-list",
    "__builtin__": "calls a builtin (the Python 2 name) other than a data constructor",
    "operator": "calls methods and reaches attributes by name (operator.attrgetter, "
                "methodcaller)",
    "functools": "builds calls to any callable (functools.partial, reduce)",
    "types": "builds functions and code objects",
    "code": "runs an interactive interpreter (" + _CODE + ")",
    "codeop": "compiles source (" + _CODE + ")",
    "ast": "compiles syntax trees into code",
    "dis": "works on code objects", "inspect": "reaches frames and code objects",
    "timeit": "runs a statement (" + _CODE + ")",
    "pdb": "runs a debugger (" + _CODE + ")", "bdb": "runs a debugger (" + _CODE + ")",
    "cProfile": "runs a statement (" + _CODE + ")", "profile": "runs a statement (" + _CODE + ")",
    "trace": "runs a statement (" + _CODE + ")", "doctest": "runs the examples of a docstring",
    "IPython": "runs shell and Python code", "jinja2": "renders templates that run code",
    # imports
    "importlib": _IMPORTS, "imp": _IMPORTS, "zipimport": _IMPORTS, "pkgutil": _IMPORTS,
    "runpy": "runs a module or a script as __main__",
    "site": "runs .pth files", "sysconfig": "reads and runs configuration",
    "compileall": "compiles and writes files", "py_compile": "compiles and writes files",
    "ensurepip": "installs packages", "venv": "creates environments and runs pip",
    "pip": "installs packages (runs their setup code)", "setuptools": "runs setup code",
    "distutils": "runs setup code", "numpy.distutils": "runs setup code",
    "numpy.f2py": "compiles and imports extension modules",
    "numpy.ctypeslib": "loads shared libraries", "numpy.testing": "runs commands",
    "numpy.lib": "loads files and pickles (numpy.lib.format)",
    "torch.hub": "downloads and imports code from the internet",
    "torch.jit": "loads and runs TorchScript", "torch.package": _LOADS,
    "torch._C": "calls into torch's C++ internals", "torch.ops": "calls registered operators",
    "torch.classes": "constructs registered C++ classes", "torch.utils": "runs build and "
    "data-loading helpers (cpp_extension compiles and loads code)",
    "torch._dynamo": "compiles and runs code", "torch.compile": "compiles and runs code",
    "torch.fx": "generates and runs Python code", "torch.save": "writes files",
    # the system
    "os": _RUNS, "posix": _RUNS, "nt": _RUNS, "_posixsubprocess": "starts processes",
    "subprocess": "runs commands", "pty": "spawns a shell on a terminal",
    "shutil": "copies, moves and deletes files", "tempfile": "creates files",
    "glob": "lists files", "pathlib": "reads, writes and deletes files",
    "io": "opens files", "_io": "opens files", "codecs": "opens files",
    "_codecs": "decodes with any registered codec",
    "sys": "changes the interpreter (modules, paths, hooks)",
    "ctypes": "calls any C function", "signal": "changes signal handlers",
    "gc": "reaches every live object", "weakref": "reaches live objects",
    "threading": "starts threads running any callable", "_thread": "starts threads",
    "multiprocessing": "starts processes running any callable",
    "asyncio": "runs subprocesses and event loops",
    "socket": "opens network connections", "http": "opens network connections",
    "urllib": "opens network connections", "ftplib": "opens network connections",
    "smtplib": "sends mail", "telnetlib": "opens network connections",
    "xmlrpc": "calls remote procedures", "webbrowser": "opens a URL in a browser "
    "(runs a program)", "logging": "configures handlers (logging.config runs code)",
}

#: Names (or every name under a module) under a :data:`DANGEROUS` prefix that are inert,
#: with the reason; the longest match of the two lists decides. The allow-list of data
#: constructors (``builtins.set``, ``pathlib.PosixPath`` as a string, ...) is
#: :mod:`lrdoctor.read.bytes.safeload`'s and is consulted before this list.
INERT: dict[str, str] = {
    "_io.BytesIO": "an in-memory buffer (DCP's default planner saves one as is)",
    "io.BytesIO": "an in-memory buffer",
    # Lightning/Fabric states and user checkpoints pickle a plain DataLoader: plain
    # classes, rebuilt with __new__ and their __dict__ (no __setstate__, no __new__ of
    # their own), and its collate function by reference; none of them loads or runs
    # anything when unpickled, nor runs code of the file's choosing when called.
    "torch.utils.data.dataloader.DataLoader": "a data loader's settings (workers start "
                                              "only when it is iterated)",
    "torch.utils.data._utils.collate": "collate functions (default_collate, "
                                       "default_convert): stack a batch's tensors",
    "torch.utils.data.sampler": "index samplers (plain records of sizes and seeds)",
    "torch.utils.data.distributed.DistributedSampler": "an index sampler (a plain record)",
    "torch.utils.data.dataset": "dataset wrappers (TensorDataset, Subset, ConcatDataset)",
}

#: The environment variable ``--allow-unsafe-global`` sets (comma-separated names), so the
#: escape reaches every reader, in this process and the ones ``check`` starts.
ALLOW_ENV = "LRDOCTOR_ALLOW_UNSAFE_GLOBALS"


def _longest(global_name: str, table: dict[str, str]) -> str:
    best = ""
    for prefix in table:
        if (global_name == prefix or global_name.startswith(prefix + ".")) \
                and len(prefix) > len(best):
            best = prefix
    return best


def danger(global_name: str) -> str | None:
    """Why ``global_name`` ("module.name") can run code, or None when it cannot (the
    longest match of :data:`DANGEROUS` and :data:`INERT` decides)."""
    best = _longest(global_name, DANGEROUS)
    if not best or len(_longest(global_name, INERT)) >= len(best):
        return None
    return DANGEROUS[best]


def allowed() -> frozenset[str]:
    """The names the user let through with ``--allow-unsafe-global``."""
    raw = os.environ.get(ALLOW_ENV, "")
    return frozenset(n.strip() for n in raw.split(",") if n.strip())


def allow(names: Iterable[str]) -> None:
    """Let ``names`` through (read as inert values) for the rest of this process and the
    processes it starts: what ``--allow-unsafe-global`` does."""
    names = sorted({*allowed(), *(n.strip() for n in names if n.strip())})
    if names:
        os.environ[ALLOW_ENV] = ",".join(names)


class CodeExecutionGlobal(UnsafePickle):
    """A pickle names a global that loads, evaluates, imports or runs code."""

    def __init__(self, path: str, global_name: str, why: str):
        self.global_name, self.why = global_name, why
        UnusableInput.__init__(
            self, f"refused: the pickle names {global_name!r}, a code-execution primitive: it "
                  f"{why}. lrdoctor ran nothing; torch.load(weights_only=False) of this file "
                  f"would (--allow-unsafe-global {global_name} reads it as an inert value if "
                  "you trust this file)", path)


class HostileRecord(UnsafePickle):
    """A record the reader maps to data, built in a way torch never writes, that
    ``torch.load(weights_only=False)`` would turn into a call or a read elsewhere (a
    storage id that leaves the archive, a tensor rebuild handed another function)."""

    def __init__(self, path: str, global_name: str, what: str):
        self.global_name, self.why = global_name, what
        UnusableInput.__init__(
            self, f"refused: {what}, which torch never writes; lrdoctor ran nothing, "
                  "torch.load(weights_only=False) of this file would act on it", path)


def refuse(path: str, global_name: str) -> None:
    """Raise :class:`CodeExecutionGlobal` for a dangerous name the user did not allow."""
    why = danger(global_name)
    if why is not None and global_name not in allowed():
        raise CodeExecutionGlobal(path, global_name, why)


def globals_in_pickle(data: Any) -> Iterator[str]:
    """Every global one pickle stream names ("module.name"), read by pickletools (nothing is
    resolved or called). ``STACK_GLOBAL`` takes the two strings before it, which may come
    from the memo, so the strings put in the memo are followed. pickletools is imported
    here: only a pickle outside a torch zip is read this way, never on ``inspect``'s path."""
    import pickletools

    strings: list[str | None] = []  # what each opcode pushed, where it is a string
    memo: dict[int, str | None] = {}
    for op, arg, _pos in pickletools.genops(data):
        name = op.name
        if name in ("GLOBAL", "INST"):
            yield str(arg).replace(" ", ".", 1)
        elif name == "STACK_GLOBAL":
            mod, nm = (strings[-2:] if len(strings) >= 2 else [None, None])
            yield f"{mod}.{nm}" if mod is not None and nm is not None else "?.?"
        if isinstance(arg, str) and "UNICODE" in name:
            strings.append(arg)
        elif name in ("GET", "BINGET", "LONG_BINGET"):  # pickletools: arg is the int index
            strings.append(memo.get(arg) if isinstance(arg, int) else None)
        elif name in ("PUT", "BINPUT", "LONG_BINPUT"):
            if isinstance(arg, int):
                memo[arg] = strings[-1] if strings else None
        elif name == "MEMOIZE":
            memo[len(memo)] = strings[-1] if strings else None
        else:
            strings.append(None)


def dangerous_in_pickle(data: Any) -> list[str]:
    """The code-execution globals a pickle (bytes or a binary file positioned at it) names
    that the user did not allow (the safe reader's data constructors are not such), read
    by name: a survey (the fuzz harness, the tests; the verdict is the reader's, which also
    refuses gadget records). A broken stream still counts up to where it breaks: an
    unpickler would have run what came before."""
    from lrdoctor.read.bytes import safeload  # its allow-list of data constructors (_codecs.encode)

    ok, found = allowed(), set()
    try:
        for g in globals_in_pickle(data):
            if danger(g) and g not in ok and not safeload.allow_listed(g):
                found.add(g)
    except (ValueError, EOFError, UnicodeDecodeError, struct_error):
        pass
    return sorted(found)


def dangerous_in_file(path: str) -> list[str]:
    """The code-execution globals (not allowed by the user) any pickle of ``path`` names, by
    name (see :func:`dangerous_in_pickle`: a survey, not the verdict). A torch zip's
    ``*.pkl`` members, else the file's own pickles (the legacy torch format is five pickles
    in a row, then raw tensor bytes); a file that is neither holds no pickle."""
    import zipfile

    from lrdoctor.read.bytes.storage import open_binary

    found: set[str] = set()
    with open_binary(path) as f:  # a URL too (fix and inspect read from object stores)
        head = f.read(4)
        if head.startswith(b"PK"):
            try:
                with zipfile.ZipFile(f) as zf:
                    for info in zf.infolist():
                        if info.filename.endswith(".pkl"):
                            with zf.open(info) as m:  # streamed: a deflate bomb is not held
                                found.update(dangerous_in_pickle(m))
            except (zipfile.BadZipFile, OSError, ValueError):
                pass
            return sorted(found)
        f.seek(0)
        for _ in range(5):
            start = f.tell()
            if f.read(1) != b"\x80":
                break
            f.seek(start)
            found.update(dangerous_in_pickle(f))
    return sorted(found)


_LENGTH_PREFIX = {-2: (1, "<B"), -3: (4, "<i"), -4: (4, "<I"), -5: (8, "<Q")}  # pickletools'
_UP_TO_NEWLINE = -1  # TAKEN_FROM_ARGUMENT1/4/4U/8U, UP_TO_NEWLINE (constants, kept lazy)


@cache
def _opcodes() -> dict[bytes, tuple[str, int]]:
    """Each opcode's byte -> (name, argument length code): pickletools' table, imported
    when a walk first needs it (inspect's light path imports no pickletools)."""
    import pickletools

    assert pickletools.TAKEN_FROM_ARGUMENT8U == -5 and pickletools.UP_TO_NEWLINE == -1
    return {op.code.encode("latin-1"): (op.name, op.arg.n if op.arg is not None else 0)
            for op in pickletools.opcodes}
_RESOLVES = frozenset({"STACK_GLOBAL", "EXT1", "EXT2", "EXT4"})
_NAME_LINE = 1 << 12  # a module or class name; a longer line is no name


def _dotted(raw: bytes) -> bool:
    try:
        text = raw.decode("ascii")
    except UnicodeDecodeError:
        return False
    return bool(text) and all(part.isidentifier() for part in text.split("."))


def _skip(f: Any, n: int) -> bool:
    """Move past ``n`` bytes of an argument without holding them (False: the stream ends)."""
    if n <= 0:
        return n == 0
    try:
        f.fileno()  # a real file, where a seek costs nothing (not a zip member: inflated)
    except (OSError, ValueError, AttributeError):
        pass
    else:
        if f.seekable():
            here = f.tell()
            end = f.seek(0, os.SEEK_END)
            if here + n > end:
                return False
            f.seek(here + n)
            return True
    while n > 0:
        chunk = f.read(min(n, 1 << 20))
        if not chunk:
            return False
        n -= len(chunk)
    return True


def _skip_line(f: Any) -> bool:
    while True:
        line = f.readline(1 << 20)
        if not line:
            return False
        if line.endswith(b"\n"):
            return True


def resolves_a_global(f: Any, path: str | None, *, pickles: int = 5) -> bool:
    """Whether a stock unpickler reading ``f`` from where it stands would look up a global
    (``GLOBAL``/``INST`` with names that could import, ``STACK_GLOBAL``, an extension code)
    before the stream stops being a pickle: the first thing a payload needs, in any
    protocol (protocol 0 is plain text, so a file need not start with ``\\x80`` to be one).

    Follows up to ``pickles`` pickles in a row (the legacy torch format is five), walking
    opcodes only: arguments are skipped (seeked past in a real file), nothing is built,
    so a file that is no pickle costs the few bytes up to its first invalid opcode, and a
    long one at most ``pickle_ops`` opcodes (refused past that, naming the limit). A
    ``GLOBAL`` whose names could not be imported ends the walk as it ends the unpickler.
    """
    import struct

    ops_left = limits.get("pickle_ops")
    table = _opcodes()
    stops = 0
    while True:
        code = f.read(1)
        if not code:
            return False
        op = table.get(code)
        if op is None:
            return False
        name, n = op
        ops_left -= 1
        if ops_left < 0:
            raise limits.over("pickle_ops", path, "the stream is a pickle longer than that "
                                                  "walked for a global")
        if name in _RESOLVES:
            return True
        if name in ("GLOBAL", "INST"):
            names = [f.readline(_NAME_LINE), f.readline(_NAME_LINE)]
            return all(line.endswith(b"\n") and _dotted(line[:-1]) for line in names)
        if name == "STOP":
            stops += 1
            if stops >= pickles:
                return False
            continue
        if n == _UP_TO_NEWLINE:
            if not _skip_line(f):
                return False
        elif n in _LENGTH_PREFIX:
            size, fmt = _LENGTH_PREFIX[n]
            raw = f.read(size)
            if len(raw) < size or not _skip(f, struct.unpack(fmt, raw)[0]):
                return False
        elif n > 0 and len(f.read(n)) < n:
            return False

