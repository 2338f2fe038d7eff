"""Factories that write REAL checkpoints with the frameworks' own classes.

Factories (plain functions, also used by scripts/make_samples.py and the
fixture scripts under tests/data/) return a ``Truth`` with what the live
objects held at each save, so tests compare a reader's RunState with the framework's own numbers:

- ``megatron_run(root, ...)``: megatron-core ``OptimizerParamScheduler`` + torch AdamW,
  saved in Megatron-LM's torch layout (``iter_NNNNNNN/mp_rank_XX/model_optim_rng.pt``).
- ``roll_run(root, ...)``: the same scheduler saved in ROLL's mcore_adapter layout.
- ``hf_run(root, ...)``: a real ``transformers.Trainer`` run on CPU.
- ``torch_loop(path, ...)``: a hand-written loop with a torch LRScheduler.

The session fixtures built from them (``hf_run_dir``, ...) are in tests/conftest.py.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@dataclass
class Saved:
    """What the live objects held when one checkpoint was written."""

    path: Path
    scheduler: dict[str, Any]
    lrs: list[float]
    optimizer_step: float | None
    counters: dict[str, Any] = field(default_factory=dict)


@dataclass
class Truth:
    root: Path
    saves: list[Saved] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def last(self) -> Saved:
        return self.saves[-1]


def _tiny_model(seed: int = 0):
    import torch

    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Tanh(), torch.nn.Linear(3, 1))


def _train_step(model, opt, seed: int) -> None:
    import torch

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(4, 4, generator=g)
    loss = model(x).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _opt_step(opt) -> float | None:
    steps = [float(s["step"]) for s in opt.state.values() if "step" in s]
    return max(steps) if steps else None


def _quiet_megatron():
    import logging
    import warnings

    warnings.filterwarnings("ignore", message=".*Transformer Engine.*")
    warnings.filterwarnings("ignore", message=".*Apex.*")
    logging.getLogger("megatron").setLevel(logging.ERROR)
    from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

    return OptimizerParamScheduler


# ---------------------------------------------------------------- Megatron-LM

def megatron_args(**over) -> argparse.Namespace:
    """A Megatron-LM ``args`` Namespace with the real argument names (subset)."""
    a = dict(
        train_iters=40, train_samples=None, lr_decay_iters=None, lr_decay_samples=None,
        lr_warmup_iters=4, lr_warmup_samples=0, lr_warmup_fraction=None, lr_warmup_init=0.0,
        lr_wsd_decay_iters=None, lr_wsd_decay_samples=None, lr_wsd_decay_style="exponential",
        lr=3e-4, min_lr=3e-5, lr_decay_style="cosine", start_weight_decay=0.01,
        end_weight_decay=0.01, weight_decay_incr_style="constant", weight_decay=0.01,
        global_batch_size=16, micro_batch_size=2, data_parallel_size=2,
        tensor_model_parallel_size=1, pipeline_model_parallel_size=1, rampup_batch_size=None,
        consumed_train_samples=0, skipped_train_samples=0, consumed_valid_samples=0,
        use_checkpoint_opt_param_scheduler=True, override_opt_param_scheduler=False,
        ckpt_format="torch", use_distributed_optimizer=False, fp16=False, bf16=False,
        seed=1234, iteration=0,
    )
    a.update(over)
    return argparse.Namespace(**a)


def megatron_run(root: Path, *, save_at=(10, 20), tp: int = 1, pp: int = 1,
                 overflow_iters=(), fp16_wrapper: bool = False, sched_per_micro: bool = False,
                 resume_at=(), double_count_on_resume: bool = False,
                 per_micro_from: int | None = None, fill_consumed: bool = True,
                 update_train_iters: bool = False, **arg_over) -> Truth:
    """Train with megatron-core's scheduler as Megatron-LM's train loop does and save
    like ``save_checkpoint`` (torch format) at each iteration in ``save_at``.

    ``overflow_iters``: iterations whose update was unsuccessful (fp16 overflow):
    the optimizer and scheduler do not step, consumed_train_samples still grows.
    ``sched_per_micro``: the bug of stepping the scheduler (increment=global_batch_size)
    once per micro-batch, num_microbatches times per iteration.
    ``resume_at``: saved iterations where the job stops and a new one resumes: fresh
    AdamW and ``OptimizerParamScheduler`` load the saved state dicts (megatron-core's
    ``load_state_dict`` steps the fresh scheduler to the saved ``num_steps``).
    ``double_count_on_resume``: slime's bug (THUDM/slime PR 1547): after the load, one
    more ``scheduler.step(increment=iteration * global_batch_size)``.
    ``per_micro_from``: from this iteration on (a resumed job running changed code), the
    scheduler is stepped once per micro-batch.
    ``fill_consumed=False``: a trainer that never fills ``args.consumed_train_samples``
    (it stays 0 in every checkpoint; issue 19).
    ``update_train_iters``: sample-based training as Megatron-LM's
    ``get_optimizer_param_scheduler`` does it: ``update_train_iters(args)`` computes
    ``args.train_iters`` (along the batch-size ramp-up, with megatron-core's calculator) and
    the checkpoints save it beside ``train_samples``.
    """
    import copy

    import torch

    Sched = _quiet_megatron()
    args = megatron_args(**arg_over)
    gbs = args.global_batch_size
    if args.train_iters:
        decay = (args.lr_decay_iters or args.train_iters) * gbs
        warm = (args.lr_warmup_fraction * decay if args.lr_warmup_fraction is not None
                else args.lr_warmup_iters * gbs)
        wd_steps = args.train_iters * gbs
        wsd = args.lr_wsd_decay_iters * gbs if args.lr_wsd_decay_iters is not None else None
    else:
        decay = args.lr_decay_samples or args.train_samples
        warm = (args.lr_warmup_fraction * decay if args.lr_warmup_fraction is not None
                else args.lr_warmup_samples)
        wd_steps = args.train_samples
        wsd = args.lr_wsd_decay_samples
    model = _tiny_model()

    def build():
        opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01)
        return opt, Sched(
            opt, init_lr=args.lr_warmup_init, max_lr=args.lr, min_lr=args.min_lr,
            lr_warmup_steps=warm, lr_decay_steps=decay, lr_decay_style=args.lr_decay_style,
            start_wd=args.start_weight_decay, end_wd=args.end_weight_decay,
            wd_incr_steps=wd_steps, wd_incr_style=args.weight_decay_incr_style,
            wsd_decay_steps=wsd, lr_wsd_decay_style=args.lr_wsd_decay_style)

    opt, sched = build()
    if update_train_iters and not args.train_iters and args.train_samples:
        args.train_iters = _update_train_iters(args)
    ramp = None
    if args.rampup_batch_size:  # megatron-core's own calculator decides each iteration's batch
        from megatron.core import num_microbatches_calculator as ramp

        ramp.unset_num_microbatches_calculator()
        ramp.init_num_microbatches_calculator(
            0, args.rampup_batch_size, gbs, args.micro_batch_size, args.data_parallel_size,
            decrease_batch_size_if_needed=False)
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    truth = Truth(root, meta={"args": args, "lr_decay_steps": decay, "lr_warmup_steps": warm})
    iteration = 0
    for it in range(1, max(save_at) + 1):
        if ramp is not None:  # what Megatron-LM's train loop does before each iteration
            ramp.update_num_microbatches(args.consumed_train_samples, consistency_check=True)
            gbs = ramp.get_current_global_batch_size()
        if it not in overflow_iters:
            _train_step(model, opt, it)
            n_micro = gbs // (args.micro_batch_size * args.data_parallel_size)
            per_micro = sched_per_micro or (per_micro_from is not None and it >= per_micro_from)
            for _ in range(n_micro if per_micro else 1):
                sched.step(increment=gbs)
        iteration = it
        if fill_consumed:
            args.consumed_train_samples += gbs
        args.iteration = iteration
        if it in save_at:
            ckpt = root / f"iter_{iteration:07d}"
            opt_sd = opt.state_dict()
            if fp16_wrapper:  # Float16OptimizerWithFloat16Params.state_dict()
                opt_sd = {"optimizer": opt_sd,
                          "grad_scaler": {"scale": torch.tensor(65536.0), "growth_tracker": 0},
                          "fp32_from_fp16_params": [[p.detach().clone()
                                                     for p in model.parameters()]]}
            for t in range(tp):
                for p in range(pp):
                    rank = f"mp_rank_{t:02d}" + (f"_{p:03d}" if pp > 1 else "")
                    d = ckpt / rank
                    d.mkdir(parents=True, exist_ok=True)
                    state = {
                        "args": copy.deepcopy(args), "checkpoint_version": 3.0,
                        "iteration": iteration, "model": model.state_dict(),
                        "optimizer": opt_sd, "opt_param_scheduler": sched.state_dict(),
                        "rng_state": [{"random_rng_state": None,
                                       "torch_rng_state": torch.get_rng_state()}],
                        "num_floating_point_operations_so_far": 0,
                    }
                    torch.save(state, d / "model_optim_rng.pt")
            (root / "latest_checkpointed_iteration.txt").write_text(str(iteration))
            truth.saves.append(Saved(
                ckpt, sched.state_dict(), [g["lr"] for g in opt.param_groups], _opt_step(opt),
                {"iteration": iteration, "consumed_train_samples": args.consumed_train_samples,
                 "skipped_train_samples": args.skipped_train_samples,
                 "wsd_decay_steps": wsd}))
        if it in resume_at:  # a new job: rebuild, then load what was just saved
            saved = torch.load(sorted(ckpt.glob("mp_rank_*/model_optim_rng.pt"))[0],
                               weights_only=False)
            opt, sched = build()
            opt.load_state_dict(saved["optimizer"]["optimizer"] if fp16_wrapper
                                else saved["optimizer"])
            sched.load_state_dict(saved["opt_param_scheduler"])
            if double_count_on_resume:
                sched.step(increment=saved["iteration"] * gbs)
    if ramp is not None:
        ramp.unset_num_microbatches_calculator()
    return truth


def _update_train_iters(args: argparse.Namespace) -> int:
    """Megatron-LM training.py ``update_train_iters`` for sample-based training: the ramp-up
    phase iteration by iteration with megatron-core's calculator, then whole global batches
    (the partial last batch thrown away)."""
    if args.rampup_batch_size is None:
        return int(args.train_samples // args.global_batch_size)
    from megatron.core import num_microbatches_calculator as calc

    calc.unset_num_microbatches_calculator()
    calc.init_num_microbatches_calculator(
        0, args.rampup_batch_size, args.global_batch_size, args.micro_batch_size,
        args.data_parallel_size, decrease_batch_size_if_needed=False)
    iterations = consumed = 0
    while consumed <= int(args.rampup_batch_size[2]) and consumed <= args.train_samples:
        calc.update_num_microbatches(consumed, consistency_check=False)
        consumed += calc.get_current_global_batch_size()
        iterations += 1
    calc.unset_num_microbatches_calculator()
    if args.train_samples > consumed:
        iterations += (args.train_samples - consumed) // args.global_batch_size
    return int(iterations)


# ---------------------------------------------------------------- ROLL

def roll_run(output_dir: Path, *, pipeline_max_steps: int = 10, nominal_per_step: int = 4,
             updates_per_step=None, save_at=(4, 9), lr: float = 1e-6, min_lr: float = 0.0,
             warmup: int = 2, style: str = "cosine", worker: str = "actor_train",
             write_config: bool = True, save_steps: int = 5) -> Truth:
    """ROLL's Megatron strategy: scheduler stepped once per optimizer update, saved as
    ``<output_dir>/<worker>/checkpoint-N/scheduler.pt`` plus mcore_adapter files.

    ``updates_per_step(step) -> int``: the real number of updates in pipeline step
    ``step`` (dynamic batching); defaults to the nominal count.
    """
    import torch

    Sched = _quiet_megatron()
    budget = pipeline_max_steps * nominal_per_step
    model = _tiny_model(1)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    sched = Sched(opt, init_lr=0.0, max_lr=lr, min_lr=min_lr, lr_warmup_steps=warmup,
                  lr_decay_steps=budget, lr_decay_style=style, start_wd=0.0, end_wd=0.0,
                  wd_incr_steps=0, wd_incr_style="constant")
    out = Path(output_dir)
    truth = Truth(out, meta={"budget": budget, "pipeline_max_steps": pipeline_max_steps})
    log_history = []
    for step in range(pipeline_max_steps):
        n = updates_per_step(step) if updates_per_step else nominal_per_step
        for i in range(n):
            _train_step(model, opt, step * 1000 + i)
            sched.step(1)
        log_history.append({"system/step": step, "actor/lr": opt.param_groups[0]["lr"]})
        if step in save_at:
            ck = out / worker / f"checkpoint-{step}"
            rank_dir = ck / "iter_0000001" / "mp_rank_00"
            rank_dir.mkdir(parents=True, exist_ok=True)
            (ck / "latest_checkpointed_iteration.txt").write_text("1")
            (ck / "mca_config.json").write_text(json.dumps(
                {"hidden_size": 3, "num_layers": 2, "tensor_model_parallel_size": 1}, indent=2))
            torch.save({"model": model.state_dict()}, rank_dir / "model_optim_rng.pt")
            # bf16 Float16OptimizerWithFloat16Params.state_dict() (no grad scaler in bf16).
            torch.save({"optimizer": opt.state_dict(),
                        "fp32_from_fp16_params": [[p.detach().clone()
                                                   for p in model.parameters()]]},
                       rank_dir / "optimizer.pt")
            torch.save(sched.state_dict(), ck / "scheduler.pt")
            (ck / "rng_state").mkdir(exist_ok=True)
            torch.save({"torch_rng_state": torch.get_rng_state()},
                       ck / "rng_state" / "rng_state_0.pth")
            pdir = out / "pipeline" / f"checkpoint-{step}" / "pipeline"
            pdir.mkdir(parents=True, exist_ok=True)
            (pdir / "worker_state_pipeline.json").write_text(json.dumps(
                {"kv": {}, "log_history": log_history, "step": step}, indent=2, sort_keys=True)
                + "\n")
            truth.saves.append(Saved(ck, sched.state_dict(), [g["lr"] for g in opt.param_groups],
                                     _opt_step(opt), {"pipeline_step": step}))
    if write_config:
        (out / "rlvr_config.yaml").write_text(
            "# The run's ROLL pipeline config (ROLL itself does not save it).\n"
            f"max_steps: {pipeline_max_steps}\nsave_steps: {save_steps}\n"
            f"rollout_batch_size: {nominal_per_step * 8}\nnum_return_sequences_in_group: 8\n"
            "ppo_epochs: 1\n"
            "actor_train:\n  training_args:\n"
            f"    learning_rate: {lr}\n    per_device_train_batch_size: 8\n"
            "    gradient_accumulation_steps: 8\n"
            f"    warmup_steps: {warmup}\n"
            + (f"    lr_scheduler_type: cosine_with_min_lr\n    lr_scheduler_kwargs:\n"
               f"      min_lr: {min_lr}\n" if min_lr else f"    lr_scheduler_type: {style}\n")
            +
            "  use_dynamic_batching_in_train: true\n"
            "  max_tokens_per_microbatch_in_train: 16384\n"
            "  sequence_length_round_in_train: 128\n")
    return truth


# ---------------------------------------------------------------- HF Trainer

def hf_run(output_dir: Path, *, max_steps: int = 12, save_steps: int = 4, lr: float = 1e-3,
           scheduler: str = "cosine", warmup_steps: float = 3, logging_steps: int = 1,
           grad_accum: int = 1, scheduler_kwargs: dict | None = None,
           save_state: bool = True, callbacks=(), args_over: dict | None = None,
           resume_from: str | None = None) -> Truth:
    """A real ``transformers.Trainer`` run of a two-layer model on CPU.

    ``save_state``: end with ``Trainer.save_state()`` (output_dir/trainer_state.json,
    whose log holds the run time, so it differs between runs). ``callbacks``: more
    ``TrainerCallback`` instances (a user's callback that misbehaves, for bug runs).
    ``args_over``: more ``TrainingArguments`` (num_train_epochs, save_strategy...);
    ``resume_from``: a checkpoint to resume from, as ``trainer.train`` does.
    """
    import torch
    from transformers import Trainer, TrainerCallback, TrainingArguments

    class TwoLayer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.net = _tiny_model(2)

        def forward(self, x, labels=None):
            out = self.net(x).squeeze(-1)
            loss = torch.nn.functional.mse_loss(out, labels) if labels is not None else None
            return {"loss": loss, "logits": out}

    class DS(torch.utils.data.Dataset):
        def __len__(self):
            return 64

        def __getitem__(self, i):
            g = torch.Generator().manual_seed(i)
            return {"x": torch.randn(4, generator=g), "labels": torch.tensor(float(i % 3))}

    saves: list[Saved] = []

    class Record(TrainerCallback):
        def on_save(self, args, state, control, **kw):
            sch, opt = kw["lr_scheduler"], kw["optimizer"]
            saves.append(Saved(Path(args.output_dir) / f"checkpoint-{state.global_step}",
                               sch.state_dict(), [g["lr"] for g in opt.param_groups],
                               _opt_step(opt), {"global_step": state.global_step,
                                                "max_steps": state.max_steps}))

    args = TrainingArguments(**{
        **dict(output_dir=str(output_dir), max_steps=max_steps, save_steps=save_steps,
               learning_rate=lr, lr_scheduler_type=scheduler, warmup_steps=warmup_steps,
               logging_steps=logging_steps, per_device_train_batch_size=4,
               gradient_accumulation_steps=grad_accum, use_cpu=True, report_to=[],
               save_strategy="steps", seed=0, disable_tqdm=True, dataloader_num_workers=0,
               lr_scheduler_kwargs=scheduler_kwargs or {}),
        **(args_over or {})})
    trainer = Trainer(model=TwoLayer(), args=args, train_dataset=DS(),
                      callbacks=[*callbacks, Record()])
    trainer.train(resume_from_checkpoint=resume_from)
    if save_state:  # what most scripts do at the end
        trainer.save_state()
    return Truth(Path(output_dir), saves, meta={"args": args})


# ---------------------------------------------------------------- torch loops

def torch_loop(path: Path, *, scheduler: str = "cosine", updates: int = 12, ga: int = 1,
               step_per_micro: bool = False, lr: float = 1e-3, layout: str = "flat",
               total_steps: int | None = None, save_total: bool = True) -> Truth:
    """A hand-written loop: AdamW + a torch LRScheduler, ``torch.save``'d as a dict.

    ``step_per_micro``: the classic bug, ``scheduler.step()`` on every micro-batch
    of a gradient-accumulation window of ``ga``. ``layout``: "flat"
    ({"optimizer", "scheduler", "step"}), "nested" ({"state": {...}}) or "names"
    ({"optimizer_state_dict", "scheduler_state_dict", "global_step"}).
    """
    import torch
    from torch.optim import lr_scheduler as L

    model = _tiny_model(3)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    # The author sizes the schedule in optimizer updates (the plan), whatever the stepping.
    horizon = total_steps or updates
    makers = {
        "lambda": lambda: L.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 4)),
        "linear": lambda: L.LinearLR(opt, start_factor=0.1, end_factor=1.0, total_iters=horizon),
        "cosine": lambda: L.CosineAnnealingLR(opt, T_max=horizon, eta_min=lr / 10),
        "onecycle": lambda: L.OneCycleLR(opt, max_lr=lr, total_steps=horizon + 1),
        "sequential": lambda: L.SequentialLR(
            opt, [L.LinearLR(opt, start_factor=0.01, end_factor=1.0, total_iters=3),
                  L.CosineAnnealingLR(opt, T_max=horizon - 3, eta_min=0.0)], milestones=[3]),
    }
    sched = makers[scheduler]()
    micro = 0
    for u in range(updates):
        for m in range(ga):
            import torch as _t

            g = _t.Generator().manual_seed(micro)
            loss = model(_t.randn(2, 4, generator=g)).pow(2).mean() / ga
            loss.backward()
            micro += 1
            if step_per_micro:
                sched.step()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if not step_per_micro:
            sched.step()
    body: dict[str, Any] = {"model": model.state_dict()}
    counters = {"step": updates, "epoch": 0, "micro_step": micro}
    if layout == "names":
        body.update(optimizer_state_dict=opt.state_dict(), scheduler_state_dict=sched.state_dict(),
                    global_step=updates, epoch=0)
    else:
        body.update(optimizer=opt.state_dict(), scheduler=sched.state_dict(), step=updates,
                    epoch=0)
    if save_total:
        body["total_steps"] = horizon
    if layout == "nested":
        body = {"state": body, "version": 1}
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(body, path)
    saved = Saved(path, sched.state_dict(), [g["lr"] for g in opt.param_groups], _opt_step(opt),
                  counters)
    return Truth(path.parent, [saved], meta={"horizon": horizon, "class": type(sched).__name__,
                                             "initial_lr": opt.param_groups[0]["initial_lr"]})


# ------------------------------------------------------------------ helpers


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now (for torch.distributed rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def approx_rel(a: float, b: float, tol: float = 1e-12) -> bool:
    return math.isclose(a, b, rel_tol=tol, abs_tol=1e-18)


def composer_state(*, batches: int, k: int) -> dict:
    """composer/core/state.py ``State.state_dict()`` with time.py's ``Timestamp.state_dict()``
    after ``batches`` batches, the LambdaLR (what ComposerSchedulers compile to) stepped ``k``
    times per batch; one home for the monolithic and the sharded (DCP) fixtures."""
    import datetime

    import torch

    model = _tiny_model(6)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: max(0.0, 1 - s / 500))
    for b in range(batches):
        _train_step(model, opt, b)
        for _ in range(k):
            sched.step()
    ts = {"iteration": 0, "epoch": 1, "batch": batches, "sample": batches * 16,
          "token": batches * 16 * 128, "epoch_in_iteration": 1, "token_in_iteration": 0,
          "batch_in_epoch": 0, "sample_in_epoch": 0, "token_in_epoch": 0,
          "total_wct": datetime.timedelta(seconds=60), "iteration_wct": datetime.timedelta(0),
          "epoch_wct": datetime.timedelta(0), "batch_wct": datetime.timedelta(0)}
    state = {"model": model.state_dict(), "optimizers": {"AdamW": opt.state_dict()},
             "schedulers": {"LambdaLR": sched.state_dict()}, "algorithms": [],
             "callbacks": {}, "timestamp": {"Timestamp": ts}, "rank_zero_seed": 17,
             "run_name": "run", "integrations": {}, "metadata": {}}
    return state


# A torch.distributed CPU job's C++ runtime sometimes aborts at exit after the work is
# done (gloo's threads torn down out of order: "terminate called without an active
# exception", SIGABRT). It is not what these fixtures test; one fresh try, then fail.
_TEARDOWN_ABORT = ("terminate called without an active exception", "Signal 6 (SIGABRT)")


def run_job(cmd: list[str], *, env: dict[str, str], cwd: Path | None = None,
            timeout: int = 600):
    """Run a distributed fixture job; a second try only after the known teardown abort.
    The finished process (asserted to exit 0, its stderr's tail shown otherwise)."""
    import subprocess

    for attempt in (1, 2):
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                           cwd=cwd)
        if r.returncode == 0 or attempt == 2 or not any(
                sig in r.stderr for sig in _TEARDOWN_ABORT):
            break
    assert r.returncode == 0, r.stderr[-3000:]
    return r


def run_deepspeed(folder: Path, script: str, *args: str, cwd: Path | None = None,
                  env: dict[str, str] | None = None):
    """Write ``script`` as ``folder/gen.py`` and run it as a one-process DeepSpeed job on the
    CPU (its own rendezvous port), with ``args``; the finished process (asserted to exit 0,
    its stderr's tail shown otherwise). ``env`` adds variables (e.g. PYTHONPATH)."""
    import sys

    (folder / "gen.py").write_text(script)
    full = dict(os.environ, DS_ACCELERATOR="cpu", MASTER_ADDR="127.0.0.1",
                MASTER_PORT=str(free_port()), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                CUDA_VISIBLE_DEVICES="", **(env or {}))
    return run_job([sys.executable, str(folder / "gen.py"), *args], env=full, cwd=cwd)
