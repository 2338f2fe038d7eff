"""What a replay means: the summary (nominal vs actual progress) and findings LRD201-LRD212.

Framework-blind: it reads only the trace and the plans' notes, so the fast
and the torch path are judged by the same rules.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from lrdoctor.core.numbers import number
from lrdoctor.findings import Finding, Severity, finding

if TYPE_CHECKING:
    from lrdoctor.replay.engine import Replay

REL_TOL = 1e-6


def _f(x: float) -> str:
    """Short human number: 1024, 0.5, 1e-06."""
    return number(x, grouping=False, whole_below=1e15, none="n/a")


def per_step(rep: Replay) -> dict[str, np.ndarray]:
    """One row per train step: updates, scheduler advance, LR at its start."""
    t = rep.trace
    steps = rep.cfg.train.steps
    ts = t["train_step"]
    updates = np.bincount(ts, weights=t["is_update"].astype(float), minlength=steps)
    mbs = np.bincount(ts, minlength=steps)
    end = np.full(steps, np.nan)
    first_lr = np.full(steps, np.nan)
    if len(ts):
        last_idx = np.flatnonzero(np.r_[ts[1:] != ts[:-1], True])
        first_idx = np.r_[0, last_idx[:-1] + 1]
        end[ts[last_idx]] = t["scheduler_progress"][last_idx]
        first_lr[ts[first_idx]] = t["lr"][first_idx]
    end = _ffill(end)
    start = np.r_[0.0, end[:-1]]
    dp = np.array([rep.cfg.dp.size_at(s) for s in range(steps)])
    return {"train_step": np.arange(steps), "updates": updates, "micro_batches": mbs,
            "progress_end": end, "advance": end - start, "lr": first_lr, "dp": dp}


def _ffill(a: np.ndarray) -> np.ndarray:
    out = a.copy()
    last = 0.0
    for i, v in enumerate(out):
        if np.isnan(v):
            out[i] = last
        else:
            last = v
    return out


def summarize(rep: Replay) -> dict[str, Any]:
    """Nominal vs actual updates, where the LR reaches its floor, the corrected budget."""
    from lrdoctor.replay.engine import floor_progress, nominal_k

    cfg, spec, t = rep.cfg, rep.spec, rep.trace
    steps = cfg.train.steps
    ps = per_step(rep)
    n_up = int(t["is_update"].sum())
    n_failed = int(t["failed"].sum())
    end = float(t["scheduler_progress"][-1]) if len(t["lr"]) else 0.0
    hz = float(spec.horizon) if spec.horizon else math.nan
    ratio = end / hz if hz else math.nan
    fp = floor_progress(spec)
    floor_step = None
    if fp is not None:
        reached = np.flatnonzero(ps["progress_end"] >= fp - 1e-9 * max(1.0, abs(fp)))
        floor_step = int(reached[0]) + 1 if len(reached) else None
    from lrdoctor.schedules import lr_at

    lr_end = lr_at(spec, end)
    up = ps["updates"]
    closes = t["is_update"]
    wsizes = t["window_size"][closes]
    k0 = nominal_k(cfg, cfg.dp.size)
    ruled = ~_has_boundaries(rep)
    # Short against the k of that update's dp size (RLinf recomputes k when dp changes).
    k_of = {int(d): nominal_k(cfg, int(d)) for d in np.unique(t["dp"])}
    k_at = np.array([k_of[int(d)] for d in t["dp"][closes]], dtype=np.int64)
    short = int(((wsizes < k_at) & ruled[closes]).sum()) if len(wsizes) else 0
    corrected_inc = (hz / end) if end > 0 else None
    inc = cfg.scheduler.increment
    s: dict[str, Any] = {
        "engine": rep.engine,
        "device": rep.device,
        "train_steps": steps,
        "micro_batches": int(len(t["lr"])),
        "scheduler_unit": spec.unit.value,
        "horizon": hz,
        "budget_updates": rep.budget_updates,
        "nominal_updates": rep.nominal_updates,
        "nominal_updates_per_step": rep.nominal_updates / steps,
        "actual_updates": n_up,
        "failed_updates": n_failed,
        "unapplied_micro_batches": int((~t["applied"]).sum()),
        "updates_per_step": {"min": float(up.min()), "mean": float(up.mean()),
                             "max": float(up.max())},
        "update_ratio": n_up / rep.nominal_updates if rep.nominal_updates else None,
        "scheduler_progress_end": end,
        "progress_ratio": ratio,
        "floor_progress": fp,
        "floor_step": floor_step,
        "floor_fraction": floor_step / steps if floor_step is not None else None,
        "lr_end": lr_end,
        "min_lr": spec.min_lr,
        "max_lr": spec.max_lr,
        "window_sizes": {"first": int(wsizes[0]) if len(wsizes) else None,
                         "min": int(wsizes.min()) if len(wsizes) else None,
                         "max": int(wsizes.max()) if len(wsizes) else None,
                         "nominal": k0, "short": short},
        # Who closes windows: the accumulation rule (k) or the strategy (mini-batch /
        # prompt-unit / document-target boundaries, where k is not the window size).
        "windows_by": ("strategy" if len(ruled) and not ruled.any() else
                       "accumulation" if ruled.all() else "both"),
        "lr_changes_inside_windows": _lr_changes_inside(t),
        "max_rank_tokens": int(t["max_rank_tokens"].max()) if len(t["lr"]) else 0,
        "corrected": {
            # ROLL issue 442's direction: nominal/actual per update, or budget = actual.
            "progress_scale": corrected_inc,
            "per_update_increment": (float(inc) * corrected_inc
                                     if corrected_inc and not isinstance(inc, str) else None),
            "budget_updates": float(n_up - n_failed * (not cfg.scheduler.step_on_failed_update)),
            "horizon": end,
        },
    }
    if not np.all(np.isnan(t["peak_mem_bytes"])):
        s["peak_memory_bytes"] = int(np.nanmax(t["peak_mem_bytes"]))
    if cfg.batching.loss_normalization is not None:
        # The effective LR scale per update the configured loss divisor implies.
        from lrdoctor.replay import loss_scale

        s["loss_scale"] = loss_scale.scale(rep, cfg.batching.loss_normalization)
    for key in ("scheduler_class", "micro_batches_per_second", "torch_seconds", "cycled",
                "logged_steps"):
        if key in rep.notes:
            s[key] = rep.notes[key]
    return s


def _has_boundaries(rep: Replay) -> np.ndarray:
    epochs = rep.cfg.train.epochs_per_step
    flags = [np.full(len(i.plan.micro_batches) * epochs, i.plan.boundaries is not None)
             for i in rep.infos]
    return np.concatenate(flags) if flags else np.zeros(0, dtype=bool)


def _lr_changes_inside(t: dict[str, np.ndarray]) -> int:
    if len(t["lr"]) < 2:
        return 0
    same_window = t["window"][1:] == t["window"][:-1]
    lr = t["lr"]
    changed = np.abs(lr[1:] - lr[:-1]) > 1e-12 * np.maximum(np.abs(lr[1:]), 1e-300)
    return int((same_window & changed).sum())


def _scheduler_calls_per_update(t: dict[str, np.ndarray]) -> float:
    """Mean number of scheduler advances per applied optimizer update."""
    prog = t["scheduler_progress"]
    moved = np.diff(np.r_[0.0, prog]) > 0
    ups = int(t["is_update"].sum())
    return float(moved.sum()) / ups if ups else 0.0


def _notes(rep: Replay, key: str) -> list[tuple[int, Any]]:
    return [(i.step, i.plan.notes[key]) for i in rep.infos if key in (i.plan.notes or {})]


@dataclass
class _Ctx:
    """What every replay rule reads: the replay, its summary, and the shared fix text."""

    rep: Replay
    s: dict[str, Any]
    knob: dict[str, Any] | None
    fix_tail: str
    ev_core: dict[str, Any]

    @property
    def cfg(self):
        return self.rep.cfg

    @property
    def spec(self):
        return self.rep.spec

    @property
    def t(self) -> dict[str, np.ndarray]:
        return self.rep.trace


def _context(rep: Replay, s: dict[str, Any], knob: dict[str, Any] | None) -> _Ctx:
    cfg, spec = rep.cfg, rep.spec
    unit = spec.unit.value
    end = s["scheduler_progress_end"]
    scale = s["corrected"]["progress_scale"]
    inc = cfg.scheduler.increment
    fix_tail = (f"Scale every scheduler advance by nominal/actual = {_f(scale)} (ROLL issue "
                "442's direction)"
                + (f", i.e. step(increment={_f(s['corrected']['per_update_increment'])}) "
                   f"instead of {_f(float(inc))}"
                   if s["corrected"]["per_update_increment"] is not None else "")
                + f", or set the scheduler's horizon to the replayed {_f(end)} {unit}"
                + ("." if spec.unit.value == "optimizer updates" else
                   f" (about {_f(s['corrected']['budget_updates'])} optimizer updates).")) \
        if scale else ""
    if cfg.dp.changes and inc == "micro_batches" and fix_tail:
        # A constant scale cannot undo a dp-dependent advance: fix the increment first.
        fix_tail = ("Increment the scheduler by samples (the global batch) or once per update, "
                    "so an update moves it the same at every dp size (LRD210); a single "
                    "scale or horizon only fits this dp history. " + fix_tail)
    ev_core = {"horizon": s["horizon"], "scheduler_progress_end": end,
               "ratio": s["progress_ratio"],
               "nominal_updates": s["nominal_updates"], "budget_updates": s["budget_updates"],
               "actual_updates": s["actual_updates"], "updates_per_step": s["updates_per_step"],
               "floor_step": s["floor_step"], "train_steps": cfg.train.steps,
               "corrected_progress_scale": scale,
               "corrected_increment": s["corrected"]["per_update_increment"],
               "corrected_horizon": end}
    if cfg.budget.formula == "generation_steps":
        # verl issue 991: the budget counts generation batches, the scheduler train steps.
        gen = float(cfg.budget.total)
        ev_core.update(generation_batches=gen,
                       generation_batches_per_train_step=gen / cfg.train.steps)
        fix_tail = (f"The budget counts {_f(gen)} generation batches but the scheduler is "
                    f"stepped per train step, {_f(gen / cfg.train.steps)} generation batches "
                    "each (dynamic sampling / filtered groups): size the horizon in train "
                    f"steps ({cfg.train.steps}), or step the scheduler per generation batch. "
                    + fix_tail)
    return _Ctx(rep, s, knob, fix_tail, ev_core)


def _budget_cause(c: _Ctx) -> str:
    """What the budget counted, when it is not the scheduler's unit."""
    if c.cfg.budget.formula != "generation_steps":
        return ""
    g = c.ev_core["generation_batches_per_train_step"]
    return (f"; the budget counts generation batches ({_f(c.ev_core['generation_batches'])}), "
            f"the scheduler train steps ({c.cfg.train.steps}): {_f(g)} generation batches "
            "per train step")


