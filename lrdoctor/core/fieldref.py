"""Where a value was read: the one field index shared by reading and repair.

Every number a reader puts into a :class:`~lrdoctor.core.state.RunState` (a counter, a
horizon, an LR) can carry a :class:`FieldRef`: the file it came from and the key
path inside that file as a tuple. A repair edits exactly the fields the reader
named, so reading and repair never re-find a field by their own tests, and a
layout read by content can be repaired by content. Display strings (``file:key``)
are made from a ref, never parsed back into one.
"""

from __future__ import annotations

from dataclasses import dataclass

Key = str | int


@dataclass(frozen=True)
class FieldRef:
    """One field of one file: ``file`` relative to the checkpoint (or absolute), ``key`` the path.

    ``key`` walks the loaded object: dict keys (str or int), list indexes (int) and
    attribute names of opaque objects (str) alike, e.g. ``("optimizer", "param_groups",
    0, "lr")``. ``item`` names a sub-object a container file holds, such as a
    torch.distributed.checkpoint bytes item (``"common_state/shard_0_1"``) or a zip member;
    it is empty for a plain file.
    """

    file: str
    key: tuple[Key, ...] = ()
    item: str = ""

    def child(self, *more: Key) -> FieldRef:
        """The ref of a field below this one."""
        return FieldRef(self.file, self.key + tuple(more), self.item)

    @property
    def dotted(self) -> str:
        """The key path as people write it: ``optimizer.param_groups[0].lr``."""
        out = ""
        for part in self.key:
            if isinstance(part, int):
                out += f"[{part}]"
            else:
                out += f".{part}" if out else part
        return out

    def __str__(self) -> str:
        where = f"{self.file}#{self.item}" if self.item else self.file
        return f"{where}:{self.dotted}" if self.key else where
