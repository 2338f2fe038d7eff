"""verl's and OpenRLHF's dynamic batch size: Karmarkar-Karp balanced partitions."""

from __future__ import annotations

import heapq
from bisect import insort
from typing import TYPE_CHECKING, Any

from pydantic import Field, model_validator

from lrdoctor.replay.packing.common import (
    MicroBatch,
    Packer,
    PackerParams,
    StepPlan,
    _mb_from_rank_lists,
    _mini_batches_per_rank,
    _note_over_cap,
    _rank_shards,
)

if TYPE_CHECKING:
    import numpy as np

# Both stop the run on one sequence longer than the cap (read in their source, 2026-11):
# verl's rearrange_micro_batches asserts max_token_len >= the batch's sequence length
# (the padded width, so already at the longest sequence); OpenRLHF's
# get_minimum_num_micro_batch_size raises ValueError past max_tokens_per_gpu.
ASSERTS_ON_LONG_SEQUENCE = {
    "verl": "verl's rearrange_micro_batches asserts max_token_len >= the sequence length",
    "verl_ceildiv": "verl's rearrange_micro_batches asserts max_token_len >= the sequence length",
    "openrlhf": "OpenRLHF's get_minimum_num_micro_batch_size raises ValueError",
}


def karmarkar_karp(values, k: int, equal_size: bool = False) -> list[list[int]]:
    """Largest differencing method for k-way balanced partitioning.

    Same procedure and tie-breaking as verl / OpenRLHF: items sorted ascending;
    with ``equal_size`` each initial state takes k consecutive sorted items;
    repeatedly merge the two states of largest spread, pairing the largest set
    of one with the smallest of the other. Returns k sorted index lists.

    Why plain integer keys reproduce verl's object comparisons exactly: verl
    orders sets by (sum, item count, item list) and states by (spread, largest
    set). Every item sits in exactly one set, so two different non-empty sets
    never share their first item, and comparing item lists stops at the first
    item's index. A set is therefore ``[sum, count, first index, items]`` (empty:
    first -1), and a state's heap key ``(-spread, -sum, -count, -first)`` of its
    largest set is a strict total order: the heap's pop sequence, and so the
    result, cannot depend on how ties would have been broken. The randomized
    comparison against verl's real function (tests/replay/test_replay_peers.py) checks it.
    """
    return [sorted(s[3]) for s in _kk_sets([int(v) for v in values], k, equal_size)]


def _kk_sets(vals: list[int], k: int, equal_size: bool) -> list[list]:
    """Karmarkar-Karp's final sets ``[sum, count, first, items, sum]``, heaviest first
    (:func:`_kk_sets_capped` without a cap)."""
    sets = _kk_sets_capped(vals, k, equal_size, vals, None)
    assert sets is not None  # no cap: never stops early
    return sets


