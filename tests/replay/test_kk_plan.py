"""The whole-run Karmarkar-Karp (lockstep partitions, array planner) equals the
per-step reference, which test_replay_peers.py compares with verl and OpenRLHF.

Random runs cover what changes the plan: each flavor, uneven steps, dp sizes,
the log's rank column (with out-of-range ranks), verl's dp balancing with and
without keep_minibatch (including a step that is not whole mini-batches),
fixed micro-batch counts, equal-size partitions, padding, many ties.
"""

from __future__ import annotations

import numpy as np
import pytest

from lrdoctor.replay import packing
from lrdoctor.replay.packing import kk_lockstep
from lrdoctor.replay.packing.karmarkar_karp import _kk_sets, plan_karmarkar_karp
from lrdoctor.replay.packing.kk_lockstep import kk_parts
from lrdoctor.replay.packing.kk_plan import plan_karmarkar_karp_steps


def _values(rng, n):
    kind = rng.integers(4)
    if kind == 0:
        return rng.integers(0, 5, n)  # zeros and ties
    if kind == 1:
        return rng.integers(1, 4, n) * 7
    if kind == 2:
        v = rng.integers(1, 8192, n)
        return 24576 * v + v * v  # verl workloads
    return rng.integers(1, 10**6, n)


def _scalar_positions(vals, k, eq):
    pos = np.zeros(len(vals), dtype=np.int64)
    for j, s in enumerate(_kk_sets(vals, k, eq)):
        pos[s[3]] = j
    return pos


@pytest.mark.parametrize("seed", range(4))
def test_lockstep_partitions_equal_the_scalar_procedure(seed, monkeypatch):
    monkeypatch.setattr(kk_lockstep, "_MIN_LOCKSTEP", 1)  # every group in lockstep
    rng = np.random.default_rng(seed)
    for _ in range(60):
        vals, starts, ks, eqs = [], [0], [], []
        for _ in range(int(rng.integers(1, 40))):
            n = int(rng.integers(1, 40))
            k = int(rng.integers(1, n + 1))
            eq = bool(rng.integers(2)) and n % k == 0
            vals += _values(rng, n).tolist()
            starts.append(len(vals))
            ks.append(k)
            eqs.append(eq)
        got = kk_parts(np.array(vals), np.array(starts), np.array(ks), np.array(eqs))
        for i, (k, eq) in enumerate(zip(ks, eqs, strict=True)):
            a, b = starts[i], starts[i + 1]
            assert got[a:b].tolist() == _scalar_positions(vals[a:b], k, eq).tolist(), \
                (vals[a:b], k, eq)


@pytest.mark.parametrize("n,k,eq", [(12, 4, False), (12, 3, True), (9, 2, False), (30, 5, False),
                                    (16, 16, False), (8, 1, False)])
def test_lockstep_large_groups_equal_the_scalar_procedure(n, k, eq):
    """Many instances of one shape: the lockstep path as the replay uses it."""
    rng = np.random.default_rng(n * 100 + k)
    count = 300
    vals = np.concatenate([_values(rng, n) for _ in range(count)])
    starts = np.arange(0, n * count + 1, n)
    got = kk_parts(vals, starts, np.full(count, k), np.full(count, eq))
    vl = vals.tolist()
    for i in range(count):
        a, b = i * n, (i + 1) * n
        assert got[a:b].tolist() == _scalar_positions(vl[a:b], k, eq).tolist(), (vl[a:b], k, eq)


def test_lockstep_runs_a_large_group_in_bounded_slices(monkeypatch):
    """A group whose state array would pass the bound runs in slices (and the slices
    too small for lockstep run in the scalar code): the same partitions."""
    rng = np.random.default_rng(5)
    n, k, count = 20, 4, 100
    vals = np.concatenate([_values(rng, n) for _ in range(count)])
    starts = np.arange(0, n * count + 1, n)
    whole = kk_parts(vals, starts, np.full(count, k), np.zeros(count, dtype=bool))
    monkeypatch.setattr(kk_lockstep, "_MAX_GROUP_BYTES", (n - k + 1) * k * 8 * 30)
    calls = []
    real = kk_lockstep._solve_group
    monkeypatch.setattr(kk_lockstep, "_solve_group",
                        lambda v, s, g, *a: (calls.append(len(g)), real(v, s, g, *a)))
    sliced = kk_parts(vals, starts, np.full(count, k), np.zeros(count, dtype=bool))
    assert calls == [30, 30, 30]  # and the last 10 in the scalar code
    assert sliced.tolist() == whole.tolist()


