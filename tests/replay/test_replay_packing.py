"""The frameworks' micro-batching, re-implemented: shapes, invariants and known numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay import packing as P

ROLL_BATCHING = {"strategy": "token_budget", "max_tokens_per_microbatch": 8192, "round_to": 128}
ROLL_TRAIN = {"micro_batch_size": 2, "gradient_accumulation": 64}


def _all_rows(plan):
    return sorted(int(i) for mb in plan.micro_batches for r in mb.ranks for i in r)


def _check_token_budget_invariants(plan, tokens, dp, cap, round_to):
    # Every sample exactly once.
    assert _all_rows(plan) == list(range(len(tokens)))
    for mb in plan.micro_batches:
        assert len(mb.ranks) == dp
        sizes = {len(r) for r in mb.ranks}
        # Same micro-batch count on every rank and, with n % dp == 0, the same size.
        assert len(sizes) == 1
        count = len(mb.ranks[0])
        plen = mb.padded_len[0]
        assert all(p == plen for p in mb.padded_len)
        longest = max(int(tokens[r].max()) for r in mb.ranks)
        assert plen == max(round_to, math.ceil(longest / round_to) * round_to)
        if count > 1:
            assert count * plen <= cap
        for r, tk in zip(mb.ranks, mb.tokens, strict=True):
            assert tk == int(tokens[r].sum())


def test_roll_sokoban_long_sequences_one_per_micro_batch():
    # ROLL sokoban shape: rollout_batch_size 1024 x num_return_sequences 1, dp 8,
    # max_tokens 8192, round 128. Every sequence longer than 4096 tokens.
    rng = np.random.default_rng(0)
    tokens = rng.integers(4097, 8064, size=1024)
    plan = P.plan_step(ROLL_BATCHING, ROLL_TRAIN, {"tokens": tokens}, 8)
    assert len(plan.micro_batches) == 128  # 1024 / 8 ranks, one sequence each
    assert all(len(r) == 1 for mb in plan.micro_batches for r in mb.ranks)
    _check_token_budget_invariants(plan, tokens, 8, 8192, 128)
    # 128 micro-batches over GA 64 = 2 updates, while the nominal budget assumed
    # 1024 / (2 * 64) / 8 = 1 per pipeline step.
    assert math.ceil(len(plan.micro_batches) / 64) == 2


def test_roll_short_dense_sequences_pack_many():
    tokens = np.full(1024, 200)  # rounds to 256 -> 32 per micro-batch
    plan = P.plan_step(ROLL_BATCHING, ROLL_TRAIN, {"tokens": tokens}, 8)
    assert [len(mb.ranks[0]) for mb in plan.micro_batches] == [32, 32, 32, 32]
    assert plan.micro_batches[0].padded_len == [256] * 8
    _check_token_budget_invariants(plan, tokens, 8, 8192, 128)
    # 4 micro-batches < GA 64: one (short) update where 1 was budgeted; with
    # mixed lengths the count falls anywhere in between.


def test_roll_sort_and_round_robin_deal():
    tokens = np.array([50, 10, 40, 20, 30, 60])
    plan = P.plan_token_budget({"tokens": tokens}, dp=2, max_tokens=100, round_to=1)
    # sorted ascending: 10(1) 20(3) 30(4) 40(2) 50(0) 60(5); rank0 gets 10,30,50; rank1 20,40,60.
    # position maxima: 20, 40, 60 -> [pos0,pos1] = 2*40=80 <= 100; add pos2: 3*60 > 100.
    assert [list(r) for r in plan.micro_batches[0].ranks] == [[1, 4], [3, 2]]
    assert [list(r) for r in plan.micro_batches[1].ranks] == [[0], [5]]
    assert plan.micro_batches[0].padded_len == [40, 40]
    assert plan.micro_batches[1].padded_len == [60, 60]
    assert plan.micro_batches[0].tokens == [40, 60]


@pytest.mark.parametrize("seed", range(5))
def test_token_budget_invariants_random(seed):
    rng = np.random.default_rng(seed)
    dp = int(rng.integers(1, 9))
    tokens = rng.integers(1, 8000, size=dp * int(rng.integers(5, 60)))
    plan = P.plan_token_budget({"tokens": tokens}, dp, 8192, 64)
    _check_token_budget_invariants(plan, tokens, dp, 8192, 64)


def test_token_budget_single_sequence_over_cap_alone_and_reported():
    tokens = np.array([100, 100, 9000, 100])
    plan = P.plan_token_budget({"tokens": tokens}, dp=1, max_tokens=8192, round_to=1)
    assert [len(mb.ranks[0]) for mb in plan.micro_batches] == [3, 1]
    assert plan.notes["sequence_over_cap"]["max_len"] == 9000


def test_token_budget_uneven_dp_keeps_every_sample():
    tokens = np.arange(1, 12)
    plan = P.plan_token_budget({"tokens": tokens}, dp=4, max_tokens=30, round_to=1)
    assert _all_rows(plan) == list(range(11))
    assert plan.notes["not_divisible_by_dp"] == {"samples": 11, "dp": 4}


def test_static_fixed_size_and_rank_column():
    tokens = np.arange(1, 17)
    plan = P.plan_step({"strategy": "static"}, {"micro_batch_size": 2}, {"tokens": tokens}, 2)
    assert len(plan.micro_batches) == 4
    assert [list(r) for r in plan.micro_batches[0].ranks] == [[0, 1], [8, 9]]
    rank = np.array([0, 1] * 8)
    plan = P.plan_step(
        {"strategy": "static"}, {"micro_batch_size": 4}, {"tokens": tokens, "rank": rank}, 2
    )
    assert [list(r) for r in plan.micro_batches[0].ranks] == [[0, 2, 4, 6], [1, 3, 5, 7]]
    assert plan.boundaries is None


# ---------------------------------------------------------------- Karmarkar-Karp


def test_karmarkar_karp_known_partition():
    # The textbook LDM case: {8,7,6,5,4} -> 8-7=1, 6-5=1, 4-1=3, 3-1=2: sums 16
    # and 14 (the optimum 15/15 is missed; a real LDM must miss it too).
    parts = P.karmarkar_karp([8, 7, 6, 5, 4], 2)
    sums = sorted(sum([8, 7, 6, 5, 4][i] for i in p) for p in parts)
    assert sums == [14, 16]
    assert sorted(i for p in parts for i in p) == [0, 1, 2, 3, 4]


def test_karmarkar_karp_equal_size_and_balance():
    rng = np.random.default_rng(1)
    vals = rng.integers(1, 10_000, size=64).tolist()
    parts = P.karmarkar_karp(vals, 8, equal_size=True)
    assert all(len(p) == 8 for p in parts)
    sums = [sum(vals[i] for i in p) for p in parts]
    # Far better balanced than round-robin chunks of the same data.
    chunk = [sum(vals[i : i + 8]) for i in range(0, 64, 8)]
    assert max(sums) - min(sums) < (max(chunk) - min(chunk)) / 4
    with pytest.raises(ValueError):
        P.karmarkar_karp(vals[:63], 8, equal_size=True)


def test_kk_plan_exceeds_cap_and_reports_it():
    # Three sequences of 5000 tokens, cap 8192: verl < 0.9.1 asks for ceil(15000/8192)=2
    # micro-batches, so one holds 10000 tokens (over the cap).
    tokens = np.array([5000, 5000, 5000])
    plan = P.plan_step(
        {"strategy": "karmarkar_karp", "max_tokens_per_microbatch": 8192, "flavor": "verl_ceildiv"},
        {"micro_batch_size": 1},
        {"tokens": tokens},
        1,
    )
    assert len(plan.micro_batches) == 2
    assert sorted(mb.tokens[0] for mb in plan.micro_batches) == [5000, 10000]
    assert plan.notes["token_cap_exceeded"] == {
        "max_tokens": 10000,
        "cap": 8192,
        "micro_batches_over": 1,
    }


def test_verl_091_raises_the_count_until_every_micro_batch_fits():
    # Same step on verl 0.9.1 (the default flavor): 2 partitions do not fit, so a third is
    # added and every micro-batch holds one 5000-token sequence.
    tokens = np.array([5000, 5000, 5000])
    plan = P.plan_step(
        {"strategy": "karmarkar_karp", "max_tokens_per_microbatch": 8192},
        {"micro_batch_size": 1},
        {"tokens": tokens},
        1,
    )
    assert [mb.tokens[0] for mb in plan.micro_batches] == [5000, 5000, 5000]
    assert "token_cap_exceeded" not in plan.notes
    assert plan.notes["partitions_raised"]["added"] == 1


def test_verl_091_cannot_fit_a_sequence_over_the_cap():
    # One sequence longer than the cap: verl 0.9.1 raises; the replay says so.
    tokens = np.array([9000, 100, 100])
    plan = P.plan_step(
        {"strategy": "karmarkar_karp", "max_tokens_per_microbatch": 8192},
        {"micro_batch_size": 1},
        {"tokens": tokens},
        1,
    )
    assert plan.notes["verl_cannot_fit"]["mini_batches"] == 1
    assert len(plan.micro_batches) == 3


def test_keep_minibatch_balances_each_mini_batch_over_dp():
    # verl balance_batch(keep_minibatch=True), lengths 1..8, dp 2, mini-batches of 4:
    # KK(equal) of rows 0-3 -> {0,3},{1,2}; of rows 4-7 -> {4,7},{5,6}; rank lists
    # [0,3,4,7] and [1,2,5,6], each sorted by workload and interleaved light/heavy
    # ([0,4,7,3], [1,5,6,2]) before the ranks cut consecutive mini-batches of 2.
    tokens = np.arange(1, 9)
    cfg = {"strategy": "karmarkar_karp", "max_tokens_per_microbatch": 100_000}
    train = {"micro_batch_size": 1, "mini_batch_size": 4}
    kept = P.plan_step({**cfg, "keep_minibatch": True}, train, {"tokens": tokens}, 2)
    assert kept.boundaries == [0, 1]
    assert [[r.tolist() for r in mb.ranks] for mb in kept.micro_batches] == [
        [[0, 4], [1, 5]],
        [[7, 3], [6, 2]],
    ]
    # Without it the step-wide KK puts other rows together.
    mixed = P.plan_step(cfg, train, {"tokens": tokens}, 2)
    assert [[r.tolist() for r in mb.ranks] for mb in mixed.micro_batches] == [
        [[1, 4], [0, 5]],
        [[7, 2], [6, 3]],
    ]


def test_kk_plan_invariants_and_mini_batch_boundaries():
    rng = np.random.default_rng(2)
    tokens = rng.integers(100, 6000, size=256)
    plan = P.plan_step(
        {"strategy": "karmarkar_karp", "max_tokens_per_microbatch": 8192},
        {"micro_batch_size": 1, "mini_batch_size": 64},
        {"tokens": tokens},
        4,
    )
    assert _all_rows(plan) == list(range(256))
    # 256 / 64 = 4 optimizer updates, whatever the micro-batch count.
    assert len(plan.boundaries) == 4
    assert plan.boundaries[-1] == len(plan.micro_batches) - 1
    # Same micro-batch count on every rank (no empty rank lists here).
    assert all(len(r) > 0 for mb in plan.micro_batches for r in mb.ranks)
    # Balanced: per-rank mini-batch micro-batches are close in workload.
    work = P.verl_workload(tokens)
    for mb in plan.micro_batches[:3]:
        assert all(int(work[r].sum()) > 0 for r in mb.ranks)


def test_openrlhf_flavor_first_fit_count():
    tokens = np.array([5, 3, 7, 2, 6]) * 1000
    assert P.first_fit_count(tokens.tolist(), 10_000) == 3
    plan = P.plan_step(
        {"strategy": "karmarkar_karp", "max_tokens_per_microbatch": 10_000, "flavor": "openrlhf"},
        {"micro_batch_size": 1},
        {"tokens": tokens},
        1,
    )
    assert len(plan.micro_batches) == 3


# ---------------------------------------------------------------- SkyRL


def test_balanced_first_fit_bins():
    lens = [6000, 5000, 3000, 2000, 1000]
    bins = P.balanced_first_fit(lens, 8192)
    # 6000 alone; 5000 new bin; 3000 -> least loaded (5000) fits -> 8000;
    # 2000 -> least loaded 6000 -> 8000; 1000 -> both full -> new bin.
    assert bins == [[0, 3], [1, 2], [4]]
    # Over-cap sequence sits alone (soft cap).
    assert P.balanced_first_fit([9000, 10], 8192) == [[0], [1]]


def test_balanced_first_fit_plan_pads_rank_counts():
    tokens = np.array([8000, 8000, 8000, 100, 100, 100])
    plan = P.plan_step(
        {"strategy": "balanced_first_fit", "max_tokens_per_microbatch": 8192},
        {"micro_batch_size": 1},
        {"tokens": tokens},
        2,
    )
    # Rank 0 has 3 x 8000 -> 3 bins; rank 1 has 3 x 100 -> 1 bin, padded to 3.
    assert len(plan.micro_batches) == 3
    assert plan.notes["padding_micro_batches"] == 2
    assert _all_rows(plan) == list(range(6))


def test_balanced_first_fit_skyrl_pads_each_mini_batch_over_dp():
    # SkyRL >= 0.2.0 (stage_chunks): mini-batches of 3 rows at dp 2 are padded to 4 with a
    # copy of their first row, which the last rank packs: row 2 (500) no longer fits beside
    # the 8000-token copy, so that rank has 2 bins and rank 0 a padding micro-batch.
    tokens = np.array([8000, 100, 500, 100, 100, 100])
    plan = P.plan_step({"strategy": "balanced_first_fit", "max_tokens_per_microbatch": 8192},
                       {"mini_batch_size": 3}, {"tokens": tokens}, 2)
    assert plan.boundaries == [1, 2]  # two updates (3 rows each), not three of 2 rows
    rows = [[r.tolist() for r in mb.ranks] for mb in plan.micro_batches]
    assert rows == [[[0, 1], []], [[], [2]], [[3, 4], [5]]]
    assert plan.notes["padding_rows"] == 2
    assert plan.notes["not_divisible_by_dp"] == {"samples": 3, "dp": 2, "padding_rows": 1}
    assert _all_rows(plan) == list(range(6))


def test_prompt_unit_balanced_packs_the_padding_copies():
    # Step-wise SkyRL, dp 2: prompt p0's 3 sequences are padded to 4 with a copy of row 0
    # (8000 tokens) on rank 1, beside row 2 (500): over the cap together, so two bins.
    plan = P.plan_step({"strategy": "prompt_unit", "prompts_per_mini_batch": 1,
                        "inner": "balanced_first_fit", "max_tokens_per_microbatch": 8192},
                       {"micro_batch_size": 1},
                       {"tokens": np.array([8000, 100, 500, 100, 100]),
                        "prompt_id": np.array([0, 0, 0, 1, 1])}, 2)
    rows = [[r.tolist() for r in mb.ranks] for mb in plan.micro_batches]
    assert rows == [[[0, 1], []], [[], [2]], [[3], [4]]]
    assert plan.boundaries == [1, 2]


def test_prompt_unit_never_splits_a_prompt():
    rng = np.random.default_rng(3)
    turns = rng.integers(1, 6, size=32)  # 32 prompts, 1-5 sequences each
    pid = np.repeat(np.arange(32), turns)
    tokens = rng.integers(100, 2000, size=len(pid))
    plan = P.plan_step(
        {"strategy": "prompt_unit"},
        {"micro_batch_size": 2, "samples_per_step": 32 * 4, "mini_batch_size": 8 * 4},
        {"tokens": tokens, "prompt_id": pid},
        4,
    )
    # 128 / 32 = 4 mini-batches of 8 prompts each.
    assert len(plan.boundaries) == 4
    assert plan.notes["prompts_per_mini_batch"] == 8
    assert _all_rows(plan) == list(range(len(pid)))
    start = 0
    seen: set[int] = set()
    for b in plan.boundaries:
        rows = [int(i) for mb in plan.micro_batches[start : b + 1] for r in mb.ranks for i in r]
        prompts = set(pid[rows].tolist())
        assert not prompts & seen  # no prompt in two mini-batches
        assert len(prompts) == 8
        seen |= prompts
        start = b + 1


def test_prompt_unit_short_padding_flagged():
    # dp 8; a mini-batch of 2 prompts x 1 turn = 2 sequences needs pad 6 > 2.
    pid = np.array([0, 1, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3])
    tokens = np.full(len(pid), 100)
    plan = P.plan_step(
        {"strategy": "prompt_unit", "prompts_per_mini_batch": 2, "pad_mode": "slice"},
        {"micro_batch_size": 1},
        {"tokens": tokens, "prompt_id": pid},
        8,
    )
    short = plan.notes["short_padding"]
    assert short[0] == {
        "mini_batch": 0,
        "mb_size": 2,
        "pad_size": 6,
        "dp": 8,
        "rows_after_padding": 4,
        "needed": 8,
    }
    # The second mini-batch (14 rows) needs 2, has 14: fine.
    assert len(short) == 1
    copy = P.plan_step(
        {"strategy": "prompt_unit", "prompts_per_mini_batch": 2, "pad_mode": "copy"},
        {"micro_batch_size": 1},
        {"tokens": tokens, "prompt_id": pid},
        8,
    )
    assert "short_padding" not in copy.notes
    assert copy.notes["padding"][0]["pad_size"] == 6


def test_prompt_unit_rejects_non_contiguous_prompt():
    with pytest.raises(UnusableInput, match="prompt_id 0 appears again"):
        P.plan_step(
            {"strategy": "prompt_unit"},
            {"micro_batch_size": 1},
            {"tokens": np.ones(3, int), "prompt_id": np.array([0, 1, 0])},
            1,
        )


# ---------------------------------------------------------------- Fast-LLM


def test_doc_target_closes_on_global_count_with_overshoot():
    docs = np.array([3, 1, 2, 2, 5, 1, 1, 1])  # rank 0 rows 0-3, rank 1 rows 4-7
    plan = P.plan_step(
        {"strategy": "doc_target", "docs_per_step": 6},
        {"micro_batch_size": 1},
        {"tokens": np.full(8, 100), "docs": docs},
        2,
    )
    # micro-steps: (3+5)=8 -> closes (overshoot 2); (1+1)=2, (2+1)=5, (2+1)=8 -> closes at 8.
    assert plan.notes["micro_batch_docs"] == [8, 2, 3, 3]
    assert plan.boundaries == [0, 3]
    assert plan.loss_divisors == [8.0, 8.0, 8.0, 8.0]
    assert plan.notes["overshoot"] == {"windows": 2, "max": 2, "total": 4}


def test_doc_target_divisor_is_window_total_and_tail():
    docs = np.array([2, 2, 2, 2, 2])
    plan = P.plan_step(
        {"strategy": "doc_target", "docs_per_step": 4},
        {"micro_batch_size": 1},
        {"tokens": np.full(5, 10), "docs": docs},
        1,
    )
    assert plan.boundaries == [1, 3, 4]
    assert plan.loss_divisors == [4.0, 4.0, 4.0, 4.0, 2.0]
    assert plan.notes["partial_tail"] == {"docs": 2, "target": 4, "micro_batches": 1}
    wrong = P.plan_step(
        {"strategy": "doc_target", "docs_per_step": 4, "loss_divisor": "micro_batch"},
        {"micro_batch_size": 1},
        {"tokens": np.full(5, 10), "docs": docs},
        1,
    )
    assert wrong.loss_divisors == [2.0] * 5


# ---------------------------------------------------------------- plumbing


def test_split_steps_and_dataframe_frame():
    import pandas as pd

    df = pd.DataFrame({"step": [1, 0, 1, 0], "tokens": [10, 20, 30, 40]})
    steps = P.split_steps(df)
    assert [s for s, _ in steps] == [0, 1]
    assert steps[0][1]["tokens"].tolist() == [20, 40]
    plan = P.plan_step({"strategy": "static"}, {"micro_batch_size": 1}, df[["tokens"]], 1)
    assert len(plan.micro_batches) == 4


def test_bad_strategy_and_missing_keys():
    with pytest.raises(UnusableInput, match="not one of"):
        P.plan_step({"strategy": "magic"}, {}, {"tokens": np.ones(2, int)}, 1)
    with pytest.raises(UnusableInput, match="max_tokens_per_microbatch"):
        P.plan_step({"strategy": "token_budget"}, {}, {"tokens": np.ones(2, int)}, 1)
    with pytest.raises(UnusableInput, match="prompt_id"):
        P.plan_step({"strategy": "prompt_unit"}, {}, {"tokens": np.ones(2, int)}, 1)


def test_nemo_rl_token_budget_per_global_batch():
    # Two global batches of 8 (one optimizer step each), dp 2, cap 1000, round 1.
    tokens = np.array([100, 900, 100, 100, 100, 100, 100, 100, 300, 300, 300, 300, 50, 50, 50, 50])
    plan = P.plan_step(
        {"strategy": "token_budget", "max_tokens_per_microbatch": 1000, "flavor": "nemo_rl"},
        {"micro_batch_size": 1, "mini_batch_size": 8},
        {"tokens": tokens},
        2,
    )
    # Chunk 1 sorted: 100 x7 then 900 -> positions (max of pair) 100,100,100,900:
    # three positions fit (3*100), the 900 one opens a micro-batch. Chunk 2: 50 x4,
    # 300 x4 -> positions 50, 50, 300, 300: 3*300 = 900 fits, all four: 4*300 > 1000.
    assert plan.boundaries == [1, 3]
    assert [len(mb.ranks[0]) for mb in plan.micro_batches] == [3, 1, 3, 1]
    assert [mb.padded_len[0] for mb in plan.micro_batches] == [100, 900, 300, 300]
    # Every row of a chunk stays in its chunk's micro-batches.
    first = {int(i) for mb in plan.micro_batches[:2] for r in mb.ranks for i in r}
    assert first == set(range(8))
    roll = P.plan_step(
        {"strategy": "token_budget", "max_tokens_per_microbatch": 1000},
        {"micro_batch_size": 1, "mini_batch_size": 8},
        {"tokens": tokens},
        2,
    )
    assert roll.boundaries is None  # ROLL leaves updates to gradient accumulation


# ---------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None)
@given(
    lens=st.lists(st.integers(1, 9000), min_size=1, max_size=80),
    dp=st.integers(1, 8),
    strategy=st.sampled_from(["static", "token_budget", "karmarkar_karp", "balanced_first_fit"]),
    cap=st.sampled_from([2048, 8192]),
)
def test_every_strategy_places_every_sample_once(lens, dp, strategy, cap):
    tokens = np.asarray(lens)
    plan = P.plan_step(
        {"strategy": strategy, "max_tokens_per_microbatch": cap, "round_to": 64},
        {"micro_batch_size": 3},
        {"tokens": tokens},
        dp,
    )
    assert _all_rows(plan) == list(range(len(lens)))
    for mb in plan.micro_batches:
        assert len(mb.ranks) == len(mb.padded_len) == len(mb.tokens) == dp
        for r, tk in zip(mb.ranks, mb.tokens, strict=True):
            assert tk == int(tokens[np.asarray(r, dtype=np.int64)].sum())
    if strategy == "token_budget":
        for mb in plan.micro_batches:
            count = max(len(r) for r in mb.ranks)
            if count > 1:
                assert count * mb.padded_len[0] <= cap
    if strategy == "balanced_first_fit":
        for mb in plan.micro_batches:
            for r, tk in zip(mb.ranks, mb.tokens, strict=True):
                assert len(r) <= 1 or tk <= cap


def test_nemo_rl_mffd_and_bin_count_adjustment():
    # cap 10, lengths 6,4,3,3,2,1: large [6] takes the medium 4; the small and tiny
    # leftovers go to NeMo-RL's sorted-bin first fit -> [[0, 1], [2, 3, 4, 5]].
    from lrdoctor.replay.packing import sequence_packing as SP

    assert SP.pack([6, 4, 3, 3, 2, 1], 10) == [[0, 1], [2, 3, 4, 5]]
    # dp 4: the count rises to 4 by moving the last item of the fullest bins.
    assert SP.pack([6, 4, 3, 3, 2, 1], 10, multiple=4) == [[0, 1], [2, 3], [5], [4]]
    assert SP.pack([6, 4, 3, 3, 2, 1], 10, "concatenative") == [[0, 1], [2, 3, 4, 5]]
    # FFD sorts (length, index) pairs descending: of the two 3s, index 3 comes first.
    assert SP.pack([6, 4, 3, 3, 2, 1], 10, "first_fit_decreasing") == [[0, 1], [3, 2, 4, 5]]


def test_sequence_packing_plan_deals_bins_round_robin_per_global_batch():
    tokens = np.array([6, 4, 3, 3, 2, 1, 6, 4, 3, 3, 2, 1])
    plan = P.plan_step(
        {"strategy": "sequence_packing", "max_tokens_per_microbatch": 10},
        {"micro_batch_size": 1, "mini_batch_size": 6},
        {"tokens": tokens},
        2,
    )
    # Each global batch of 6 packs into 2 bins: one per rank, one update per batch.
    assert plan.boundaries == [0, 1]
    assert [[r.tolist() for r in mb.ranks] for mb in plan.micro_batches] == [
        [[0, 1], [2, 3, 4, 5]],
        [[6, 7], [8, 9, 10, 11]],
    ]


@pytest.mark.parametrize("flavor", ["verl", "verl_ceildiv", "openrlhf"])
def test_count_only_path_matches_the_full_plan(flavor):
    rng = np.random.default_rng(11)
    for dp, mini in ((1, None), (4, 16), (8, 8)):
        tokens = rng.integers(50, 6000, size=64)
        fr = {"tokens": tokens}
        counts = P.count_micro_batches(fr, dp, 8192, flavor=flavor, mini_per_rank=mini)
        plan = P.plan_karmarkar_karp(fr, dp, 8192, flavor=flavor, mini_per_rank=mini)
        per_mini = np.diff([-1, *(plan.boundaries or [len(plan.micro_batches) - 1])]).tolist()
        assert counts == per_mini