def _lrd201(c: _Ctx) -> Finding | None:
    """The scheduler runs past its horizon: the LR reaches its floor early."""
    s, spec = c.s, c.spec
    ratio = s["progress_ratio"]
    if not ratio > 1 + REL_TOL:
        return None
    where = (f"; the LR reaches its floor ({_f(spec.min_lr)}) after train step "
             f"{s['floor_step']} of {c.cfg.train.steps} ({s['floor_fraction']:.0%})"
             if s["floor_step"] is not None else "")
    return finding(
        "LRD201",
        f"The replayed loop advances the scheduler to {_f(s['scheduler_progress_end'])} "
        f"{spec.unit.value}, {ratio:.3g}x its "
        f"horizon of {_f(s['horizon'])} ({s['actual_updates']} optimizer updates vs "
        f"{_f(s['budget_updates'])} budgeted, {_lrd201_cause(c)}){where}.",
        c.ev_core, fix=c.fix_tail, location="scheduler",
        # A few percent early is a drift to fix, not a broken run.
        severity=Severity.WARNING if ratio < 1.05 else None)


def _lrd201_cause(c: _Ctx) -> str:
    """Why the loop overruns: more updates per train step than planned, or (the rate as
    planned) a budget that counts fewer train steps than the loop runs. "1 per train step
    instead of 1" named a rate that was not the cause."""
    s, steps = c.s, c.cfg.train.steps
    mean, nominal = s["updates_per_step"]["mean"], s["nominal_updates_per_step"]
    if abs(mean - nominal) > REL_TOL * max(abs(nominal), 1e-12):
        return f"{_f(mean)} per train step instead of {_f(nominal)}"
    covers = s["budget_updates"] / nominal if nominal else None
    return (f"{_f(mean)} per train step as planned, but the budget covers only "
            + (f"{_f(covers)} of the {steps} train steps" if covers is not None
               else f"part of the {steps} train steps"))


