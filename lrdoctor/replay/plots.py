"""Plots for ``replay``: intended vs replayed LR over train steps, and window sizes.

Written atomically (temp sibling + ``os.replace``); matplotlib's Agg backend,
so it works headless.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from lrdoctor.replay.engine import Replay


def _umask_mode(path: str) -> None:
    """mkstemp makes 0600 files; give the output the mode a plain open() would."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def intended_lr(rep: Replay) -> np.ndarray:
    """LR at the start of each train step if progress followed the budget evenly."""
    from lrdoctor.schedules import lr_at

    steps = rep.cfg.train.steps
    hz = float(rep.spec.horizon or 0.0)
    return np.array([lr_at(rep.spec, hz * s / steps) for s in range(steps + 1)])


def plot(results: list[tuple[Any, Replay]], path: str | Path, key: str | None = None) -> None:
    """One replay (``[(None, rep)]``) or a sweep over ``key``: LR and update panels."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from lrdoctor.replay.analysis import per_step, summarize

    base = results[0][1]
    steps = base.cfg.train.steps
    x = np.arange(steps)
    fig, (ax_lr, ax_w) = plt.subplots(2, 1, figsize=(10, 7), sharex=False,
                                      gridspec_kw={"height_ratios": [3, 2]})
    ax_lr.plot(np.arange(steps + 1), intended_lr(base), color="black", lw=2, ls="--",
               label="intended (budget followed evenly)")
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, (val, rep) in enumerate(results):
        ps = per_step(rep)
        s = summarize(rep)
        label = "replayed" if key is None else f"{key.split('.')[-1]}={val}"
        c = colors[i % len(colors)]
        ax_lr.plot(x, ps["lr"], color=c, lw=1.5, label=label)
        if s["floor_step"] is not None and s["floor_step"] < steps:
            ax_lr.axvline(s["floor_step"], color=c, ls=":", lw=1)
            ax_lr.annotate(f"floor at step {s['floor_step']}", (s["floor_step"], rep.spec.min_lr),
                           textcoords="offset points", xytext=(4, 8 + 12 * i), color=c,
                           fontsize=8)
        if key is None:
            upd = rep.trace["is_update"]
            sizes = rep.trace["window_size"][upd]
            ax_w.plot(np.arange(len(sizes)), sizes, ".", ms=3 if len(sizes) < 500 else 1.5,
                      color=c, label="micro-batches per update")
        else:
            ax_w.step(x, ps["updates"], where="mid", color=c, lw=1.2, label=label)
    ax_lr.axhline(base.spec.min_lr, color="grey", lw=0.8, ls="-.",
                  label=f"floor min_lr = {base.spec.min_lr:g}")
    ax_lr.axvline(steps, color="grey", lw=0.8, ls="--",
                  label=f"horizon {base.spec.horizon:g} {base.spec.unit.value}")
    ax_lr.annotate(f"horizon {base.spec.horizon:g} {base.spec.unit.value}\nreached here "
                   "when on budget", (steps, base.spec.max_lr), ha="right", va="top",
                   fontsize=8, color="grey")
    ax_lr.set_xlabel("train step (rollout / pipeline step)")
    ax_lr.set_ylabel("learning rate (at each train step's start)")
    ax_lr.set_title(f"{base.spec.family} {base.spec.kind}: intended vs replayed LR")
    ax_lr.legend(fontsize=8, loc="upper right", bbox_to_anchor=(1.0, 0.85))
    ax_lr.grid(alpha=0.3)
    if key is None:
        # Nominal k of each update's dp size (RLinf-style loops recompute it on scaling).
        from lrdoctor.replay.engine import nominal_k

        t = base.trace
        dps = t["dp"][t["is_update"]]
        k_of = {int(d): nominal_k(base.cfg, int(d)) for d in np.unique(dps)}
        ax_w.step(np.arange(len(dps)), [k_of[int(d)] for d in dps], where="mid", color="black",
                  ls="--", lw=0.8, label="nominal micro-batches per update")
        ax_w.set_xlabel("optimizer update (index)")
        ax_w.set_ylabel("window size (micro-batches)")
    else:
        ax_w.axhline(base.nominal_updates / steps, color="black", ls="--", lw=0.8,
                     label="nominal")
        ax_w.set_xlabel("train step (rollout / pipeline step)")
        ax_w.set_ylabel("optimizer updates per train step")
    ax_w.legend(fontsize=8)
    ax_w.grid(alpha=0.3)
    fig.tight_layout()
    from lrdoctor.errors import UnusableInput

    path = Path(path)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=path.suffix or ".png",
                                   dir=path.parent or ".")
        os.close(fd)
        fig.savefig(tmp, dpi=110, format="png")
        _umask_mode(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise UnusableInput(f"--plot: cannot write: {exc.strerror or exc}", str(path)) from None
    finally:
        plt.close(fig)
        if tmp and os.path.exists(tmp):
            os.unlink(tmp)
