"""DeepSpeed checkpoints written by a real engine on the CPU, read back metadata-only.

The engine runs in a subprocess (it initialises torch.distributed and global
accelerator state); the truth it saw is written next to each checkpoint.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.state import Unit
from lrdoctor.read.layouts import deepspeed as ds_fmt
from lrdoctor.schedules import lr_at
from tests.helpers.factories import run_deepspeed

pytestmark = pytest.mark.frameworks

GEN = textwrap.dedent("""
    import json, sys, torch, deepspeed
    from pathlib import Path
    out = Path(sys.argv[1])
    torch.manual_seed(0)

    def run(name, cfg, steps, inf_at=(), client=None, extra_sched_calls=False, saves=(None,)):
        m = torch.nn.Linear(4, 2)
        kw = {}
        if client == "cosine":
            opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
            kw = dict(optimizer=opt, lr_scheduler=torch.optim.lr_scheduler.CosineAnnealingLR(
                opt, T_max=40))
        eng, opt, _, sch = deepspeed.initialize(model=m, model_parameters=m.parameters(),
                                                config=cfg, **kw)
        ga = cfg.get("gradient_accumulation_steps", 1)
        for i in range(steps * ga):
            x = torch.randn(2, 4, dtype=next(eng.module.parameters()).dtype)
            loss = eng(x).float().pow(2).mean()
            if i // ga in inf_at:
                loss = loss * float("inf")
            eng.backward(loss)
            eng.step()
            if extra_sched_calls:  # the bug: a scheduler step per micro-batch on top of DeepSpeed's
                sch.step()
            if i + 1 == steps * ga or (i + 1) // ga in saves and (i + 1) % ga == 0:
                eng.save_checkpoint(str(out / name))
        base = opt.optimizer if hasattr(opt, "optimizer") else opt
        steps_seen = [float(s["step"]) for s in base.state.values() if "step" in s]
        lbi = getattr(sch, "last_batch_iteration", None)
        (out / name / "truth.json").write_text(json.dumps({
            "global_steps": eng.global_steps, "global_samples": eng.global_samples,
            "skipped_steps": eng.skipped_steps, "last_batch_iteration": lbi,
            "last_epoch": getattr(sch, "last_epoch", None),
            "lr": [g["lr"] for g in opt.param_groups],
            "opt_step": max(steps_seen) if steps_seen else None}))

    adam = {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}}
    run("decay", {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
                  "gradient_accumulation_steps": 2, "optimizer": adam,
                  "scheduler": {"type": "WarmupDecayLR", "params": {
                      "warmup_min_lr": 0, "warmup_max_lr": 1e-3, "warmup_num_steps": 3,
                      "total_num_steps": 20}}},
        steps=5, saves=(3,))
    from deepspeed.accelerator import get_accelerator
    if not get_accelerator().is_fp16_supported():  # e.g. a CPU without AVX512-FP16/AMX
        (out / "fp16-unsupported").write_text(get_accelerator().device_name())
    else:
      run("fp16", {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
                   "fp16": {"enabled": True, "initial_scale_power": 4},
                   "zero_optimization": {"stage": 1}, "optimizer": adam,
                   "scheduler": {"type": "WarmupCosineLR", "params": {
                       "warmup_min_ratio": 0.0, "warmup_num_steps": 3, "total_num_steps": 20,
                       "cos_min_ratio": 0.1, "warmup_type": "linear"}}},
          steps=7, inf_at=(2, 4))
    run("client", {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
                   "zero_optimization": {"stage": 2},
                   "zero_allow_untested_optimizer": True}, steps=4, client="cosine")
    run("permicro", {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                     "gradient_accumulation_steps": 4, "optimizer": adam,
                     "scheduler": {"type": "WarmupLR", "params": {
                         "warmup_min_lr": 0, "warmup_max_lr": 1e-3, "warmup_num_steps": 50,
                         "warmup_type": "linear"}}},
        steps=3, extra_sched_calls=True)
    warm = {"type": "WarmupLR", "params": {"warmup_max_lr": 1e-3, "warmup_num_steps": 3}}
    run("bf16", {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
                 "bf16": {"enabled": True}, "optimizer": adam, "scheduler": warm}, steps=4)
    run("zero3", {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
                  "zero_optimization": {"stage": 3}, "optimizer": adam, "scheduler": warm},
        steps=4)
