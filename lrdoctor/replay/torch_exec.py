"""The real replay path: a torch optimizer and scheduler stepped as the configured loop does.

Why: the fast path (:mod:`.engine`) derives the trace arithmetically; this path
*executes* the loop — forward and backward of a probe model on every
micro-batch at its real padded shape, the accumulation condition written the
way the training code writes it, ``optimizer.step()``, ``zero_grad()`` and
``scheduler.step()`` — and measures what happened:

- window sizes and loss-weight sums come from gradients (two scalar probe
  parameters whose gradients count micro-batches and sum loss weights);
- the LR each micro-batch saw is read from ``optimizer.param_groups``;
- on CUDA, the peak memory of each micro-batch (``torch.cuda.max_memory_allocated``).

The scheduler is megatron-core's ``OptimizerParamScheduler`` when the schedule
family is megatron and megatron-core is installed, otherwise a ``LambdaLR``
over :func:`lrdoctor.schedules.lr_at` fed the progress the loop accumulated.
"""

from __future__ import annotations

import importlib
import math
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.engine import Replay, carried_doc_windows
from lrdoctor.replay.nominal import (
    nominal_k,
    nominal_samples_per_update,
    nominal_updates,
    replayed_budget_updates,
    samples_per_step,
    schedule_spec,
)
from lrdoctor.replay.planning import StepInfo


def _torch():
    """torch, or one line naming the extra (the core install has no torch)."""
    from lrdoctor.extras import need

    return need("torch", "the torch replay engine (--torch, --model, the cross-check)")


def pick_device(device: str) -> str:
    torch = _torch()

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise UnusableInput("--device cuda: no CUDA device is available")
    if device not in ("cpu", "cuda"):
        raise UnusableInput(f"--device {device!r}: allowed: auto, cpu, cuda")
    return device


def load_model_factory(spec: str) -> Callable[[], Any]:
    """``module:factory`` -> the factory (a user's model instead of the probe)."""
    mod_name, _, attr = spec.partition(":")
    if not mod_name or not attr:
        raise UnusableInput(f"--model {spec!r}: expected module:factory")
    try:
        mod = importlib.import_module(mod_name)
    except ImportError as exc:
        raise UnusableInput(f"--model {spec!r}: cannot import {mod_name}: {exc}") from None
    fn = getattr(mod, attr, None)
    if not callable(fn):
        raise UnusableInput(f"--model {spec!r}: {attr} is not a callable in {mod_name}")
    return fn


def _probe_model(vocab: int = 256, dim: int = 16):
    import torch

    class Probe(torch.nn.Module):
        """Embedding + linear over token ids: activations scale with rows x padded_len."""

        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(vocab, dim)
            self.out = torch.nn.Linear(dim, 1)

        def forward(self, ids):
            return self.out(self.emb(ids))

    return Probe()


def _as_scalar(output: Any):
    import torch

    if isinstance(output, torch.Tensor):
        return output.float().mean()
    for key in ("loss", "logits", "last_hidden_state"):
        val = getattr(output, key, None)
        if val is None and isinstance(output, dict):
            val = output.get(key)
        if isinstance(val, torch.Tensor):
            return val.float().mean()
    if isinstance(output, (tuple, list)) and output and isinstance(output[0], torch.Tensor):
        return output[0].float().mean()
    raise UnusableInput("--model: the model's output has no tensor to take a loss from")


def _megatron_scheduler(optimizer, spec):
    """megatron-core's own scheduler, or None when it cannot represent ``spec``."""
    if spec.family != "megatron":
        return None
    try:
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler
    except Exception:  # noqa: BLE001 - any import failure means "not installed"
        return None
    params = spec.params or {}
    try:
        return OptimizerParamScheduler(
            optimizer, init_lr=spec.init_lr, max_lr=spec.max_lr, min_lr=spec.min_lr,
            lr_warmup_steps=spec.warmup, lr_decay_steps=spec.horizon,
            lr_decay_style=spec.kind, start_wd=0.0, end_wd=0.0, wd_incr_steps=1,
            wd_incr_style="constant",
            wsd_decay_steps=params.get("wsd_decay_steps"),
            lr_wsd_decay_style=params.get("lr_wsd_decay_style"))
    except (AssertionError, TypeError, ValueError):
        return None


