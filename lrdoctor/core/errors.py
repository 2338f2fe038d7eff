"""Errors that become exit code 2 with a single line of text (never a traceback)."""

from __future__ import annotations

from typing import Any


def one_line(text: str) -> str:
    """``text`` as one printable line: a name taken from a hostile file (a pickle global,
    a path) may hold newlines, carriage returns or form feeds; they are shown escaped."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


class UnusableInput(Exception):
    """The input could not be used. ``str(exc)`` is the one line shown to the user.

    The path and the message are kept apart (``exc.path``, ``exc.message``): a caller that
    rewords or re-raises takes ``exc.message``, never a split of the joined line.
    """

    def __init__(self, message: str, path: str | None = None,
                 detail: dict[str, Any] | None = None):
        self.path = path
        self.message = one_line(message)
        # A structured record of what was looked at (``lrdoctor check --json`` shows it as
        # the LRD303 finding's evidence); the one line stays the message.
        self.detail = detail
        super().__init__(one_line(f"{path}: {message}" if path else message))

    def inside(self, root: str) -> UnusableInput:
        """This refusal located in the input ``root`` the user named, keeping its type
        (and so LRD303's advice). Why: a repair names the file it refused by its name inside
        the checkpoint (``scheduler.pt``); joined naively with a one-file input that name
        was printed twice (``X.pt: X.pt: ...``). No file named: ``root``; a name inside
        ``root``: ``root/name``, or ``root`` itself when ``root`` is that file; a path
        already under ``root`` or absolute: unchanged."""
        import copy
        import os
        from pathlib import PurePosixPath

        if self.path is not None and (os.path.isabs(self.path) or "://" in self.path
                                      or self.path == root or self.path.startswith(
                                          root.rstrip("/") + "/")):
            return self
        if self.path is None or (PurePosixPath(root).name == self.path
                                 and not os.path.isdir(root)):
            where = root
        else:
            where = f"{root.rstrip('/')}/{self.path}"
        new = copy.copy(self)
        new.path = where
        new.args = (one_line(f"{where}: {self.message}"),)
        return new


class NotText(UnusableInput):
    """A file read as text holds binary content (not UTF-8)."""


class NotParsed(UnusableInput):
    """A text file is not valid in its language (``language``: "JSON", "YAML", "CSV")."""

    def __init__(self, language: str, message: str, path: str | None = None):
        self.language = language
        super().__init__(message, path)


class UnsafePickle(UnusableInput):
    """A pickle asked for a global that is not on the allow-list."""

    def __init__(self, path: str, global_name: str):
        self.global_name = global_name
        super().__init__(
            f"refused to load: it asks for '{global_name}', which is not on lrdoctor's "
            "allow-list of harmless classes (nothing was executed)",
            path,
        )


class LimitExceeded(UnusableInput):
    """A resource limit stopped reading an untrusted file (``lrdoctor.read.bytes.limits``);
    ``env``: the environment variable that raises it (LRD303's advice names it)."""

    env: str | None = None


class NotFound(UnusableInput):
    """The named file or folder does not exist (or is not where the caller looked)."""


class NotRecognised(UnusableInput):
    """The input exists but holds nothing lrdoctor reads as a checkpoint (``detail``:
    what was scanned)."""


class Corrupt(UnusableInput):
    """The file is empty, truncated or corrupt: its bytes end or break where its own
    format says they go on."""


def cannot_read(exc: OSError, path: object) -> UnusableInput:
    """The one line for an OS error reading ``path``: :class:`NotFound` when it is gone,
    so that the advice (LRD303) follows the cause."""
    cls = NotFound if isinstance(exc, FileNotFoundError) else UnusableInput
    return cls(f"cannot read: {exc.strerror or exc}", str(path))


class BadKey(UnusableInput):
    """A configuration is wrong at ``key`` (``[tool.lrdoctor]``'s
    :class:`~lrdoctor.ci.config.ConfigError` is one): the fix names the key."""

    key: str


def reason(exc: BaseException) -> str:
    """What went wrong, without the file name: an ``OSError``'s text repeats the path
    (``[Errno 2] No such file or directory: 'X'``), and the one line names it already."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
