"""Callbacks for the HF Trainer and Lightning: catch the bugs while training runs.

>>> trainer = Trainer(..., callbacks=[hf_callback(batch_log="run/batches.jsonl")])
>>> pl.Trainer(..., callbacks=[lightning_callback(strict=True)])

Each one feeds a :class:`lrdoctor.runtime.guard.LoopWatch` from the framework's hooks
(scheduler stepped more than once per optimizer update: LRD103; LR changing
inside an accumulation window: LRD205; scheduler past its horizon before the
planned end: LRD101) and warns (``strict=True``: raises
:class:`~lrdoctor.runtime.guard.SchedulerStepError`) with the code in the message. With
``batch_log=PATH`` it also records per-sample token counts at the optimizer
step they belong to, the batch log ``lrdoctor replay`` reads.

The classes are built on first use, so importing lrdoctor never imports
transformers or Lightning. ``HFCallback`` and ``LightningCallback`` are the
classes (module attributes, resolved lazily).
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

from lrdoctor.runtime.guard import LoopWatch

__all__ = ["HFCallback", "LightningCallback", "hf_callback", "lightning_callback"]  # noqa: F822

_CLASSES: dict[str, type] = {}


class _Core:
    """What both callbacks share: the watch, the recorder and the token counting."""

    def _setup(self, strict: bool, batch_log: Any, max_steps: float | None,
               horizon: float | None, ignore: Any, tokens_fn: Any) -> None:
        self.strict = strict
        self.batch_log = batch_log
        self.tokens_fn = tokens_fn
        self._opts = {"strict": strict, "max_steps": max_steps, "horizon": horizon,
                      "ignore": ignore}
        self.watches: list[LoopWatch] = []
        self.recorder: Any = None
        self.skipped_batches = 0  # batches the token counter could not read

    @property
    def findings(self) -> list[Any]:
        """Every finding caught so far (:class:`lrdoctor.core.findings.Finding`)."""
        return [f for w in self.watches for f in w.findings]

    def _open_recorder(self, rank: int | None) -> None:
        if self.batch_log is not None and self.recorder is None:
            from lrdoctor.runtime.record import BatchLogRecorder

            self.recorder = BatchLogRecorder(self.batch_log, rank=rank)

    def _record(self, step: int, batch: Any) -> None:
        if self.recorder is None:
            return
        if self.tokens_fn is not None:
            tokens = self.tokens_fn(batch)
        else:
            from lrdoctor.runtime.record import tokens_per_sample

            tokens = tokens_per_sample(batch)
        if tokens is None:
            self.skipped_batches += 1
            if self.skipped_batches == 1:
                warnings.warn("lrdoctor: the batch has no attention_mask/input_ids to count "
                              "tokens from; pass tokens_fn=... to record the batch log",
                              RuntimeWarning, stacklevel=3)
            return
        tokens = [int(t) for t in (tokens.tolist() if hasattr(tokens, "tolist") else tokens)]
        tokens = [t for t in tokens if t > 0]  # empty padding rows are not samples
        if tokens:
            self.recorder.log(step, tokens)

    def _close_recorder(self) -> None:
        if self.recorder is not None:
            self.recorder.close()


# --------------------------------------------------------------------- HF Trainer

def _hf_class() -> type:
    if "hf" in _CLASSES:
        return _CLASSES["hf"]
    from transformers import TrainerCallback

    class HFCallback(_Core, TrainerCallback):
        """``transformers.TrainerCallback`` running lrdoctor's live checks (and recorder)."""

        def __init__(self, *, strict: bool = False, batch_log: Any = None,
                     max_steps: float | None = None, horizon: float | None = None,
                     ignore: Any = (), tokens_fn: Any = None):
            self._setup(strict, batch_log, max_steps, horizon, ignore, tokens_fn)
            self._hook: Any = None
            self._state: Any = None
            self._armed = False

        def on_train_begin(self, args, state, control, model=None, optimizer=None,
                           lr_scheduler=None, **kw):
            self._state = state
            self.watches = []
            if lr_scheduler is not None:
                watch = LoopWatch(**self._opts)
                # A resumed run starts part-way: its first update checks the restored
                # scheduler continues from global_step (fp16-overflowed steps leave the
                # scheduler behind by design, so no check there).
                watch.start(lr_scheduler, optimizer,
                            max_steps=self._opts["max_steps"] or state.max_steps or None,
                            resumed_updates=None if getattr(args, "fp16", False)
                            else state.global_step)
                watch.updates = state.global_step
                self.watches.append(watch)
            if self.batch_log is not None and model is not None:
                world = getattr(args, "world_size", 1)
                self._open_recorder(args.process_index if world > 1 else None)
                self._hook = model.register_forward_pre_hook(self._forward, with_kwargs=True)

        def _forward(self, module, args, kwargs):
            # The first training forward after a micro-batch boundary is that
            # micro-batch; a loss that calls the model again is not more samples.
            if module.training and self._armed:
                self._armed = False
                self._record(self._state.global_step, kwargs if kwargs else
                             (args[0] if len(args) == 1 else args))

        def on_step_begin(self, args, state, control, **kw):
            self._armed = True
            for w in self.watches:
                w.micro_batch(first=True)

        def on_substep_end(self, args, state, control, **kw):
            self._armed = True
            for w in self.watches:
                w.micro_batch(first=False)

        def on_pre_optimizer_step(self, args, state, control, **kw):
            for w in self.watches:
                w.before_update()

        def on_step_end(self, args, state, control, **kw):
            for w in self.watches:
                w.after_update(state.global_step)

        def on_train_end(self, args, state, control, **kw):
            try:
                for w in self.watches:
                    w.end()
            finally:
                if self._hook is not None:
                    self._hook.remove()
                    self._hook = None
                self._close_recorder()

    _CLASSES["hf"] = HFCallback
    return HFCallback


