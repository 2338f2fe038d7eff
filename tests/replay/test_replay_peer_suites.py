"""The frameworks' own unit tests, transcribed into replay cases.

Inputs and expected numbers come from the peers' test files (named per test);
their code is not copied, and the checks run against lrdoctor's packers:

- verl ``tests/utils/test_seqlen_balancing.py`` (rearrange_micro_batches counts)
- SkyRL ``tests/train/test_prompt_mini_batch.py`` (prompt mini-batch boundaries,
  MeshDispatch.stage_chunks) and
  ``tests/backends/skyrl_train/test_token_based_batching_utils.py`` (balanced packing)
- ROLL ``tests/utils/test_dynamic_batching.py`` (dynamic_batching_shard)
- Fast-LLM ``tests/layers/test_docs_per_step.py`` (PR 520, _prefetch_to_doc_target)

Not transcribed: cases of behaviour lrdoctor does not model (ROLL's virtual-pipeline
count padding, verl's uid-grouped partitions, Fast-LLM's breadth-first divisibility
assertion, SkyRL's tensor payloads), and the verl test's random masks, replaced by
seeded lengths in the same ranges.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay import packing as P


def _mini_batches(plan) -> list[list[list[int]]]:
    """Per mini-batch (between boundaries), per rank: the rows, in order."""
    out, start = [], 0
    for b in plan.boundaries:
        mbs = plan.micro_batches[start : b + 1]
        dp = len(mbs[0].ranks)
        out.append([[int(i) for mb in mbs for i in mb.ranks[k]] for k in range(dp)])
        start = b + 1
    return out


def _bounds(plan) -> list[tuple[int, int]]:
    """Mini-batch (start, end) row ranges, as SkyRL's boundaries are written."""
    out = []
    for mini in _mini_batches(plan):
        rows = sorted(r for rank in mini for r in rank)
        out.append((rows[0], rows[-1] + 1))
    return out


# --------------------------------------------------------------------------- verl


@pytest.mark.parametrize("flavor", ["verl_ceildiv", "verl"])
def test_verl_seqlen_balancing_counts_and_cover(flavor):
    """test_seqlen_balancing / _worker: 20 + 5*rank rows of width 100, 50-90% valid tokens,
    max_token_len 300. Every row lands in exactly one micro-batch; with
    same_micro_num_in_dp the count is the max over ranks of
    min(rows, ceildiv(tokens, 300)) (verl < 0.9.1; 0.9.1 may add micro-batches
    until each fits, never fewer)."""
    rng = np.random.default_rng(42)
    dp = 2
    rows = [20 + 5 * r for r in range(dp)]
    toks = np.concatenate([rng.integers(50, 91, n) for n in rows])
    rank = np.repeat(np.arange(dp), rows)
    plan = P.plan_step({"strategy": "karmarkar_karp", "max_tokens_per_microbatch": 300,
                        "flavor": flavor}, {"micro_batch_size": 1},
                       {"tokens": toks, "rank": rank}, dp)
    local = [min(n, math.ceil(int(toks[rank == r].sum()) / 300)) for r, n in enumerate(rows)]
    if flavor == "verl_ceildiv":
        assert len(plan.micro_batches) == max(local)
    else:
        assert len(plan.micro_batches) >= max(local)
        assert all(t <= 300 for mb in plan.micro_batches for t in mb.tokens)
    for r in range(dp):
        got = sorted(int(i) for mb in plan.micro_batches for i in mb.ranks[r])
        assert got == np.flatnonzero(rank == r).tolist()


# --------------------------------------------------------------------------- SkyRL


def _prompt_plan(uids, prompts_per_mini_batch, dp=1, micro=10_000):
    pid = np.array([int(u[1:]) for u in uids])
    return P.plan_step({"strategy": "prompt_unit", "prompts_per_mini_batch": prompts_per_mini_batch},
                       {"micro_batch_size": micro},
                       {"tokens": np.full(len(uids), 8), "prompt_id": pid}, dp)


def _uids_stepwise(prompts):
    return [p for p, turns in prompts for t in turns for _ in range(t)]


@pytest.mark.parametrize("mini, expected", [
    (1, [(0, 2), (2, 4), (4, 6), (6, 8)]),
    (2, [(0, 4), (4, 8)]),
    (4, [(0, 8)]),
])
def test_skyrl_nonstepwise_prompt_mini_batches(mini, expected):
    uids = ["p0", "p0", "p1", "p1", "p2", "p2", "p3", "p3"]
    assert _bounds(_prompt_plan(uids, mini)) == expected


def test_skyrl_stepwise_prompt_mini_batches():
    # p0 turns [3, 2], p1 [1, 4], p2 [2, 1], p3 [1, 1]: 15 sequences, 2 prompts per mini-batch.
    uids = _uids_stepwise([("p0", [3, 2]), ("p1", [1, 4]), ("p2", [2, 1]), ("p3", [1, 1])])
    assert len(uids) == 15
    assert _bounds(_prompt_plan(uids, 2)) == [(0, 10), (10, 15)]
    uids = _uids_stepwise([("p0", [2, 1, 3]), ("p1", [1, 1, 1])])
    assert _bounds(_prompt_plan(uids, 1)) == [(0, 6), (6, 9)]


