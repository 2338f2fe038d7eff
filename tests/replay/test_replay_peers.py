"""lrdoctor's packers against the peers' REAL functions on random inputs.

Optional target (marker ``peers``): the released verl and OpenRLHF packages,
installed without their heavy dependencies (``tests/helpers/peers.py`` says how they are
loaded). Not in the [test] extra, because ``pip install verl`` pulls Ray, vLLM and
CUDA wheels. Run: ``pip install --no-deps verl==0.9.1 openrlhf==0.11.2`` then
``pytest -m peers``. Skipped, with that reason, where they are not installed.
``make test`` (and so CI) installs both and unpacks verl 0.9.0 and SkyRL 0.4.0
with ``scripts/fetch_peers.py``, so only NeMo-RL (no release on PyPI) is skipped there.
"""

from __future__ import annotations

import numpy as np
import pytest

from lrdoctor.replay import packing as P
from lrdoctor.replay.packing import kk_lockstep
from tests.helpers import peers

pytestmark = pytest.mark.peers

N_CASES = 500

VERL = peers.verl_balancing()
VERL_OLD = peers.verl_old_balancing()
ORL = peers.openrlhf_balancing()
SKYRL = peers.skyrl_bin_packing()
SKYRL_STEP = peers.skyrl_step()
NEMO = peers.nemo_rl_packing()
need_verl = pytest.mark.skipif(VERL is None, reason=f"verl not installed ({peers.PEERS_INSTALL})")
need_orl = pytest.mark.skipif(ORL is None,
                              reason=f"openrlhf not installed ({peers.PEERS_INSTALL})")


def _lengths(rng, n, hi):
    kind = rng.integers(3)
    if kind == 0:  # many ties: tie-breaking decides
        return rng.integers(1, 8, n) * int(rng.integers(1, 64))
    if kind == 1:
        return rng.integers(1, hi, n)
    return np.minimum(rng.lognormal(np.log(hi / 4), 0.8, n).astype(np.int64) + 1, hi)


@need_verl
def test_karmarkar_karp_matches_verl_partitions():
    rng = np.random.default_rng(101)
    cases = []
    for case in range(N_CASES):
        n = int(rng.integers(1, 200))
        k = int(rng.integers(1, min(n, 16) + 1))
        equal = bool(rng.integers(2)) and n % k == 0
        vals = _lengths(rng, n, 5000).tolist()
        want = VERL.get_seqlen_balanced_partitions(vals, k, equal_size=equal)
        assert P.karmarkar_karp(vals, k, equal_size=equal) == want, (case, n, k, equal)
        cases.append((vals, k, equal, want))
    _assert_lockstep_matches(cases)


def _assert_lockstep_matches(cases):
    """All cases in one lockstep call (every group in lockstep, however small): each
    item's set position equals the peer's partition order."""
    vals = [v for c in cases for v in c[0]]
    starts = np.cumsum([0] + [len(c[0]) for c in cases])
    saved = kk_lockstep._MIN_LOCKSTEP
    kk_lockstep._MIN_LOCKSTEP = 1
    try:
        got = kk_lockstep.kk_parts(np.array(vals), starts, np.array([c[1] for c in cases]),
                                   np.array([c[2] for c in cases]))
    finally:
        kk_lockstep._MIN_LOCKSTEP = saved
    for (v, _k, _eq, want), a in zip(cases, starts[:-1].tolist(), strict=True):
        pos = [0] * len(v)
        for j, part in enumerate(want):
            for i in part:
                pos[i] = j
        assert got[a:a + len(v)].tolist() == pos, (v, _k, _eq)


