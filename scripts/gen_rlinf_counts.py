"""Write tests/data/rlinf/rlinf_counts.json: RLinf's own dynamic micro-batch counts.

Run once with RLinf on the path (its pure functions import with torch alone):

    pip install --no-deps --target /tmp/rlinf030 rlinf==0.3.0
    PYTHONPATH=/tmp/rlinf030:. python scripts/gen_rlinf_counts.py

It draws a seeded batch log shaped like tests/data/rlinf/grpo_dynamic.yaml (6 rollout
steps x 128 sequences, dp 4, 2 global batches per step) and, per step and global batch,
runs ``rlinf/utils/data_iter_utils.py get_iterator_dynamic``'s counting on each dp rank's
rows with RLinf's own ``get_seqlen_BFD_partitions`` and ``get_seqlen_balanced_partitions``;
its two all-reduces (MAX of the counts, MIN of "every partition fits") are taken by hand
across the ranks, since the real function needs CUDA and a process group. Rank r holds
the r-th contiguous quarter of a step's rows and global batch j its j-th half
(``get_iterator_k_split`` with ``shuffle_rollout: False``).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

STEPS, PER_STEP, DP, N_MINI, CAP = 6, 128, 4, 2, 8192
OUT = Path(__file__).resolve().parents[1] / "tests" / "data" / "rlinf" / "rlinf_counts.json"


def lengths() -> list[list[int]]:
    rng = np.random.default_rng(30)
    return [np.clip(rng.lognormal(7.3, 0.8, PER_STEP), 64, CAP).astype(int).tolist()
            for _ in range(STEPS)]


def rlinf_counts(lens_by_rank: list[list[int]], cap: int) -> tuple[int, list[list[int]]]:
    from rlinf.utils.data_iter_utils import (
        get_seqlen_balanced_partitions,
        get_seqlen_BFD_partitions,
    )

    n = max(len(get_seqlen_BFD_partitions(ln, cap)) for ln in lens_by_rank)
    while True:
        parts = [get_seqlen_balanced_partitions(seqlen_list=ln, k_partitions=n,
                                                equal_size=False) for ln in lens_by_rank]
        if all(sum(ln[i] for i in p) <= cap for ln, ps in zip(lens_by_rank, parts, strict=True)
               for p in ps):
            # tokens per micro-batch, per rank, in RLinf's partition order
            return n, [[sum(ln[i] for i in p) for p in ps]
                       for ln, ps in zip(lens_by_rank, parts, strict=True)]
        n += 1


def main() -> None:
    import rlinf

    steps = lengths()
    per_rank, per_mini = PER_STEP // DP, PER_STEP // DP // N_MINI
    out: dict = {"source": f"rlinf {getattr(rlinf, '__version__', '0.3.0')} "
                           "data_iter_utils (get_seqlen_BFD_partitions, "
                           "get_seqlen_balanced_partitions)",
                 "cap": CAP, "dp": DP, "n_minibatches": N_MINI, "lengths": steps,
                 "counts": [], "tokens": []}
    for lens in steps:
        ranks = [lens[r * per_rank:(r + 1) * per_rank] for r in range(DP)]
        counts, toks = [], []
        for j in range(N_MINI):
            mini = [rk[j * per_mini:(j + 1) * per_mini] for rk in ranks]
            n, t = rlinf_counts(mini, CAP)
            counts.append(n)
            toks.append(t)
        out["counts"].append(counts)
        out["tokens"].append(toks)
    OUT.write_text(json.dumps(out, separators=(",", ":")) + "\n")
    print(OUT, out["counts"])


if __name__ == "__main__":
    main()
