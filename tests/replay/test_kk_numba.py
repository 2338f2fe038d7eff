"""The compiled Karmarkar-Karp (numba, optional) gives the scalar code's partitions.

The scalar ``_kk_sets_capped`` is compared with verl's and OpenRLHF's released
functions elsewhere (tests/replay/test_replay_peers.py); here the compiled kernel
must give every item the same final set, stop on the same instances when a cap is
passed, and leave the empty-partition error to the scalar code, on random instances:
ties, equal-size, n == k, k == 1, many partitions of a few items (verl >= 0.9.1's
count search), caps on another column (verl's fit test). Without numba
(``pip install lrdoctor[fast]``) the same kernel runs as Python, on fewer cases.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

from lrdoctor.replay.packing import kk_numba
from lrdoctor.replay.packing.karmarkar_karp import _kk_sets_capped

# Without numba the kernel runs as plain Python (the replay then never uses it): fewer
# cases, the same checks.
SEEDS = 300 if kk_numba.available() else 60


def _scalar(vals, toks, k, eq, cap):
    try:
        sets = _kk_sets_capped(vals, k, eq, toks, cap)
    except ValueError:
        return "error"
    if sets is None:
        return "stopped"
    pos = [0] * len(vals)
    for j, s in enumerate(sets):
        for i in s[3]:
            pos[i] = j
    return pos


@pytest.mark.parametrize("seed", range(SEEDS))
def test_compiled_equals_scalar(seed):
    rng = random.Random(seed)
    k = rng.choice([1, 2, 3, 8, 9, 40, 150])
    eq = rng.random() < 0.3
    per = rng.choice([1, 1, 2, 4, 7])
    n = k * per if eq else k + rng.randint(0, 6 * k)
    spread = rng.choice([3, 50, 3000])
    vals = [rng.randint(0 if rng.random() < 0.05 else 1, spread) for _ in range(n)]
    toks = [v if rng.random() < 0.5 else rng.randint(1, 4000) for v in vals]
    cap = rng.choice([None, None, max(toks) + rng.randint(0, sum(toks) // max(1, k))])
    want = _scalar(vals, toks, k, eq, cap)
    out = np.full(n, -1, dtype=np.int64)
    status = kk_numba.solve_group(np.asarray(vals, dtype=np.int64), np.array([0, n]),
                                  np.array([0]), k, eq, out, np.asarray(toks, dtype=np.int64),
                                  np.array([-1 if cap is None else cap]))
    assert status is not None
    got = {0: out.tolist(), 1: "stopped", 2: "error"}[int(status[0])]
    assert got == want