def _lrd202(c: _Ctx) -> Finding | None:
    """The scheduler stops short of its horizon: the LR never decays to its floor."""
    s = c.s
    ratio = s["progress_ratio"]
    if not ratio < 1 - REL_TOL:
        return None
    return finding(
        "LRD202",
        f"The replayed loop advances the scheduler to only {_f(s['scheduler_progress_end'])} "
        f"of {_f(s['horizon'])} {c.spec.unit.value} "
        f"({ratio:.1%}): {s['actual_updates']} optimizer updates vs "
        f"{_f(s['budget_updates'])} budgeted; the last LR is {_f(s['lr_end'])}, the "
        f"floor {_f(c.spec.min_lr)}{_budget_cause(c)}.",
        c.ev_core, fix=c.fix_tail, location="scheduler")


def _lrd203(c: _Ctx) -> Finding | None:
    """A memory knob (micro-batch size, token cap) changes scheduler progress."""
    knob = c.knob
    if not (knob and knob.get("differs")):
        return None
    rows = "; ".join(f"{knob['key'].split('.')[-1]} {_f(v)}: {_f(u)} updates, "
                     f"progress {_f(p)}" for v, u, p in knob["rows"])
    return finding(
        "LRD203",
        f"Scheduler progress depends on {knob['key']} ({knob['source']}): {rows}.",
        {"key": knob["key"], "rows": knob["rows"]}, location=knob["key"])


