"""The loss divisor under gradient accumulation and data parallelism, as an LR scale.

What each token's gradient is weighted by depends on what the loop divides its loss by
(transformers PR 34191 / ``num_items_in_batch``, issue 37766). Relative to the right
weight, ``1 / N`` with ``N`` the tokens of the whole update (every micro-batch of the
window on every dp rank), with DDP averaging gradients over ``dp`` ranks and a loss
divided by the nominal accumulation ``k``:

- ``per_micro_batch_tokens``: each micro-batch takes the mean over its own tokens, then
  ``/ k``: a token of micro-batch ``m`` on rank ``r`` weighs ``N / (k * dp * n[m, r])``;
- ``window_tokens``: each rank divides by its own window's tokens: ``N / (dp * N[r])``;
- ``global_window_tokens``: every rank divides by ``N`` (all-reduced, the loss multiplied
  by ``dp`` to undo DDP's mean, as transformers does): ``1``.

The effective LR scale of an update is the sum of its tokens' relative weights over
``N``: 1 for the global divisor; ``(micro-batches x ranks with tokens) / (k * dp)`` per
micro-batch (a short window trains at a fraction of the LR); and the spread of the
per-token weights says how unequally tokens count inside one update.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from lrdoctor.rules.replay_context import LOSS_SCALE_TOL as TOL

STRATEGIES = ("per_micro_batch_tokens", "window_tokens", "global_window_tokens")


def rank_tokens(rep) -> np.ndarray:
    """Tokens per (trace row, dp rank), in the trace's execution order (0 where a rank has
    no micro-batch); ranks beyond a step's dp size are 0."""
    rows: list[list[float]] = []
    width = max((int(i.dp) for i in rep.infos), default=1)
    for info in rep.infos:
        mbs = info.plan.micro_batches
        if not mbs:
            continue
        block = [[float(t) for t in mb.tokens] + [0.0] * (width - len(mb.tokens)) for mb in mbs]
        for _ in range(rep.cfg.train.epochs_per_step):
            rows.extend(block)
    return np.asarray(rows, dtype=float).reshape(-1, width)


def scale(rep, strategy: str) -> dict[str, Any] | None:
    """Per applied update: the effective LR scale and the token-weight spread."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown loss normalisation {strategy!r}")
    t = rep.trace
    n = rank_tokens(rep)
    if len(n) != len(t["window"]) or not len(n):
        return None
    from lrdoctor.replay.nominal import nominal_k

    applied = t["applied"].astype(bool)
    win = t["window"][applied]
    n = n[applied]
    dp = t["dp"][applied].astype(float)
    # The loop divides by its configured accumulation, not by the window it got.
    k = np.array([nominal_k(rep.cfg, int(d)) for d in dp], dtype=float)
    scales, lo, hi = [], [], []
    for w in np.unique(win):
        sel = win == w
        tok = n[sel]  # micro-batches x ranks
        total = tok.sum()
        if total <= 0:
            continue
        d, kk = float(dp[sel][0]), float(k[sel][0])
        if strategy == "global_window_tokens":
            rel = np.where(tok > 0, 1.0, 0.0)
        elif strategy == "window_tokens":
            per_rank = tok.sum(axis=0, keepdims=True)
            rel = np.where(tok > 0, total / (d * np.where(per_rank > 0, per_rank, 1)), 0.0)
        else:
            rel = np.where(tok > 0, total / (kk * d * np.where(tok > 0, tok, 1)), 0.0)
        scales.append(float((rel * tok).sum() / total))
        used = rel[tok > 0]
        lo.append(float(used.min()))
        hi.append(float(used.max()))
    if not scales:
        return None
    s = np.asarray(scales)
    worst = int(np.argmax(np.abs(s - 1)))
    return {"strategy": strategy, "updates": len(s),
            "scale_per_update": {"min": float(s.min()), "max": float(s.max()),
                                 "mean": float(s.mean())},
            "token_weight": {"min": float(min(lo)), "max": float(max(hi))},
            "worst_update": worst, "worst_scale": float(s[worst]),
            "updates_off": int((np.abs(s - 1) > TOL).sum())}