def _kk_sets_capped(vals: list[int], k: int, equal_size: bool, toks: list[int],
                    cap: int | None) -> list[list] | None:
    """Karmarkar-Karp's final sets ``[sum, count, first, items, toks]``, heaviest first;
    None as soon as a set's ``toks`` sum passes ``cap``.

    Why the cap: sets only ever merge, so a set over the cap in any state is part
    of a final set over it; verl >= 0.9.1 then rejects the count whatever the rest
    of the run gives, and stopping there saves the rest of a try it discards. The
    fifth field (the sum of ``toks``) is never compared: sets differ by ``first``.

    Merges that involve a one-item state (most of them with few items per
    partition) touch one set instead of looping over k, and ``n == k`` is
    forced (one item each); the pop order is unchanged, so the result is too.
    A state holds only its non-empty sets (the k - len empty ones, all equal and
    lighter than any non-empty set, are implied at its end): with many
    partitions (k in the hundreds, a few items each) most states have a few
    sets, so a merge costs what the two states hold, not k. The pairing is
    verl's: set i of one state meets set k-1-i of the other; a state's spread
    counts an empty set as 0. ``vals`` and ``toks`` are Python ints already. A
    state's sets are kept lightest first (its empty sets implied at the front), so
    placing a changed set is the C ``bisect.insort`` (no Python-level search).
    """
    lim = float("inf") if cap is None else cap
    n = len(vals)
    if n < k:
        raise ValueError(f"{n} items cannot fill {k} partitions")
    if equal_size and n % k:
        raise ValueError(f"equal_size needs {n} divisible by {k}")
    if k == 1:
        t = sum(toks)
        return [[sum(vals), n, 0, list(range(n)), t]] if t <= lim else None
    ordered = sorted(zip(vals, range(n), strict=True))
    # Heterogeneous entries by design: a singleton (6 fields) or a state (5 fields).
    heap: list[tuple[Any, ...]] = []
    push = heap.append
    if not equal_size:
        # Forced opening: the heaviest singleton pops first with the next one, and
        # while the merged state keeps an empty set its key stays that singleton's
        # key, the smallest in the heap; so the k heaviest items end as one state
        # of k singletons (k - 1 merges saved; with n == k, the whole answer).
        heaviest: list[list[Any]] = [[v, 1, i, [i], toks[i]] for v, i in ordered[n - k :]]
        if max(x[4] for x in heaviest) > lim:
            return None
        if n == k:
            heaviest.reverse()
            return heaviest
        ordered = ordered[: n - k]
        push((heaviest[0][0] - heaviest[-1][0], -heaviest[-1][0], -1, -heaviest[-1][2],
              heaviest))
    if equal_size:
        for off in range(0, n, k):
            sets: list[list[Any]] = [[v, 1, i, [i], toks[i]] for v, i in ordered[off: off + k]]
            if max(x[4] for x in sets) > lim:
                return None
            top = sets[-1]
            push((sets[0][0] - top[0], -top[0], -1, -top[2], sets))
    else:
        for v, i in ordered:
            push((-v, -v, -1, -i, v, i))
    heapq.heapify(heap)
    pop = heapq.heappop
    hpush = heapq.heappush
    while len(heap) > 1:
        ea = pop(heap)
        eb = pop(heap)
        if len(ea) == 6:
            if len(eb) == 6:  # the common merge: two singletons, a's item sorts first
                va = ea[4]
                ta, tb = toks[ea[5]], toks[eb[5]]
                if ta > lim or tb > lim:
                    return None
                a = [[eb[4], 1, eb[5], [eb[5]], tb], [va, 1, ea[5], [ea[5]], ta]]
                hpush(heap, (-va if k > 2 else eb[4] - va, -va, -1, -ea[5], a))
                continue
            a = eb[4]
            # a's item meets b's lightest set (an empty one while b has fewer than k)
            va = ea[4]
            t = toks[ea[5]]
            if len(a) == k:
                y = a.pop(0)
                t += y[4]
                insort(a, [va + y[0], 1 + y[1], ea[5], [ea[5]] + y[3], t])
            else:
                insort(a, [va, 1, ea[5], [ea[5]], t])
            if t > lim:
                return None
        else:
            a = ea[4]
            if len(eb) == 6:  # b's item meets a's lightest set
                if len(a) == k:
                    x = a.pop(0)
                    x[0] += eb[4]
                    x[1] += 1
                    x[3].append(eb[5])
                    x[4] += toks[eb[5]]
                else:
                    x = [eb[4], 1, eb[5], [eb[5]], toks[eb[5]]]
                if x[4] > lim:
                    return None
                insort(a, x)
            else:
                b = eb[4]
                p = len(a)
                q = len(b)
                lo = k - q  # a's i-th heaviest set meets b's (k-1-i)-th from here on
                if lo < p:
                    for i in range(lo, p):
                        x = a[p - 1 - i]
                        y = b[q - k + i]
                        x[0] += y[0]
                        x[1] += y[1]
                        x[3] += y[3]
                        x[4] += y[4]
                        if x[4] > lim:
                            return None
                    a.extend(b[q - k + p:])  # b's sets that meet a's empty ones
                else:
                    a.extend(b)
                a.sort()
        top = a[-1]
        low = a[0][0] if len(a) == k else 0
        hpush(heap, (low - top[0], -top[0], -top[1], -top[2], a))
    sets = heap[0][4]
    if len(sets) < k or not sets[0][1]:
        raise ValueError("an empty partition")
    sets.reverse()
    return sets