def _lrd204(c: _Ctx) -> Finding | None:
    """The first accumulation window is short, so every later window is shifted."""
    t, ws = c.t, c.s["window_sizes"]
    ruled = ~_has_boundaries(c.rep)
    if not (len(t["lr"]) and ruled[0] and ws["first"] is not None and ws["nominal"] > 1
            and ws["first"] < ws["nominal"] and ws["max"] >= ws["nominal"]):
        return None
    sizes = t["window_size"][t["is_update"]][:4].tolist()
    return finding(
        "LRD204",
        f"The first optimizer update uses {ws['first']} micro-batch(es) instead of "
        f"{ws['nominal']} (window sizes {', '.join(map(str, sizes))}, ...), and every "
        "later window is shifted.",
        {"window_sizes_head": sizes, "k": ws["nominal"], "rule": c.cfg.accumulation.rule},
        location="accumulation.rule")


def _lrd205(c: _Ctx) -> Finding | None:
    """The LR moves inside accumulation windows (scheduler stepped per micro-batch)."""
    s, cfg = c.s, c.cfg
    changes = s["lr_changes_inside_windows"]
    if not changes:
        return None
    nwin = max(1, s["actual_updates"])
    calls = _scheduler_calls_per_update(c.t)
    speed = (f"; the scheduler moves {calls:.3g} times per optimizer update, so a budget "
             f"counted in updates runs {calls:.3g}x fast" if calls > 1 + REL_TOL else "")
    return finding(
        "LRD205",
        f"The LR changes {changes} times inside accumulation windows "
        f"({changes / nwin:.2g} per update): micro-batches of one update see different "
        f"LRs (scheduler stepped on {cfg.scheduler.step_on.replace('_', ' ')}){speed}.",
        {"changes": changes, "updates": s["actual_updates"],
         "step_on": cfg.scheduler.step_on, "scheduler_moves_per_update": calls},
        location="scheduler.step_on")


