"""slime's and AReaL's micro-batching and configs, against the frameworks' own functions.

slime (THUDM/slime 624b824a, not on the package index): ``build_dp_schedule`` when
``LRDOCTOR_PEER_SLIME`` names a slime checkout; worked cases of its algorithm otherwise.
AReaL 1.0.4: ``areal/utils/seqpack.py`` ``ffd_allocate`` from the released wheel
(scripts/fetch_peers.py, ``LRDOCTOR_PEER_AREAL``) with its ``allocate_balanced_mbs_synced``
rank sync and ``redistribute_trajectories`` spelled out from ``areal/utils/data.py`` and
``areal/infra/dist_rollout.py`` (they need torch.distributed). The configs are the
projects' own: slime's scripts/run-qwen3-4B.sh (tests/data/launch_scripts) and AReaL's
examples/math/gsm8k_grpo.yaml (examples/areal/).
"""

from __future__ import annotations

import random
from types import SimpleNamespace

import numpy as np
import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.config import load_config
from lrdoctor.replay.packing import areal_ffd, plan_step, slime_dp_schedule
from tests.helpers import peers
from tests.helpers.paths import REPO, TESTS

SLIME_SH = TESTS / "data" / "launch_scripts" / "slime" / "scripts" / "run-qwen3-4B.sh"
AREAL_YAML = REPO / "examples" / "areal" / "gsm8k_grpo.yaml"

SLIME = peers.slime_dp_schedule()
AREAL = peers.areal_seqpack()


def _rank_rows(plan, dp):
    """Per rank, the rows of each of its micro-batches (empty ones dropped)."""
    return [[sorted(mb.ranks[r].tolist()) for mb in plan.micro_batches if len(mb.ranks[r])]
            for r in range(dp)]


# ------------------------------------------------------------------------------- slime


def test_slime_first_fit_in_log_order_then_split_to_a_multiple_of_dp():
    """Worked by hand from build_dp_schedule: lengths 6 5 4 3 2 1, cap 10, dp 2.
    First fit in log order: [6,4] [5,3,2] [1] -> 3 micro-batches; 4 needed, so the
    largest multi-sample one ([5,3,2]: (10, 1) beats (10, 0) in max) splits into the
    token-balanced halves [5] and [3,2]; round-robin: rank 0 takes 0 and 2, rank 1 1 and 3."""
    lengths = [6, 5, 4, 3, 2, 1]
    bins = slime_dp_schedule.step_micro_batches(lengths, 2, cap=10, micro_batch_size=None)
    assert bins == [[0, 2], [1], [5], [3, 4]]
    plan = plan_step({"strategy": "slime_dp_schedule", "max_tokens_per_microbatch": 10},
                     {"mini_batch_size": 6}, {"tokens": np.array(lengths, dtype=np.int64)}, 2)
    assert _rank_rows(plan, 2) == [[[0, 2], [5]], [[1], [3, 4]]]
    assert plan.boundaries == [1]  # one update: both ranks run 2 micro-batches


def test_slime_drops_trailing_samples_and_static_asserts_like_slime():
    plan = plan_step({"strategy": "slime_dp_schedule"}, {"mini_batch_size": 4,
                                                         "micro_batch_size": 2},
                     {"tokens": np.arange(1, 11)}, 2)
    assert plan.boundaries == [0, 1] and plan.notes["dropped_rows"] == 2
    with pytest.raises(UnusableInput, match="not a multiple of dp 2"):
        plan_step({"strategy": "slime_dp_schedule"}, {"mini_batch_size": 6,
                                                      "micro_batch_size": 2},
                  {"tokens": np.ones(6, dtype=np.int64)}, 2)


@pytest.mark.peers
@pytest.mark.skipif(SLIME is None, reason="LRDOCTOR_PEER_SLIME (a slime checkout: slime is "
                                          "not on the package index) not set")