def test_lockstep_leaves_keys_too_wide_for_int64_to_the_scalar_code():
    rng = np.random.default_rng(9)
    vals = (rng.integers(1, 1000, 300) * (1 << 40)).tolist()  # sums far past 2**62 / keys
    got = kk_parts(np.array(vals), np.array([0, 300]), np.array([7]), np.array([False]))
    assert got.tolist() == _scalar_positions(vals, 7, False).tolist()


def test_lockstep_rejects_impossible_instances():
    with pytest.raises(ValueError):
        kk_parts(np.array([1, 2]), np.array([0, 2]), np.array([3]), np.array([False]))
    with pytest.raises(ValueError):
        kk_parts(np.array([1, 2, 3]), np.array([0, 3]), np.array([2]), np.array([True]))


def _same_plan(got, want):
    assert len(got.micro_batches) == len(want.micro_batches)
    for x, y in zip(got.micro_batches, want.micro_batches, strict=True):
        assert [r.tolist() for r in x.ranks] == [list(r) for r in y.ranks]
        assert x.padded_len == y.padded_len
        assert x.tokens == y.tokens
    assert got.boundaries == want.boundaries
    assert got.notes == want.notes
    assert list(got.notes) == list(want.notes)  # the same order in --json


def _random_run(rng):
    frames, dps, mprs = [], [], []
    use_rank = rng.random() < 0.2
    for _ in range(int(rng.integers(1, 12))):
        dp = int(rng.choice([1, 2, 3, 4, 8]))
        n = int(rng.integers(0, 60)) if rng.random() < 0.5 else dp * int(rng.integers(1, 10))
        if rng.random() < 0.5:
            tok = rng.integers(1, 8, n) * int(rng.integers(1, 300))
        else:
            tok = rng.integers(1, int(rng.choice([100, 3000, 20000])), n)
        fr = {"tokens": tok.astype(np.int64)}
        if use_rank:
            fr["rank"] = rng.integers(0, dp + (1 if rng.random() < 0.2 else 0), n)
        frames.append(fr)
        dps.append(dp)
        mprs.append(int(rng.integers(1, 20)) if rng.random() < 0.6 else None)
    return frames, dps, mprs


@pytest.mark.parametrize("seed", range(6))
def test_whole_run_plan_equals_the_per_step_plan(seed):
    rng = np.random.default_rng(1000 + seed)
    for _ in range(50):
        frames, dps, mprs = _random_run(rng)
        cap = int(rng.choice([500, 2000, 8192, 30000]))
        kw = dict(num_micro_batches=int(rng.integers(1, 5)) if rng.random() < 0.15 else None,
                  equal_size=bool(rng.random() < 0.3),
                  flavor=str(rng.choice(["verl", "verl_ceildiv", "openrlhf"])),
                  balance_dp=bool(rng.random() < 0.8), keep_minibatch=bool(rng.random() < 0.3),
                  round_to=int(rng.choice([1, 64])))
        got = plan_karmarkar_karp_steps(frames, dps, cap, mini_per_rank=mprs, **kw)
        for f, dp, m, plan in zip(frames, dps, mprs, got, strict=True):
            _same_plan(plan, plan_karmarkar_karp(f, dp, cap, mini_per_rank=m, **kw))


def test_plan_many_equals_plan_step_with_the_configs_notes():
    rng = np.random.default_rng(7)
    frames = [{"tokens": rng.integers(1, 6000, int(n))} for n in rng.integers(30, 50, 20)]
    batching = {"strategy": "karmarkar_karp", "max_tokens_per_microbatch": 4096,
                "round_to": 128}
    train = {"micro_batch_size": 1, "mini_batch_size": 12}  # 12 % dp 8: a config note
    got = packing.plan_many(batching, train, frames, [8] * len(frames))
    assert all("mini_batch_not_divisible_by_dp" in p.notes for p in got)
    for f, plan in zip(frames, got, strict=True):
        _same_plan(plan, packing.plan_step(batching, train, f, 8))