def hf_callback(*, strict: bool = False, batch_log: Any = None, max_steps: float | None = None,
                horizon: float | None = None, ignore: Any = (), tokens_fn: Any = None) -> Any:
    """A ``transformers.TrainerCallback`` with lrdoctor's live checks.

    ``strict``: raise instead of warning. ``batch_log``: record the batch log there
    (JSONL/CSV as it goes, Parquet at the end; ``{rank}`` in the path for one file
    per process). ``max_steps``/``horizon``: override the planned updates / the
    scheduler's horizon. ``ignore``: finding codes to stay quiet about.
    ``tokens_fn(batch) -> per-sample token counts`` when the batch has no
    ``attention_mask``/``input_ids``.
    """
    return _hf_class()(strict=strict, batch_log=batch_log, max_steps=max_steps,
                       horizon=horizon, ignore=ignore, tokens_fn=tokens_fn)


# --------------------------------------------------------------------- Lightning

def _import_lightning(name: str) -> Any:
    """One of the two Lightning packages, imported statically by name."""
    if name == "pytorch_lightning":
        import pytorch_lightning

        return pytorch_lightning
    if name == "lightning.pytorch":
        import lightning.pytorch

        return lightning.pytorch
    raise ImportError(f"{name!r} is not a Lightning package (pytorch_lightning or "
                      "lightning.pytorch)")


def _lightning_module(package: str | None) -> Any:
    """The Callback base of the Lightning the Trainer comes from (the two packages'
    classes are not interchangeable)."""
    if package:
        names = [package]
    elif "lightning.pytorch" in sys.modules and "pytorch_lightning" not in sys.modules:
        names = ["lightning.pytorch"]
    else:
        names = ["pytorch_lightning", "lightning.pytorch"]
    for name in names:
        try:
            return _import_lightning(name)
        except ImportError:
            continue
    raise ImportError("lightning_callback needs pytorch_lightning or lightning installed")


def _lightning_class(package: str | None = None) -> type:
    mod = _lightning_module(package)
    key = f"lightning:{mod.__name__}"
    if key in _CLASSES:
        return _CLASSES[key]

    # The Trainer's own Callback base, chosen at run time (two packages): untyped here.
    callback_base: Any = mod.Callback

    class LightningCallback(_Core, callback_base):
        """Lightning ``Callback`` running lrdoctor's live checks (and recorder)."""

        def __init__(self, *, strict: bool = False, batch_log: Any = None,
                     max_steps: float | None = None, horizon: float | None = None,
                     ignore: Any = (), tokens_fn: Any = None):
            self._setup(strict, batch_log, max_steps, horizon, ignore, tokens_fn)
            self._last_step: int | None = None

        def on_train_start(self, trainer, pl_module):
            planned = self._opts["max_steps"]
            if planned is None:
                planned = trainer.max_steps if trainer.max_steps and trainer.max_steps > 0 \
                    else trainer.estimated_stepping_batches
                planned = planned if planned != float("inf") else None
            self.watches = []
            for cfg in trainer.lr_scheduler_configs:
                # Epoch-interval schedulers step per epoch, not per update: nothing to pair.
                if cfg.interval == "step":
                    # A resumed fit checks, on its first update, that the restored
                    # scheduler continues from global_step (one step per update when
                    # frequency is 1; other frequencies are not checked).
                    watch = LoopWatch(**self._opts).start(
                        cfg.scheduler, max_steps=planned,
                        resumed_updates=trainer.global_step if cfg.frequency == 1 else None)
                    watch.updates = trainer.global_step
                    self.watches.append(watch)
            self._open_recorder(trainer.global_rank if trainer.world_size > 1 else None)
            self._last_step = None

        def on_train_batch_start(self, trainer, pl_module, batch, batch_idx):
            step = trainer.global_step
            first = step != self._last_step
            self._last_step = step
            for w in self.watches:
                w.micro_batch(first=first)
            self._record(step, batch)

        def on_before_optimizer_step(self, trainer, pl_module, optimizer):
            raw = getattr(optimizer, "optimizer", optimizer)  # a LightningOptimizer
            for w in self.watches:
                if w.optimizer is raw or len(self.watches) == 1:
                    w.before_update()

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
            for w in self.watches:
                w.after_update(trainer.global_step)

        def on_train_end(self, trainer, pl_module):
            try:
                for w in self.watches:
                    w.end()
            finally:
                self._close_recorder()

        def on_exception(self, trainer, pl_module, exception):
            self._close_recorder()

    _CLASSES[key] = LightningCallback
    return LightningCallback


def lightning_callback(*, strict: bool = False, batch_log: Any = None,
                       max_steps: float | None = None, horizon: float | None = None,
                       ignore: Any = (), tokens_fn: Any = None,
                       package: str | None = None) -> Any:
    """A Lightning ``Callback`` with lrdoctor's live checks (options as :func:`hf_callback`).

    ``package``: ``"pytorch_lightning"`` or ``"lightning.pytorch"``, whichever your
    Trainer comes from (default: the one already imported, else pytorch_lightning).
    """
    return _lightning_class(package)(strict=strict, batch_log=batch_log, max_steps=max_steps,
                                     horizon=horizon, ignore=ignore, tokens_fn=tokens_fn)


def __getattr__(name: str) -> Any:
    if name == "HFCallback":
        return _hf_class()
    if name == "LightningCallback":
        return _lightning_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
