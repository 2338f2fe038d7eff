"""The replay's samples: one row per sample as named numpy columns (:class:`Samples`).

Why not a pandas DataFrame: a replay only slices whole columns (sort by step, cut
into steps), which numpy does alone, and importing pandas costs more than a short
replay's whole planning (about 0.2 s idle, 2 s on a loaded machine). pandas stays
for what needs it (``--trace`` files, :meth:`Samples.to_pandas`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import pandas as pd


class Samples:
    """Equal-length named columns; ``samples[name]`` is the column's numpy array.

    Text columns are held as object arrays, as a DataFrame holds them, so a column
    reads the same whether it came through pandas or not.
    """

    __slots__ = ("_cols", "_n")

    def __init__(self, cols: Mapping[str, Any]) -> None:
        out: dict[str, np.ndarray] = {}
        n = None
        for name, v in cols.items():
            arr = np.asarray(v)
            if arr.dtype.kind in "US":
                arr = arr.astype(object)
            if arr.ndim != 1:
                raise ValueError(f"column {name!r} is not one-dimensional")
            if n is None:
                n = len(arr)
            elif len(arr) != n:
                raise ValueError(f"column {name!r} has {len(arr)} rows, not {n}")
            out[str(name)] = arr
        self._cols = out
        self._n = n or 0

    @classmethod
    def of(cls, frame: Samples | pd.DataFrame | Mapping[str, Any]) -> Samples:
        """A :class:`Samples` from itself, a DataFrame or a dict of columns."""
        if isinstance(frame, Samples):
            return frame
        if isinstance(frame, Mapping):
            return cls(frame)
        return cls({str(c): frame[c].to_numpy() for c in frame.columns})

    @property
    def columns(self) -> list[str]:
        return list(self._cols)

    def __getitem__(self, name: str) -> np.ndarray:
        return self._cols[name]

    def __contains__(self, name: object) -> bool:
        return name in self._cols

    def __iter__(self) -> Iterator[str]:
        return iter(self._cols)

    def __len__(self) -> int:
        return self._n

    def to_pandas(self) -> pd.DataFrame:
        import pandas as pd

        return pd.DataFrame(self._cols)


class UniformSamples(Samples):
    """One train step's rows, the same at every step (a static loop's sample counts, no
    lengths): planning makes one plan per dp size (:class:`~lrdoctor.replay.planning.
    StepRuns`), never a row per sample of the run. ``len()`` is one step's rows;
    :attr:`total` the run's."""

    __slots__ = ("steps",)

    def __init__(self, cols: Mapping[str, Any], steps: int) -> None:
        super().__init__(cols)
        self.steps = steps

    @property
    def total(self) -> int:
        return len(self) * self.steps

