"""LRD130 `resume-file-unreadable`: A file the checkpoint needs to resume is truncated or corrupt

Discovery reads what it can and judges that; a truncated ``scheduler.pt`` beside a
good ``optimizer.pt`` used to be only a note, so a CI gate passed a checkpoint that
cannot be resumed. Each file that could not be read at all (``RunState.unreadable``,
filled by the reader from the scan) is one error naming the file and why.

## Explanation
A file of the checkpoint (scheduler, optimizer, trainer state, a DCP `.metadata`) could not
be read at all: cut short by a crashed or interrupted save, or damaged since. Resuming from
this checkpoint fails, or silently starts that state afresh (a fresh scheduler repeats
warmup). lrdoctor judges what it could read and names the file it could not: never exit 0.

## Example
`checkpoint-8/scheduler.pt`: truncated or corrupt zip checkpoint (no central directory),
beside a readable `optimizer.pt`.

## Fix
Resume from an earlier complete checkpoint, or save again; write checkpoints to a temporary
name and rename them when complete.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity

if TYPE_CHECKING:
    from lrdoctor.core.state import RunState


class UnreadableFile(Evidence):
    file: str
    why: str
    read: tuple[str, ...]  # the checkpoint's files that were read and judged

    def headline(self) -> str | None:
        return f"{self.file.rsplit('/', 1)[-1]} unreadable"


RULE = Rule.from_module(__name__, Severity.ERROR, evidence=(UnreadableFile,))


def check(state: RunState, found: Sequence[Finding]) -> list[Finding]:
    read = tuple(f for f in state.files if f not in state.unreadable)
    return [RULE.finding(f"{file} could not be read ({why}): resuming from this checkpoint "
                         "needs it; what was judged comes from the other files.",
                         UnreadableFile(file, why, read), location=file)
            for file, why in state.unreadable.items()]