def verl_workload(lens: np.ndarray) -> np.ndarray:
    """verl's attention-aware cost per sequence (7B calibration): 24576*s + s^2."""
    import numpy as np
    lens = lens.astype(np.int64)
    return 24576 * lens + lens * lens


def first_fit_count(lens, cap: int) -> int:
    """OpenRLHF's micro-batch count: first-fit in log order, no sorting."""
    bins: list[int] = []
    for ln in lens:
        for i, b in enumerate(bins):
            if b + ln <= cap:
                bins[i] = b + ln
                break
        else:
            bins.append(ln)
    return len(bins)


VERL_FLAVORS = ("verl", "verl_ceildiv")


def _workloads(lens: list[int]) -> list[int]:
    """:func:`verl_workload` on a short Python list (cheaper than numpy at this size)."""
    return [24576 * x + x * x for x in lens]


def _verl_order(w: list[int], k: int, equal_size: bool) -> list[list[int]]:
    """verl's micro-batches of one rank: KK on the workload, heaviest in the middle."""
    sets = _kk_sets(w, k, equal_size and len(w) % k == 0)
    keyed = sorted(((s[0], min(s[3]), s[3]) for s in sets), reverse=True)
    parts = [sorted(t[2]) for t in keyed]
    return parts[::2][::-1] + parts[1::2]


