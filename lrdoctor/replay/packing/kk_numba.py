"""Karmarkar-Karp compiled with numba, when numba is installed (``pip install
lrdoctor[fast]``): the same procedure as :func:`karmarkar_karp._kk_sets_capped`,
operation for operation, for the instances the lockstep code leaves to the scalar
one (many partitions: verl >= 0.9.1 raising the count until every micro-batch fits,
a few items per partition, ~150 partitions of 640 rows a rank).

Why compiled: those instances take one heap merge per item, each a few list
operations, and CPython spends microseconds on each whatever the code does
(16-30 s per 1M samples); compiled, the same merges take well under a microsecond.
Why optional: numba is a large binary dependency; without it the scalar code gives
the same answers, slower. The equivalence is tested on random instances
(tests/replay/test_kk_numba.py, run where numba is installed), and the scalar code
is itself compared with verl's released function.

How it mirrors the scalar code: a set is identified by its first item (a set's first
item never changes when another set joins it, and a singleton that absorbs the
lightest set of a full state becomes that set's first item), so ``(sum, count,
first)`` orders sets exactly as the scalar lists compare; items find their set by
following ``parent`` links written at each merge. A state is a row of set ids,
lightest first, holding only its non-empty sets (the empty ones are implied before
them), as in the scalar code; the heap holds 4 integer keys per entry, the scalar
code's tuple keys, a strict total order, so the pop sequence is the same whatever the
heap's shape.
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache
from typing import Any

import numpy as np

# Rows x k int64 of state storage per instance beyond which the scalar code is used.
_MAX_ROW_CELLS = 1 << 24


def available() -> bool:
    """numba importable and not turned off (``LRDOCTOR_KK_COMPILED=0``, which
    benchmarks/bench_replay.py sets to time the scalar code beside it)."""
    return os.environ.get("LRDOCTOR_KK_COMPILED", "1") != "0" and _numba()


@cache
def _numba() -> bool:
    return importlib.util.find_spec("numba") is not None


@cache
def _kernels() -> Any:
    from lrdoctor.replay.packing._kk_numba_kernels import group

    return group


def solve_group(vals: np.ndarray, starts: np.ndarray, grp: np.ndarray, k: int, eq: bool,
                out: np.ndarray, toks: np.ndarray | None,
                caps: np.ndarray | None) -> np.ndarray | None:
    """Every instance of ``grp`` solved into ``out``; per instance 0 (done), 1 (stopped
    over its cap) or 2 (an empty partition: the caller's scalar code raises it). None
    when the group is too large for the compiled state storage (the caller falls back)."""
    n = int(starts[grp[0] + 1] - starts[grp[0]]) if len(grp) else 0
    if (n + 1) * k > _MAX_ROW_CELLS:
        return None
    status = np.zeros(len(grp), dtype=np.int64)
    caps_a = caps if caps is not None else np.full(len(starts) - 1, -1, dtype=np.int64)
    _kernels()(vals, vals if toks is None else np.asarray(toks, dtype=np.int64), starts,
               np.asarray(grp, dtype=np.int64),
               int(k), bool(eq), np.asarray(caps_a, dtype=np.int64), out, status)
    return status