class _Scheduler:
    """One interface over the real scheduler: ``advance(amount)`` = one ``step()`` call."""

    def __init__(self, optimizer, spec, framework: bool = True) -> None:
        import torch

        from lrdoctor.schedules import lr_at

        self.kind = "megatron-core OptimizerParamScheduler"
        self.mcore = _megatron_scheduler(optimizer, spec) if framework else None
        if self.mcore is None:
            self.kind = "torch LambdaLR(lrdoctor.schedules.lr_at)"
            # LambdaLR counts calls; the loop's increments map a call count to progress.
            self.progress_at_call = [0.0]
            base = spec.max_lr
            self.lambda_lr = torch.optim.lr_scheduler.LambdaLR(
                optimizer, lambda call: lr_at(spec, self.progress_at_call[call]) / base)

    def advance(self, amount: float) -> None:
        if self.mcore is not None:
            self.mcore.step(amount)
        else:
            self.progress_at_call.append(self.progress_at_call[-1] + amount)
            self.lambda_lr.step()

    @property
    def progress(self) -> float:
        if self.mcore is not None:
            return float(self.mcore.num_steps)
        return self.progress_at_call[-1]


def replay_torch(cfg, infos: Sequence[StepInfo], device: str = "auto",
                 model_factory: Callable[[], Any] | None = None, optimizer: str = "sgd",
                 progress: Callable[[int], None] | None = None,
                 notes: dict | None = None, seed: int = 0,
                 start: dict | None = None, framework_scheduler: bool = True) -> Replay:
    """Execute the configured loop for real over the planned micro-batches.

    ``start`` resumes mid-run, as a loop resumed from a checkpoint does, for a
    segment of a longer run (the fast path's cross-check): ``global_step``
    (micro-steps so far), ``update_index`` (updates so far), ``progress`` (the
    scheduler's, restored by one ``step(progress)``) and ``samples_per_step`` (of
    the whole run, which sizes the schedule). The segment must start with no
    accumulation window open. ``framework_scheduler=False`` drives the LR with a
    LambdaLR over lrdoctor's schedule instead of megatron-core's scheduler (whose
    import alone takes seconds: too slow for a cross-check that must answer in
    seconds)."""
    torch = _torch()

    dev = pick_device(device)
    torch.manual_seed(seed)
    threads = torch.get_num_threads()
    if dev == "cpu":
        # The probe is tiny: intra-op threads only contend (measured 13x slower with 2).
        torch.set_num_threads(1)
    try:
        import warnings

        # What torch (or the user's --model) warns while the loop runs is the loop's, not
        # lrdoctor's: held here, counted, and put in the replay's notes (the report says
        # it, LRD216 where it is a step-order bug) instead of printed at torch_exec.py.
        with warnings.catch_warnings(record=True) as caught, _eager_without_dynamo(torch):
            warnings.simplefilter("always")
            rep = _run(cfg, infos, dev, model_factory, optimizer, progress, notes,
                       start or {}, framework_scheduler)
        held = loop_warnings(caught)
        if held:
            rep.notes["torch_warnings"] = held
        return rep
    finally:
        torch.set_num_threads(threads)


def loop_warnings(caught: list) -> list[dict]:
    """Warnings raised while the replayed loop ran, one entry per (category, message) with
    how often and the first trace row's train step unknown here (the loop order is
    what matters): ``[{"category", "message", "count"}]``."""
    out: dict[tuple[str, str], dict] = {}
    for w in caught:
        key = (w.category.__name__, " ".join(str(w.message).split()))
        entry = out.setdefault(key, {"category": key[0], "message": key[1], "count": 0})
        entry["count"] += 1
    return list(out.values())


def _eager_step(cls):
    """``cls`` with its own ``step`` code run under ``no_grad``, without the
    ``_use_grad_for_differentiable`` wrapper that imports ``torch._dynamo`` on every
    call for two ``graph_break()`` calls (no-ops outside torch.compile). The update
    is the class's own code; ``no_grad`` is what the wrapper sets for a
    non-differentiable optimizer (the only kind the replay builds). Where torch's
    ``step`` has no such wrapper, ``cls`` itself is used."""
    import torch

    inner = getattr(cls.step, "__wrapped__", None)
    if inner is None or getattr(getattr(cls.step, "__code__", None), "co_name", "") != "_use_grad":
        return cls

    def step(self, closure=None):
        with torch.no_grad():
            return inner(self, closure)

    # The same name: reports and notes name the optimizer the user knows.
    return type(cls.__name__, (cls,), {"step": step, "__doc__": cls.__doc__})


@contextmanager
def _eager_without_dynamo(torch) -> Iterator[None]:
    """Run torch's optimizers and schedulers without importing the compiler.

    ``torch.optim`` marks methods with ``torch._compile._disable_dynamo``, which
    imports ``torch._dynamo`` (about 1.5-2 s, most of a default replay) on the
    first call only to wrap the method so that torch.compile will not trace it.
    The replay never compiles, so for its duration each such method's cached
    wrapper is set to the method itself: the same eager code runs, minus the
    import. The cache entries are removed afterwards, so a later torch.compile
    in the same process gets dynamo's wrapper as usual. Nothing is changed when
    dynamo is already imported, or where torch's layout differs.
    """
    if "torch._dynamo" in sys.modules:
        yield
        return
    marked = []
    try:
        code = torch._compile._disable_dynamo(lambda: None).__code__
        classes = [torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]
        for cls in classes:
            classes.extend(c for c in cls.__subclasses__() if c not in classes)
            for attr in vars(cls).values():
                fn = getattr(attr, "__wrapped__", None)
                if (getattr(attr, "__code__", None) is code and fn is not None
                        and "__dynamo_disable" not in vars(fn)):
                    fn.__dynamo_disable = fn
                    marked.append(fn)
    except AttributeError:  # another torch layout: leave it to torch
        pass
    try:
        yield
    finally:
        for fn in marked:
            vars(fn).pop("__dynamo_disable", None)


