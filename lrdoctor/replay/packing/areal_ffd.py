"""AReaL's micro-batches: samples dealt to ranks by FFD, mini-batches and micro-batches by
FFD per rank, each count synced to the largest over the ranks.

Transcribed from AReaL 1.0.4 (the PyPI release; the same code at inclusionAI/AReaL
4aef98d8d818af55b43621aaadba047ae10f4e77):

- ``areal/infra/dist_rollout.py`` ``redistribute_trajectories``: the step's
  trajectories (one sample each in the RLVR workflow) go to dp ranks by
  ``ffd_allocate(seqlens, capacity=1e12, min_groups=dp)``; rank ``r`` takes group ``r``;
- ``areal/trainer/ppo/actor.py`` ``_ppo_update``: each rank's batch is cut into
  ``ppo_n_minibatches`` mini-batches by ``split_padded_tensor_dict_into_mb_list`` with
  ``MicroBatchSpec(n_mbs=ppo_n_minibatches)`` (no token cap: 1e12), one
  ``engine.train_batch`` (one optimizer update) each;
- ``areal/engine/fsdp_engine.py`` ``_prepare_mb_list``: each mini-batch is cut into
  micro-batches with the actor's ``mb_spec`` (``max_tokens_per_mb``, ``n_mbs`` the
  minimum count, ``n_mbs_divisor``);
- ``areal/utils/data.py`` ``allocate_balanced_mbs`` / ``allocate_balanced_mbs_synced``:
  ``ffd_allocate`` then the groups sorted; when the ranks' counts differ every rank
  allocates again with ``n_mbs`` = the largest, until they agree;
- ``areal/utils/seqpack.py`` ``ffd_allocate`` / ``_ffd_allocate``: longest first
  (``np.argsort(-values)``), a new group while fewer than ``min_groups`` or when the
  least-filled group cannot take it, else the group with the fewest items among those
  it fits (the least-filled first on a tie); a value over the capacity raises.

The scheduler steps once per global step (``rl_trainer.py``: ``ppo_update`` then
``step_lr_scheduler``).
"""

from __future__ import annotations

import bisect
from typing import TYPE_CHECKING

from pydantic import Field

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.packing.common import (
    Packer,
    PackerParams,
    StepPlan,
    _assemble_minis,
    _note_over_cap,
)

if TYPE_CHECKING:
    import numpy as np

NO_CAP = int(1e12)  # AReaL's DEFAULT_MAX_TOKENS_PER_MB and the redistribution's capacity


def _ffd(values: np.ndarray, capacity: int, min_groups: int) -> list[list[int]]:
    """``_ffd_allocate`` (its ``n_groups_divisor`` argument is unused there)."""
    import numpy as np

    order = np.argsort(-values)  # AReaL's sort, kind and all: ties fall as numpy puts them
    vals = values.tolist()
    n = len(vals)
    groups: list[list[int]] = []
    sums: list[tuple[float, int]] = []  # (group sum, group id), kept sorted
    for idx in order.tolist():
        v = vals[idx]
        if len(sums) < min_groups or sums[0][0] + v > capacity:
            bisect.insort(sums, (float(v), len(groups)))
            groups.append([idx])
            continue
        i = bisect.bisect_right(sums, (capacity - v, n))
        best = 0
        for j in range(1, i):  # np.argmin: the first of the fewest
            if len(groups[sums[j][1]]) < len(groups[sums[best][1]]):
                best = j
        s, g = sums.pop(best)
        bisect.insort(sums, (float(v + s), g))
        groups[g].append(idx)
    return groups


def ffd_allocate(values: list[int] | np.ndarray, capacity: int, min_groups: int | None,
                 n_groups_divisor: int = 1) -> list[list[int]]:
    """AReaL's ``ffd_allocate``: groups under ``capacity``, at least ``min_groups``, their
    count a multiple of ``n_groups_divisor``. Its ``RuntimeError`` cases are
    :class:`UnusableInput` here (the real run stops there)."""
    import numpy as np

    arr = np.asarray(values, dtype=np.int64)
    if min_groups is None or min_groups < n_groups_divisor:
        min_groups = n_groups_divisor
    if len(arr) and int(arr.max()) > capacity:
        raise UnusableInput(f"AReaL's ffd_allocate raises RuntimeError: a sequence of "
                            f"{int(arr.max())} tokens is over max_tokens_per_mb {capacity}")
    if len(arr) < min_groups:
        raise UnusableInput(f"AReaL's ffd_allocate raises RuntimeError: {len(arr)} sequences "
                            f"are fewer than the {min_groups} groups asked for")
    while True:
        res = _ffd(arr, capacity, min_groups)
        min_groups += n_groups_divisor - min_groups % n_groups_divisor
        if len(res) % n_groups_divisor == 0:
            return res
        if len(arr) < min_groups:
            raise UnusableInput(f"AReaL's ffd_allocate raises RuntimeError: cannot split "
                                f"{len(arr)} sequences into a multiple of {n_groups_divisor}")


