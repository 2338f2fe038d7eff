"""Real PyTorch-Ignite runs (a framework neither the corpus nor the layout registry names).

Every run is written by Ignite's own classes: ``create_supervised_trainer(...,
gradient_accumulation_steps=4)`` (the optimizer steps on every 4th iteration), a torch
``CosineAnnealingLR`` wrapped by Ignite's ``LRScheduler`` handler or Ignite's own
``CosineAnnealingScheduler``, and Ignite's ``Checkpoint`` handler with ``DiskSaver``
writing ``checkpoint_<epoch>.pt`` = {"trainer": {iteration, epoch_length, max_epochs},
"model", "optimizer", "lr_scheduler": the handler's state_dict (``event_index``, the torch
scheduler's state under ``lr_scheduler``, or the native scheduler's ``cycle_size``...)}.

Ignite's ``LRScheduler.__call__`` sets the LR from ``get_lr()`` and then increments
``last_epoch`` without calling torch's ``step()``: the optimizer's LR is the schedule one
call behind ``last_epoch``, ``_step_count`` stays 1 and ``_last_lr`` keeps the base LR.

Scenarios (3 epochs of 12 micro-batches, accumulation 4: 36 iterations, 9 updates):

- ``healthy-torch``: CosineAnnealingLR(T_max=9 updates) fired on ITERATION_COMPLETED(every=4).
- ``bug-micro-torch``: the same handler on every ITERATION_COMPLETED (per micro-batch).
- ``bug-horizon-iters``: T_max=36 (iterations) while stepped per update.
- ``healthy-native`` / ``bug-micro-native``: Ignite's CosineAnnealingScheduler(cycle_size=9).
- ``healthy-warmup`` / ``bug-micro-warmup``: Ignite's ``create_lr_scheduler_with_warmup``
  (2 events of linear warmup, then CosineAnnealingLR(T_max=7); the wrapped torch scheduler's
  ``last_epoch`` ends at 8 = T_max + 1 while the LR is the cosine's floor at 7) fired on
  ITERATION_STARTED(every=4), or on every ITERATION_STARTED.
- ``healthy-resume``: interrupted after epoch 2 (``trainer.terminate()``), resumed with
  ``Checkpoint.load_objects`` of trainer, model, optimizer and lr_scheduler.
- ``bug-resume-restart``: the same resume without the lr_scheduler: it restarts at 0.
"""

from __future__ import annotations

import warnings
from pathlib import Path

K = 4
EPOCH_LEN = 12
EPOCHS = 3
ITERS = EPOCH_LEN * EPOCHS
UPDATES = ITERS // K
SCENARIOS = ("healthy-torch", "bug-micro-torch", "bug-horizon-iters", "healthy-native",
             "bug-micro-native", "healthy-resume", "bug-resume-restart", "healthy-warmup",
             "bug-micro-warmup")


def _data():
    import torch

    g = torch.Generator().manual_seed(0)
    return [(torch.randn(2, 4, generator=g), torch.randn(2, 1, generator=g))
            for _ in range(EPOCH_LEN)]


def _build(native: bool = False, t_max: int = UPDATES):
    import torch
    from ignite.engine import create_supervised_trainer
    from ignite.handlers.param_scheduler import CosineAnnealingScheduler, LRScheduler

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    trainer = create_supervised_trainer(model, opt, torch.nn.MSELoss(),
                                        gradient_accumulation_steps=K)
    if native:
        sched = CosineAnnealingScheduler(opt, "lr", start_value=1e-3, end_value=1e-5,
                                         cycle_size=UPDATES)
    else:
        sched = LRScheduler(torch.optim.lr_scheduler.CosineAnnealingLR(
            opt, T_max=t_max, eta_min=1e-5))
    return model, opt, trainer, sched


def _saver(root: Path, trainer, to_save: dict) -> None:
    from ignite.engine import Events
    from ignite.handlers import Checkpoint, DiskSaver, global_step_from_engine

    ck = Checkpoint(to_save, DiskSaver(str(root), require_empty=False), n_saved=None,
                    global_step_transform=global_step_from_engine(trainer))
    trainer.add_event_handler(Events.EPOCH_COMPLETED, ck)


def _plain(root: Path, per_micro_batch: bool, **kw) -> None:
    from ignite.engine import Events

    model, opt, trainer, sched = _build(**kw)
    event = Events.ITERATION_COMPLETED if per_micro_batch else Events.ITERATION_COMPLETED(every=K)
    trainer.add_event_handler(event, sched)
    _saver(root, trainer, {"trainer": trainer, "model": model, "optimizer": opt,
                           "lr_scheduler": sched})
    trainer.run(_data(), max_epochs=EPOCHS)


def _warmup(root: Path, per_micro_batch: bool) -> None:
    import torch
    from ignite.engine import Events
    from ignite.handlers.param_scheduler import create_lr_scheduler_with_warmup

    model, opt, trainer, _ = _build()
    sched = create_lr_scheduler_with_warmup(
        torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=UPDATES - 2, eta_min=1e-5),
        warmup_start_value=0.0, warmup_duration=2)
    event = Events.ITERATION_STARTED if per_micro_batch else Events.ITERATION_STARTED(every=K)
    trainer.add_event_handler(event, sched)
    _saver(root, trainer, {"trainer": trainer, "model": model, "optimizer": opt,
                           "lr_scheduler": sched})
    trainer.run(_data(), max_epochs=EPOCHS)


def _resume(root: Path, restore_scheduler: bool) -> None:
    import torch
    from ignite.engine import Events
    from ignite.handlers import Checkpoint

    model, opt, trainer, sched = _build()
    trainer.add_event_handler(Events.ITERATION_COMPLETED(every=K), sched)
    _saver(root, trainer, {"trainer": trainer, "model": model, "optimizer": opt,
                           "lr_scheduler": sched})
    trainer.add_event_handler(Events.EPOCH_COMPLETED(once=EPOCHS - 1),
                              lambda e: e.terminate())  # the job is killed here
    trainer.run(_data(), max_epochs=EPOCHS)
    model, opt, trainer, sched = _build()
    trainer.add_event_handler(Events.ITERATION_COMPLETED(every=K), sched)
    objs = {"trainer": trainer, "model": model, "optimizer": opt}
    if restore_scheduler:
        objs["lr_scheduler"] = sched
    last = root / f"checkpoint_{EPOCHS - 1}.pt"
    Checkpoint.load_objects(objs, torch.load(last, weights_only=False))
    _saver(root, trainer, {"trainer": trainer, "model": model, "optimizer": opt,
                           "lr_scheduler": sched})
    trainer.run(_data(), max_epochs=EPOCHS)


def write(root: Path, scenario: str) -> Path:
    """Write ``scenario``'s checkpoints (one per epoch) into ``root``; return ``root``."""
    warnings.filterwarnings("ignore", module="ignite")
    root.mkdir(parents=True, exist_ok=True)
    if scenario.endswith("-warmup"):
        _warmup(root, per_micro_batch="micro" in scenario)
    elif scenario == "healthy-resume":
        _resume(root, True)
    elif scenario == "bug-resume-restart":
        _resume(root, False)
    else:
        _plain(root, per_micro_batch="micro" in scenario, native="native" in scenario,
               t_max=ITERS if scenario == "bug-horizon-iters" else UPDATES)
    return root
