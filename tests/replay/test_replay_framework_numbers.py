"""Step accounting of each framework's current release, checked against its own functions.

NeMo-RL (a recipe with ``defaults:``), ROLL (sequence packing), OpenRLHF 0.11.2
(``balance_experiences``) and Fast-LLM (current schema). Where the framework
installs, its own function is run on the same random lengths (``tests/helpers/peers``);
torch's own schedulers give the LR NeMo-RL's workers see.
"""

from __future__ import annotations

import math
import types

import numpy as np
import pytest

from lrdoctor.replay import ReplayOptions, packing, replay_full
from lrdoctor.replay.config import load_config
from lrdoctor.replay.packing.karmarkar_karp import openrlhf_balance
from lrdoctor.replay.packing.roll_sequence_packing import plan_roll_sequence_packing
from tests.helpers import peers
from tests.helpers.paths import REPO

EX = REPO / "examples"
NEMO_SH = EX / "nemo-rl" / "run_grpo_math_seqpack.sh"
ROLL_SH = EX / "roll-rlvr" / "examples" / "qwen2.5-7B-rlvr_megatron" / "run_rlvr_pipeline.sh"


def test_nemo_rl_recipe_inherits_its_base_through_defaults():
    cfg = load_config(NEMO_SH)
    # from the base (grpo_math_1B.yaml): 32 prompts x 16 generations; from the recipe:
    # global batches of 128, TP 4 on 4 nodes x 8 GPUs -> dp 8, 30 steps
    assert (cfg.train.samples_per_step, cfg.train.mini_batch_size, cfg.dp.size) == (512, 128, 8)
    assert cfg.train.steps == 30
    assert cfg.batching.strategy == "sequence_packing"
    # sequence packing pads to policy.make_sequence_length_divisible_by (lm_policy.py),
    # not to sequence_packing.sequence_length_round (64)
    assert cfg.batching.round_to == 4
    assert cfg.batching.max_tokens_per_microbatch == 4096  # ${mul:4096, 1}


def test_nemo_rl_steps_its_scheduler_once_per_grpo_step_as_torch_does():
    torch = pytest.importorskip("torch")
    res = replay_full(str(NEMO_SH), options=ReplayOptions(engine="fast", knob_check=False))
    tr = res.replay.trace
    first = {int(s): float(lr) for s, lr in zip(tr["train_step"][::-1], tr["lr"][::-1],
                                                strict=True)}
    # NeMo-RL's DTensor v2 / Megatron worker: one scheduler.step() per train() call
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.AdamW([p], lr=3e-7)
    sched = torch.optim.lr_scheduler.SequentialLR(opt, [
        torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, end_factor=1.0, total_iters=13),
        torch.optim.lr_scheduler.ConstantLR(opt, factor=1.0, total_iters=10**10)],
        milestones=[13])
    want = []
    for _ in range(30):
        want.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    got = [first[s] for s in range(30)]
    assert got == pytest.approx(want, rel=1e-12)
    assert got[5] == pytest.approx(1.3384615e-7, rel=1e-6)  # not 3e-7 (4 steps per GRPO step)
    # 4 global batches per GRPO step: 4 updates, one scheduler step
    assert res.report.extra["summary"]["updates_per_step"]["mean"] == 4


