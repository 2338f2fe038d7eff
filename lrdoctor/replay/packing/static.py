"""Fixed-size micro-batches: ``micro_batch_size`` rows per rank, in order (every framework's default)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from lrdoctor.replay.packing.common import (
    MicroBatch,
    Packer,
    PackerParams,
    StepPlan,
    _empty,
    _get,
    _rank_layout,
    _round_up,
)

if TYPE_CHECKING:
    pass


def plan_static(fr, dp, micro_batch_size, round_to=1, drop_last=False) -> StepPlan:
    """Fixed ``micro_batch_size`` sequences per rank, in order, from each rank's rows;
    ``drop_last``: a rank's short last micro-batch is dropped (DataLoader drop_last)."""
    notes: dict = {}
    mbs, _ = _static_core(fr, dp, micro_batch_size, round_to, notes, drop_last=drop_last)
    return StepPlan(mbs, None, None, notes)


def _static_core(fr, dp, micro_batch_size, round_to, notes, extra=None, drop_last=False):
    """Static micro-batches, plus per micro-step global sums of column ``extra``.

    Every micro-batch is a contiguous run of the rank-ordered rows, so sums and
    maxima come from ``reduceat`` calls over the whole step.
    """
    import numpy as np
    tokens = fr["tokens"]
    perm, bounds = _rank_layout(fr, dp, notes)
    m = max(1, int(micro_batch_size))
    segs = [list(range(bounds[k], bounds[k + 1] - (m - 1 if drop_last else 0), m))
            for k in range(dp)]
    if drop_last:
        notes["dropped_rows"] = int(sum(bounds[k + 1] - bounds[k] - len(segs[k]) * m
                                        for k in range(dp)))
    counts = [len(x) for x in segs]
    count = max(counts, default=0)
    if count == 0:
        return [], []
    if len(set(counts)) > 1:
        notes["uneven_micro_batch_counts"] = counts
    flat_starts = [a for x in segs for a in x]
    tp = tokens[perm]
    sums = np.add.reduceat(tp, flat_starts).tolist()
    maxs = np.maximum.reduceat(tp, flat_starts)
    maxs = _round_up(maxs, round_to).tolist()
    ex = np.add.reduceat(extra[perm], flat_starts).tolist() if extra is not None else None
    ex_step = [0] * count
    off = [0]
    for c in counts:
        off.append(off[-1] + c)
    mbs: list[MicroBatch] = []
    for i in range(count):
        ranks, pl, tk = [], [], []
        for k in range(dp):
            if i < counts[k]:
                a = segs[k][i]
                b = min(a + m, bounds[k + 1])
                ranks.append(perm[a:b])
                pl.append(maxs[off[k] + i])
                tk.append(sums[off[k] + i])
                if ex is not None:
                    ex_step[i] += ex[off[k] + i]
            else:
                ranks.append(_empty())
                pl.append(0)
                tk.append(0)
        mbs.append(MicroBatch(ranks, pl, tk))
    return mbs, ex_step


class StaticParams(PackerParams):
    round_to: int = Field(1, ge=1)


def _plan(p: StaticParams, train, fr, dp) -> StepPlan:
    return plan_static(fr, dp, int(_get(train, "micro_batch_size", 1)), p.round_to,
                       drop_last=bool(_get(train, "drop_last", False)))


PACKER = Packer("static", "every framework: `train.micro_batch_size` rows per rank",
                StaticParams, _plan, packed=False)
