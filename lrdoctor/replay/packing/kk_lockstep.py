"""Karmarkar-Karp on many small instances at once, in lockstep with numpy.

Why: a replay of verl or OpenRLHF runs Karmarkar-Karp once per rank and
mini-batch (and again per count verl >= 0.9.1 tries): ~100,000 calls of a dozen
items for a 10,000-step run. Each merge is a few list operations, so a
per-call Python loop spends microseconds per merge however tight it is. All the
instances take the same *number* of merges (states - 1), only the choice of
the pair differs, so the merges run side by side as array operations: merge
t of every instance at once.

The result is the same as :func:`karmarkar_karp._kk_sets` (verl's procedure and
tie-breaking): the same sorted start, the same forced opening (the k heaviest
items are one state of singletons), the same pair chosen by the same total
order of state keys ``(spread, largest set's sum, count, first item)``, and the
same pairing of one state's sets with the other's in reverse. What the scalar
code compares as tuples is compared here as one integer per set,
``sum << 2b | count << b | first + 1`` (b bits hold any count or index), and
per state as (spread, that integer), which is the same order. Where that
integer could overflow int64 the group is left to the scalar code. The
equivalence is tested against the scalar code on random inputs
(tests/replay/test_kk_lockstep.py), which is itself compared with verl's
released function.

Set membership is not moved item by item: each set has an id, a merge makes
the absorbed set's id point at the surviving one, and items resolve their id
at the end.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Composite keys must stay below this (a margin under 2**63 for the subtraction).
_KEY_LIMIT = 1 << 62


def kk_parts(vals: np.ndarray, starts: np.ndarray, ks: np.ndarray,
             eqs: np.ndarray) -> np.ndarray:
    """Final set position of every item of many Karmarkar-Karp instances.

    Instance ``i`` partitions ``vals[starts[i]:starts[i+1]]`` (non-negative
    ints) into ``ks[i]`` sets, equal-size when ``eqs[i]``. Returns, per item,
    the index of its set in the final state's order (0: the heaviest by sum,
    then item count, then first item), exactly the order of the scalar
    ``_kk_sets``. Callers guarantee ``1 <= k <= n`` and, with ``eqs``, ``n % k == 0``.
    """
    return kk_parts_capped(vals, starts, ks, eqs, None, None)[0]


def kk_parts_capped(vals: np.ndarray, starts: np.ndarray, ks: np.ndarray, eqs: np.ndarray,
                    toks: np.ndarray | None, caps: np.ndarray | None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """:func:`kk_parts`, and per instance whether it stopped early: an instance with
    ``caps[i] >= 0`` may stop once one of its sets sums past ``caps[i]`` in ``toks``
    (its sets are then left incomplete; only verl's fit test asks, and it rejects
    such a count whatever the final sets would be). Only the scalar path stops."""
    vals = np.asarray(vals, dtype=np.int64)
    starts = np.asarray(starts, dtype=np.int64)
    ks = np.asarray(ks, dtype=np.int64)
    eqs = np.asarray(eqs, dtype=bool)
    out = np.zeros(len(vals), dtype=np.int64)
    n_inst = len(ks)
    stopped = np.zeros(n_inst, dtype=bool)
    if n_inst == 0:
        return out, stopped
    ns = np.diff(starts)
    if (ks < 1).any() or (ks > ns).any() or (eqs & (ns % np.maximum(ks, 1) != 0)).any():
        raise ValueError("every instance needs 1 <= k <= n, and n % k == 0 when equal-size")
    states = np.where(eqs, ns // ks, ns - ks + 1)
    # One lockstep group per (k, equal-size, state count): every instance of a group
    # takes the same merges, so live states stay packed in the first rows.
    key = (ks * 2 + eqs) * (int(states.max()) + 1) + states
    order = np.argsort(key, kind="stable")
    cuts = np.flatnonzero(np.diff(key[order])) + 1
    for grp in np.split(order, cuts):
        k = int(ks[grp[0]])
        if k == 1:
            continue  # every item in set 0
        eq = bool(eqs[grp[0]])
        # The group's state array holds states x instances x k int64: bounded by
        # running a large group in slices.
        per_inst = int(states[grp[0]]) * k * 8
        step = max(1, _MAX_GROUP_BYTES // per_inst)
        for a in range(0, len(grp), step):
            part = grp[a:a + step]
            if len(part) < _MIN_LOCKSTEP or k >= _SCALAR_FROM_K:
                _scalar_group(vals, starts, part, k, eq, out, toks, caps, stopped)
            else:
                _solve_group(vals, starts, part, k, eq, out)
    return out, stopped


# Below this many instances, per-merge numpy calls cost more than the scalar code.
_MIN_LOCKSTEP = 16
# From this many sets the scalar code is as fast or faster (its merges with a one-item
# state cost log k; the lockstep arrays hold states x k per instance): measured by
# benchmarks/bench_replay.py (KK with many micro-batches).
_SCALAR_FROM_K = 64
# From this many sets the compiled code (numba, when installed) takes the scalar
# code's groups: below it the lockstep or the scalar merges are cheap already.
_COMPILED_FROM_K = 8
# The most one lockstep group's state array may take (the rest runs in later slices).
_MAX_GROUP_BYTES = 128 * 2**20


def _solve_group(vals, starts, grp, k, eq, out):
    """One lockstep group: instances of one size ``n`` (one state count, one k)."""
    n_inst = len(grp)
    n = int(starts[grp[0] + 1] - starts[grp[0]])
    n_states = n // k if eq else n - k + 1
    # One int64 per set, most significant first: sum | count | first item + 1. Sorting
    # these sorts sets as the scalar does (sum, count, first; empty sets, all 0, are
    # equal there too). The first item also names the set: every set starts as one
    # item, and a merge keeps the first set's first item (the other's if it is empty).
    fb = (n + 1).bit_length()
    sh_c, sh_s = fb, 2 * fb
    cnt1 = 1 << sh_c
    fmask = cnt1 - 1
    high = ~fmask  # sum and count fields
    sb_bits = int(n_states).bit_length()
    flat = (starts[grp][:, None] + np.arange(n, dtype=np.int64)[None, :]).reshape(-1)
    v = vals[flat].reshape(n_inst, n)
    if float(v.sum(axis=1).max()) * float(1 << (sh_s + sb_bits)) >= _KEY_LIMIT:
        _scalar_group(vals, starts, grp, k, eq, out)
        return
    # A one-item set's key, sorted along each instance: ascending (value, index), the
    # scalar's sorted(zip(vals, range)).
    keys = np.sort((v << sh_s) | (cnt1 + 1 + np.arange(n, dtype=np.int64))[None, :], axis=1)
    # State-major rows (state * n_inst + instance): a reduction over the states of
    # every instance is then a few passes over contiguous rows, not a per-row loop.
    # Each state's sets lightest first (so a sorted merge needs no reversal).
    comp = np.zeros((n_states, n_inst, k), dtype=np.int64)
    if eq:  # state s: the k items from sorted place s*k
        comp[:] = keys.reshape(n_inst, n_states, k).transpose(1, 0, 2)
    else:  # the opening: the k heaviest as one state; then one state per other item
        comp[0] = keys[:, n - k:]
        comp[1:, :, k - 1] = keys[:, : n - k].T
    comp = comp.reshape(n_states * n_inst, k)
    void = np.dtype((np.void, 8 * k))
    cfv = comp.view(void).reshape(-1)  # one element per state
    inst_off = np.arange(n_inst, dtype=np.int64) * n
    # Selection key of a state: its largest set's key, then the state index in the
    # low bits, so the maximum also names its state (keys are unique).
    smask = (1 << sb_bits) - 1
    st_idx = np.repeat(np.arange(n_states, dtype=np.int64), n_inst)
    spf = (comp[:, k - 1] >> sh_s) - (comp[:, 0] >> sh_s)
    tkf = (comp[:, k - 1] << sb_bits) | st_idx
    spread = spf.reshape(n_states, n_inst)
    topk = tkf.reshape(n_states, n_inst)
    cols = np.arange(n_inst, dtype=np.int64)
    base = inst_off - 1
    links: list[tuple[np.ndarray, np.ndarray]] = []  # per merge: absorbed sets, survivors
    for live in range(n_states, 1, -1):
        # Live states are rows [0, live): the absorbed state's row takes the last one's.
        sp, tk = spread[:live], topk[:live]
        m = sp.max(axis=0)
        a = (tk * (sp == m)).max(axis=0) & smask
        la = a * n_inst + cols
        spf[la] = -2
        m2 = sp.max(axis=0)
        b = (tk * (sp == m2)).max(axis=0) & smask
        lb = b * n_inst + cols
        sa = np.take(comp, la, axis=0)
        sb = np.take(comp, lb, axis=0)[:, ::-1]  # a's heaviest set meets b's lightest
        ne_a = sa >= cnt1
        r_i, c_i = np.nonzero(ne_a & (sb >= cnt1))
        if len(r_i):
            bi = base[r_i]
            links.append((bi + (sb[r_i, c_i] & fmask), bi + (sa[r_i, c_i] & fmask)))
        new = np.where(ne_a, sa + (sb & high), sb)
        new.sort(axis=1)
        cfv[la] = new.view(void).reshape(-1)
        spf[la] = (new[:, k - 1] >> sh_s) - (new[:, 0] >> sh_s)
        tkf[la] = (new[:, k - 1] << sb_bits) | a
        src = (live - 1) * n_inst + cols
        cfv[lb] = cfv[src]
        spf[lb] = spf[src]
        tkf[lb] = (tkf[src] & ~smask) | b
    ffirst = (comp[:n_inst] & fmask) - 1  # row 0 is the last state: each set's name
    # Absorbed set -> surviving set, resolved newest first: a survivor's own entry is
    # final by the time the sets it absorbed earlier look it up.
    parf = np.arange(n_inst * n, dtype=np.int64)
    for child, par in reversed(links):
        parf[child] = parf[par]
    posmap = np.empty(n_inst * n, dtype=np.int64)
    posmap[inst_off[:, None] + ffirst] = np.arange(k - 1, -1, -1, dtype=np.int64)[None, :]
    out[flat] = posmap[parf]


def _scalar_group(vals: Any, starts: Any, grp: Any, k: int, eq: bool, out: Any, toks: Any = None,
                  caps: Any = None, stopped: Any = None) -> None:
    """The scalar procedure, for a group whose keys would not fit in int64 (or too
    small, or too many sets, for lockstep to pay); with ``caps``, it may stop early."""
    from lrdoctor.replay.packing import kk_numba
    from lrdoctor.replay.packing.karmarkar_karp import _kk_sets_capped

    if k >= _COMPILED_FROM_K and kk_numba.available():
        status = kk_numba.solve_group(vals, starts, grp, k, eq, out, toks, caps)
        if status is not None:  # 1: stopped over the cap; 2: the scalar code raises below
            if stopped is not None:
                stopped[grp[status == 1]] = True
            grp = grp[status == 2]
    for i in grp.tolist():
        a, b = int(starts[i]), int(starts[i + 1])
        v = vals[a:b].tolist()
        cap = int(caps[i]) if caps is not None and caps[i] >= 0 else None
        sets = _kk_sets_capped(v, k, eq, toks[a:b].tolist() if cap is not None else v, cap)
        if sets is None:
            stopped[i] = True
            continue
        idx: list[int] = []
        pos: list[int] = []
        for j, s in enumerate(sets):
            idx += s[3]
            pos += [j] * len(s[3])
        out[np.asarray(idx, dtype=np.int64) + a] = pos