def _balance_dp(tokens: Any, dp: int, mini_batch_size: int | None = None) -> list[Any]:
    """verl's ``_balance_batch``: equal-size KK of the step over dp ranks on the workload.

    With ``keep_minibatch`` (``mini_batch_size`` rows), each mini-batch is balanced
    over the ranks on its own and the ranks' lists are concatenated, so a mini-batch
    keeps its rows. Either way each rank's rows are then ordered light/heavy
    interleaved (verl sorts the whole rank list by workload, which reshuffles rows
    across mini-batches again: the order decides which rows share a mini-batch,
    since ranks cut their rows into consecutive mini-batches).
    """
    import numpy as np
    work = verl_workload(tokens).tolist()
    if mini_batch_size:
        lists: list[list[int]] = [[] for _ in range(dp)]
        for i in range(len(work) // mini_batch_size):
            off = i * mini_batch_size
            sub = work[off : off + mini_batch_size]
            for j, part in enumerate(karmarkar_karp(sub, dp, equal_size=True)):
                lists[j].extend(x + off for x in part)
    else:
        lists = karmarkar_karp(work, dp, equal_size=True)
    shards = []
    for p in lists:
        p.sort(key=lambda x: (work[x], x))
        shards.append(np.asarray(p[::2] + p[1::2][::-1], dtype=np.int64))
    return shards


def plan_karmarkar_karp(
    fr,
    dp,
    max_tokens,
    *,
    num_micro_batches=None,
    equal_size=False,
    flavor="verl",
    mini_per_rank=None,
    balance_dp=True,
    keep_minibatch=False,
    round_to=1,
) -> StepPlan:
    """verl / OpenRLHF dynamic batch size: balanced partitions.

    dp split: the log's ``rank`` column, else (verl's balance_batch) a KK
    equal-size partition of the step over dp ranks by workload (per mini-batch
    with ``keep_minibatch``), else contiguous chunks (OpenRLHF). Each rank's
    mini-batch is split into N micro-batches by KK, where N starts at
    ``ceil(sum/max_tokens)`` capped at the row count (verl) or OpenRLHF's
    first-fit count, then the max over dp ranks. verl >= 0.9.1 (``flavor='verl'``)
    then raises N, on every rank together, until every partition's token sum fits
    the cap; before 0.9.1 (``flavor='verl_ceildiv'``) and in OpenRLHF the
    balanced sums can exceed the cap: the largest micro-batch token sum is
    reported in notes.
    """
    import numpy as np
    notes: dict = {}
    tokens = fr["tokens"]
    n = len(tokens)
    cap = int(max_tokens)
    if n == 0:
        return StepPlan([], None, None, notes)
    verl = flavor in VERL_FLAVORS
    if "rank" in fr:
        shards = _rank_shards(fr, dp, notes)
    elif verl and balance_dp and n >= dp and n % dp == 0 and dp > 1:
        mini_global = mini_per_rank * dp if keep_minibatch and mini_per_rank else None
        shards = _balance_dp(tokens, dp, mini_global)
    else:
        shards = _rank_shards(fr, dp, notes)
    minis = _mini_batches_per_rank(shards, mini_per_rank)
    n_minis = max(len(m) for m in minis)
    mbs: list[MicroBatch] = []
    bounds: list[int] = []
    worst = 0
    raised: list[int] = []
    for j in range(n_minis):
        rows_j = [m[j] if j < len(m) else np.zeros(0, np.int64) for m in minis]
        lens_j = [tokens[rows].tolist() for rows in rows_j]
        counts = []
        for ln in lens_j:
            if not ln:
                counts.append(0)
                continue
            if num_micro_batches:
                c = int(num_micro_batches)
            elif flavor == "openrlhf":
                c = first_fit_count(ln, cap)
            else:
                c = -(-sum(ln) // cap)
            counts.append(max(min(c, len(ln)), 1))  # a rank with rows needs one
        c_all = max(counts)
        per_rank: list[list[np.ndarray]] = []
        if flavor == "verl" and cap and not num_micro_batches:
            per_rank = _verl_fit(rows_j, lens_j, c_all, cap, equal_size, notes, raised)
        else:
            parts_j: list[list[list[int]]] = []
            for ln in lens_j:
                if not ln:
                    parts_j.append([])
                    continue
                k = min(c_all, len(ln))
                eq = equal_size and len(ln) % k == 0
                if verl:
                    parts_j.append(_verl_order(_workloads(ln), k, eq))
                else:
                    parts_j.append(karmarkar_karp(ln, k, equal_size=eq))
            per_rank = _gather(rows_j, parts_j)
        part = _mb_from_rank_lists(per_rank, tokens, round_to)
        for mb in part:
            worst = max(worst, max(mb.tokens))
        mbs.extend(part)
        bounds.append(len(mbs) - 1)
    if raised:
        note_partitions_raised(notes, len(raised), sum(raised))
    notes["max_micro_batch_tokens"] = worst
    if cap and worst > cap:
        notes["token_cap_exceeded"] = {
            "max_tokens": worst,
            "cap": cap,
            "micro_batches_over": sum(1 for mb in mbs if max(mb.tokens) > cap),
        }
    _note_over_cap(notes, tokens, cap, asserts=ASSERTS_ON_LONG_SEQUENCE.get(flavor))
    return StepPlan(mbs, bounds if mini_per_rank else None, None, notes)


def _gather(rows_j: list[np.ndarray], parts_j: list[list[list[int]]]) -> list[list[np.ndarray]]:
    """Every rank's parts as views into one array built from one list (not one numpy
    call per part): ``parts_j[r]`` indexes into ``rows_j[r]``."""
    import numpy as np
    flat: list[int] = []
    for rows, parts in zip(rows_j, parts_j, strict=True):
        if parts:
            rl = rows.tolist()
            for p in parts:
                flat.extend([rl[i] for i in p])
    arr = np.array(flat, dtype=np.int64)
    out = []
    a = 0
    for parts in parts_j:
        views = []
        for p in parts:
            b = a + len(p)
            views.append(arr[a:b])
            a = b
        out.append(views)
    return out


def _verl_fit(rows_j, lens, count, cap, equal_size, notes, raised):
    """verl >= 0.9.1: raise the shared count until every rank's partitions fit ``cap``.

    verl raises ``ValueError`` when the count would pass the smallest rank's row
    count (a sequence longer than the cap never fits); the replay then keeps the
    last tried count, capped per rank, and says so in notes.
    """
    live = [r for r in rows_j if len(r)]
    if not live:
        return [[] for _ in rows_j]
    min_rows = min(len(r) for r in live)
    start = count
    works = [_workloads(x) for x in lens]
    while True:
        k_try = min(count, min_rows)
        parts_all: list[Any] = []
        fits = count <= min_rows
        for ln, w in zip(lens, works, strict=True):
            if not ln:
                parts_all.append([])
                continue
            parts = _verl_order(w, k_try, equal_size)
            parts_all.append(parts)
            # The ranks agree on the count (an all-reduce MIN of "fits"): one rank
            # over the cap sends every rank to the next count.
            if fits and any(sum(ln[i] for i in p) > cap for p in parts):
                fits = False
                if count < min_rows:
                    break
        if fits or count >= min_rows:
            break
        count += 1
    per_rank = _gather(rows_j, parts_all)
    if not fits:
        note_cannot_fit(notes)
    if count > start:
        raised.append(count - start)
    return per_rank


def note_partitions_raised(notes: dict, mini_batches: int, added: int) -> None:
    """The step's note on verl >= 0.9.1 raising the count (one wording for both planners)."""
    notes["partitions_raised"] = {
        "mini_batches": mini_batches,
        "added": added,
        "note": "verl >= 0.9.1 adds micro-batches until every one fits the cap",
    }


def note_cannot_fit(notes: dict) -> None:
    """Count one mini-batch whose cap verl cannot meet (it raises ValueError)."""
    rec = notes.setdefault(
        "verl_cannot_fit",
        {
            "mini_batches": 0,
            "note": "verl raises ValueError: the cap cannot be met with one sequence "
            "or more per micro-batch",
        },
    )
    rec["mini_batches"] += 1


def count_micro_batches(
    fr,
    dp,
    max_tokens,
    *,
    flavor="verl",
    mini_per_rank=None,
    balance_dp=True,
    keep_minibatch=False,
) -> list[int]:
    """Micro-batches per mini-batch, without building them, where the count allows it.

    verl < 0.9.1 and OpenRLHF fix the count before partitioning (``ceil(tokens /
    cap)`` or the first-fit count, capped at the rows, max over ranks), so only
    each rank's rows are needed: no Karmarkar-Karp over micro-batches. verl >=
    0.9.1 decides the count by testing the partitions, so it plans in full. For
    callers that need counts only (update accounting, sweeps), not shapes.
    """
    tokens = fr["tokens"]
    n = len(tokens)
    cap = int(max_tokens)
    if n == 0:
        return []
    if flavor == "verl":
        plan = plan_karmarkar_karp(fr, dp, cap, flavor=flavor, mini_per_rank=mini_per_rank,
                                   balance_dp=balance_dp, keep_minibatch=keep_minibatch)
        if plan.boundaries is None:
            return [len(plan.micro_batches)]
        prev = -1
        out = []
        for b in plan.boundaries:
            out.append(b - prev)
            prev = b
        return out
    notes: dict = {}
    if "rank" in fr:
        shards = _rank_shards(fr, dp, notes)
    elif flavor in VERL_FLAVORS and balance_dp and n >= dp and n % dp == 0 and dp > 1:
        mini_global = mini_per_rank * dp if keep_minibatch and mini_per_rank else None
        shards = _balance_dp(tokens, dp, mini_global)
    else:
        shards = _rank_shards(fr, dp, notes)
    minis = _mini_batches_per_rank(shards, mini_per_rank)
    out = []
    for j in range(max(len(m) for m in minis)):
        best = 0
        for m in minis:
            if j >= len(m) or not len(m[j]):
                continue
            lens = tokens[m[j]]
            if flavor == "openrlhf":
                c = first_fit_count(lens.tolist(), cap)
            else:
                c = -(-int(lens.sum()) // cap)
            best = max(best, min(c, len(lens)))
        out.append(best)
    return out


class KarmarkarKarpParams(PackerParams):
    max_tokens_per_microbatch: int | None = Field(None, ge=1)
    num_micro_batches: int | None = Field(None, ge=1)
    equal_size: bool = False
    flavor: str = "verl"
    balance_dp: bool = True
    keep_minibatch: bool = False
    round_to: int = Field(1, ge=1)

    @model_validator(mode="after")
    def _check(self) -> KarmarkarKarpParams:
        if self.max_tokens_per_microbatch is None and self.num_micro_batches is None:
            raise ValueError("needs batching.max_tokens_per_microbatch or num_micro_batches")
        return self

    def options(self) -> dict:
        return dict(num_micro_batches=self.num_micro_batches, equal_size=self.equal_size,
                    flavor=self.flavor, balance_dp=self.balance_dp,
                    keep_minibatch=self.keep_minibatch, round_to=self.round_to)


def openrlhf_balance(tokens: np.ndarray, dp: int) -> tuple[np.ndarray, np.ndarray]:
    """OpenRLHF 0.11.2 ``balance_experiences`` (``trainer/ppo_utils/experience.py``): rows
    sorted by length (longest first, ties in order), cut into chunks of dp, the first
    half of the chunks interleaved with the reversed second half from its end; rank r
    takes the r-th row of every chunk. Returns (row order, rank of each) with each
    rank's rows contiguous and in the order the rank receives them."""
    import numpy as np

    idx = np.argsort(-np.asarray(tokens), kind="stable")
    chunks = [idx[i:i + dp] for i in range(0, len(idx), dp)]
    half = len(chunks) // 2
    first, last = chunks[:half], [c[::-1] for c in chunks[half:]]
    inter: list[np.ndarray] = []
    for i in range(half):
        inter += [first[i], last[-(i + 1)]]
    if len(last) > len(first):
        inter.append(last[0])
    per_rank = [[int(c[r]) for c in inter if r < len(c)] for r in range(dp)]
    order = np.asarray([i for rows in per_rank for i in rows], dtype=np.int64)
    ranks = np.repeat(np.arange(dp, dtype=np.int64), [len(rows) for rows in per_rank])
    return order, ranks


def _balanced(p: KarmarkarKarpParams, fr: dict, dp: int) -> tuple[dict, np.ndarray | None]:
    """The frame as OpenRLHF hands it to its ranks (flavor openrlhf, no logged ranks)."""
    if p.flavor != "openrlhf" or "rank" in fr or dp < 2:
        return fr, None
    order, ranks = openrlhf_balance(fr["tokens"], dp)
    out = {k: v[order] for k, v in fr.items()}
    out["rank"] = ranks
    return out, order


def _unbalanced(plan: StepPlan, order: np.ndarray | None) -> StepPlan:
    """Row indices back to the caller's frame."""
    if order is not None:
        for mb in plan.micro_batches:
            mb.ranks = [order[a] for a in mb.ranks]
        plan.notes["openrlhf_balance_experiences"] = True
    return plan


def _plan(p: KarmarkarKarpParams, train, fr, dp) -> StepPlan:
    from lrdoctor.replay.packing.common import _mini_per_rank

    notes: dict = {}
    fr, order = _balanced(p, fr, dp)
    plan = plan_karmarkar_karp(fr, dp, p.max_tokens_per_microbatch or 0,
                               mini_per_rank=_mini_per_rank(train, dp, notes), **p.options())
    plan.notes.update(notes)
    return _unbalanced(plan, order)


def _plan_steps(p: KarmarkarKarpParams, train, frames, dps) -> list[StepPlan]:
    """All steps at once (``kk_plan``: lockstep partitions), equal to :func:`_plan` per step."""
    from lrdoctor.replay.packing.common import _mini_per_rank
    from lrdoctor.replay.packing.kk_plan import plan_karmarkar_karp_steps

    step_notes: list[dict] = [{} for _ in frames]
    mprs = [_mini_per_rank(train, d, n) for d, n in zip(dps, step_notes, strict=True)]
    balanced = [_balanced(p, f, d) for f, d in zip(frames, dps, strict=True)]
    plans = plan_karmarkar_karp_steps([f for f, _ in balanced], dps,
                                      p.max_tokens_per_microbatch or 0,
                                      mini_per_rank=mprs, **p.options())
    for plan, n, (_, order) in zip(plans, step_notes, balanced, strict=True):
        plan.notes.update(n)
        _unbalanced(plan, order)
    return plans


PACKER = Packer("karmarkar_karp", "verl / OpenRLHF dynamic batch size: Karmarkar-Karp "
                "balanced partitions", KarmarkarKarpParams, _plan, packed=True, token_knob=True,
                plan_steps=_plan_steps, mini_batch_windows=True)