""")


@pytest.fixture(scope="module")
def saved(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("deepspeed")
    run_deepspeed(out, GEN, str(out))
    return out


FP16_SKIP = ("DeepSpeed says fp16 is not supported on this CPU (no AVX512-FP16/AMX): "
             "the fp16 loss-scale overflow run cannot be written here")


@pytest.fixture(scope="module")
def fp16_run(saved) -> Path:
    """The fp16 ZeRO-1 run with overflowed (skipped) steps, where the CPU can run fp16."""
    if (saved / "fp16-unsupported").exists():
        pytest.skip(FP16_SKIP)
    return saved / "fp16"


def test_fp16_run_exactly_where_deepspeed_supports_it(saved):
    """The generator asks DeepSpeed's own accelerator; the choice matches it, and every
    other precision's run was written either way."""
    code = ("from deepspeed.accelerator import get_accelerator as g; "
            "print(bool(g().is_fp16_supported()))")
    env = dict(os.environ, DS_ACCELERATOR="cpu", CUDA_VISIBLE_DEVICES="")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=300)
    supported = r.stdout.strip().splitlines()[-1] == "True"
    assert (saved / "fp16" / "truth.json").exists() is supported
    assert (saved / "fp16-unsupported").exists() is not supported
    for name in ("decay", "client", "permicro", "bf16", "zero3"):
        assert (saved / name / "truth.json").exists(), name


def truth(d: Path) -> dict:
    return json.loads((d / "truth.json").read_text())


def test_warmup_decay_healthy(saved):
    run = saved / "decay"
    t = truth(run)
    assert ds_fmt.detect(run)
    st = ds_fmt.read(run)  # the run dir: follows `latest`
    assert st.extras["tag"] == "global_step5" == st.extras["latest"]
    assert st.counter("deepspeed.global_steps").value == t["global_steps"] == 5
    assert st.counter("deepspeed.global_samples").value == t["global_samples"] == 20
    assert st.counter("deepspeed.global_samples").unit is Unit.SAMPLES
    assert st.counter("deepspeed.skipped_steps").value == t["skipped_steps"] == 0
    assert st.counter("optimizer.step").value == t["opt_step"] == 5
    assert st.scheduler_progress.value == t["last_batch_iteration"] + 1
    assert st.scheduler_progress.value == st.nominal_progress.value  # healthy
    s = st.schedule
    assert (s.family, s.kind, s.max_lr, s.horizon, s.warmup) == (
        "deepspeed", "WarmupDecayLR", 1e-3, 20, 3)
    assert s.params == {"warmup_min_lr": 0, "warmup_max_lr": 1e-3, "warmup_num_steps": 3,
                        "total_num_steps": 20}
    assert st.planned_end.value == 20 and st.trainer_progress.value == 5
    assert st.samples_per_update == 4
    assert st.optimizer_lrs == pytest.approx(t["lr"])
    # The rebuilt schedule gives the LR the live optimizer had.
    assert lr_at(s, st.scheduler_progress.value) == pytest.approx(t["lr"][0], rel=1e-12)


def test_checkpoints_listed_oldest_first(saved):
    run = saved / "decay"
    assert [p.name for p in ds_fmt.find_checkpoints(run)] == ["global_step3", "global_step5"]
    old = ds_fmt.read(run / "global_step3")
    assert old.counter("deepspeed.global_steps").value == 3
    assert old.scheduler_progress.value == old.nominal_progress.value == 3
    f = run / "global_step3" / "mp_rank_00_model_states.pt"
    assert ds_fmt.detect(f) and ds_fmt.read(f).path == str(run / "global_step3")


def test_fp16_overflow_skips_scheduler_but_counts_global_steps(fp16_run):
    run = fp16_run
    t = truth(run)
    st = ds_fmt.read(run)
    assert t["skipped_steps"] == 2 and t["global_steps"] == 7
    assert st.counter("deepspeed.skipped_steps").value == 2
    assert st.counter("deepspeed.global_steps").value == 7
    assert st.scheduler_progress.value == t["last_batch_iteration"] + 1 == 5
    assert st.nominal_progress.value == 5  # global - skipped: healthy
    # ZeRO-1: the optimizer lives in the partition file, loss scaler pickled inside.
    assert st.counter("optimizer.step").value == t["opt_step"] == 5
    assert any("optim_states" in f for f in st.files)
    assert st.extras["zero_stage"] == 1 and st.extras["precision"] == "fp16"
    assert st.extras["loss_scaler"]["last_overflow_iter"] == 4
    s = st.schedule
    assert s.kind == "WarmupCosineLR" and s.max_lr == 1e-3 and s.min_lr == pytest.approx(1e-4)
    assert lr_at(s, st.scheduler_progress.value) == pytest.approx(t["lr"][0], rel=1e-12)


