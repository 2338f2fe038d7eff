"""Typed facts a reader knows about a run beyond its counters: what the rules judge by.

Why: the rules are framework-blind. Instead of asking "is this Megatron?" or looking
up a string key a reader may or may not have set, a rule asks for the fact it needs
(how many micro-batches an update takes, how often one scheduler call steps it, which
framework law ties the scheduler to the counters). A reader that knows a fact fills it;
a fact left None is unknown, never a guess. ``RunState.facts`` holds one of these.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from lrdoctor.core.findings import Record, optional


class Invariant(str, Enum):
    """A framework's own law between its scheduler's progress and its counters: when it
    is broken the framework's state is inconsistent by its own definition (LRD104, LRD109),
    not merely different from lrdoctor's idea of the budget (LRD103)."""

    #: Megatron: ``num_steps == consumed_train_samples - skipped_train_samples``.
    MEGATRON_SAMPLES = "consumed - skipped samples"
    #: DeepSpeed: ``last_batch_iteration + 1 == global_steps - skipped_steps``.
    DEEPSPEED_STEPS = "global_steps - skipped_steps"


class Storage(str, Enum):
    """How the checkpoint stores its tensors: what ``fix`` can rewrite."""

    FILES = "files"  # torch.save / safetensors / JSON files: fix rewrites them
    DCP = "dcp"  # torch.distributed.checkpoint: fix refuses, says what to set on resume


class Rampup(Record):
    """Megatron's ``--rampup-batch-size`` and the samples it really consumes (LRD118)."""

    start_global_batch: int
    increment: int
    rampup_samples: int
    global_batch_size: int
    samples_at_iteration: int | None = optional()
    segments_so_far: list[dict[str, int]] | None = optional()
    samples_at_train_iters: int | None = optional()
    segments: list[dict[str, int]] | None = optional()
    train_iters_x_global_batch: int | None = optional()


class LrsUnread(Record):
    """Param-group LRs the checkpoint shows were saved but that could not be read
    (Megatron's distributed optimizer): why, and the items (LRD111)."""

    reason: str
    #: The unread items' keys (JSON ``items``).
    names: list[str] = field(default_factory=list, metadata={"key": "items"})


class LrLog(Record):
    """A logged-LR file (Lightning's metrics.csv, a TensorBoard event file) the schedule
    was fitted from (``column``, ``points``), or one that could not be used (``reason``)."""

    file: str
    column: str | None = optional()
    points: int | None = optional()
    reason: str | None = optional()


class EpochPlan(Record):
    """The knobs an epoch-based loop sizes its horizon from, and where they were read
    (:mod:`lrdoctor.epochs` does the arithmetic, LRD117 judges it)."""

    epochs: int
    ga: int
    batches_per_epoch: int
    horizon: int | None = None
    dataset_len: int | None = None
    batch_size: int | None = None
    world_size: int = 1
    drop_last: bool | None = None
    window: str | None = None  # flush / drop / carry when the config says
    source: str = ""



@dataclass
class Facts:
    """What the rules need to know beyond the counters; None: the reader does not know."""

    #: Which framework law ties ``scheduler_progress`` to ``nominal_progress``.
    invariant: Invariant | None = None
    #: Micro-batches in one optimizer update (gradient accumulation x pipeline).
    micro_batches_per_update: int | None = None
    #: Processes (ranks) that ran the loop.
    processes: int | None = None
    #: Scheduler steps one call of the loop's ``scheduler.step()`` makes (accelerate's
    #: ``AcceleratedScheduler`` with ``split_batches=False``: ``num_processes``).
    scheduler_steps_per_call: int | None = None
    #: Scheduler steps beyond the framework's own loop (Lightning: a manual ``sch.step()``
    #: in ``training_step`` on top of automatic stepping); 0: none seen or unknown.
    extra_scheduler_calls: float = 0.0
    storage: Storage = Storage.FILES
    rampup: Rampup | None = None
    #: What each scanned file was found to hold, where the reader said (content scan).
    contents: dict[str, str] = field(default_factory=dict)
    optimizer_lrs_unread: LrsUnread | None = None
    #: The logged-LR file the schedule was fitted from, and those that could not be used.
    lr_log: LrLog | None = None
    lr_log_unused: list[LrLog] = field(default_factory=list)
    #: How an epoch-based loop sized its horizon (LRD117).
    epoch_plan: EpochPlan | None = None
    #: The files a content read took the state from (None: not read by content); ``fix``
    #: edits these.
    files_used: list[str] | None = None
    #: The param groups' ``initial_lr``: a torch LRScheduler was built on the optimizer,
    #: and this was its peak, even where no scheduler state was saved (LRD115).
    optimizer_initial_lrs: list[float] = field(default_factory=list)
