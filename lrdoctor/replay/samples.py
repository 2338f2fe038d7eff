"""Where a replay's sample lengths come from: a batch log, synthetic lengths, or (static
batching) the sample counts alone.

Why apart from planning: choosing and validating the source is the command line's and
the config's business (``--batch-log`` / ``--synthetic`` / ``data:``), and the output
names it (:func:`lengths_source`); :mod:`.planning` only sees the rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.table import Samples, UniformSamples

if TYPE_CHECKING:
    from lrdoctor.replay.config import RunConfig


def load_samples(cfg: RunConfig, batch_log: str | None = None, synthetic: str | None = None,
                 seed: int | None = None) -> Samples:
    """One row per sample (``step``, ``tokens`` and optional ``prompt_id``/``docs``/``rank``).

    Numpy columns, not a DataFrame: the default replay never imports pandas."""
    if batch_log and synthetic:
        raise UnusableInput("give either --batch-log or --synthetic, not both")
    if not batch_log and not synthetic:
        # The config's data section applies only when the command line names no source.
        if cfg.data.batch_log and cfg.data.synthetic:
            raise UnusableInput("data: give either batch_log or synthetic, not both")
        if cfg.data.batch_log:
            # Relative to the config file, so a config runs from any directory.
            batch_log = cfg.resolve_path(cfg.data.batch_log)
            from pathlib import Path

            if not Path(batch_log).is_file():
                raise UnusableInput(f"data.batch_log {cfg.data.batch_log!r}: no such file "
                                    "(read relative to the config file's directory)",
                                    batch_log)
        synthetic = cfg.data.synthetic
    seed = cfg.data.seed if seed is None else seed
    if batch_log:
        from lrdoctor.replay import batchlog

        return Samples(batchlog.read_batch_columns(batch_log))
    if synthetic:
        from lrdoctor.replay import batchlog

        sps = cfg.train.samples_per_step
        if sps is None:
            raise UnusableInput("--synthetic needs train.samples_per_step in the config")
        from lrdoctor.read.bytes import limits

        if cfg.train.steps * sps > limits.get("replay_samples"):
            raise UnusableInput(
                f"--synthetic draws train.steps x samples_per_step = {cfg.train.steps * sps:,} "
                f"lengths, more than one replay materialises (limit "
                f"{limits.LIMITS['replay_samples'].env}={limits.get('replay_samples')})")
        return Samples(batchlog.synthetic_columns(synthetic, cfg.train.steps, sps, seed=seed))
    if cfg.batching.strategy not in ("static",):
        raise UnusableInput(f"batching.strategy {cfg.batching.strategy} needs sample lengths: "
                            "give --batch-log or --synthetic (or data.batch_log / "
                            "data.synthetic in the config)")
    sps = cfg.train.samples_per_step
    if sps is None:
        raise UnusableInput("train.samples_per_step is needed when there is no batch log")
    # Without lengths a static loop only needs the sample count; one token each. Every
    # step is the same: one step's rows, planned once per dp size (planning.StepRuns).
    return UniformSamples({"step": np.zeros(sps, dtype=np.int64),
                           "tokens": np.ones(sps, dtype=np.int64)}, cfg.train.steps)


def lengths_source(cfg: RunConfig, batch_log: str | None = None,
                   synthetic: str | None = None) -> str:
    """Where the replay's sample lengths come from, in words (the output says it)."""
    o = cfg.lengths_origin(batch_log, synthetic)
    if o["kind"] == "batch_log":
        return f"batch log {o['source']}" + \
            (f" ({o['given_by']})" if o["given_by"] != "--batch-log" else "")
    if o["kind"] == "synthetic":
        return f"synthetic {o['source']} ({o['given_by']})"
    return f"{o['source']} ({o['given_by']})"