def test_client_torch_scheduler(saved):
    st = ds_fmt.read(saved / "client")
    t = truth(saved / "client")
    assert st.schedule.family == "torch" and st.schedule.kind == "CosineAnnealingLR"
    assert st.schedule.horizon == 40
    assert st.scheduler_progress.name == "scheduler.last_epoch"
    assert st.scheduler_progress.value == t["last_epoch"] == 4
    assert st.scheduler_progress.value == st.nominal_progress.value
    assert st.planned_end.value == 40


def test_scheduler_stepped_per_micro_batch_disagrees(saved):
    st = ds_fmt.read(saved / "permicro")
    t = truth(saved / "permicro")
    # 3 updates x 4 micro-batches: DeepSpeed's own 3 steps + 12 extra calls.
    assert st.nominal_progress.value == 3
    assert st.scheduler_progress.value == t["last_batch_iteration"] + 1 == 15
    assert st.schedule.kind == "WarmupLR" and st.schedule.horizon is None


def test_sibling_ds_config_json_when_the_checkpoint_lacks_it(saved, tmp_path):
    import torch

    src = saved / "decay" / "global_step5"
    sd = torch.load(src / "mp_rank_00_model_states.pt", weights_only=True)
    cfg = sd.pop("ds_config")
    tag = tmp_path / "run" / "global_step5"
    tag.mkdir(parents=True)
    torch.save(sd, tag / "mp_rank_00_model_states.pt")
    st = ds_fmt.read(tag)
    assert st.schedule is None and st.scheduler_progress.value == 5
    assert any("ds_config" in n for n in st.notes)
    (tmp_path / "run" / "ds_config.json").write_text(json.dumps(cfg))
    st = ds_fmt.read(tmp_path / "run")
    assert st.schedule.kind == "WarmupDecayLR" and st.schedule.horizon == 20
    assert str(tmp_path / "run" / "ds_config.json") in st.files


def test_hf_checkpoint_dirs_are_left_to_the_hf_reader(saved, tmp_path):
    ck = tmp_path / "checkpoint-5"
    (ck / "global_step5").mkdir(parents=True)
    (ck / "global_step5" / "mp_rank_00_model_states.pt").write_bytes(
        (saved / "decay" / "global_step5" / "mp_rank_00_model_states.pt").read_bytes())
    (ck / "trainer_state.json").write_text("{}")
    assert not ds_fmt.detect(ck)
    assert not ds_fmt.detect(tmp_path)
    # Pointing at the tag itself asks for the DeepSpeed view of it.
    assert ds_fmt.detect(ck / "global_step5")
    assert ds_fmt.read(ck / "global_step5").scheduler_progress.value == 5


def test_bad_inputs(tmp_path):
    assert not ds_fmt.detect(tmp_path)
    with pytest.raises(UnusableInput, match="no DeepSpeed checkpoints"):
        ds_fmt.read(tmp_path)
    tag = tmp_path / "global_step1"
    tag.mkdir()
    (tag / "mp_rank_00_model_states.pt").write_bytes(b"garbage")
    with pytest.raises(UnusableInput) as e:
        ds_fmt.read(tmp_path)
    assert "mp_rank_00_model_states.pt" in str(e.value) and "\n" not in str(e.value)
    (tmp_path / "latest").write_text("global_step9")
    with pytest.raises(UnusableInput, match="latest"):
        ds_fmt.read(tmp_path)


def test_model_parallel_ranks_are_compared(saved, tmp_path):
    """Constructed: a second mp rank (a copy of rank 0), then one that disagrees."""
    import shutil

    import torch

    tag = tmp_path / "global_step5"
    shutil.copytree(saved / "decay" / "global_step5", tag)
    shutil.copy(tag / "mp_rank_00_model_states.pt", tag / "mp_rank_01_model_states.pt")
    st = ds_fmt.read(tag)
    assert st.extras["model_state_files"] == 2 and st.extras["ranks_agree"] is True
    assert st.files[0].endswith("mp_rank_00_model_states.pt")
    sd = torch.load(tag / "mp_rank_01_model_states.pt", weights_only=True)
    sd["lr_scheduler"] = {"last_batch_iteration": 9}
    torch.save(sd, tag / "mp_rank_01_model_states.pt")
    st = ds_fmt.read(tag)
    assert st.extras["ranks_agree"] is False
    assert st.scheduler_progress.value == 5  # rank 0 is read
    assert any("disagree" in n and "lr_scheduler" in n for n in st.notes)


