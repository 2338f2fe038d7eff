"""verl / OpenRLHF dynamic batch size for a whole run at once.

The same plan as :func:`karmarkar_karp.plan_karmarkar_karp`, step for step,
but built for every train step together: rank layouts, mini-batches, counts,
verl >= 0.9.1's raise-until-it-fits loop and the micro-batches are array
operations over all rows of the run, and the Karmarkar-Karp partitions run in
lockstep (:mod:`kk_lockstep`). Why: planned one step at a time, a 10,000-step
run spends seconds in Python per-call overhead (~100,000 small partitions),
which is most of what a default ``replay`` costs. The per-step planner stays
the readable reference; ``tests/replay/test_kk_plan.py`` checks the two give
identical plans and notes on random runs.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from lrdoctor.replay.packing.common import (
    MicroBatch,
    StepPlan,
    _empty,
    _note_over_cap,
    _round_up,
)
from lrdoctor.replay.packing.karmarkar_karp import (
    ASSERTS_ON_LONG_SEQUENCE,
    VERL_FLAVORS,
    first_fit_count,
    note_cannot_fit,
    note_partitions_raised,
    plan_karmarkar_karp,
    verl_workload,
)
from lrdoctor.replay.packing.kk_lockstep import kk_parts, kk_parts_capped


def _ranges(starts: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """Concatenated ``arange(s, s + l)`` for each (s, l), without a Python loop."""
    total = int(lens.sum())
    offs = np.cumsum(lens) - lens
    return np.arange(total, dtype=np.int64) + np.repeat(starts - offs, lens)


def _seg_starts(lens: np.ndarray) -> np.ndarray:
    return np.cumsum(lens) - lens


def _cumcount(keys_sorted: np.ndarray) -> np.ndarray:
    """Position of each element within its run of equal (sorted) keys."""
    n = len(keys_sorted)
    if not n:
        return np.zeros(0, dtype=np.int64)
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(keys_sorted[1:], keys_sorted[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    return np.arange(n, dtype=np.int64) - np.repeat(starts, np.diff(np.append(starts, n)))


def _order(*keys: np.ndarray) -> np.ndarray:
    """Stable order by several non-negative int64 keys (most significant first): one
    argsort of a packed key when they fit in 63 bits (several times faster than
    ``np.lexsort``), else ``np.lexsort``."""
    widths = [int(k.max()).bit_length() if len(k) else 0 for k in keys]
    if sum(widths) > 62:
        return np.lexsort(keys[::-1])
    packed = np.zeros(len(keys[0]), dtype=np.int64)
    for k, w in zip(keys, widths, strict=True):
        packed <<= w
        packed |= k
    return np.argsort(packed, kind="stable")


def _group_ids(keys_sorted: np.ndarray) -> np.ndarray:
    """0, 1, 2, ... numbering of the runs of equal (sorted) keys."""
    if not len(keys_sorted):
        return np.zeros(0, dtype=np.int64)
    return np.concatenate(([0], np.cumsum(keys_sorted[1:] != keys_sorted[:-1])))


def plan_karmarkar_karp_steps(
    frames: Sequence[dict],
    dps: Sequence[int],
    max_tokens: int,
    *,
    mini_per_rank: Sequence[int | None],
    num_micro_batches=None,
    equal_size=False,
    flavor="verl",
    balance_dp=True,
    keep_minibatch=False,
    round_to=1,
) -> list[StepPlan]:
    """One :class:`StepPlan` per frame, equal to ``plan_karmarkar_karp`` on each.

    A step the array path does not model (verl's ``keep_minibatch`` balance of a
    step that is not whole mini-batches, whose tail no rank receives) is planned
    by the per-step reference instead.
    """
    kw = dict(num_micro_batches=num_micro_batches, equal_size=equal_size, flavor=flavor,
              balance_dp=balance_dp, keep_minibatch=keep_minibatch, round_to=round_to)
    odd = []
    if keep_minibatch and flavor in VERL_FLAVORS and balance_dp:
        for i, (f, dp, m) in enumerate(zip(frames, dps, mini_per_rank, strict=True)):
            n = len(f["tokens"])
            if m and "rank" not in f and dp > 1 and n >= dp and n % dp == 0 and n % (m * dp):
                odd.append(i)
    if not odd:
        return _plan_arrays(frames, dps, max_tokens, mini_per_rank=mini_per_rank, **kw)
    out: list[StepPlan | None] = [None] * len(frames)
    for i in odd:
        out[i] = plan_karmarkar_karp(frames[i], dps[i], max_tokens,
                                     mini_per_rank=mini_per_rank[i], **kw)
    rest = [i for i in range(len(frames)) if out[i] is None]
    if rest:
        got = _plan_arrays([frames[i] for i in rest], [dps[i] for i in rest], max_tokens,
                           mini_per_rank=[mini_per_rank[i] for i in rest], **kw)
        for i, plan in zip(rest, got, strict=True):
            out[i] = plan
    return out  # type: ignore[return-value]


def _plan_arrays(frames, dps, max_tokens, *, mini_per_rank, num_micro_batches, equal_size,
                 flavor, balance_dp, keep_minibatch, round_to) -> list[StepPlan]:
    n_steps = len(frames)
    cap = int(max_tokens)
    verl = flavor in VERL_FLAVORS
    fit = flavor == "verl" and bool(cap) and not num_micro_batches
    notes: list[dict] = [{} for _ in range(n_steps)]
    plans: list[StepPlan | None] = [None] * n_steps
    ns = np.array([len(f["tokens"]) for f in frames], dtype=np.int64)
    dp_s = np.array([int(d) for d in dps], dtype=np.int64)
    mpr_s = np.array([int(m or 0) for m in mini_per_rank], dtype=np.int64)
    for s in np.flatnonzero(ns == 0).tolist():
        plans[s] = StepPlan([], None, None, notes[s])
    if not ns.sum():
        return plans  # type: ignore[return-value]

    # ---- every row of the run: step, row in step, tokens, workload
    tokens = np.concatenate([f["tokens"] for f in frames]).astype(np.int64, copy=False)
    step = np.repeat(np.arange(n_steps, dtype=np.int64), ns)
    row = np.arange(len(tokens), dtype=np.int64) - np.repeat(_seg_starts(ns), ns)
    work = verl_workload(tokens) if verl else tokens

    # ---- rank of every row and its position in the rank's list
    has_rank = np.array(["rank" in f for f in frames], dtype=bool)
    balanced = (~has_rank & (ns >= dp_s) & (ns % dp_s == 0) & (dp_s > 1)
                if verl and balance_dp else np.zeros(n_steps, dtype=bool))
    contiguous = ~has_rank & ~balanced
    for s in np.flatnonzero(contiguous & (ns % dp_s != 0)).tolist():
        notes[s]["not_divisible_by_dp"] = {"samples": int(ns[s]), "dp": int(dp_s[s])}
    # Contiguous chunks (nothing rebalances the step): rank and position by arithmetic.
    per = -(-ns // dp_s)
    rank = row // per[step]
    pos = row - rank * per[step]
    if has_rank.any():
        m_col = has_rank[step]
        rk_all = []
        for s in np.flatnonzero(has_rank).tolist():
            rk = np.asarray(frames[s]["rank"]).astype(np.int64, copy=False)
            if len(rk) and (rk.min() < 0 or rk.max() >= dp_s[s]):
                notes[s]["rank_out_of_range"] = {"max_rank": int(rk.max()), "dp": int(dp_s[s])}
                rk = rk % dp_s[s]
            rk_all.append(rk)
        idx = np.flatnonzero(m_col)
        rank[idx] = np.concatenate(rk_all)
        # The log's rank column: each rank's rows in log order.
        o = _order(step[idx], rank[idx], row[idx])
        pos[idx[o]] = _cumcount(step[idx][o] * (int(dp_s.max()) + 1) + rank[idx][o])
    if balanced.any():
        idx = np.flatnonzero(balanced[step])
        rank[idx] = _balance_ranks(idx, step, row, work, dp_s, mpr_s, keep_minibatch)
        # verl orders each rank's rows by (workload, row), light and heavy interleaved.
        o = _order(step[idx], rank[idx], work[idx], row[idx])
        gk = step[idx][o] * (int(dp_s.max()) + 1) + rank[idx][o]
        q = _cumcount(gk)
        gid = _group_ids(gk)
        glen = np.bincount(gid)[gid]
        pos[idx[o]] = np.where(q % 2 == 0, q // 2, glen - 1 - q // 2)

    # ---- instances: (step, mini-batch, rank); items in the rank's list order
    mpr_r = mpr_s[step]
    mini = np.where(mpr_r > 0, pos // np.maximum(mpr_r, 1), 0)
    local = pos - mini * mpr_r
    max_mini = int(mini.max()) + 1
    dpmax = int(dp_s.max())
    order = _order(step, mini, rank, local)
    ikey_o = (step[order] * max_mini + mini[order]) * dpmax + rank[order]  # (step, mini, rank)
    inst = _group_ids(ikey_o)
    n_inst = int(inst[-1]) + 1
    inst_start = np.flatnonzero(np.concatenate(([True], ikey_o[1:] != ikey_o[:-1])))
    i_step = step[order][inst_start]
    i_mini = mini[order][inst_start]
    i_rank = rank[order][inst_start]
    i_len = np.diff(np.append(inst_start, len(order)))
    tok_o = tokens[order]
    row_o = row[order]
    local_o = local[order]
    val_o = work[order]  # what the partitions balance: workloads (verl) or tokens
    i_sum = np.add.reduceat(tok_o, inst_start)
    mkey = i_step * max_mini + i_mini
    mb_id = _group_ids(mkey)  # instances -> their (step, mini-batch)
    n_mb = int(mb_id[-1]) + 1
    m_step = i_step[np.flatnonzero(np.concatenate(([True], mkey[1:] != mkey[:-1])))]

    # ---- micro-batch count per rank, then shared over the mini-batch's ranks
    if num_micro_batches:
        c = np.full(n_inst, int(num_micro_batches), dtype=np.int64)
    elif flavor == "openrlhf":
        c = _first_fit_counts(tok_o, inst_start, i_len, cap)
    else:
        c = -(-i_sum // cap)
    c = np.maximum(np.minimum(c, i_len), 1)
    c_all = np.zeros(n_mb, dtype=np.int64)
    np.maximum.at(c_all, mb_id, c)

    part = np.zeros(len(order), dtype=np.int64)
    k_inst = np.minimum(c_all[mb_id], i_len)
    if fit:
        k_inst = _verl_fit_all(c_all, mb_id, i_len, inst_start, tok_o, val_o, local_o,
                               equal_size, cap, part, m_step, notes)
    else:
        eqs = equal_size & (i_len % k_inst == 0)
        part[:] = kk_parts(val_o, np.append(inst_start, len(order)), k_inst, eqs)
        if verl:
            part[:] = _verl_positions(part, inst_start, i_len, k_inst, val_o, local_o)

    # ---- micro-batches: (step, mini, micro, rank) segments, empty ones included
    mb_count = np.zeros(n_mb, dtype=np.int64)
    np.maximum.at(mb_count, mb_id, k_inst)
    dp_m = dp_s[m_step]
    seg_base = _seg_starts(mb_count * dp_m)  # first segment of each mini-batch
    item_inst = np.repeat(np.arange(n_inst), i_len)
    seg = seg_base[mb_id][item_inst] + part * dp_m[mb_id][item_inst] + i_rank[item_inst]
    total_segs = int((mb_count * dp_m).sum())
    # Items are in (instance, local) order, so a stable sort on the segment alone
    # leaves each segment's rows by local index, as the per-step planner lists them.
    so = np.argsort(seg, kind="stable")
    rows_flat = row_o[so]
    seg_sorted = seg[so]
    sizes = np.bincount(seg_sorted, minlength=total_segs)
    offs = _seg_starts(sizes)
    ne = sizes > 0
    tsum = np.zeros(total_segs, dtype=np.int64)
    tmax = np.zeros(total_segs, dtype=np.int64)
    if ne.any():
        tf = tok_o[so]
        tsum[ne] = np.add.reduceat(tf, offs[ne])
        tmax[ne] = np.maximum.reduceat(tf, offs[ne])
    tmax = _round_up(tmax, round_to)
    ol, sl = offs.tolist(), sizes.tolist()
    views = [rows_flat[a:a + b] if b else _empty() for a, b in zip(ol, sl, strict=True)]
    tsum_l, tmax_l = tsum.tolist(), tmax.tolist()

    # A micro-batch's largest rank token sum, for the per-step notes.
    mb_of_seg = np.repeat(np.arange(int(mb_count.sum())), np.repeat(dp_m, mb_count))
    worst_mb = np.zeros(int(mb_count.sum()), dtype=np.int64)
    np.maximum.at(worst_mb, mb_of_seg, tsum)
    mb_step = np.repeat(m_step, mb_count)

    steps_with = np.flatnonzero(ns > 0)
    first_mb = np.searchsorted(m_step, steps_with)  # mini-batches of each step, in order
    last_mb = np.searchsorted(m_step, steps_with, side="right")
    worst_step = np.zeros(n_steps, dtype=np.int64)
    np.maximum.at(worst_step, mb_step, worst_mb)
    over_step = (np.bincount(mb_step[worst_mb > cap], minlength=n_steps) if cap
                 else np.zeros(n_steps, dtype=np.int64))  # read only where over the cap
    asserts = ASSERTS_ON_LONG_SEQUENCE.get(flavor)
    longest = np.zeros(n_steps, dtype=np.int64)
    np.maximum.at(longest, step, tokens)
    if not cap:
        longest[:] = 0  # no cap: nothing to note
    # Every micro-batch of the run in one pass (its first segment, its dp), then each
    # step takes its slice; a mini-batch closes at its last micro-batch.
    n_all = int(mb_count.sum())
    mb_first = _seg_starts(mb_count)
    mb_dp = np.repeat(dp_m, mb_count)
    mb_lo = np.repeat(seg_base, mb_count) + (np.arange(n_all) - np.repeat(mb_first, mb_count)) * mb_dp
    all_mbs = [MicroBatch(views[lo:lo + d], tmax_l[lo:lo + d], tsum_l[lo:lo + d])
               for lo, d in zip(mb_lo.tolist(), mb_dp.tolist(), strict=True)]
    step_first = mb_first[first_mb]  # each step's first micro-batch, run-wide
    close = (mb_first + mb_count - 1 - step_first.repeat(last_mb - first_mb)).tolist()
    mb_a = step_first.tolist()
    mb_b = np.append(mb_first, n_all)[last_mb].tolist()
    for s, a, b, ma, mb_end in zip(steps_with.tolist(), first_mb.tolist(), last_mb.tolist(),
                                    mb_a, mb_b, strict=True):
        nt = notes[s]
        worst = int(worst_step[s])
        nt["max_micro_batch_tokens"] = worst
        if cap and worst > cap:
            nt["token_cap_exceeded"] = {"max_tokens": worst, "cap": cap,
                                        "micro_batches_over": int(over_step[s])}
        if longest[s] > cap:
            _note_over_cap(nt, frames[s]["tokens"], cap, asserts=asserts)
        plans[s] = StepPlan(all_mbs[ma:mb_end], close[a:b] if mpr_s[s] else None, None, nt)
    return plans  # type: ignore[return-value]


def _first_fit_counts(tok_o, inst_start, i_len, cap) -> np.ndarray:
    """OpenRLHF's first-fit bin count (:func:`first_fit_count`) of every instance at
    once: item p of every instance is placed in the same pass, into its first open
    bin with room, else a new one. Long instances (over 64 rows) use the scalar."""
    n_inst = len(inst_start)
    out = np.zeros(n_inst, dtype=np.int64)
    long = i_len > 64
    for i in np.flatnonzero(long).tolist():
        a = int(inst_start[i])
        out[i] = first_fit_count(tok_o[a:a + int(i_len[i])].tolist(), cap)
    short = np.flatnonzero(~long)
    if not len(short):
        return out
    width = int(i_len[short].max())
    loads = np.zeros((len(short), width), dtype=np.int64)
    count = np.zeros(len(short), dtype=np.int64)
    opened = np.arange(width)[None, :]
    rows = np.arange(len(short))
    for p in range(width):
        act = i_len[short] > p
        x = np.where(act, tok_o[np.minimum(inst_start[short] + p, len(tok_o) - 1)], 0)
        fits = (loads + x[:, None] <= cap) & (opened < count[:, None])
        j = np.where(fits.any(axis=1), fits.argmax(axis=1), count)
        loads[rows[act], j[act]] += x[act]
        count += act & (j == count)
    out[short] = count
    return out


def _balance_ranks(idx, step, row, work, dp_s, mpr_s, keep_minibatch) -> np.ndarray:
    """verl's ``_balance_batch``: an equal-size partition of each step (or, with
    ``keep_minibatch``, of each mini-batch of ``mini_per_rank * dp`` rows) over the
    dp ranks by workload; set ``j`` (heaviest first) goes to rank ``j``. ``idx``: the
    rows of balanced steps, in (step, row) order; returns their ranks."""
    st = step[idx]
    seg_len = dp_s * mpr_s if keep_minibatch else np.zeros_like(dp_s)
    sl = seg_len[st]
    segk = np.where(sl > 0, row[idx] // np.maximum(sl, 1), 0)
    key = st * (int(segk.max()) + 1) + segk
    starts = np.flatnonzero(np.concatenate(([True], key[1:] != key[:-1])))
    bounds = np.append(starts, len(idx))
    k = dp_s[st[starts]]
    return kk_parts(work[idx], bounds, k, np.ones(len(k), dtype=bool))


def _verl_positions(part, inst_start, i_len, k_inst, val_o, local_o):
    """verl's micro-batch order of one rank's partitions: sorted by (workload sum,
    smallest index) descending, then the even places reversed and the odd ones
    after them (the heaviest micro-batch in the middle)."""
    multi = k_inst > 1
    if not multi.all():  # one micro-batch: nothing to order
        out = np.zeros_like(part)
        if multi.any():
            items = _ranges(inst_start[multi], i_len[multi])
            out[items] = _verl_positions(part[items], _seg_starts(i_len[multi]), i_len[multi],
                                         k_inst[multi], val_o[items], local_o[items])
        return out
    n_inst = len(inst_start)
    # Sets numbered run-wide (instance i's sets from set_off[i]): no padding to the
    # largest k, whose micro-batch count one long rank could make large.
    set_off = _seg_starts(k_inst)
    item_inst = np.repeat(np.arange(n_inst), i_len)
    key = set_off[item_inst] + part
    n_sets = int(k_inst.sum())
    wsum = np.bincount(key, weights=val_o.astype(np.float64), minlength=n_sets)
    minloc = np.full(n_sets, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(minloc, key, local_o)
    # Place of each set in its instance, by descending (sum, smallest index).
    isum = wsum.astype(np.int64)
    set_inst = np.repeat(np.arange(n_inst), k_inst)
    o = _order(set_inst, isum.max(initial=0) - isum, minloc.max(initial=0) - minloc)
    q = np.empty(n_sets, dtype=np.int64)
    q[o] = _cumcount(set_inst[o])
    half = (k_inst[set_inst] + 1) // 2
    remap = np.where(q % 2 == 0, half - 1 - q // 2, half + q // 2)
    return remap[key]


def _verl_fit_all(c_all, mb_id, i_len, inst_start, tok_o, val_o, local_o, equal_size, cap,
                  part, m_step, notes):
    """verl >= 0.9.1 for every mini-batch at once: the shared count rises until every
    rank's partitions fit the cap (or reach the smallest rank's row count).

    With many micro-batches (k >= ``_SCALAR_FROM_K``, where partitions cost per
    instance) a try checks the ranks in turn and stops at the first that does not
    fit: the count fails whatever the other ranks give. A try that fits, or the last
    one, has every rank partitioned, which is what the plan keeps; so the counts and
    the partitions are the ones trying every rank would give. Few micro-batches run
    all ranks in one call (one lockstep call per try costs less than one per rank).
    """
    from lrdoctor.replay.packing.kk_lockstep import _SCALAR_FROM_K

    n_inst = len(inst_start)
    n_mb = len(c_all)
    min_rows = np.full(n_mb, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(min_rows, mb_id, i_len)
    first_inst = np.full(n_mb, n_inst, dtype=np.int64)
    np.minimum.at(first_inst, mb_id, np.arange(n_inst, dtype=np.int64))
    rank_pos = np.arange(n_inst, dtype=np.int64) - first_inst[mb_id]
    count = c_all.copy()
    fits = np.zeros(n_mb, dtype=bool)
    k_inst = np.zeros(n_inst, dtype=np.int64)
    active = np.arange(n_mb)
    while len(active):
        act_mask = np.zeros(n_mb, dtype=bool)
        act_mask[active] = True
        k_mb = np.minimum(count, min_rows)
        last_try = count >= min_rows  # partitioned on every rank, fit or not
        all_insts = np.flatnonzero(act_mask[mb_id])
        rounds = np.where(k_mb[mb_id[all_insts]] >= _SCALAR_FROM_K, rank_pos[all_insts], 0)
        over_mb = np.zeros(n_mb, dtype=bool)
        for r in range(int(rounds.max()) + 1 if len(rounds) else 0):
            insts = all_insts[rounds == r]
            insts = insts[~over_mb[mb_id[insts]] | last_try[mb_id[insts]]]
            if not len(insts):
                continue
            k_try = k_mb[mb_id[insts]]
            lens = i_len[insts]
            items = _ranges(inst_start[insts], lens)
            starts = np.concatenate(([0], np.cumsum(lens)))
            eqs = equal_size & (lens % k_try == 0)
            # A try that is not the last may stop at the first set over the cap.
            caps = np.where(last_try[mb_id[insts]], -1, cap)
            # Karmarkar-Karp's own set order: verl's micro-batch order is put once, at
            # the end, on the tries kept (a set's place does not change its sum).
            p, stopped = kk_parts_capped(val_o[items], starts, k_try, eqs, tok_o[items], caps)
            part[items] = p
            k_inst[insts] = k_try
            set_off = _seg_starts(k_try)
            sub_inst = np.repeat(np.arange(len(insts)), lens)
            psum = np.bincount(set_off[sub_inst] + p, weights=tok_o[items].astype(np.float64),
                               minlength=int(k_try.sum()))
            over_inst = (np.maximum.reduceat(psum, set_off) > cap) | stopped
            over_mb[mb_id[insts[over_inst]]] = True
        f = (count[active] <= min_rows[active]) & ~over_mb[active]
        fits[active] = f
        done = f | (count[active] >= min_rows[active])
        count[active[~done]] += 1
        active = active[~done]
    part[:] = _verl_positions(part, inst_start, i_len, k_inst, val_o, local_o)
    raised = count - c_all
    for j in np.flatnonzero(~fits).tolist():
        note_cannot_fit(notes[int(m_step[j])])
    up = raised > 0
    if up.any():
        n_up = np.bincount(m_step[up])
        added = np.bincount(m_step[up], weights=raised[up].astype(np.float64))
        for s in np.flatnonzero(n_up).tolist():
            note_partitions_raised(notes[s], int(n_up[s]), int(added[s]))
    return k_inst
