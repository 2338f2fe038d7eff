"""The horizon tested against the planned end: every explanation of a saved horizon
(:data:`HYPOTHESES`), each predicting a number from saved ones, the one that fits
reported with the rest ruled out (LRD119, LRD120), and a horizon named by a counter of
another unit (:func:`counter_horizon`).

Split from :mod:`lrdoctor.rules.hypotheses` (the counters compared, the harm ahead),
whose evidence list and tolerances these share. A new explanation of a horizon is one
:class:`Test` in :func:`horizon_tests` and a line in :data:`HYPOTHESES` (the catalog page
lists them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from lrdoctor.core.evidence import EvidenceItem, first, of
from lrdoctor.core.evidence import Quantity as Q
from lrdoctor.core.evidence import Role as R
from lrdoctor.core.numbers import number
from lrdoctor.core.state import RunState, Unit
from lrdoctor.rules.hypotheses import MAX_K, REL_TOL, _fits, comparisons, evidence

#: Every explanation of a saved horizon :func:`horizon_tests` tries, and what it predicts.
HYPOTHESES: tuple[tuple[str, str], ...] = (
    ("the planned end", "scheduler calls per update x planned updates (healthy)"),
    ("a horizon unset or negative", "the saved horizon is 0 or below (LRD120 with an LR of 0)"),
    ("the planned end counted in micro-batches", "planned updates x gradient accumulation"),
    ("the planned end divided by the accumulation again", "planned updates / accumulation"),
    ("the planned end counted per process", "planned updates x process count"),
    ("the planned end counted in micro-batches of every process",
     "planned updates x processes x accumulation"),
    ("the planned end counted in batches (dataloader length x epochs)",
     "batches per epoch x epochs"),
    ("the planned end counted in epochs", "the planned epochs"),
    ("the planned end counted in samples", "planned updates x global batch"),
    ("the planned end minus the warmup", "planned scheduler calls - warmup"),
    ("the planned end counted in rollout steps while the scheduler steps per optimizer update",
     "the planned rollout steps (planned updates / updates per rollout step: prompts per "
     "step / mini-batch x PPO epochs)"),
    ("the planned end counted in optimizer updates while the scheduler steps per rollout step",
     "planned rollout steps x updates per rollout step (mini-batches x PPO epochs)"),
    ("the planned end counted in prompts, not responses",
     "planned scheduler calls / responses per prompt (n_samples_per_prompt, rollout.n)"),
    ("the planned end counted in responses, not prompts",
     "planned scheduler calls x responses per prompt"),
    ("the planned end counted in a unit k times smaller",
     "a whole multiple k of the planned end when no saved factor explains it (a warning that "
     "names the number that would confirm it: no file holds k)"),
)


@dataclass
class Test:
    """One candidate explanation of the horizon: what it predicts, and from which items."""

    hypothesis: str
    predicted: float
    arithmetic: str
    uses: list[str] = field(default_factory=list)
    harmful: bool = True   # a fit means a bug (False: the healthy explanation)
    # The number no file holds that would confirm it (None: every number was read). A fit
    # that needs one is at most a warning, and says which number would decide it.
    missing: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out = {"hypothesis": self.hypothesis, "predicts": self.predicted,
               "arithmetic": self.arithmetic, "uses": self.uses}
        return out | ({"missing": self.missing} if self.missing else {})


@dataclass
class HorizonVerdict:
    """The horizon tested against the planned end: the fitting test, and the rest."""

    horizon: EvidenceItem
    planned_updates: float
    planned_from: str
    rate: float
    rate_from: str
    fit: Test | None
    ruled_out: list[Test]
    rounding: bool = False  # only floor vs ceil at the epoch end separates them (LRD117)
    also: list[Test] = field(default_factory=list)  # other tests predicting the same number
    scale: float = 1.0  # scheduler units per update at one call per update (samples: the batch)
    step: str = "update"  # the trainer's step the plan and the rate count ("rollout step")

    @property
    def healthy(self) -> bool:
        return self.fit is not None and not self.fit.harmful


def _factor(st: RunState, q: Q) -> EvidenceItem | None:
    return next((e for e in of(evidence(st), R.FACTOR, q) if e.value >= 1), None)


def _horizon_refs(st: RunState) -> set[str]:
    """The fields that hold the scheduler's horizon: a planned end read from one of them is
    the horizon itself (DeepSpeed's ``total_num_steps`` is both), never an independent plan."""
    spec = st.schedule
    out = {e.where for e in of(evidence(st), R.HORIZON, Q.SCHEDULER_CALLS)
           if spec is not None and spec.horizon is not None and e.value == spec.horizon}
    if spec is not None and "horizon" in spec.refs:
        out.add(str(spec.refs["horizon"]))
    return out


def _planned_updates(st: RunState) -> tuple[float, str, EvidenceItem | None] | None:
    """The planned end in optimizer updates, and where it was read (or how computed); a
    planned end that is the horizon's own field is no plan (nothing to test against)."""
    end = st.planned_end
    circular = _horizon_refs(st)
    if (end is not None and end.unit is Unit.UPDATES and end.value > 0
            and not (end.ref is not None and str(end.ref) in circular)):
        return float(end.value), end.source or end.name, None
    e = next((x for x in of(evidence(st), R.PLANNED_END, Q.ITERATIONS)
              if x.value > 0 and x.where not in circular), None)
    if e is not None:
        return e.value, e.where, e
    epochs = next((x for x in of(evidence(st), R.PLANNED_END, Q.EPOCHS) if x.value > 0), None)
    if epochs is None:
        return None
    upe = _factor(st, Q.UPDATES_PER_EPOCH)
    if upe is not None:
        return epochs.value * upe.value, f"{epochs.where} x {upe.where}", epochs
    bpe = _factor(st, Q.BATCHES_PER_EPOCH)
    if bpe is not None:
        ga = _factor(st, Q.GRAD_ACCUM)
        g, g_from = (ga.value, f"{ga.value:g}") if ga is not None else (1.0, "1")
        if ga is None:
            derived = _accumulation_from_counters(st)
            if derived is not None:
                g, g_from = derived
        return (epochs.value * math.ceil(bpe.value / g),
                f"{epochs.where} x ceil({bpe.where} / {g_from})", epochs)
    return None


def _accumulation_from_counters(st: RunState) -> tuple[float, str] | None:
    """The batches per optimizer update when no accumulation is saved: a loop counter of
    iterations that is a whole k >= 2 times the optimizer's step (PyTorch-Ignite's
    ``trainer.iteration`` 36 over ``optimizer.state[0].step`` 9 under accumulation 4).
    Dividing the dataloader's length by 1 there would be a number no file holds."""
    opt = next((e for e in of(evidence(st), R.PROGRESS, Q.OPTIMIZER_STEPS) if e.value > 0),
               None)
    if opt is None:
        return None
    for it in of(evidence(st), R.PROGRESS, Q.ITERATIONS):
        k = it.value / opt.value
        if it.value > opt.value and abs(k - round(k)) < 1e-9 and round(k) >= 2:
            return float(round(k)), f"({it.where} {it.value:g} / {opt.where} {opt.value:g})"
    return None


def _horizon_item(st: RunState) -> EvidenceItem | None:
    """The horizon the scheduler decays over: its own state's, else a config's. A schedule
    rebuilt without a horizon (ExponentialLR, warm restarts, a SequentialLR whose last child
    never decays) has none: another field's number is not its horizon."""
    spec = st.schedule
    hs = of(evidence(st), R.HORIZON, Q.SCHEDULER_CALLS)
    if spec is not None and spec.horizon is not None:
        return next((e for e in hs if e.value == spec.horizon), None) or _spec_item(st)
    if spec is not None and not st.stateless:
        return None
    return hs[0] if hs else None


def _spec_item(st: RunState) -> EvidenceItem | None:
    from lrdoctor.core.fieldref import FieldRef

    spec = st.schedule
    if spec is None or spec.horizon is None:
        return None
    return EvidenceItem(R.HORIZON, Q.SCHEDULER_CALLS, float(spec.horizon),
                    spec.refs.get("horizon", FieldRef(spec.source or "schedule")))


def _rate(st: RunState) -> tuple[float, str] | None:
    """Scheduler calls per update so far, from a comparison of two independent counters in
    the scheduler's own unit (None: nothing compared, so no rate is known)."""
    cmp = comparisons(st)
    if not cmp or cmp[0].ratio is None:
        return None
    c = cmp[0]
    return (1.0 if c.agree else c.ratio or 1.0), c.describe()


@dataclass(frozen=True)
class PerRollout:
    """Optimizer updates per rollout step, from an RL trainer's knobs, and how."""

    value: float
    arithmetic: str
    uses: list[str]


def updates_per_rollout(st: RunState) -> PerRollout | None:
    """How many optimizer updates one rollout step makes: the mini-batches its batch splits
    into, times the passes over it (PPO epochs). Read from the knobs, whatever the trainer
    calls them: a count of mini-batches (TRL's ``num_mini_batches``); a batch of prompts
    beside a mini-batch of prompts (verl's ``data.train_batch_size`` /
    ``ppo_mini_batch_size``, SkyRL's ``train_batch_size`` / ``policy_mini_batch_size``); or
    prompts x responses per prompt over the samples of one update (OpenRLHF's
    ``rollout_batch_size`` x ``n_samples_per_prompt`` / ``train_batch_size``, NeMo-RL's
    ``num_prompts_per_step`` x ``num_generations_per_prompt`` / ``train_global_batch_size``)."""
    ep = _factor(st, Q.PPO_EPOCHS)
    times = ep.value if ep is not None else 1.0
    ep_txt = f" x {ep.name} {number(ep.value)}" if ep is not None else ""
    ep_use = [ep.where] if ep is not None else []
    mb = _factor(st, Q.MINI_BATCHES)
    if mb is not None:
        return PerRollout(mb.value * times, f"{mb.name} {number(mb.value)}{ep_txt}",
                          [mb.where] + ep_use)
    mini = _factor(st, Q.PPO_MINI_BATCH)
    prompts = _factor(st, Q.PROMPTS_PER_STEP)
    gbs = _factor(st, Q.GLOBAL_BATCH)
    batch = prompts or gbs  # a batch size beside a PPO mini-batch: the rollout step's batch
    if mini is not None and batch is not None and batch.value >= mini.value:
        return PerRollout(batch.value / mini.value * times,
                          f"{batch.name} {number(batch.value)} / {mini.name} "
                          f"{number(mini.value)}{ep_txt}", [batch.where, mini.where] + ep_use)
    n = _factor(st, Q.RESPONSES_PER_PROMPT)
    if prompts is not None and gbs is not None and mini is None:
        k = n.value if n is not None else 1.0
        n_txt = f" x {n.name} {number(n.value)}" if n is not None else ""
        return PerRollout(prompts.value * k / gbs.value * times,
                          f"{prompts.name} {number(prompts.value)}{n_txt} / {gbs.name} "
                          f"{number(gbs.value)}{ep_txt}",
                          [prompts.where, gbs.where] + ([n.where] if n else []) + ep_use)
    return None


def _planned_rollouts(st: RunState) -> tuple[float, str] | None:
    """The planned end in rollout (training, pipeline, GRPO) steps, and where it was read."""
    end = st.planned_end
    if end is not None and end.unit is Unit.ROLLOUT_STEPS and end.value > 0:
        return float(end.value), end.source or end.name
    e = next((x for x in of(evidence(st), R.PLANNED_END, Q.ROLLOUTS) if x.value > 0), None)
    return (e.value, e.where) if e is not None else None


def _rl_tests(st: RunState, e_upd: float, e_from: str, e_s: float, rate: float,
              per_rollout: bool) -> list[Test]:
    """The RL units: rollout steps against optimizer updates, prompts against responses.
    ``e_upd`` is the plan in the frame's step (updates, or rollout steps when
    ``per_rollout``), ``rate`` the scheduler calls per such step."""
    out: list[Test] = []
    u = updates_per_rollout(st)
    if u is not None and u.value >= 2:
        rollouts = e_upd if per_rollout else e_upd / u.value
        r_txt = (f"{number(e_upd)} planned rollout steps ({e_from})" if per_rollout else
                 f"{number(e_upd)} planned updates ({e_from}) / {number(u.value)} updates per "
                 f"rollout step ({u.arithmetic})")
        out.append(Test("the planned end counted in rollout steps while the scheduler steps "
                        f"per optimizer update ({u.arithmetic} = {number(u.value)} updates per "
                        "rollout step)", rollouts, r_txt, [e_from] + u.uses))
        per_rollout_rate = rate if per_rollout else rate * u.value
        if abs(per_rollout_rate - 1) <= REL_TOL:  # the scheduler is stepped per rollout step
            out.append(Test("the planned end counted in optimizer updates while the scheduler "
                            "steps per rollout step", rollouts * u.value,
                            f"{number(rollouts)} rollout steps x {u.arithmetic}",
                            [e_from] + u.uses))
    n = _factor(st, Q.RESPONSES_PER_PROMPT)
    if n is not None and n.value >= 2:
        out.append(Test("the planned end counted in prompts, not responses", e_s / n.value,
                        f"{number(e_s)} / {n.name} {number(n.value)}", [e_from, n.where]))
        out.append(Test("the planned end counted in responses, not prompts", e_s * n.value,
                        f"{number(e_s)} x {n.name} {number(n.value)}", [e_from, n.where]))
    return out


def horizon_tests(st: RunState) -> HorizonVerdict | None:
    """Test every explanation of the horizon against the planned end (in updates; in
    rollout steps where the scheduler's counter was compared with a rollout-step counter
    and the plan is saved in rollout steps)."""
    spec = st.schedule
    scale = 1.0  # scheduler units per update at one call per update
    cmp = comparisons(st)
    rollouts = _planned_rollouts(st)
    per_rollout = bool(cmp) and cmp[0].unit == Unit.ROLLOUT_STEPS.value and rollouts is not None
    if spec is not None and spec.unit is Unit.SAMPLES and st.samples_per_update:
        scale = float(st.samples_per_update)  # Megatron: the scheduler counts samples
    elif spec is not None and spec.unit is not Unit.UPDATES and not per_rollout:
        return None  # epochs, rollouts without a plan in them: LRD108/LRD118 reason there
    h = _horizon_item(st)
    planned = _planned_updates(st) if not per_rollout else (
        (rollouts[0], rollouts[1], None) if rollouts is not None else None)
    if planned is None and rollouts is not None:
        # Only the rollout steps are planned: in updates, times the updates per rollout step.
        u = updates_per_rollout(st)
        if u is not None:
            planned = (rollouts[0] * u.value, f"{rollouts[1]} x {u.arithmetic}", None)
    if h is None or planned is None:
        return None
    e_upd, e_from, _ = planned
    step = "rollout step" if per_rollout else "update"
    measured = _rate(st)
    if measured is None:
        # Whether the scheduler is called once or k times per update decides which horizon
        # is right: without a second counter no hypothesis can be told from another.
        return None
    rate, rate_from = measured
    H = h.value
    tests: list[Test] = []
    e_s = rate * e_upd * scale
    per = f" x {number(scale)} samples per update" if scale != 1 else ""
    plan_txt = (f"{number(round(rate, 4))} call(s) per {step} x {number(e_upd)} planned "
                f"{step}s ({e_from}){per}")
    end = st.planned_end
    if scale != 1 and end is not None and end.unit is Unit.SAMPLES and end.value > 0:
        # The plan in samples as saved or derived (Megatron: train_samples, or train_iters
        # along the batch-size ramp-up): planned updates x the final global batch is not it
        # when the batch ramps up, and is no saved number.
        e_s = rate * float(end.value)
        plan_txt = (f"{number(round(rate, 4))} call(s) per sample x {number(end.value)} "
                    f"planned samples ({end.source or end.name})")
    elif scale != 1 and st.facts.rampup is not None:
        return None  # a ramp-up without a plan in samples: no saved number gives one
    tests.append(Test("the planned end", e_s, plan_txt, [e_from], harmful=False))
    ga, ws = _factor(st, Q.GRAD_ACCUM), _factor(st, Q.PROCESSES)
    gbs = _factor(st, Q.GLOBAL_BATCH)
    bpe = _factor(st, Q.BATCHES_PER_EPOCH)
    epochs = next((x for x in of(evidence(st), R.PLANNED_END, Q.EPOCHS) if x.value > 0), None)
    warm = spec.warmup if spec is not None and spec.warmup else None
    warm_item = first(evidence(st), R.WARMUP, Q.SCHEDULER_CALLS)
    if warm is None and warm_item is not None and warm_item.value > 0:
        warm = warm_item.value
    if H <= 0:
        tests.append(Test("a horizon unset or negative", H, f"{h.name} = {number(H)}", [h.where]))
    if scale != 1 or per_rollout:
        # A samples horizon: only the warmup and an iteration count can explain it. A plan in
        # rollout steps: the accumulation, processes and batch are the updates' own units.
        ga = ws = gbs = bpe = epochs = None
    if scale != 1:
        tests.append(Test("the planned end counted in iterations, not samples", e_upd,
                          f"{number(e_upd)} planned updates", [e_from]))
    if ga is not None and ga.value >= 2:
        tests.append(Test("the planned end counted in micro-batches", e_upd * ga.value,
                          f"{number(e_upd)} updates x {ga.name} {number(ga.value)}",
                          [e_from, ga.where]))
        tests.append(Test("the planned end divided by the accumulation again",
                          e_upd / ga.value, f"{number(e_upd)} / {ga.name} {number(ga.value)}",
                          [e_from, ga.where]))
    if ws is not None and ws.value >= 2:
        tests.append(Test("the planned end counted per process", e_upd * ws.value,
                          f"{number(e_upd)} updates x {ws.name} {number(ws.value)}",
                          [e_from, ws.where]))
        if ga is not None and ga.value >= 2:
            tests.append(Test("the planned end counted in micro-batches of every process",
                              e_upd * ws.value * ga.value,
                              f"{number(e_upd)} x {ws.name} {number(ws.value)} x {ga.name} "
                              f"{number(ga.value)}", [e_from, ws.where, ga.where]))
    if bpe is not None and epochs is not None:
        tests.append(Test("the planned end counted in batches (dataloader length x epochs)",
                          bpe.value * epochs.value,
                          f"{bpe.name} {number(bpe.value)} x {epochs.name} "
                          f"{number(epochs.value)}", [bpe.where, epochs.where]))
    if epochs is not None and epochs.value < e_upd:
        tests.append(Test("the planned end counted in epochs", epochs.value,
                          f"{epochs.name} = {number(epochs.value)}", [epochs.where]))
    if gbs is not None and gbs.value >= 2:
        tests.append(Test("the planned end counted in samples", e_upd * gbs.value,
                          f"{number(e_upd)} updates x {gbs.name} {number(gbs.value)}",
                          [e_from, gbs.where]))
    if warm:
        tests.append(Test("the planned end minus the warmup", e_s - warm,
                          f"{number(e_s)} - warmup {number(warm)}",
                          [e_from] + ([warm_item.where] if warm_item else [])))
    if scale == 1:
        tests += _rl_tests(st, e_upd, e_from, e_s, rate, per_rollout)
    k = round(H / e_s) if e_s > 0 else 0
    # (k beyond MAX_K: a "forever" sentinel such as ConstantLR's total_iters 10**9, no unit)
    if 2 <= k <= MAX_K and _fits(k * e_s, H) and not any(_fits(t.predicted, H) for t in tests):
        # No saved factor names k, but a whole multiple of the plan is no coincidence.
        tests.append(Test(f"the planned end counted in a unit {k} times smaller (no saved "
                          "accumulation, process count or batch size names it: micro-batches "
                          f"under accumulation {k}, or {k} processes)", k * e_s,
                          f"{number(e_s)} x {k}", [e_from],
                          missing=f"a saved gradient accumulation or process count of {k}"))
    fitting = [t for t in tests if _fits(t.predicted, H)]
    fit = fitting[0] if fitting else None
    ruled_out = [t for t in tests if t not in fitting]
    rounding = False
    if fit is None and epochs is not None and abs(H - e_s) <= max(1.0, epochs.value):
        rounding = True  # floor vs ceil at every epoch end: LRD117 judges that
    return HorizonVerdict(h, e_upd, e_from, rate, rate_from, fit, ruled_out, rounding,
                          also=fitting[1:], scale=scale, step=step)


@dataclass(frozen=True)
class CounterHorizon:
    """The horizon equals a saved counter of another unit than the one the scheduler follows.

    ``counter`` (the loop's micro-batch step, Composer's ``timestamp.batch``, Fabric's
    ``iter_num``) holds exactly the horizon, while the scheduler's own counter equals
    ``follows`` (the optimizer's step, ``global_steps``, ``timestamp.epoch``), ``k`` times
    smaller; ``k`` is a saved factor (``k_from``) or the counters are an epoch and a step
    count of the same clock. Every number is read from a file: the horizon was sized in
    ``counter``'s unit, and where that counter has reached it the scheduler is at
    ``scheduler / horizon`` of its decay."""

    horizon: EvidenceItem
    counter: EvidenceItem
    scheduler: EvidenceItem
    follows: EvidenceItem
    k: float
    k_from: str


def _plain(e: EvidenceItem) -> tuple[int, int]:
    """Order: a field of the state itself before one inside a list (a saved history)."""
    return (sum(1 for k in e.ref.key if isinstance(k, int)), len(e.ref.key))


def counter_horizon(st: RunState) -> CounterHorizon | None:
    """The horizon named by a saved counter of another unit (None: no counter holds it, or
    the scheduler's counter is not behind it by a factor the files name)."""
    items = evidence(st)
    h = _horizon_item(st)
    sched = [e for e in of(items, R.PROGRESS, Q.SCHEDULER_CALLS) if e.value >= 1]
    if h is None or h.value < 2 or not sched:
        return None
    s = min(sched, key=_plain)
    if s.value >= h.value:
        return None
    others = [e for e in items if e.role is R.PROGRESS and e.quantity is not Q.SCHEDULER_CALLS]
    named = sorted((e for e in others if e.value == h.value), key=_plain)
    same = sorted((e for e in others if e.value == s.value), key=_plain)
    for c in named:
        k = c.value / s.value
        if k < 2:
            continue
        for d in same:
            if d.quantity is Q.EPOCHS and c.quantity is not Q.EPOCHS:
                return CounterHorizon(h, c, s, d, k, f"{c.name} {number(c.value)} / "
                                      f"{d.name} {number(d.value)}: the {c.quantity.value} "
                                      "of one epoch")
            fac = next((f for f in of(items, R.FACTOR, Q.GRAD_ACCUM, Q.PROCESSES,
                                      Q.BATCHES_PER_EPOCH, Q.UPDATES_PER_EPOCH)
                        if _fits(f.value, k) and abs(f.value - k) < 1e-9), None)
            if fac is not None and d.quantity is not Q.EPOCHS:
                return CounterHorizon(h, c, s, d, k, f"{fac.name} = {number(fac.value)} "
                                      f"({fac.where})")
    return None