def test_bf16_without_zero_counts_an_initialisation_step(saved):
    st, t = ds_fmt.read(saved / "bf16"), truth(saved / "bf16")
    assert t["global_steps"] == 4 and t["opt_step"] == 5  # DeepSpeed's own zero-grad step()
    assert st.counter("optimizer.step").value == 5
    assert st.scheduler_progress.value == st.nominal_progress.value == 4
    assert st.extras["optimizer.init_step"] == 1 and st.extras["precision"] == "bf16"


def test_zero3_layout(saved):
    tag = saved / "zero3" / "global_step4"
    assert [f.name for f in tag.glob("*model_states.pt")] == [
        "zero_pp_rank_0_mp_rank_00_model_states.pt"]
    assert ds_fmt.detect(saved / "zero3") and ds_fmt.detect(tag)
    st, t = ds_fmt.read(saved / "zero3"), truth(saved / "zero3")
    assert st.extras["zero_stage"] == 3
    assert st.counter("optimizer.step").value == t["opt_step"] == 4
    assert st.scheduler_progress.value == st.nominal_progress.value == 4
    assert "optimizer.init_step" not in st.extras
    assert st.optimizer_lrs == pytest.approx(t["lr"])


def test_reading_never_imports_torch(saved):
    code = ("import sys; from pathlib import Path; from lrdoctor.read.layouts import deepspeed as M; "
            "st = M.read(Path(sys.argv[1])); assert st.scheduler_progress is not None; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code, str(saved / "decay")], check=True, timeout=60)


def test_batch_size_change_is_noted(saved, tmp_path):
    """Constructed from a real file: 2 of 5 steps at batch 8 instead of 4 (elastic resume)."""
    import torch

    sd = torch.load(saved / "decay" / "global_step5" / "mp_rank_00_model_states.pt",
                    weights_only=True)
    assert "deepspeed.samples_per_step_observed" not in ds_fmt.read(saved / "decay").extras
    sd["global_samples"] = 3 * 4 + 2 * 8
    tag = tmp_path / "global_step5"
    tag.mkdir()
    torch.save(sd, tag / "mp_rank_00_model_states.pt")
    st = ds_fmt.read(tag)
    assert st.extras["deepspeed.samples_per_step_observed"] == pytest.approx(28 / 5)
    assert any("batch size changed" in n for n in st.notes)


# ---------------------------------------------------------------- the whole diagnosis

def test_inspect_healthy_engines_are_silent(saved):
    """WarmupDecayLR, fp16 overflow with skipped steps (ZeRO-1), client torch scheduler
    (ZeRO-2), bf16, ZeRO-3: every checkpoint, no finding at all."""
    from lrdoctor.inspect_api import inspect_path

    for name, n in (("decay", 2), ("fp16", 1), ("client", 1), ("bf16", 1), ("zero3", 1)):
        if not (saved / name).is_dir():  # fp16 where the CPU cannot run it
            assert (saved / f"{name}-unsupported").exists()
            continue
        reps = inspect_path(saved / name, all=True)
        assert len(reps) == n, name
        for r in reps:
            assert r.findings == [], (r.target, [(f.code, f.message) for f in r.findings])
            assert r.exit_code("warning") == 0
            assert r.state["derived"]["progress_ratio"] == 1.0


def test_inspect_scheduler_stepped_per_micro_batch_is_lrd109(saved):
    from lrdoctor.core.findings import Severity
    from lrdoctor.inspect_api import inspect_path

    (r,) = inspect_path(saved / "permicro")
    assert [f.code for f in r.findings] == ["LRD109"]
    f = r.findings[0]
    assert f.severity is Severity.ERROR and r.exit_code("error") == 1
    e = f.evidence
    assert (e["scheduler_progress"], e["nominal_progress"], e["ratio"]) == (15, 3, 5.0)
    assert e["scheduler_counter"] == "scheduler.last_batch_iteration + 1"