def _lrd206(c: _Ctx) -> Finding | None:
    """Train steps hold different amounts of optimizer work."""
    s, t = c.s, c.t
    ups = s["updates_per_step"]
    if ups["max"] == ups["min"]:
        return None
    mbs_per_step = per_step(c.rep)["micro_batches"]
    if c.cfg.accumulation.flush_at_step_end:
        spread = None
    else:
        # Windows span train steps: 0/1 (or 8/9) updates per step is only where
        # windows happen to end. A drift is steps holding different amounts of
        # work: micro-batches per step in units of the mean window.
        mean_window = len(t["lr"]) / max(1, s["actual_updates"])
        work = mbs_per_step / mean_window
        spread = (float(work.min()), float(work.max()))
    if spread is not None and spread[1] - spread[0] < 1 - REL_TOL:
        return None
    extra = ("" if spread is None else
             f"; with windows spanning steps, steps hold {spread[0]:.3g} to "
             f"{spread[1]:.3g} updates' worth of micro-batches "
             f"({int(mbs_per_step.min())}..{int(mbs_per_step.max())} per step)")
    return finding(
        "LRD206",
        f"Optimizer updates per train step vary from {_f(ups['min'])} to "
        f"{_f(ups['max'])} (mean {ups['mean']:.3g}, nominal "
        f"{_f(s['nominal_updates_per_step'])}){extra}.",
        {"updates_per_step": ups, "work_per_step_in_updates": spread})


def _lrd207(c: _Ctx) -> Finding | None:
    """Documents are weighted by a divisor other than the window's global document total."""
    t = c.t
    if not (t["loss_divisor"].size and not np.all(np.isnan(t["loss_divisor"]))):
        return None
    sums = t["window_weight_sum"][t["is_update"]]
    # A wrong divisor is off by whole documents; 1e-6 only absorbs float sums.
    bad = np.abs(sums - 1.0) > 1e-6
    if not bad.any():
        return None
    return finding(
        "LRD207",
        f"{int(bad.sum())} of {len(sums)} updates weight their documents by a divisor "
        f"other than the step's global document total (loss-weight sums "
        f"{_f(float(sums.min()))}..{_f(float(sums.max()))}, should be 1).",
        {"bad_updates": int(bad.sum()), "weight_sum_min": float(sums.min()),
         "weight_sum_max": float(sums.max())},
        location="batching.loss_divisor")


def _lrd208(c: _Ctx) -> Finding | None:
    """Padding a mini-batch to a multiple of dp yields fewer rows than it needs."""
    short = _notes(c.rep, "short_padding")
    if not short:
        return None
    first = short[0][1][0] if isinstance(short[0][1], list) else short[0][1]
    n_minis = sum(len(v) if isinstance(v, list) else 1 for _, v in short)
    return finding(
        "LRD208",
        f"Padding to dp comes up short in {n_minis} "
        f"mini-batch(es) over {len(short)} train step(s); e.g. step {short[0][0]}: "
        f"mb_size {first.get('mb_size')}, pad_size {first.get('pad_size')}, dp "
        f"{first.get('dp')}: {first.get('rows_after_padding')} rows instead of "
        f"{first.get('needed')}.",
        {"steps": len(short), "example": first}, location="batching.pad_mode")