def test_skyrl_stepwise_same_step_count_as_non_stepwise():
    fixed = [f"p{i}" for i in range(256) for _ in range(5)]
    assert _bounds(_prompt_plan(fixed, 128)) == [(0, 640), (640, 1280)]
    step = _uids_stepwise([(f"p{i}", [1 + (i * j) % 4 for j in range(5)]) for i in range(256)])
    assert len(_bounds(_prompt_plan(step, 128))) == 2


def test_skyrl_noncontiguous_uids_raise():
    with pytest.raises(UnusableInput, match="contiguous"):
        _prompt_plan(["p0", "p0", "p1", "p0"], 1)


def test_skyrl_stage_chunks_padding_over_dp():
    # test_variable_minibatches_dp2_padding: boundaries (0,3),(3,7), dp 2: mini-batch 0 is
    # padded 3 -> 4 (a loss-masked copy), chunks [0,1] and [2,pad]; mini-batch 1 [3,4],[5,6].
    plan = _prompt_plan(["p0", "p0", "p0", "p1", "p1", "p1", "p1"], 1, dp=2)
    assert _mini_batches(plan) == [[[0, 1], [2]], [[3, 4], [5, 6]]]
    assert plan.notes["padding"][0] == {"mini_batch": 0, "mb_size": 3, "pad_size": 1}
    # test_dp_size_4_heavy_padding: 5 rows, dp 4 -> padded to 8, chunks of 2.
    plan = _prompt_plan(["p0"] * 5, 1, dp=4)
    assert _mini_batches(plan) == [[[0, 1], [2, 3], [4], []]]
    assert plan.notes["padding"][0]["pad_size"] == 3
    # test_uniform_minibatches_dp1: no padding at dp 1.
    plan = _prompt_plan(["p0"] * 5 + ["p1"] * 5, 1, dp=1)
    assert _mini_batches(plan) == [[[0, 1, 2, 3, 4]], [[5, 6, 7, 8, 9]]]
    assert "padding" not in plan.notes


@pytest.mark.parametrize("lens, cap, n_bins", [
    ([10, 10, 5, 5], 15, 2),        # test_basic_packing
    ([10, 1, 1, 1, 1, 1], 10, 2),   # test_single_large_item
    ([5, 5, 5, 5], 10, 2),          # test_all_items_equal
    ([10], 15, 1),                  # test_single_item
    ([8, 3, 5, 6, 2, 7], 11, None),  # test_all_indices_covered / test_no_overflow
])
def test_skyrl_balanced_binpacking(lens, cap, n_bins):
    bins = P.balanced_first_fit(lens, cap)
    if n_bins is not None:
        assert len(bins) == n_bins
    assert sorted(i for b in bins for i in b) == list(range(len(lens)))
    assert all(sum(lens[i] for i in b) <= cap for b in bins)


def test_skyrl_oversized_sequence_gets_own_micro_batch():
    bins = P.balanced_first_fit([100, 10, 10], 50)
    assert [0] in bins and sorted(i for b in bins for i in b) == [0, 1, 2]
    assert all(sum([100, 10, 10][i] for i in b) <= 50 for b in bins if b != [0])
    assert P.balanced_first_fit([100], 50) == [[0]]


# --------------------------------------------------------------------------- ROLL


def test_roll_dynamic_batching_shard():
    # dp 2, lengths [2, 4, 7, 6, 3, 4], cap 20, round 2: micro-batch positions [[0,2],[2,3]]
    # with padded lengths [4, 8].
    plan = P.plan_step({"strategy": "token_budget", "max_tokens_per_microbatch": 20,
                        "round_to": 2}, {"micro_batch_size": 1},
                       {"tokens": np.array([2, 4, 7, 6, 3, 4])}, 2)
    sizes = [len(mb.ranks[0]) for mb in plan.micro_batches]
    starts = np.cumsum([0, *sizes]).tolist()
    assert [[starts[i], starts[i + 1]] for i in range(len(sizes))] == [[0, 2], [2, 3]]
    assert [mb.padded_len[0] for mb in plan.micro_batches] == [4, 8]
    # Rank 0 holds sorted positions 0, 2, 4 (lengths 2, 4, 6): micro-batch 0 is 2 rows x 4.
    assert sorted(int(x) for x in plan.micro_batches[0].ranks[0]) == [0, 1]


# --------------------------------------------------------------------------- Fast-LLM


def _doc_windows(docs_per_mb, target, bfmb=1):
    """Micro-batches of one doc count each (dp 1), grouped by the docs_per_step rule."""
    n = len(docs_per_mb)
    plan = P.plan_step({"strategy": "doc_target", "docs_per_step": target},
                       {"micro_batch_size": 1},
                       {"tokens": np.full(n, 64), "docs": np.array(docs_per_mb)}, 1)
    return plan


@pytest.mark.parametrize("docs, target, first_window, divisor", [
    ([2, 2, 2, 2, 2], 6, 3, 6),   # test_prefetch_stops_at_target
    ([3, 3, 3], 5, 2, 6),         # test_prefetch_resets_num_documents_in_batch
    ([4, 4], 5, 2, 8),            # test_prefetch_overshoot_is_included
    ([2, 2, 2, 2], 4, 2, 4),      # test_prefetch_exact_divisibility (bfmb 2: 2 % 2 == 0)
])
def test_fast_llm_docs_per_step(docs, target, first_window, divisor):
    plan = _doc_windows(docs, target)
    assert plan.boundaries[0] == first_window - 1
    # Every micro-batch of the window divides by the window's document total.
    assert plan.loss_divisors[:first_window] == [float(divisor)] * first_window
