"""SkyRL step-wise training: mini-batches that end on prompt boundaries."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Literal

from pydantic import Field

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.packing.balanced_first_fit import pack_chunk
from lrdoctor.replay.packing.common import (
    MicroBatch,
    Packer,
    PackerParams,
    StepPlan,
    _get,
    _mb_from_rank_lists,
)

if TYPE_CHECKING:
    import numpy as np


def prompt_runs(prompt_id: np.ndarray) -> tuple[np.ndarray, list]:
    """End offsets of consecutive equal prompt ids; non-contiguous repeats are an error."""
    import numpy as np
    n = len(prompt_id)
    if n == 0:
        return np.zeros(0, np.int64), []
    change = np.flatnonzero(prompt_id[1:] != prompt_id[:-1]) + 1
    ends = np.concatenate((change, [n]))
    firsts = prompt_id[np.concatenate(([0], change))]
    if len(set(firsts.tolist())) != len(firsts):
        seen: set = set()
        for pos, p in zip(np.concatenate(([0], change)).tolist(), firsts.tolist(), strict=False):
            if p in seen:
                raise UnusableInput(
                    f"prompt_id {p!r} appears again at step row {pos + 1} after other prompts: "
                    "a prompt's sequences must be contiguous"
                )
            seen.add(p)
    return ends, firsts.tolist()


def plan_prompt_unit(
    fr,
    dp,
    micro_batch_size,
    *,
    prompts_per_mini_batch=None,
    samples_per_step=None,
    mini_batch_size=None,
    pad_mode="copy",
    max_tokens=None,
    inner="static",
    round_to=1,
) -> StepPlan:
    """SkyRL step-wise training: mini-batches end on prompt boundaries.

    Each mini-batch spans ``prompts_per_mini_batch`` whole prompts (default:
    prompts in the step / (samples_per_step / mini_batch_size), the nominal
    number of mini-batches). It is padded to a multiple of dp, then chunked
    contiguously over ranks, then into micro-batches. ``pad_mode='slice'``
    reproduces padding by ``tensor[:pad_size]``, which yields only
    ``min(pad_size, mb_size)`` rows: short whenever ``pad_size > mb_size``.
    """
    import numpy as np
    notes: dict = {}
    tokens = fr["tokens"]
    n = len(tokens)
    if n == 0:
        return StepPlan([], [], None, notes)
    if "prompt_id" not in fr:
        raise UnusableInput("strategy prompt_unit needs a prompt_id column in the batch log")
    ends, _ = prompt_runs(np.asarray(fr["prompt_id"]))
    n_prompts = len(ends)
    if not prompts_per_mini_batch:
        if samples_per_step and mini_batch_size:
            n_minis = max(1, int(samples_per_step) // int(mini_batch_size))
            if n_prompts % n_minis:
                notes["prompts_not_divisible"] = {"prompts": n_prompts, "mini_batches": n_minis}
            prompts_per_mini_batch = max(1, math.ceil(n_prompts / n_minis))
        else:
            prompts_per_mini_batch = n_prompts
    ppm = int(prompts_per_mini_batch)
    notes["prompts"] = n_prompts
    notes["prompts_per_mini_batch"] = ppm
    if mini_batch_size and n % int(mini_batch_size):
        # Fixed-size sequence mini-batches (the pre-fix code) would not divide this step.
        notes["fixed_size_not_divisible"] = {
            "sequences": n,
            "mini_batch_size": int(mini_batch_size),
        }
    starts_p = np.concatenate(([0], ends))
    mbs: list[MicroBatch] = []
    bounds: list[int] = []
    pad_all = []
    short = []
    m = max(1, int(micro_batch_size))
    for pi in range(0, n_prompts, ppm):
        a = int(starts_p[pi])
        b = int(starts_p[min(pi + ppm, n_prompts)])
        mb_size = b - a
        pad = (-mb_size) % dp
        rows = np.arange(a, b)
        got = pad if pad_mode != "slice" else min(pad, mb_size)
        if pad:
            pad_all.append({"mini_batch": len(bounds), "mb_size": mb_size, "pad_size": pad})
            if pad > mb_size:
                rec = {
                    "mini_batch": len(bounds),
                    "mb_size": mb_size,
                    "pad_size": pad,
                    "dp": dp,
                    "rows_after_padding": mb_size + got,
                    "needed": mb_size + pad,
                }
                if pad_mode == "slice":
                    short.append(rec)
        total = mb_size + got
        # Padding rows are loss-masked copies (of the first row; 'slice': of the first
        # `got` rows): they take rank slots but are not samples.
        padded_rows = np.concatenate((rows, np.full(got, -1, dtype=np.int64)))
        copy_of = a + (np.arange(got) if pad_mode == "slice" else np.zeros(got, np.int64))
        chunk = math.ceil(total / dp)
        per_rank = []
        for k in range(dp):
            rk = padded_rows[k * chunk : (k + 1) * chunk]
            pads = copy_of[max(0, k * chunk - mb_size) : max(0, (k + 1) * chunk - mb_size)]
            rk = rk[rk >= 0]
            if inner == "balanced_first_fit" and max_tokens:
                # The copies are packed too, as SkyRL's iterator packs its whole chunk.
                per_rank.append(pack_chunk(tokens, rk, int(max_tokens), tokens[pads].tolist()))
            else:
                per_rank.append([rk[i : i + m] for i in range(0, len(rk), m)])
        part = _mb_from_rank_lists(per_rank, tokens, round_to)
        if part:
            mbs.extend(part)
            bounds.append(len(mbs) - 1)
    if pad_all:
        notes["padding"] = pad_all
    if short:
        notes["short_padding"] = short
    notes["mini_batches"] = len(bounds)
    return StepPlan(mbs, bounds, None, notes)


class PromptUnitParams(PackerParams):
    prompts_per_mini_batch: int | None = Field(None, ge=1)
    pad_mode: Literal["copy", "slice"] = "copy"
    max_tokens_per_microbatch: int | None = Field(None, ge=1)
    inner: Literal["static", "balanced_first_fit"] = "static"
    round_to: int = Field(1, ge=1)


def _plan(p: PromptUnitParams, train, fr, dp) -> StepPlan:
    return plan_prompt_unit(
        fr, dp, int(_get(train, "micro_batch_size", 1)),
        prompts_per_mini_batch=p.prompts_per_mini_batch,
        samples_per_step=_get(train, "samples_per_step"),
        mini_batch_size=_get(train, "mini_batch_size"), pad_mode=p.pad_mode,
        max_tokens=p.max_tokens_per_microbatch, inner=p.inner, round_to=p.round_to)


PACKER = Packer("prompt_unit", "SkyRL step-wise training: mini-batches end on prompt "
                "boundaries", PromptUnitParams, _plan, packed=True)