def _lrd209(c: _Ctx) -> Finding | None:
    """A micro-batch on one rank is over the configured token cap."""
    cfg, t = c.cfg, c.t
    cap = cfg.batching.max_tokens_per_microbatch
    if not (cap and len(t["lr"])):
        return None
    # The trace's per-rank cost is real tokens when the framework packs (verl,
    # OpenRLHF, SkyRL) and rows x padded length when it pads (ROLL, static).
    first_pass = t["epoch"] == 0
    cost = t["max_rank_tokens"][first_pass]
    over = cost > cap
    if not over.any():
        return None
    packed = cfg.batching.is_packed
    what = ("real tokens (packed, no padding)" if packed
            else "tokens as rows x padded length")
    over_steps = np.unique(t["train_step"][first_pass][over])
    single = [(step, v) for step, v in _notes(c.rep, "sequence_over_cap")
              if isinstance(v, dict)]
    longest = max((int(v.get("max_len", 0)) for _, v in single), default=0)
    why = (f"; {sum(int(v.get('count', 0)) for _, v in single)} single sequence(s) are "
           f"longer than the cap (up to {longest})" if longest > cap else
           "; the partitions are balanced, not capped" if cfg.batching.strategy
           == "karmarkar_karp" else "")
    # A sequence longer than the cap is not a soft overshoot where the framework
    # asserts on it (ROLL, NeMo-RL, verl, OpenRLHF): the real run stops at that step.
    asserts = next((v["asserts"] for _, v in single if v.get("asserts")), None)
    severity = fix = None
    if asserts and longest > cap:
        first = min(step for step, v in single if v.get("asserts"))
        severity = Severity.ERROR
        why += f": {asserts}, so the real run stops at train step {first}"
        fix = (f"Raise the cap to at least {longest} (the longest sequence, rounded as the "
               "framework rounds it) or cut the sequences to the cap before training.")
    return finding(
        "LRD209",
        f"A micro-batch holds up to {int(cost.max())} {what} on one rank, over the "
        f"cap of {cap}: {int(over.sum())} of {len(cost)} micro-batches in "
        f"{len(over_steps)} of {cfg.train.steps} train step(s){why}.",
        {"cap": cap, "max_tokens": int(cost.max()), "measure":
         "real tokens" if packed else "rows x padded length",
         "micro_batches_over": int(over.sum()), "micro_batches": int(len(cost)),
         "steps": int(len(over_steps)), "longest_sequence": longest or None,
         "framework_asserts": asserts if severity else None},
        severity=severity, fix=fix, location="batching.max_tokens_per_microbatch")


def _lrd210(c: _Ctx) -> Finding | None:
    """Scheduler advance per train step depends on the dp size (elastic runs)."""
    if not c.cfg.dp.changes:
        return None
    ps = per_step(c.rep)
    by_dp = {int(d): float(np.mean(ps["advance"][ps["dp"] == d]))
             for d in np.unique(ps["dp"])}
    vals = list(by_dp.values())
    if not max(vals) - min(vals) > REL_TOL * max(abs(v) for v in vals):
        return None
    desc = ", ".join(f"dp {d}: {_f(v)}" for d, v in by_dp.items())
    inc = c.cfg.scheduler.increment
    return finding(
        "LRD210",
        f"Scheduler advance per train step depends on the dp size ({desc} "
        f"{c.spec.unit.value} per "
        f"step) with the same global batch: increment '{inc}' counts per-rank work.",
        {"advance_by_dp": by_dp, "increment": inc}, location="scheduler.increment")


