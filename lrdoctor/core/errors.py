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
    """A resource limit stopped reading an untrusted file (``lrdoctor.read.bytes.limits``)."""


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