@pytest.mark.parametrize("seed", range(3))
def test_many_micro_batches_whole_run_equals_the_per_step_plan(seed):
    """k >= 64 micro-batches per mini-batch: the whole-run planner checks a count rank
    by rank and stops at the first rank over the cap; the per-step reference
    partitions every rank for every count. Counts, partitions and notes (raised,
    cannot fit) must be the same, with the log's rank column (uneven ranks: the
    smallest bounds the count) and with verl's own dp balancing."""
    rng = np.random.default_rng(50 + seed)
    frames, dps, mprs = [], [], []
    for i in range(4):
        dp = int(rng.choice([2, 4]))
        n = dp * int(rng.integers(250, 400))
        tok = np.clip(rng.lognormal(np.log(900), 0.7, n), 1, 6000).astype(np.int64)
        if i == 3:
            tok[0] = 9000  # over the cap: no count fits, the last try keeps every rank
        fr = {"tokens": tok}
        if seed == 1:
            fr["rank"] = rng.integers(0, dp, n)
        frames.append(fr)
        dps.append(dp)
        mprs.append(int(n // dp) if i % 2 else int(n // dp // 2))
    kw = dict(flavor="verl", balance_dp=seed != 2, keep_minibatch=False)
    got = plan_karmarkar_karp_steps(frames, dps, 4096, mini_per_rank=mprs, **kw)
    assert max(len(p.micro_batches) for p in got) >= 64
    assert any("cannot" in str(p.notes) for p in got) or seed == 1
    for f, dp, m, plan in zip(frames, dps, mprs, got, strict=True):
        _same_plan(plan, plan_karmarkar_karp(f, dp, 4096, mini_per_rank=m, **kw))


@pytest.mark.parametrize("seed", range(3))
def test_a_capped_try_stops_only_where_verl_rejects_the_count(seed):
    """verl >= 0.9.1 rejects a count when a final set's tokens pass the cap; sets only
    merge, so the capped procedure may stop at the first set over it. It must stop
    only then, and otherwise give the uncapped sets (k from 2 to 300, equal-size too)."""
    from lrdoctor.replay.packing.karmarkar_karp import _kk_sets_capped

    rng = np.random.default_rng(900 + seed)
    stopped = kept = 0
    for _ in range(150):
        n = int(rng.integers(2, 700))
        k = int(rng.integers(2, min(n, 300) + 1))
        eq = bool(rng.integers(2)) and n % k == 0
        toks = rng.integers(1, 4000, n)
        vals = (24576 * toks + toks * toks).tolist() if rng.integers(2) else _values(rng, n)
        vals = [int(v) for v in vals]
        full = _kk_sets(vals, k, eq)
        worst = max(sum(int(toks[i]) for i in s[3]) for s in full)
        cap = int(worst * rng.uniform(0.7, 1.3))
        got = _kk_sets_capped(vals, k, eq, toks.tolist(), cap)
        if got is None:
            assert worst > cap
            stopped += 1
        else:
            assert [s[:4] for s in got] == [s[:4] for s in full] and worst <= cap
            kept += 1
    assert stopped and kept  # both outcomes were exercised

    # Many instances at once: stopped ones are reported, the others equal kk_parts.
    ks = rng.integers(64, 120, 12)
    ns = ks * rng.integers(3, 6, 12)
    starts = np.concatenate(([0], np.cumsum(ns)))
    toks = rng.integers(1, 4000, int(ns.sum()))
    vals = 24576 * toks + toks * toks
    eqs = np.zeros(12, dtype=bool)
    want = kk_parts(vals, starts, ks, eqs)
    caps = np.where(np.arange(12) % 3 == 0, -1, 9000)  # -1: this instance never stops
    got, stop = kk_lockstep.kk_parts_capped(vals, starts, ks, eqs, toks, caps)
    assert stop.any() and not stop[caps < 0].any()
    for i in np.flatnonzero(~stop):
        a, b = starts[i], starts[i + 1]
        np.testing.assert_array_equal(got[a:b], want[a:b])
        sums = np.bincount(want[a:b], weights=toks[a:b])
        assert caps[i] < 0 or sums.max() <= caps[i]
    for i in np.flatnonzero(stop):
        a, b = starts[i], starts[i + 1]
        assert np.bincount(want[a:b], weights=toks[a:b]).max() > caps[i]