@need_verl
@need_orl
def test_karmarkar_karp_few_items_per_partition_match_verl_and_openrlhf():
    """Micro-batch sized calls (a dozen rows, k close to n, many ties): the shapes the
    replay's fast paths take (one-item merges, the forced opening, n == k)."""
    rng = np.random.default_rng(303)
    cases = []
    for case in range(N_CASES):
        n = int(rng.integers(1, 25))
        k = int(rng.integers(max(1, n // 4), n + 1))
        equal = bool(rng.integers(2)) and n % k == 0
        vals = _lengths(rng, n, 5000).tolist()
        want = VERL.get_seqlen_balanced_partitions(vals, k, equal_size=equal)
        assert P.karmarkar_karp(vals, k, equal_size=equal) == want, (case, n, k, equal)
        cases.append((vals, k, equal, want))
    _assert_lockstep_matches(cases)


@need_verl
def test_karmarkar_karp_with_hundreds_of_partitions_matches_verl():
    """Many micro-batches per mini-batch (k 64-300, three to eight rows each, verl's
    workloads and ties): the shape where the scalar code keeps only a state's non-empty
    sets and inserts a one-item merge by binary search (kk_lockstep routes k >= 64
    there); both must leave verl's result unchanged."""
    from lrdoctor.replay.packing.karmarkar_karp import verl_workload

    rng = np.random.default_rng(505)
    cases = []
    for case in range(12):
        k = int(rng.integers(64, 301))
        n = k * int(rng.integers(3, 9)) + int(rng.integers(0, k))
        equal = case % 4 == 3 and n % k == 0
        toks = _lengths(rng, n, 8192) if case % 3 else rng.integers(1, 9, n) * 512  # ties
        vals = verl_workload(np.asarray(toks)).tolist() if case % 2 else toks.tolist()
        want = VERL.get_seqlen_balanced_partitions(vals, k, equal_size=equal)
        assert P.karmarkar_karp(vals, k, equal_size=equal) == want, (case, n, k, equal)
        cases.append((vals, k, equal, want))
    _assert_lockstep_matches(cases)


@need_orl
def test_karmarkar_karp_and_first_fit_match_openrlhf():
    rng = np.random.default_rng(202)
    for case in range(N_CASES):
        n = int(rng.integers(1, 200))
        k = int(rng.integers(1, min(n, 16) + 1))
        vals = _lengths(rng, n, 5000).tolist()
        want = ORL.get_seqlen_balanced_partitions(vals, k, equal_size=False)
        assert P.karmarkar_karp(vals, k) == want, (case, n, k)
        cap = int(rng.integers(max(vals), 3 * max(vals) + 2))
        assert P.first_fit_count(vals, cap) == ORL.get_minimum_num_micro_batch_size(
            vals, cap, 1, 1), case


def _random_rank_step(rng, hi=4096):
    dp = int(rng.integers(1, 5))
    per_rank = int(rng.integers(1, 40))
    minis = int(rng.integers(1, 4))
    mini_per_rank = max(1, per_rank // minis)
    n = dp * per_rank
    toks = _lengths(rng, n, hi)
    rank = np.repeat(np.arange(dp), per_rank)
    rng.shuffle(rank)  # a log written by the ranks, interleaved
    cap = int(rng.integers(int(toks.max()), int(toks.max()) * 6 + 2))
    return dp, mini_per_rank, toks, rank, cap


def _verl_rank_batch(lens):
    import torch

    lens = torch.as_tensor(np.asarray(lens, dtype=np.int64))
    width = int(lens.max())
    mask = (torch.arange(width)[None, :] < lens[:, None]).long()
    return {"input_ids": torch.zeros_like(mask), "attention_mask": mask}


def _verl_plan(mod, toks, rank, dp, mini_per_rank, cap):
    """verl's worker loop: each rank's rows in log order, consecutive mini-batches,
    rearrange_micro_batches on each with the dp collectives (ranks as threads)."""
    fake = peers.FakeDist(dp)
    mod.dist = fake
    rows = [np.flatnonzero(rank == k) for k in range(dp)]
    out = []
    for a in range(0, len(rows[0]), mini_per_rank):
        chunk = [r[a : a + mini_per_rank] for r in rows]
        res = fake.run(
            lambda b: mod.rearrange_micro_batches(b, cap, dp_group=object())[1],
            [(_verl_rank_batch(toks[c]),) for c in chunk])
        for r in res:
            if isinstance(r, Exception):
                raise r
        out.append([[c[np.asarray(p, dtype=np.int64)].tolist() for p in parts]
                    for c, parts in zip(chunk, res, strict=True)])
    return out


def _lrd_plan(toks, rank, dp, mini_per_rank, cap, flavor):
    """lrdoctor's per-step plan, checked equal to the whole-run planner replay uses
    (``plan_many``: lockstep Karmarkar-Karp), so both are compared with the peer."""
    batching = {"strategy": "karmarkar_karp", "max_tokens_per_microbatch": cap,
                "flavor": flavor}
    train = {"mini_batch_size": mini_per_rank * dp}
    frame = {"tokens": toks, "rank": rank}
    plan = P.plan_step(batching, train, frame, dp)
    saved = kk_lockstep._MIN_LOCKSTEP
    kk_lockstep._MIN_LOCKSTEP = 1  # one step's partitions too, in lockstep
    try:
        (whole,) = P.plan_many(batching, train, [frame], [dp])
    finally:
        kk_lockstep._MIN_LOCKSTEP = saved
    assert [[r.tolist() for r in mb.ranks] for mb in whole.micro_batches] == \
        [[r.tolist() for r in mb.ranks] for mb in plan.micro_batches]
    assert whole.boundaries == plan.boundaries
    out = []
    start = 0
    for b in plan.boundaries:
        mbs = plan.micro_batches[start : b + 1]
        out.append([[mb.ranks[k].tolist() for mb in mbs] for k in range(dp)])
        start = b + 1
    return out


def _compare_verl(mod, flavor, seed):
    rng = np.random.default_rng(seed)
    for case in range(N_CASES):
        dp, mpr, toks, rank, cap = _random_rank_step(rng)
        want = _verl_plan(mod, toks, rank, dp, mpr, cap)
        got = _lrd_plan(toks, rank, dp, mpr, cap, flavor)
        assert got == want, (case, dp, mpr, cap, toks.tolist(), rank.tolist())


@need_verl
def test_verl_micro_batches_match_released_verl():
    if not (peers.verl_version() or "").startswith("0.9.1"):
        pytest.skip(f"installed verl is {peers.verl_version()}, this compares 0.9.1")
    _compare_verl(VERL, "verl", 303)


@pytest.mark.skipif(VERL_OLD is None, reason="LRDOCTOR_PEER_VERL_OLD (an unpacked verl < 0.9.1 "
                    "wheel) not set")
def test_verl_ceildiv_matches_older_verl():
    _compare_verl(VERL_OLD, "verl_ceildiv", 404)


@need_orl
def test_openrlhf_micro_batches_match_openrlhf():
    """OpenRLHF's replay buffer: per rank and train batch, first-fit count (max over dp),
    then KK partitions of the raw lengths, in the order KK returns them."""
    rng = np.random.default_rng(505)
    for case in range(N_CASES):
        dp, mpr, toks, rank, cap = _random_rank_step(rng)
        rows = [np.flatnonzero(rank == k) for k in range(dp)]
        want = []
        for a in range(0, len(rows[0]), mpr):
            chunk = [r[a : a + mpr] for r in rows]
            num = max(ORL.get_minimum_num_micro_batch_size(toks[c].tolist(), cap, 1, 1)
                      for c in chunk)
            want.append([[c[p].tolist() for p in ORL.get_seqlen_balanced_partitions(
                toks[c].tolist(), min(num, len(c)), equal_size=False)] for c in chunk])
        got = _lrd_plan(toks, rank, dp, mpr, cap, "openrlhf")
        assert got == want, (case, dp, mpr, cap)


@pytest.mark.skipif(SKYRL is None, reason="skyrl not installed and LRDOCTOR_PEER_SKYRL (an "
                    "unpacked skyrl wheel; it needs Python 3.12 to install) not set")
def test_balanced_first_fit_matches_skyrl_packer():
    """SkyRL's Balanced packer (soft cap, least-loaded bin first), bins in its order."""
    rng = np.random.default_rng(606)
    for case in range(N_CASES):
        n = int(rng.integers(1, 120))
        lens = _lengths(rng, n, 8000).tolist()
        cap = int(rng.integers(max(1, max(lens) // 3), 3 * max(lens) + 2))  # some over the cap
        want = SKYRL.make_seq_packer("balanced", bin_capacity=cap).pack(lens)
        assert P.balanced_first_fit(lens, cap) == want, (case, cap, lens)


def _skyrl_real_layout(sk, toks, bounds, dp, cap, micro=1):
    """SkyRL 0.4.0's own step: ``MeshDispatch.stage_chunks`` pads each mini-batch to a
    multiple of dp (copies of its first row, loss-masked) and chunks it over the ranks;
    each rank's ``get_microbatch_iterator`` (token-based when ``cap`` > 0: packs its chunk
    and syncs the count, MAX over dp, ranks as threads) yields its micro-batches. Per
    mini-batch, per rank: each micro-batch's real rows (loss-masked rows dropped, so a
    padding micro-batch or a bin of padding copies is [])."""
    import torch

    n, width = len(toks), int(toks.max())
    lens = torch.as_tensor(toks)
    data = sk.TrainingInputBatch({
        "sequences": torch.arange(n)[:, None],  # the row's id rides along
        "attention_mask": (torch.arange(width)[None, :] < lens[:, None]).long(),
        "loss_mask": torch.ones(n, 1, dtype=torch.long),  # 0 on every kind of padding
    })
    data.metadata = {"response_length": 1}
    staged = sk.MeshDispatch.stage_chunks(dp, data, bounds)  # ray.put is the identity here
    fake = peers.FakeDist(dp)
    sk.worker_utils.dist = fake
    out = []
    for chunks in staged:
        its = fake.run(lambda c: sk.worker_utils.get_microbatch_iterator(c, micro, cap),
                       [(c,) for c in chunks])
        mini = []
        for c, it in zip(chunks, its, strict=True):
            if isinstance(it, Exception):
                raise it
            if isinstance(it, sk.worker_utils.TokenBasedBatchIterator):
                # What its __iter__ yields, without copying the rows: the packer's bins
                # (positions in the chunk), then the padding micro-batches.
                ids, keep = c["sequences"][:, 0].tolist(), c["loss_mask"][:, 0].tolist()
                mbs = [[ids[i] for i in b if keep[i]] for b in it._microbatches]
                mbs += [[]] * it.num_padding_microbatches
            else:
                mbs = [[i for i, k in zip(mb["sequences"][:, 0].tolist(),
                                          mb["loss_mask"][:, 0].tolist(), strict=True) if k]
                       for mb in it]
            assert len(mbs) == len(it)
            mini.append(mbs)
        out.append(mini)
    return out


def _lrd_layout(plan, dp):
    got = []
    start = 0
    for b in plan.boundaries:
        mbs = plan.micro_batches[start : b + 1]
        got.append([[mb.ranks[k].tolist() for mb in mbs] for k in range(dp)])
        start = b + 1
    return got


def _random_skyrl_step(rng, sk):
    """A SkyRL step: ``train_batch_size`` prompts of ``n_samples_per_prompt`` rows, mini-batches
    of ``policy_mini_batch_size`` prompts (the trainer's own boundaries), any dp (mini-batches
    not divisible by dp are padded). One case in four adds a ragged last mini-batch, which
    SkyRL's trainer asserts away but a step logged short has; stage_chunks takes it."""
    dp = int(rng.choice([1, 2, 2, 3, 4, 4, 5, 8]))
    n_samples = int(rng.integers(1, 7))
    pmini = int(rng.integers(1, 7))
    prompts = pmini * int(rng.integers(1, 5))
    uids = [f"p{i}" for i in range(prompts) for _ in range(n_samples)]
    bounds = sk.compute_prompt_mini_batch_boundaries(uids, pmini, prompts, False, n_samples)
    mini = pmini * n_samples
    if rng.integers(4) == 0 and mini > 1:
        extra = int(rng.integers(1, mini))
        bounds.append((len(uids), len(uids) + extra))
    n = bounds[-1][1]
    toks = _lengths(rng, n, 4096).astype(np.int64)
    cap = int(rng.integers(max(1, int(toks.max()) // 3), 3 * int(toks.max()) + 2))
    return dp, mini, toks, bounds, cap


@pytest.mark.skipif(SKYRL_STEP is None, reason="skyrl not installed and LRDOCTOR_PEER_SKYRL (an "
                    "unpacked skyrl wheel; it needs Python 3.12 to install) not set, or no torch")
def test_balanced_first_fit_step_matches_skyrl_dispatch():
    """The whole SkyRL step (flavor ``skyrl``): which rows each dp rank gets in each
    mini-batch and its micro-batches, against skyrl 0.4.0's trainer boundaries,
    ``MeshDispatch.stage_chunks`` and ``TokenBasedBatchIterator`` (the real files)."""
    rng = np.random.default_rng(808)
    for case in range(N_CASES):
        dp, mini, toks, bounds, cap = _random_skyrl_step(rng, SKYRL_STEP)
        want = _skyrl_real_layout(SKYRL_STEP, toks, bounds, dp, cap)
        plan = P.plan_step({"strategy": "balanced_first_fit", "max_tokens_per_microbatch": cap,
                            "flavor": "skyrl"}, {"mini_batch_size": mini}, {"tokens": toks}, dp)
        assert _lrd_layout(plan, dp) == want, (case, dp, mini, cap, bounds, toks.tolist())


@pytest.mark.skipif(SKYRL_STEP is None, reason="skyrl not installed and LRDOCTOR_PEER_SKYRL (an "
                    "unpacked skyrl wheel; it needs Python 3.12 to install) not set, or no torch")
def test_prompt_unit_step_matches_skyrl_dispatch():
    """SkyRL step-wise training (strategy ``prompt_unit``): a prompt's samples have 1-4 turns
    each, so mini-batches of whole prompts have any size and are padded over dp. Against
    the trainer's step-wise boundaries, ``stage_chunks`` and the worker's micro-batch
    iterator, token-based (inner ``balanced_first_fit``) or fixed-size (``static``)."""
    rng = np.random.default_rng(909)
    for case in range(N_CASES):
        dp = int(rng.choice([1, 2, 2, 3, 4, 4, 5, 8]))
        n_samples = int(rng.integers(1, 5))
        pmini = int(rng.integers(1, 5))
        prompts = pmini * int(rng.integers(1, 5))
        uids = [f"p{i}" for i in range(prompts) for _ in range(n_samples)
                for _ in range(int(rng.integers(1, 5)))]
        bounds = SKYRL_STEP.compute_prompt_mini_batch_boundaries(uids, pmini, prompts, True,
                                                                 n_samples)
        toks = _lengths(rng, len(uids), 4096).astype(np.int64)
        token_based = bool(rng.integers(4))
        cap = int(rng.integers(max(1, int(toks.max()) // 3), 3 * int(toks.max()) + 2))
        micro = int(rng.integers(1, 5))
        want = _skyrl_real_layout(SKYRL_STEP, toks, bounds, dp, cap if token_based else 0, micro)
        batching = {"strategy": "prompt_unit", "prompts_per_mini_batch": pmini,
                    "pad_mode": "copy"}
        if token_based:
            batching.update(inner="balanced_first_fit", max_tokens_per_microbatch=cap)
        plan = P.plan_step(batching, {"micro_batch_size": micro},
                           {"tokens": toks, "prompt_id": np.array([int(u[1:]) for u in uids])},
                           dp)
        assert _lrd_layout(plan, dp) == want, (case, dp, pmini, cap, token_based, micro, bounds,
                                               toks.tolist())


@pytest.mark.skipif(NEMO is None, reason="nemo_rl not importable and LRDOCTOR_PEER_NEMO_RL (a "
                    "NeMo-RL source checkout; the PyPI name is a placeholder) not set")
@pytest.mark.parametrize("algorithm", ["modified_first_fit_decreasing", "first_fit_decreasing",
                                       "concatenative"])
def test_sequence_packing_matches_nemo_rl_packers(algorithm):
    """NeMo-RL's get_packer(algorithm, cap, min_bin_count=dp, bin_count_multiple=dp).pack."""
    from lrdoctor.replay.packing import sequence_packing as SP

    rng = np.random.default_rng(707)
    for case in range(N_CASES):
        n = int(rng.integers(1, 120))
        lens = _lengths(rng, n, 8000).tolist()
        cap = int(rng.integers(max(lens), 4 * max(lens) + 2))
        dp = int(rng.integers(1, min(n, 8) + 1))
        want = NEMO.get_packer(algorithm, cap, min_bin_count=dp, bin_count_multiple=dp).pack(lens)
        assert SP.pack(lens, cap, algorithm, dp) == want, (case, cap, dp, lens)


@pytest.mark.skipif(SKYRL_STEP is None, reason="skyrl not installed and LRDOCTOR_PEER_SKYRL (an "
                    "unpacked skyrl wheel; it needs Python 3.12 to install) not set, or no torch")
def test_skyrl_launch_script_step_matches_skyrl_dispatch():
    """examples/skyrl-gsm8k-stepwise.sh as the replay reads it (no batch log: synthetic
    lengths, prompt ids from n_samples_per_prompt), one step against SkyRL's own trainer
    boundaries, ``stage_chunks`` and micro-batch iterator."""
    from lrdoctor.replay import batchlog
    from lrdoctor.replay.config import load_config
    from tests.helpers.paths import REPO

    cfg = load_config(REPO / "examples" / "skyrl-gsm8k-stepwise.sh")
    b, t, dp = cfg.batching, cfg.train, cfg.dp.size
    df = batchlog.synthetic(cfg.data.synthetic, 1, t.samples_per_step, seed=3)
    toks = df["tokens"].to_numpy().astype(np.int64)
    pid = df["prompt_id"].to_numpy()
    n = t.samples_per_step // len(np.unique(pid))
    uids = [f"p{int(p)}" for p in pid]
    bounds = SKYRL_STEP.compute_prompt_mini_batch_boundaries(
        uids, b.prompts_per_mini_batch, len(np.unique(pid)), True, n)
    want = _skyrl_real_layout(SKYRL_STEP, toks, bounds, dp, 0, t.micro_batch_size)
    plan = P.plan_step(b, t, {"tokens": toks, "prompt_id": pid}, dp)
    assert _lrd_layout(plan, dp) == want
