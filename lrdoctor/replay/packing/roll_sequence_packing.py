"""ROLL ``use_sequence_packing`` (megatron strategy), ``sequence_packing_args.algorithm:
load_balance``: each rank's mini-batch packed into a count of micro-batches set by tokens.

Read in ROLL (``roll/utils/sequence_packing.py``, ``LoadBalancePacker``; defaults in
``roll/configs/worker_config.py``, ``SequencePackingConfig``), 2026-11:

- a rank's mini-batch is ``per_device_train_batch_size x gradient_accumulation_steps``
  rows (one optimizer step); rows reach ranks in contiguous chunks;
- each length is rounded up to the pad factor (``lcm(16, tp)``, or
  ``lcm(16, 2 x cp x tp)`` with context parallelism);
- micro-batches = ``ceil(sum of rounded lengths / max_packed_sequence_length_train)``,
  at most the rows, at least ``min_num_micro_batches_train``; the MAX over dp ranks
  (an all-reduce), rounded up to a multiple of the virtual pipeline size;
- rows are split into that many partitions by Karmarkar-Karp on the workload
  ``24576 x len + len^2`` (``get_seqlen_balanced_partitions``, equal sizes not
  required).

ROLL asserts that ``max_packed_sequence_length_train`` is at least the batch's
padded width; a longer sequence is noted (the real run stops there).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import Field

from lrdoctor.replay.packing.common import (
    Packer,
    PackerParams,
    StepPlan,
    _assemble_minis,
    _get,
    _note_over_cap,
    _rank_shards,
)
from lrdoctor.replay.packing.karmarkar_karp import karmarkar_karp

if TYPE_CHECKING:
    import numpy as np

ASSERTS = ("ROLL's LoadBalancePacker asserts max_packed_sequence_length_train >= the "
           "batch's sequence length")


class RollSequencePackingParams(PackerParams):
    max_tokens_per_microbatch: int = Field(..., ge=1)  # max_packed_sequence_length_train
    round_to: int = Field(16, ge=1)  # the pad factor: lcm(16, tp) or lcm(16, 2 x cp x tp)
    min_micro_batches: int = Field(1, ge=1)  # min_num_micro_batches_train
    virtual_pipeline: int = Field(1, ge=1)  # the count is rounded up to a multiple of it


def _workload(lens: np.ndarray) -> list[int]:
    return (24576 * lens + lens * lens).tolist()


def plan_roll_sequence_packing(fr: dict, dp: int, max_tokens: int, *, rows_per_update: int,
                               round_to: int = 16, min_micro_batches: int = 1,
                               virtual_pipeline: int = 1) -> StepPlan:
    import numpy as np

    notes: dict = {}
    tokens = fr["tokens"]
    if len(tokens) == 0:
        return StepPlan([], None, None, notes)
    r = max(1, int(round_to))
    padded = -(-tokens // r) * r
    shards = _rank_shards(fr, dp, notes)
    minis = [[s[i:i + rows_per_update] for i in range(0, len(s), rows_per_update)] or [s]
             for s in shards]
    per_rank_minis: list[list[list[np.ndarray]]] = [[] for _ in range(dp)]
    for j in range(max(len(m) for m in minis)):
        rows_j = [m[j] if j < len(m) else np.zeros(0, dtype=np.int64) for m in minis]
        counts = []
        for rows in rows_j:
            if not len(rows):
                continue
            c = -(-int(padded[rows].sum()) // int(max_tokens))
            counts.append(max(min(max(1, c), len(rows)), int(min_micro_batches)))
        count = max(counts, default=0)
        if count and virtual_pipeline > 1:
            count = -(-count // virtual_pipeline) * virtual_pipeline
        for k, rows in enumerate(rows_j):
            if not len(rows):
                per_rank_minis[k].append([])
                continue
            if count > len(rows):
                notes["more_micro_batches_than_rows"] = {"rows": int(len(rows)), "count": count}
            parts = karmarkar_karp(_workload(padded[rows]), count, equal_size=False)
            per_rank_minis[k].append([rows[np.asarray(p, dtype=np.int64)] for p in parts if p])
    mbs, bounds = _assemble_minis(per_rank_minis, padded, 1)
    _note_over_cap(notes, padded, int(max_tokens), ASSERTS)
    return StepPlan(mbs, bounds, None, notes)


def _plan(p: RollSequencePackingParams, train, fr, dp) -> StepPlan:
    rows = int(_get(train, "micro_batch_size", 1)) * int(_get(train, "gradient_accumulation", 1))
    return plan_roll_sequence_packing(fr, dp, p.max_tokens_per_microbatch, rows_per_update=rows,
                                      round_to=p.round_to,
                                      min_micro_batches=p.min_micro_batches,
                                      virtual_pipeline=p.virtual_pipeline)


PACKER = Packer("roll_sequence_packing", "ROLL `use_sequence_packing` (megatron, "
                "`load_balance`): per rank and update, micro-batches by packed tokens",
                RollSequencePackingParams, _plan, packed=True, token_knob=True,
                mini_batch_windows=True)
