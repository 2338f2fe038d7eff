"""OneVision-Encoder's launch command (``torchrun ... -m training.train --key value``).

Read from github.com/EvolvingLMMs-Lab/OneVision-Encoder ``training/train.py`` (c2cd3e0),
before and after PR 82 (b02db5b), which changed three lines:

- argument defaults: ``--list_datasets [k710_ssv2_univit_pfs]``, ``--list_batch_sizes
  [32]`` (one value is repeated for every dataset, else one per dataset),
  ``--num_sampled_data 60000000``, ``--lr 1e-3``, ``--warmup_ratio 0.1``,
  ``--backward_passes_per_step 1``, ``--opt adamw`` (the only one);
- ``batch_size = sum(list_batch_sizes)`` per rank (video heads are scaled by 1) and
  ``total_steps = int(num_sampled_data / batch_size / world_size)``, ``world_size`` =
  torchrun's ``--nproc_per_node x --nnodes``;
- the loop runs ``global_step`` from 0 and stops once it passes ``total_steps``:
  ``total_steps + 1`` micro-steps, one data-loader batch each, one counter for the run;
- before PR 82: ``is_accumulation_step = global_step % k != 0`` (the first update after
  one micro-step), ``lr_scheduler.step()`` after every micro-step, and
  ``PolynomialLRWarmup(opt, int(total_steps x warmup_ratio), total_steps, 2)``;
- after: ``(global_step + 1) % k != 0``, the scheduler stepped after ``opt.step()``, and
  ``optimizer_total_steps = total_steps // k`` as its ``total_iters`` (warmup
  ``int(optimizer_total_steps x warmup_ratio)``).

``k = --backward_passes_per_step``. Which ``train.py`` runs is in no argument: the
current one is assumed, ``--set onevision.train_py=before-pr82`` replays the other;
``--set train.KEY=VALUE`` sets a train.py argument (``train.num_sampled_data=1280000``).
The schedule is :mod:`lrdoctor.schedules.onevision` (the class's recursive form).
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.replay.translate.common import Reader, Translation, Translator

MODULE = "training.train"
REVISIONS = ("pr82", "before-pr82")
# train.py's argparse defaults that decide step accounting (c2cd3e0)
DEFAULTS: dict[str, Any] = {
    "list_datasets": ["k710_ssv2_univit_pfs"], "list_batch_sizes": ["32"],
    "num_sampled_data": "60000000", "lr": "1e-3", "warmup_ratio": "0.1",
    "backward_passes_per_step": "1", "opt": "adamw",
}
_LISTS = {"list_datasets", "list_batch_sizes", "list_sample_rates", "list_margins",
          "list_filters", "list_lr_pfc_weights", "list_loss_weights",
          "list_init_partial_fc_paths", "multi_frame_list"}


def looks_like(text: str) -> bool:
    return MODULE in text and ("--num_sampled_data" in text
                               or "--backward_passes_per_step" in text)


def _options(words: list[str]) -> dict[str, Any]:
    """``--key value`` (lists for train.py's ``nargs='+'`` options), ``--key=value``."""
    out: dict[str, Any] = {}
    i = 0
    while i < len(words):
        w = words[i]
        i += 1
        if not w.startswith("--"):
            continue
        key, eq, val = w[2:].partition("=")
        key = key.replace("-", "_")
        if eq:
            out[key] = val.split() if key in _LISTS else val
            continue
        vals = []
        while i < len(words) and not words[i].startswith("--"):
            vals.append(words[i])
            i += 1
        out[key] = vals if key in _LISTS else (vals[0] if vals else True)
    return out


def parse(text: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """(torchrun's options, train.py's options) of the launch command's words."""
    try:
        words = shlex.split(text)
    except ValueError as exc:
        raise UnusableInput(f"cannot split the command: {exc}") from None
    at = next((i for i, w in enumerate(words) if w == MODULE or w.endswith("train.py")), None)
    if at is None:
        return {}, _options(words)
    return _options(words[:at]), _options(words[at + 1:])


def _world(r: Reader) -> int:
    """torchrun's ``--nproc_per_node x --nnodes`` (``WORLD_SIZE`` for train.py)."""
    nproc = r.count("torchrun.nproc_per_node", 1)
    nnodes = r.get("torchrun.nnodes", "1", str)
    if ":" in nnodes:
        raise UnusableInput(f"torchrun.nnodes is {nnodes!r}, an elastic range: the world size "
                            "is decided at run time; give it with --set nnode=N")
    try:
        n = int(nnodes)
    except ValueError:
        raise UnusableInput(f"torchrun --nnodes is {nnodes!r}; expected a number "
                            "(--set the variable it comes from)") from None
    if n < 1:
        raise UnusableInput(f"torchrun --nnodes is {n}; expected >= 1")
    return nproc * n


def translate(text: str, base: Path | None = None) -> Translation:
    launcher, opts = parse(text)
    for key in [k for k in opts if k.startswith("train.")]:  # --set train.KEY=VALUE
        val = opts.pop(key)
        opts[key[len("train."):]] = val.split() if key[len("train."):] in _LISTS else val
    rev = str(opts.pop("onevision.train_py", "pr82"))
    if rev not in REVISIONS:
        raise UnusableInput(f"onevision.train_py is {rev!r}: known: {', '.join(REVISIONS)}")
    nnodes = launcher.get("nnodes", launcher.get("nnode"))
    tree: dict[str, Any] = {"torchrun": {"nproc_per_node": launcher.get("nproc_per_node"),
                                         "nnodes": nnodes},
                            "train": {**DEFAULTS, **opts}}
    r = Reader(tree, resolve_refs=False)
    if r.get("train.opt", "adamw", str) != "adamw":
        raise UnusableInput("train.py --opt: only adamw is supported by train.py itself")
    heads = r.get("train.list_datasets")
    n_heads = len(heads) if isinstance(heads, list) else 1
    sizes = r.get("train.list_batch_sizes")
    sizes = sizes if isinstance(sizes, list) else [sizes]
    if len(sizes) == 1:
        sizes = sizes * n_heads
    elif len(sizes) != n_heads:
        raise UnusableInput(f"--list_batch_sizes: expected 1 or {n_heads} values, got "
                            f"{len(sizes)} (train.py raises ValueError)")
    try:
        per_rank = sum(int(x) for x in sizes)
    except ValueError:
        raise UnusableInput(f"--list_batch_sizes {sizes!r}: expected integers") from None
    if per_rank < 1:
        raise UnusableInput(f"--list_batch_sizes sums to {per_rank}; expected >= 1")
    world = _world(r)
    sampled = r.need("train.num_sampled_data", "train.py's samples (default 60000000)")
    total = int(sampled / per_rank / world)  # train.py: float division, then int()
    if total < 1:
        raise UnusableInput(f"total_steps = int({sampled} / {per_rank} / {world}) = {total}: "
                            "the loop takes no step")
    k = r.need("train.backward_passes_per_step", "train.py's accumulation (default 1)")
    lr = r.get("train.lr", kind=float)
    ratio = r.get("train.warmup_ratio", kind=float)
    before = rev == "before-pr82"
    iters = total if before else total // k
    if iters < 1:
        raise UnusableInput(f"optimizer_total_steps = total_steps // k = {total} // {k} = 0")
    warmup = int(iters * ratio)
    if warmup >= iters:
        raise UnusableInput(f"warmup_iters int({iters} x {ratio}) = {warmup} is not below "
                            f"total_iters {iters}")
    from lrdoctor.core.state import ScheduleSpec, Unit
    from lrdoctor.schedules import lr_at

    params = {"power": 2}  # train.py: PolynomialLRWarmup(opt, warmup, total, 2)
    spec = ScheduleSpec(family="onevision", kind="polynomial_lr_warmup", max_lr=lr,
                        unit=Unit.UPDATES, warmup=warmup, horizon=iters, params=params)
    schedule = {"family": "onevision", "kind": "polynomial_lr_warmup", "max_lr": lr,
                # where the recursion leaves the LR (not 0): LRD201 names it as the floor
                "min_lr": lr_at(spec, iters), "warmup": warmup, "horizon": iters,
                "params": params}
    r.used["onevision.train_py"] = rev
    r.used["total_steps"] = total
    cfg = {
        "schedule": schedule,
        "budget": {"formula": "explicit", "total": iters},
        "train": {"steps": total + 1, "samples_per_step": per_rank * world,
                  "micro_batch_size": per_rank, "gradient_accumulation": k},
        "dp": {"size": world},
        "batching": {"strategy": "static"},
        "accumulation": {"rule": "off_by_one" if before else "correct",
                         "flush_at_step_end": False},
        "scheduler": {"step_on": "micro_step" if before else "update", "increment": 1},
    }
    return r.done("onevision_encoder", cfg)


TRANSLATOR = Translator("onevision_encoder", "OneVision-Encoder (torchrun -m training.train)",
                        "args", looks_like, translate)