def _roll_reference(tokens, dp, rows_per_update, cap, pad, balancing):
    """ROLL's LoadBalancePacker on one step, with verl's get_seqlen_balanced_partitions
    (ROLL's roll/utils/functionals.py copy of it)."""
    n = len(tokens)
    per = -(-n // dp)
    out = []
    shards = [np.arange(k * per, min((k + 1) * per, n)) for k in range(dp)]
    for a in range(0, per, rows_per_update):
        chunk = [s[a:a + rows_per_update] for s in shards]
        padded = [((tokens[c] + pad - 1) // pad) * pad for c in chunk]
        count = max(max(min(max(1, math.ceil(int(p.sum()) / cap)), len(p)), 1) for p in padded)
        parts = []
        for c, p in zip(chunk, padded, strict=True):
            work = (24576 * p + p * p).tolist()
            parts.append(sorted(sorted(c[i] for i in part) for part in
                                balancing.get_seqlen_balanced_partitions(work, count, False)))
        out.append(parts)
    return out


def test_roll_sequence_packing_matches_roll_load_balance_packer():
    verl = peers.verl_balancing()
    if verl is None:
        pytest.skip(f"verl not installed ({peers.PEERS_INSTALL})")
    rng = np.random.default_rng(21)
    for _case in range(30):
        dp = int(rng.integers(1, 5))
        rows = int(rng.integers(4, 40))
        n = dp * rows * int(rng.integers(1, 3))
        tokens = rng.integers(1, 3000, n).astype(np.int64)
        pad = int(rng.choice([16, 32]))
        cap = int(rng.integers(3000, 20000))
        plan = plan_roll_sequence_packing({"tokens": tokens}, dp, cap, rows_per_update=rows,
                                          round_to=pad)
        want = _roll_reference(tokens, dp, rows, cap, pad, verl)
        got, start = [], 0
        for end in plan.boundaries:
            mbs = plan.micro_batches[start:end + 1]
            got.append([sorted(sorted(int(i) for i in mb.ranks[k]) for mb in mbs
                               if len(mb.ranks[k])) for k in range(dp)])
            start = end + 1
        assert got == want


def test_roll_launch_script_packs_instead_of_64_static_micro_batches():
    cfg = load_config(ROLL_SH)
    assert cfg._format == "roll-yaml"
    assert cfg.batching.strategy == "roll_sequence_packing"
    assert (cfg.batching.max_tokens_per_microbatch, cfg.batching.round_to) == (8192, 16)
    assert cfg.dp.size == 8 and cfg.train.gradient_accumulation == 64
    # ../config/deepspeed_zero@_here_ is inside the folder the command runs from: followed
    assert "defaults_not_followed" not in cfg._source
    res = replay_full(str(ROLL_SH), options=ReplayOptions(engine="fast", knob_check=False))
    ws = res.report.extra["summary"]["window_sizes"]
    assert 12 <= ws["min"] <= ws["max"] <= 24  # not 64 static micro-batches per update


def test_roll_packing_under_another_strategy_is_lrd213(tmp_path):
    text = (ROLL_SH.parent / "rlvr_config.yaml").read_text().replace(
        "strategy_name: megatron_train", "strategy_name: deepspeed_train").replace(
        "  - ../config/deepspeed_zero@_here_\n", "")
    (tmp_path / "rlvr.yaml").write_text(text.replace("defaults:\n", ""))
    cfg = load_config(tmp_path / "rlvr.yaml")
    assert cfg.batching.strategy == "static"
    assert [u["key"] for u in cfg._unmodelled] == ["actor_train.use_sequence_packing"]


def test_openrlhf_balance_matches_balance_experiences():
    balance = peers.openrlhf_balance_experiences()
    if balance is None:
        pytest.skip(f"openrlhf not installed ({peers.PEERS_INSTALL})")
    rng = np.random.default_rng(7)
    for _case in range(50):
        dp = int(rng.integers(1, 9))
        n = int(rng.integers(1, 200))
        tokens = rng.integers(1, 50, n)  # many ties: the sort must be stable as Python's
        items = [types.SimpleNamespace(total_length=int(t), row=i) for i, t in enumerate(tokens)]
        args = types.SimpleNamespace(actor=types.SimpleNamespace(num_nodes=1,
                                                                 num_gpus_per_node=dp),
                                     ds=types.SimpleNamespace(ring_attn_size=1,
                                                              tensor_parallel_size=1))
        want = [[it.row for it in rank_items] for rank_items in balance(items, args)]
        order, ranks = openrlhf_balance(tokens, dp)
        got = [order[ranks == r].tolist() for r in range(dp)]
        assert got == want[:dp] + [[]] * (dp - len(want))


def test_openrlhf_script_counts_micro_batches_after_balancing():
    cfg = load_config(EX / "openrlhf-train-ppo-ray.sh")
    rng = np.random.default_rng(3)
    frame = {"tokens": rng.integers(64, 4096, cfg.train.samples_per_step).astype(np.int64)}
    plan = packing.plan_step(cfg.batching, cfg.train, frame, cfg.dp.size)
    assert plan.notes.get("openrlhf_balance_experiences") is True
    rows = sorted(int(i) for mb in plan.micro_batches for r in mb.ranks for i in r)
    assert rows == list(range(len(frame["tokens"])))  # every row once, in the caller's frame


@pytest.mark.parametrize("name", ["verl-dynamic-bsz.yaml", "verl-ppo-megatron.sh",
                                  "nemo-rl/run_grpo_math_seqpack.sh"])
def test_knob_check_reuse_gives_what_replanning_gives(name, monkeypatch):
    """Where the 2x knob check reuses the first plan, a real replan at 2x agrees."""
    from lrdoctor.replay import analysis

    opts = ReplayOptions(engine="fast")
    fast = replay_full(str(EX / name), options=opts).report.extra["summary"]["memory_knob"]
    monkeypatch.setattr(analysis, "_knob_cannot_move", lambda rep: False)
    slow = replay_full(str(EX / name), options=opts).report.extra["summary"]["memory_knob"]
    assert fast["rows"] == slow["rows"] and fast["differs"] == slow["differs"]
    # verl and NeMo-RL step the scheduler per train step and update per mini-batch
    assert "without a second replay" in fast["source"]
    assert slow["source"] == "replayed again at twice the cap"


def test_nemo_rl_recipe_bins_match_nemo_rl_packer_on_padded_lengths():
    """Per global batch: NeMo-RL's packer on lengths padded to make_sequence_length_divisible_by
    (lm_policy.py's sequence_length_pad_multiple) gives the micro-batches the replay plans."""
    nemo = peers.nemo_rl_packing()
    if nemo is None:
        pytest.skip("nemo_rl not importable and LRDOCTOR_PEER_NEMO_RL not set")
    cfg = load_config(NEMO_SH)
    b, t, dp = cfg.batching, cfg.train, cfg.dp.size
    rng = np.random.default_rng(89)
    tokens = rng.integers(64, 4096, t.samples_per_step).astype(np.int64)
    plan = packing.plan_step(b, t, {"tokens": tokens}, dp)
    want, start = [], 0
    for a in range(0, len(tokens), t.mini_batch_size):
        padded = (-(-tokens[a:a + t.mini_batch_size] // b.round_to) * b.round_to).tolist()
        bins = nemo.get_packer(b.algorithm, b.max_tokens_per_microbatch, min_bin_count=dp,
                               bin_count_multiple=dp).pack(padded)
        want.append(len(bins) // dp)
    got = []
    for end in plan.boundaries:
        got.append(end + 1 - start)
        start = end + 1
    assert got == want