def _run(cfg, infos, dev, model_factory, optimizer, progress, notes, start,
         framework_scheduler=True) -> Replay:
    import torch

    sps = start.get("samples_per_step") or samples_per_step(cfg, infos)
    spec = schedule_spec(cfg, sps)
    model = (model_factory() if model_factory is not None else _probe_model()).to(dev)
    vocab = getattr(getattr(model, "config", None), "vocab_size", None) or 256
    # Probe scalars: grad(count) = micro-batches in the window, grad(weight) = loss weights.
    # float64: loss-weight sums are compared with 1 to 1e-9 (LRD207).
    count = torch.zeros((), device=dev, dtype=torch.float64, requires_grad=True)
    weight = torch.zeros((), device=dev, dtype=torch.float64, requires_grad=True)
    params = [*model.parameters(), count, weight]
    if optimizer == "sgd":
        opt = _eager_step(torch.optim.SGD)(params, lr=spec.max_lr)
    elif optimizer == "adamw":
        opt = _eager_step(torch.optim.AdamW)(params, lr=spec.max_lr)
    else:
        raise UnusableInput(f"--optimizer {optimizer!r}: allowed: sgd, adamw")
    sched = _Scheduler(opt, spec, framework_scheduler)
    if start.get("progress"):
        import warnings

        with warnings.catch_warnings():  # torch warns of step() before optimizer.step()
            warnings.simplefilter("ignore")
            sched.advance(float(start["progress"]))  # resume: the saved progress

    acc, sc = cfg.accumulation, cfg.scheduler
    packed = cfg.batching.is_packed
    failed_set = set(sc.failed_updates)
    epochs = cfg.train.epochs_per_step
    cols: dict[str, list] = {k: [] for k in (
        "train_step", "epoch", "micro_index", "rows", "padded_len", "tokens", "samples",
        "max_rank_tokens", "window", "window_size", "is_update", "applied", "update_index",
        "failed", "scheduler_progress", "lr", "dp", "loss_weight", "loss_divisor", "docs",
        "window_weight_sum", "peak_mem_bytes")}
    open_rows: list[int] = []  # trace rows of the window being accumulated
    global_step = int(start.get("global_step", 0))  # micro-steps over the whole run
    local_step = 0  # micro-steps of this replay (indexes ``carried``)
    # Fast-LLM document windows that span train steps (flush_at_step_end: false).
    carried = carried_doc_windows(cfg, infos)
    update_index = int(start.get("update_index", 0))
    window_samples = 0  # samples accumulated since the last update (may span steps)
    cuda = dev == "cuda"
    t0 = time.perf_counter()

    def sched_step(amount: float) -> None:
        for _ in range(sc.multiplier):
            sched.advance(amount)

    for info in infos:
        plan = info.plan
        mbs = plan.micro_batches
        n = len(mbs)
        k = nominal_k(cfg, info.dp)
        bset = set(plan.boundaries) if plan.boundaries is not None else None
        nominal = nominal_samples_per_update(cfg, info.dp)
        divisors = plan.loss_divisors
        if cfg.batching.loss_divisor == "micro_batch" and info.mb_docs is not None \
                and divisors is not None:
            divisors = info.mb_docs
        for epoch in range(epochs):
            micro_step = 0  # restarts each epoch when the loop flushes at step end
            for i, mb in enumerate(mbs):
                samples = sum(len(r) for r in mb.ranks)
                # The heaviest rank's shape is what the probe runs (memory is per rank):
                # one row of real tokens when the framework packs, else rows x padded length.
                if packed:
                    shapes = [(1, int(t)) for t in mb.tokens if t]
                else:
                    shapes = [(len(r), p) for r, p in zip(mb.ranks, mb.padded_len, strict=False)]
                rows_h, len_h = max(shapes, key=lambda s: s[0] * s[1]) if shapes else (0, 0)
                if divisors is not None:
                    mb_docs = info.mb_docs[i] if info.mb_docs is not None else samples
                    div = float(divisors[i])
                    if carried is not None and cfg.batching.loss_divisor == "step_total":
                        div = float(carried[1][local_step])
                    w = mb_docs / div
                else:
                    w = samples / nominal
                    div = math.nan
                lr_seen = opt.param_groups[0]["lr"]
                if cuda:
                    torch.cuda.reset_peak_memory_stats()
                if rows_h and len_h:
                    ids = torch.randint(0, int(vocab), (rows_h, len_h), device=dev)
                    act = _as_scalar(model(ids))
                else:
                    act = torch.zeros((), device=dev)
                loss = act * w + count + weight * w
                loss.backward()
                peak = torch.cuda.max_memory_allocated() if cuda else math.nan

                # The loop's own optimizer-step condition.
                counter = micro_step if acc.flush_at_step_end else global_step
                if carried is not None:
                    do_step = bool(carried[0][local_step])
                elif bset is not None:
                    do_step = i in bset or i == n - 1
                elif acc.rule == "correct":
                    do_step = (counter + 1) % k == 0 or (acc.flush_at_step_end and i == n - 1)
                else:  # `if global_step % k != 0: continue` (accumulate)
                    do_step = counter % k == 0 or (acc.flush_at_step_end and i == n - 1)
                micro_step += 1
                global_step += 1
                local_step += 1
                window_samples += samples

                row = len(cols["lr"])
                open_rows.append(row)
                failed = False
                if do_step:
                    # backward() through count and weight filled both grads
                    assert count.grad is not None and weight.grad is not None
                    wsize = int(round(count.grad.item()))
                    wsum = float(weight.grad.item())
                    failed = update_index in failed_set
                    if not failed:
                        opt.step()
                    opt.zero_grad(set_to_none=False)
                if sc.step_on == "micro_step":
                    amount = samples if sc.increment == "samples" else \
                        1.0 if sc.increment == "micro_batches" else float(sc.increment)
                    sched_step(amount)
                elif sc.step_on == "update" and do_step and (not failed or sc.step_on_failed_update):
                    amount = window_samples if sc.increment == "samples" else \
                        float(wsize) if sc.increment == "micro_batches" else float(sc.increment)
                    sched_step(amount)
                elif sc.step_on == "rollout_step" and epoch == epochs - 1 and i == n - 1:
                    amount = info.samples if sc.increment == "samples" else \
                        float(n) if sc.increment == "micro_batches" else float(sc.increment)
                    sched_step(amount)

                cols["train_step"].append(info.step)
                cols["epoch"].append(epoch)
                cols["micro_index"].append(i)
                cols["rows"].append(len(mb.ranks[0]) if mb.ranks else 0)
                cols["padded_len"].append(mb.padded_len[0] if mb.padded_len else 0)
                cols["tokens"].append(int(sum(mb.tokens)))
                cols["samples"].append(samples)
                cols["max_rank_tokens"].append(rows_h * len_h)
                cols["is_update"].append(do_step)
                cols["update_index"].append(update_index if do_step else -1)
                cols["failed"].append(failed)
                cols["scheduler_progress"].append(sched.progress)
                cols["lr"].append(lr_seen)
                cols["dp"].append(info.dp)
                cols["loss_weight"].append(w)
                cols["loss_divisor"].append(div)
                cols["docs"].append(info.mb_docs[i] if info.mb_docs is not None else math.nan)
                cols["peak_mem_bytes"].append(peak)
                cols["window"].append(update_index)
                cols["window_size"].append(0)
                cols["window_weight_sum"].append(math.nan)
                cols["applied"].append(False)
                if do_step:
                    for r in open_rows:
                        cols["window_size"][r] = wsize
                        cols["window_weight_sum"][r] = wsum
                        cols["applied"][r] = True
                    open_rows = []
                    update_index += 1
                    window_samples = 0
        if progress is not None:
            progress(info.step)
    # Micro-batches left accumulating at the end of the run never reach an update.
    for r in open_rows:
        cols["window_size"][r] = len(open_rows)
    elapsed = time.perf_counter() - t0
    trace = {k: np.asarray(v) for k, v in cols.items()}
    trace["scheduler_progress"] = trace["scheduler_progress"].astype(float)
    out_notes = dict(notes or {})
    out_notes.update({"scheduler_class": sched.kind, "optimizer": type(opt).__name__,
                      "model": "probe" if model_factory is None else "user",
                      "torch_seconds": elapsed,
                      "micro_batches_per_second": (len(cols["lr"]) / elapsed) if elapsed else None})
    if cuda:
        out_notes["peak_memory_bytes"] = int(np.nanmax(trace["peak_mem_bytes"])) \
            if len(trace["peak_mem_bytes"]) else 0
    return Replay(cfg=cfg, spec=spec, trace=trace, infos=infos,
                  nominal_updates=nominal_updates(cfg, sps),
                  budget_updates=replayed_budget_updates(cfg, sps),
                  engine="torch", device=dev, notes=out_notes)