def _lrd211(c: _Ctx) -> Finding | None:
    """Failed (skipped) updates still advanced the scheduler."""
    if not (c.cfg.scheduler.step_on_failed_update and c.s["failed_updates"]):
        return None
    return finding(
        "LRD211",
        f"{c.s['failed_updates']} failed update(s) still advanced the scheduler.",
        {"failed_updates": c.s["failed_updates"]}, location="scheduler.step_on_failed_update")


def _lrd212(c: _Ctx) -> Finding | None:
    """A step's samples do not divide into the configured mini-batches or dp ranks."""
    return _divisibility(c.rep)


def unmodelled_keys(items: list[dict[str, Any]]) -> list[Finding]:
    """LRD213: keys of a framework's own config that change step accounting, not replayed."""
    return [finding("LRD213", f"{it['key']} = {it['value']!r}: {it['why']}.",
                    {"key": it["key"], "value": it["value"]}, location=it["key"])
            for it in items]


# One function per finding code, in catalog order.
RULES = (_lrd201, _lrd202, _lrd203, _lrd204, _lrd205, _lrd206, _lrd207, _lrd208, _lrd209,
         _lrd210, _lrd211, _lrd212)


def findings(rep: Replay, summary: dict[str, Any] | None = None,
             knob: dict[str, Any] | None = None) -> list[Finding]:
    """LRD201-LRD212 from one replay (``knob``: a memory-knob comparison, for LRD203)."""
    ctx = _context(rep, summary or summarize(rep), knob)
    from lrdoctor.replay import loss_scale

    return [f for rule in RULES if (f := rule(ctx)) is not None] + loss_scale.findings(rep)


def _divisibility(rep: Replay) -> Finding | None:
    cfg = rep.cfg
    keys = ("fixed_size_not_divisible", "prompts_not_divisible", "mini_batch_not_divisible_by_dp",
            "not_divisible_by_dp")
    if cfg.batching.strategy == "prompt_unit":
        # There the note says what fixed-size mini-batches *would* do: not a problem.
        keys = tuple(k for k in keys if k != "fixed_size_not_divisible")
    hits = [(k, st, v) for k in keys for st, v in _notes(rep, k)]
    mini = cfg.train.mini_batch_size
    extra = []
    if mini and cfg.batching.strategy == "static":
        ps = per_step(rep)
        nominal = math.ceil((cfg.train.samples_per_step or mini) / mini) * cfg.train.epochs_per_step
        for info in rep.infos:
            if info.samples % mini:
                extra.append((info.step, info.samples, int(ps["updates"][info.step]), nominal))
    if not hits and not extra:
        return None
    if extra:
        st, n, got, nom = extra[0]
        msg = (f"Fixed-size mini-batches of {mini} sequences do not divide {len(extra)} train "
               f"step(s); e.g. step {st}: {n} sequences take {got} updates instead of {nom}.")
    else:
        k, st, v = hits[0]
        msg = f"Train step {st}: {k.replace('_', ' ')} ({v}); {len(hits)} step(s) affected."
    return finding("LRD212", msg, {"steps": len(extra) or len(hits),
                                   "example": extra[0] if extra else hits[0]},
                   location="train.mini_batch_size")


# ---------------------------------------------------------------- sweeps and the knob check


def sweep(cfg, samples, key: str, values: list[Any], planner=None,
          progress=None, *, jobs: int = 1, executor: str = "process") -> list[tuple[Any, Replay]]:
    """Replay (fast path) once per value of ``key``.

    ``jobs``/``executor``: the values run on a local process pool or on Ray
    (:func:`lrdoctor.parallel.run_map`), in value order whatever finishes first;
    ``jobs=1`` with the process executor runs here, with ``progress``.
    """
    from lrdoctor.replay import engine
    from lrdoctor.replay.config import with_key

    configs = [with_key(cfg, key, v, "--sweep") for v in values]
    if jobs == 1 and executor == "process":
        return [(v, engine.replay_fast(c, samples, planner, progress))
                for v, c in zip(values, configs, strict=True)]
    from lrdoctor.parallel import run_map

    reps = run_map(_sweep_task, [(c, samples, planner) for c in configs], jobs=jobs,
                   executor=executor, preload=["pandas", "lrdoctor.replay.engine",
                                               "lrdoctor.replay.packing",
                                               "lrdoctor.replay.config"])
    return list(zip(values, reps, strict=True))


