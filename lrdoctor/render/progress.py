"""Progress bars on stderr for long work (a replay's micro-batches, a fix's big copies).

Both stay off when stderr is not a terminal or the output is machine-readable, so
logs and pipes get only the document.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class CopyBar:
    """A bytes bar for the files ``repair.write_fix`` copies (its ``progress`` hook)."""

    def __init__(self) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            Progress,
            TextColumn,
            TransferSpeedColumn,
        )

        self.p = Progress(TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
                          TransferSpeedColumn(), console=Console(stderr=True), transient=True)

    def add_task(self, *a, **kw):
        self.p.start()
        return self.p.add_task(*a, **kw)

    def update(self, *a, **kw):
        self.p.update(*a, **kw)

    def stop(self):
        self.p.stop()


def copy_bar(quiet: bool) -> CopyBar | None:
    """A :class:`CopyBar` on a terminal, else None (write_fix then reports nothing)."""
    if quiet or not sys.stderr.isatty():
        return None
    return CopyBar()


@contextmanager
def stage_bar() -> Iterator[Callable[[str, int, int], None]]:
    """A ``progress(stage, done, total)`` callback drawing one bar per stage (replay)."""
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskID,
        TextColumn,
        TimeRemainingColumn,
    )

    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                  TimeRemainingColumn(), console=Console(stderr=True),
                  transient=True) as bar:
        tasks: dict[str, TaskID] = {}

        def progress(stage: str, done: int, total: int) -> None:
            if stage not in tasks:
                tasks[stage] = bar.add_task(stage, total=total)
            if done % 16 == 0 or done == total:
                bar.update(tasks[stage], completed=done)

        yield progress