def allocate_synced(per_rank_lens: list[np.ndarray], capacity: int, n_mbs: int | None,
                    divisor: int = 1) -> list[list[list[int]]]:
    """``allocate_balanced_mbs_synced`` on every rank at once: each rank's sorted groups,
    all ranks allocating again with the largest count until the counts agree."""
    while True:
        out = [sorted(sorted(g) for g in ffd_allocate(lens, capacity, n_mbs, divisor))
               for lens in per_rank_lens]
        counts = {len(g) for g in out}
        if len(counts) == 1:
            return out
        n_mbs = max(counts)


def plan_areal(fr: dict, dp: int, *, cap: int | None, n_mbs: int | None = 1,
               divisor: int = 1, minibatches: int = 1, group_size: int = 1,
               round_to: int = 1) -> StepPlan:
    """One global step: ``group_size`` consecutive samples are one trajectory (AReaL's
    ``GroupedRolloutWorkflow`` concatenates a prompt's ``gconfig.n_samples`` answers),
    dealt whole to ranks by their summed length."""
    import numpy as np

    notes: dict = {}
    tokens = fr["tokens"]
    n = len(tokens)
    if n == 0:
        return StepPlan([], None, None, notes)
    if "rank" in fr:  # the log says where each sample ran
        rk = fr["rank"].astype(np.int64, copy=False) % dp
        shards = [np.flatnonzero(rk == r) for r in range(dp)]
    else:
        g = max(1, int(group_size))
        starts = np.arange(0, n, g)
        if n % g:
            notes["not_divisible_by_group"] = {"samples": n, "group_size": g}
        traj = np.add.reduceat(tokens, starts)
        shards = [np.concatenate([np.arange(starts[t], min(starts[t] + g, n)) for t in grp])
                  for grp in ffd_allocate(traj, NO_CAP, dp)]
    minis = allocate_synced([tokens[s] for s in shards], NO_CAP, minibatches)
    capacity = int(cap) if cap else NO_CAP
    if cap:  # AReaL raises on a longer sequence: said (LRD209), then planned as if it fit
        _note_over_cap(notes, tokens, int(cap), asserts="AReaL's ffd_allocate raises "
                                                         "RuntimeError")
        capacity = max(capacity, int(tokens.max()))
    per_rank: list[list[list[np.ndarray]]] = [[] for _ in range(dp)]
    for j in range(len(minis[0])):
        rows = [shards[r][minis[r][j]] for r in range(dp)]
        mbs = allocate_synced([tokens[x] for x in rows], capacity, n_mbs, divisor)
        for r in range(dp):
            per_rank[r].append([rows[r][g] for g in mbs[r]])
    mbs_out, bounds = _assemble_minis(per_rank, tokens, round_to)
    return StepPlan(mbs_out, bounds, None, notes)


class ArealParams(PackerParams):
    max_tokens_per_microbatch: int | None = Field(None, ge=1)
    num_micro_batches: int = Field(1, ge=1)  # mb_spec.n_mbs: the minimum count
    n_mbs_divisor: int = Field(1, ge=1)
    minibatches: int = Field(1, ge=1)  # actor.ppo_n_minibatches
    group_size: int = Field(1, ge=1)  # gconfig.n_samples: samples per trajectory
    round_to: int = Field(1, ge=1)


def _plan(p: ArealParams, train, fr, dp) -> StepPlan:
    del train
    return plan_areal(fr, dp, cap=p.max_tokens_per_microbatch, n_mbs=p.num_micro_batches,
                      divisor=p.n_mbs_divisor, minibatches=p.minibatches,
                      group_size=p.group_size, round_to=p.round_to)


PACKER = Packer("areal_ffd", "AReaL ffd_allocate: samples to ranks, mini-batches and "
                "micro-batches by first-fit decreasing, counts synced to the largest rank's",
                ArealParams, _plan, packed=True, token_knob=True, mini_batch_windows=True)