def _sweep_task(args) -> Replay:
    """One sweep value in a worker process (module level: it must pickle)."""
    from lrdoctor.replay import engine

    cfg, samples, planner = args
    return engine.replay_fast(cfg, samples, planner)


def sweep_table(results: list[tuple[Any, Replay]], key: str) -> list[dict[str, Any]]:
    rows = []
    for v, rep in results:
        s = summarize(rep)
        rows.append({key: v, "actual_updates": s["actual_updates"],
                     "updates_per_step_min": s["updates_per_step"]["min"],
                     "updates_per_step_mean": s["updates_per_step"]["mean"],
                     "updates_per_step_max": s["updates_per_step"]["max"],
                     "scheduler_progress_end": s["scheduler_progress_end"],
                     "progress_ratio": s["progress_ratio"], "floor_step": s["floor_step"],
                     "lr_end": s["lr_end"], "max_rank_tokens": s["max_rank_tokens"],
                     # What this value alone would report (no knob check inside a sweep).
                     "findings": [f.code for f in findings(rep, s)]})
    return rows


def knob_comparison(results: list[tuple[Any, Replay]], key: str, source: str) -> dict[str, Any]:
    rows = []
    for v, rep in results:
        t = rep.trace
        end = float(t["scheduler_progress"][-1]) if len(t["lr"]) else 0.0
        rows.append((v, int(t["is_update"].sum()), end))
    ends = [r[2] for r in rows]
    differs = max(ends) - min(ends) > REL_TOL * max(1.0, max(abs(e) for e in ends))
    return {"key": key, "source": source, "rows": rows, "differs": differs}


def memory_knob_check(rep: Replay, samples, planner=None) -> dict[str, Any] | None:
    """Automatic 2x check of max_tokens_per_microbatch for token-based batching."""
    from lrdoctor.replay import engine
    from lrdoctor.replay.config import TOKEN_STRATEGIES, with_key

    cfg = rep.cfg
    cap = cfg.batching.max_tokens_per_microbatch
    if cfg.batching.strategy not in TOKEN_STRATEGIES or not cap:
        return None
    key = "batching.max_tokens_per_microbatch"
    if _knob_cannot_move(rep):
        # Replanning (Karmarkar-Karp: most of a replay's time) cannot change the answer:
        # the first replay's counts stand for 2x too.
        return knob_comparison([(cap, rep), (cap * 2, rep)], key,
                               "automatic 2x check; reused: the scheduler counts train steps "
                               "and each update is a mini-batch, neither depends on the cap")
    other = engine.replay_fast(with_key(cfg, key, cap * 2), samples, planner)
    return knob_comparison([(cap, rep), (cap * 2, other)], key, "automatic 2x check")


def _knob_cannot_move(rep: Replay) -> bool:
    """True when neither the updates nor the scheduler's progress can depend on the token
    cap: the scheduler steps a fixed amount once per train step, and the packer closes one
    update per mini-batch (a count set by the mini-batch size, not by packing)."""
    from lrdoctor.replay.packing.registry import PACKERS

    cfg = rep.cfg
    sch = cfg.scheduler
    if sch.step_on != "rollout_step" or isinstance(sch.increment, str):
        return False
    packer = PACKERS.get(cfg.batching.strategy)
    return bool(packer is not None and packer.mini_batch_windows and rep.infos
                and cfg.accumulation.flush_at_step_end
                and all(i.plan.boundaries is not None for i in rep.infos))
