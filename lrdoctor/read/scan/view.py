"""What a layout's claim sees: one typed view, of an input or of one checkpoint read by content.

Every layout is claimed the same way (:func:`lrdoctor.read.layouts.claim`) on a
:class:`ScanView`, at one of two depths of evidence:

- **an input** (``ScanView(path)``): the bounded listing (names only, no file opened),
  taken on first access. The registry's cheap hints are matched against it before any
  layout is imported; a layout recognised by its files (Megatron's ``iter_N``, HF's
  ``trainer_state.json``) claims here, and its reader reads the input.
- **one checkpoint read by content** (:meth:`ScanView.of`): the same listing (the parts of
  the files read) plus what the files hold (the classification
  :func:`lrdoctor.read.scan.reading.scan` made). A framework recognised only by what
  plain ``torch.save`` files hold (verl's ``lr_scheduler`` inside
  ``extra_state_*.pt``, Composer's ``state.timestamp``) claims here.

Why the content is not classified for an input's claim: the generic content read
classifies every checkpoint it reads anyway, so the claim is made on that classification
and no file is read twice; and each checkpoint of a run is recognised on its own (the
generic content read is the reader of such files: ``--format torchsave`` and the repair
name it, and a framework normalises what it read).
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from lrdoctor.read.scan.listing import Tree, list_tree

if TYPE_CHECKING:
    from lrdoctor.read.scan.shapes import Scan


class ScanView:
    """The evidence a layout's ``claims`` judges: the listing, and the content where a
    content read classified it (None for an input)."""

    def __init__(self, path: Path, *, tree: Tree | None = None,
                 content: Scan | None = None) -> None:
        self.path = path
        self.content = content
        if tree is not None:
            self.__dict__["tree"] = tree  # the listing is known: never walked again

    @classmethod
    def of(cls, content: Scan) -> ScanView:
        """The view of one checkpoint already read by content: its names are the parts of
        the files read (and the checkpoint's own name), its content is ``content``."""
        root = content.checkpoint.path
        names = {part for f in content.files_read for part in Path(f).parts}
        names.add(root.name)
        return cls(root, tree=Tree(root, frozenset(names), True), content=content)

    @cached_property
    def tree(self) -> Tree:
        """The bounded listing of the input (names only)."""
        return list_tree(self.path)

    @property
    def names(self) -> frozenset[str]:
        return self.tree.names

    @property
    def complete(self) -> bool:
        """False when a bound cut the listing short (every hint then matches)."""
        return self.tree.complete

    @property
    def keys(self) -> frozenset[str]:
        """The key paths the content classification found (empty without content)."""
        sc = self.content
        return frozenset(f.key for f in sc.found) if sc is not None else frozenset()