@pytest.mark.parametrize("seed", range(40))
def test_slime_schedule_equals_build_dp_schedule(seed):
    rng = random.Random(seed)
    dp = rng.choice([1, 2, 4, 8])
    gbs = dp * rng.randint(1, 24)
    n = gbs * rng.randint(1, 3) + rng.randint(0, gbs - 1)
    lengths = [rng.choice([rng.randint(1, 300), rng.randint(1, 3000), 128]) for _ in range(n)]
    dynamic = rng.random() < 0.8
    cap = rng.randint(300, 6000) if dynamic else None
    micro = rng.choice([1, 2]) if not dynamic else 1
    if not dynamic and (gbs // micro) % dp:
        micro = 1
    args = SimpleNamespace(micro_batch_size=micro, use_dynamic_batch_size=dynamic,
                           max_tokens_per_gpu=cap, balance_data=False, balance_by_flops=False)
    tp = {"dp_size": dp, "cp_size": 1, "vpp_size": 1, "microbatch_group_size_per_vp_stage": 1}
    partitions, mbi, nmb, _ = SLIME.build_dp_schedule(args, tp, lengths, global_batch_size=gbs,
                                                     rollout_indices=list(range(n)))
    theirs = [[sorted(partitions[r][i] for i in mb) for mb in mbi[r]] for r in range(dp)]
    batching = {"strategy": "slime_dp_schedule", "max_tokens_per_microbatch": cap}
    plan = plan_step(batching, {"mini_batch_size": gbs, "micro_batch_size": micro},
                     {"tokens": np.array(lengths, dtype=np.int64)}, dp)
    assert _rank_rows(plan, dp) == theirs
    per_step = np.diff([-1, *plan.boundaries]).tolist()
    assert per_step == nmb


def test_slime_launch_script_as_shipped():
    """scripts/run-qwen3-4B.sh: 3000 rollouts of 32 prompts x 8 = 256 samples, one
    training step of --global-batch-size 256 each; dp 8 GPUs / tp 2 = 4; dynamic
    batches of --max-tokens-per-gpu 9216; --lr-decay-style constant 1e-6; the scheduler
    counts samples (256 per update). The GPU count comes from nvidia-smi: asked for."""
    with pytest.raises(UnusableInput, match="actor-num-gpus-per-node comes from NUM_GPUS.*"
                                            "--set NUM_GPUS=VALUE"):
        load_config(SLIME_SH)
    cfg = load_config(SLIME_SH, ["NUM_GPUS=8"])
    assert cfg._format == "slime-config"
    assert (cfg.train.steps, cfg.train.samples_per_step, cfg.train.mini_batch_size,
            cfg.dp.size) == (3000, 256, 256, 4)
    b = cfg.batching
    assert (b.strategy, b.max_tokens_per_microbatch, b.balance_dp) == \
        ("slime_dp_schedule", 9216, True)
    s = cfg.schedule
    assert (s.family, s.kind, s.max_lr, s.horizon) == ("megatron", "constant", 1e-6, 768000.0)
    assert cfg.scheduler.increment == "samples"


# ------------------------------------------------------------------------------- AReaL


def test_areal_ffd_worked_case():
    """_ffd_allocate by hand: 9 7 5 3 2 into capacity 12, min 2 groups: 9 and 7 open
    groups; 5 fits only the 7 group (12); 3 fits the 9 group (12); 2 fits neither: a
    new group."""
    assert areal_ffd.ffd_allocate([5, 9, 2, 7, 3], 12, 2) == [[1, 4], [3, 0], [2]]
    with pytest.raises(UnusableInput, match="raises RuntimeError"):
        areal_ffd.ffd_allocate([13, 1], 12, 1)


def _areal_synced(lens_per_rank, cap, n_mbs, divisor):
    """areal/utils/data.py allocate_balanced_mbs_synced, all ranks in lockstep, on the
    peer's ffd_allocate: every rank allocates, counts are all-gathered, and unless all
    agree every rank allocates again with n_mbs = the largest."""
    while True:
        out = [sorted(sorted(g) for g in AREAL.ffd_allocate(list(map(int, lens)), cap,
                                                            min_groups=n_mbs,
                                                            n_groups_divisor=divisor))
               for lens in lens_per_rank]
        if len({len(o) for o in out}) == 1:
            return out
        n_mbs = max(len(o) for o in out)


need_areal = pytest.mark.skipif(AREAL is None, reason="areal not installed and "
                                                     "LRDOCTOR_PEER_AREAL (an unpacked areal "
                                                     "1.0.4 wheel, scripts/fetch_peers.py) not set")


@pytest.mark.peers
@need_areal
@pytest.mark.parametrize("seed", range(60))
def test_areal_ffd_allocate_equals_areals(seed):
    rng = random.Random(seed)
    n = rng.randint(1, 300)
    vals = [rng.choice([rng.randint(1, 50), rng.randint(1, 4000), 64]) for _ in range(n)]
    cap = max(vals) + rng.choice([0, rng.randint(0, 8000), int(1e12) - max(vals)])
    div = rng.choice([1, 1, 2, 4])
    min_groups = rng.randint(1, max(1, min(n, 8)))
    try:
        theirs = AREAL.ffd_allocate(vals, cap, min_groups, div)
    except RuntimeError:
        with pytest.raises(UnusableInput):
            areal_ffd.ffd_allocate(vals, cap, min_groups, div)
        return
    assert [list(map(int, g)) for g in theirs] == areal_ffd.ffd_allocate(vals, cap, min_groups,
                                                                          div)


@pytest.mark.peers
@need_areal
@pytest.mark.parametrize("seed", range(30))
def test_areal_step_equals_areals_redistribution_minibatches_and_synced_micro_batches(seed):
    rng = random.Random(seed)
    dp = rng.choice([1, 2, 4])
    group = rng.choice([1, 4, 8])
    prompts = dp * rng.randint(2, 12)
    tokens = np.array([rng.randint(20, 3000) for _ in range(prompts * group)], dtype=np.int64)
    cap = int(tokens.max()) + rng.randint(0, 6000)
    minis = rng.choice([1, 2, 4])
    n_mbs, div = rng.choice([1, 2]), rng.choice([1, 2])
    # redistribute_trajectories: a trajectory's attention_mask.sum() is its group's tokens
    traj = [int(tokens[t * group:(t + 1) * group].sum()) for t in range(prompts)]
    owner = AREAL.ffd_allocate(traj, capacity=int(1e12), min_groups=dp)
    shards = [np.concatenate([np.arange(t * group, (t + 1) * group) for t in g]) for g in owner]
    if min(len(s) for s in shards) < minis * max(n_mbs, div):
        pytest.skip("a rank holds fewer samples than AReaL needs (it raises)")
    mini_groups = _areal_synced([tokens[s] for s in shards], int(1e12), minis, 1)
    expect = []
    for j in range(len(mini_groups[0])):
        rows = [shards[r][mini_groups[r][j]] for r in range(dp)]
        mbs = _areal_synced([tokens[x] for x in rows], cap, n_mbs, div)
        expect.append([[sorted(rows[r][g].tolist()) for g in mbs[r]] for r in range(dp)])
    plan = plan_step({"strategy": "areal_ffd", "max_tokens_per_microbatch": cap,
                      "minibatches": minis, "num_micro_batches": n_mbs, "n_mbs_divisor": div,
                      "group_size": group}, {}, {"tokens": tokens}, dp)
    got, start = [], 0
    for end in plan.boundaries:
        part = plan.micro_batches[start:end + 1]
        got.append([[sorted(mb.ranks[r].tolist()) for mb in part] for r in range(dp)])
        start = end + 1
    assert got == expect


def test_areal_yaml_as_shipped():
    """AReaL's examples/math/gsm8k_grpo.yaml: 256 prompts x 4 samples per step, dp 4
    (fsdp:d4p1t1), ppo_n_minibatches 1, max_tokens_per_mb 10240, constant LR 1.7e-5 with
    int(0.001 x 290) = 0 warmup steps. The dataset size is asked for (GSM8K's train split
    has 7473 prompts: 29 steps an epoch x 10 epochs = 290)."""
    with pytest.raises(UnusableInput, match="--set lrdoctor.dataset_size=N"):
        load_config(AREAL_YAML)
    cfg = load_config(AREAL_YAML, ["lrdoctor.dataset_size=7473"])
    assert cfg._format == "areal-config"
    assert (cfg.train.steps, cfg.train.samples_per_step, cfg.dp.size) == (290, 1024, 4)
    b = cfg.batching
    assert (b.strategy, b.max_tokens_per_microbatch, b.minibatches, b.group_size) == \
        ("areal_ffd", 10240, 1, 4)
    s = cfg.schedule
    assert (s.kind, s.max_lr, s.warmup, s.horizon) == ("constant_with_warmup", 1.7e-5, 0, 290)
    assert cfg.scheduler.step_on == "rollout_step"
    stopped = load_config(AREAL_YAML, ["lrdoctor.dataset_size=7473", "total_train_steps=100"])
    assert (stopped.train.steps, stopped.schedule.horizon) == (100, 290)


def test_the_examples_replay_as_their_headers_say(tmp_path):
    """examples/slime and examples/areal (the frameworks' files with a header) replay with
    no findings and every scheduler step accounted (progress = horizon), shortened to 6
    steps here (the full runs take ~30 s and ~7 s on 2 cores; each step is the same
    accounting): slime's --num-rollout edited in a copy, AReaL's dataset size given."""
    import shutil

    from lrdoctor.replay import ReplayOptions, run

    slime_dir = tmp_path / "scripts"
    shutil.copytree(REPO / "examples" / "slime" / "scripts", slime_dir)
    sh = slime_dir / "run-qwen3-4B.sh"
    sh.write_text(sh.read_text().replace("--num-rollout 3000", "--num-rollout 6"))
    full = load_config(REPO / "examples" / "slime" / "scripts" / "run-qwen3-4B.sh",
                       ["NUM_GPUS=8"])
    assert (full.train.steps, full.dp.size, full.schedule.horizon) == (3000, 4, 768000.0)
    for config, sets in ((sh, ("NUM_GPUS=8",)),
                         (AREAL_YAML, ("lrdoctor.dataset_size=1536", "total_train_epochs=1"))):
        rep = run(str(config), options=ReplayOptions(engine="fast", sets=sets))
        s = rep.extra["summary"]
        assert not rep.findings, [f.code for f in rep.findings]
        assert s["actual_updates"] == 6 and s["progress_ratio"] == pytest.approx(1.0)


@pytest.mark.frameworks
def test_slime_lrs_are_megatron_cores_stepped_by_samples(tmp_path):
    """slime's scheduler is megatron-core's OptimizerParamScheduler built in samples
    (get_optimizer_param_scheduler: decay lr_decay_iters x global_batch_size, warmup
    lr_warmup_iters x global_batch_size) and stepped by each update's samples: the
    replayed LR of every update equals the real scheduler's, stepped the same way."""
    torch = pytest.importorskip("torch")
    sched_mod = pytest.importorskip("megatron.core.optimizer_param_scheduler")
    from lrdoctor.replay import ReplayOptions, replay_full

    p = tmp_path / "run.sh"
    p.write_text("python3 train.py --rollout-batch-size 4 --n-samples-per-prompt 2 "
                 "--global-batch-size 4 --num-rollout 6 --lr 1e-5 --min-lr 1e-6 "
                 "--lr-decay-style cosine --lr-warmup-iters 2 --actor-num-nodes 1 "
                 "--actor-num-gpus-per-node 2 --use-dynamic-batch-size "
                 "--max-tokens-per-gpu 4096 --rollout-max-response-len 1024\n")
    res = replay_full(str(p), options=ReplayOptions(engine="fast"))
    t = res.replay.trace
    got = t["lr"][t["is_update"]].tolist()
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    real = sched_mod.OptimizerParamScheduler(
        opt, init_lr=0.0, max_lr=1e-5, min_lr=1e-6, lr_warmup_steps=2 * 4,
        lr_decay_steps=12 * 4, lr_decay_style="cosine", start_wd=0.0, end_wd=0.0,
        wd_incr_steps=12 * 4, wd_incr_style="constant")
    want = []
    for _ in range(12):  # 6 rollouts x 8 samples / 4 a training step
        want.append(opt.param_groups[0]["lr"])
        real.step(increment=4)
    assert len(got) == 12
    assert got == pytest.approx(want, rel=1e-12, abs=1e-18)


def test_areal_lrs_are_transformers_schedules_stepped_per_global_step(tmp_path):
    """AReaL's linear schedule is transformers' get_linear_schedule_with_warmup over
    total_train_epochs x steps per epoch, stepped once per global step whatever the
    number of mini-batches (ppo_n_minibatches 2: two updates a step, one LR)."""
    torch = pytest.importorskip("torch")
    from transformers import get_linear_schedule_with_warmup

    from lrdoctor.replay import ReplayOptions, replay_full

    text = AREAL_YAML.read_text().replace("lr_scheduler_type: constant",
                                          "lr_scheduler_type: linear")
    text = text.replace("warmup_steps_proportion: 0.001", "warmup_steps_proportion: 0.2")
    text = text.replace("ppo_n_minibatches: 1", "ppo_n_minibatches: 2")
    cfg = tmp_path / "areal.yaml"
    cfg.write_text(text)
    res = replay_full(str(cfg), options=ReplayOptions(
        engine="fast", sets=("lrdoctor.dataset_size=2560", "total_train_epochs=1")))
    t = res.replay.trace
    upd = t["is_update"]
    got = t["lr"][upd].tolist()
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.7e-5)
    real = get_linear_schedule_with_warmup(opt, int(0.2 * 10), 10)
    want = []
    for _ in range(10):  # 2560 // 256 steps, two updates each at the same LR
        want += [opt.param_groups[0]["lr"]] * 2
        opt.step()
        real.step()
    assert got == pytest.approx(want, rel=1e-12, abs=1e-18)
