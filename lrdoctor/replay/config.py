"""The lrdoctor run config (YAML) for ``replay``, validated by pydantic.

Every section forbids unknown keys, so a typo fails loudly with one line that
names the key, the bad value and what is allowed (exit code 2), instead of a
replay of a different loop than the one the user runs.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from lrdoctor.core.errors import NotText, UnusableInput
from lrdoctor.replay.packing.registry import PACKERS

# The batching.strategy choices: the packer registry (lrdoctor.replay.packing.registry).
STRATEGIES = tuple(PACKERS)
FLAVORS = ("verl", "verl_ceildiv", "openrlhf", "roll", "nemo_rl", "skyrl", "skyrl_rank_first")
# Strategies whose memory knob is max_tokens_per_microbatch (the 2x knob check, LRD203).
TOKEN_STRATEGIES = tuple(n for n, p in PACKERS.items() if p.token_knob)
# Frameworks that pack a micro-batch's sequences end to end without padding (verl
# use_remove_padding, OpenRLHF packing_samples, SkyRL, Fast-LLM): a micro-batch costs its
# real tokens, not rows x padded length. ROLL / NeMo-RL token budgets and static batches pad.
PACKED_STRATEGIES = tuple(n for n, p in PACKERS.items() if p.packed)
# Keys whose change should only move memory use, never the schedule (LRD203 on --sweep).
MEMORY_KNOBS = ("batching.max_tokens_per_microbatch", "batching.num_micro_batches",
                "batching.round_to")


_MAX_MAGNITUDE = 1e15  # as for saved values (read/layouts/_common.MAX_MAGNITUDE)


class _Section(BaseModel):
    # No number of a config may be inf/nan or past 10**15: every one sizes or scales
    # something (a loop, an array, a product the planners take in int64).
    model_config = ConfigDict(extra="forbid", validate_assignment=True, allow_inf_nan=False)

    @field_validator("*", mode="after")
    @classmethod
    def _magnitude(cls, v: Any) -> Any:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) > _MAX_MAGNITUDE:
            raise ValueError(f"{v:g} is beyond 1e15 (no real run comes near)")
        return v


class ScheduleCfg(_Section):
    """The intended schedule (the fields of :class:`lrdoctor.core.state.ScheduleSpec`)."""

    family: Literal["megatron", "hf", "torch", "deepspeed", "onevision"] = "megatron"
    kind: str = "cosine"
    max_lr: float = Field(default=1.0e-6, gt=0)
    min_lr: float = Field(default=0.0, ge=0)
    init_lr: float = Field(default=0.0, ge=0)
    warmup: float = Field(default=0.0, ge=0)
    horizon: float | Literal["auto"] = "auto"
    params: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _check(self) -> ScheduleCfg:
        if self.min_lr > self.max_lr:
            raise ValueError(f"min_lr {self.min_lr} is above max_lr {self.max_lr}")
        if self.horizon != "auto" and self.horizon <= 0:
            raise ValueError(f"horizon must be > 0 or auto, got {self.horizon}")
        for name in ("max_lr", "min_lr", "init_lr", "warmup", "horizon"):
            v = getattr(self, name)
            if isinstance(v, float) and not math.isfinite(v):
                raise ValueError(f"schedule.{name} is {v}; expected a finite number")
        where = _non_finite(self.params)
        if where is not None:
            raise ValueError(f"schedule.params.{where[0]} is {where[1]}; expected a finite "
                             "number (a schedule is evaluated from it)")
        return self


def _non_finite(value: Any, path: str = "", depth: int = 0) -> tuple[str, Any] | None:
    """The first non-finite number in a schedule's params (nested: SequentialLR children),
    as (dotted key, value); None when every number is finite."""
    if isinstance(value, float) and not math.isfinite(value):
        return path or "?", value
    if depth > 8:
        return None
    items = value.items() if isinstance(value, dict) else \
        enumerate(value) if isinstance(value, (list, tuple)) else ()
    for k, v in items:
        got = _non_finite(v, f"{path}.{k}" if path else str(k), depth + 1)
        if got is not None:
            return got
    return None


class BudgetCfg(_Section):
    """How the framework computed the horizon it handed the scheduler."""

    formula: Literal["roll", "explicit", "nominal", "generation_steps"] = "nominal"
    # explicit: the horizon in scheduler units; generation_steps: the generation (rollout)
    # batches the budget was counted in (verl: len(train_dataloader) * total_epochs), while
    # the scheduler counts train steps: with dynamic sampling / filtered groups one train
    # step consumes several generation batches (verl issue 991).
    total: float | None = Field(default=None, gt=0)

    @model_validator(mode="after")
    def _check(self) -> BudgetCfg:
        if self.formula in ("explicit", "generation_steps") and self.total is None:
            raise ValueError(f"budget.formula {self.formula} needs budget.total")
        return self

    @property
    def given_total(self) -> float:
        """``total`` where the formula needs it (explicit, generation_steps), which the
        check above guarantees: the engine reads it through here, typed as set."""
        if self.total is None:
            raise ValueError(f"budget.formula {self.formula} has no budget.total")
        return float(self.total)


class TrainCfg(_Section):
    steps: int = Field(default=..., ge=1)
    samples_per_step: int | None = Field(default=None, ge=1)
    epochs_per_step: int = Field(default=1, ge=1)
    micro_batch_size: int = Field(default=1, ge=1)
    gradient_accumulation: int = Field(default=1, ge=1)
    mini_batch_size: int | None = Field(default=None, ge=1)
    # static batching: each rank's last micro-batch of a train step (an epoch of a
    # DataLoader) is dropped when it is short, as DataLoader(drop_last=True) does.
    drop_last: bool = False


class DpChange(_Section):
    at_step: int = Field(default=..., ge=0)
    size: int = Field(default=..., ge=1)


class DpCfg(_Section):
    size: int = Field(default=1, ge=1)
    changes: list[DpChange] = Field(default_factory=list)

    def size_at(self, step: int) -> int:
        size = self.size
        for ch in sorted(self.changes, key=lambda c: c.at_step):
            if ch.at_step <= step:
                size = ch.size
        return size


class _BatchingBase(_Section):
    strategy: Literal[STRATEGIES] = "static"  # type: ignore[valid-type]
    max_tokens_per_microbatch: int | None = Field(default=None, ge=1)
    round_to: int = Field(default=1, ge=1)
    num_micro_batches: int | None = Field(default=None, ge=1)
    docs_per_step: int | None = Field(default=None, ge=1)
    equal_size: bool = False
    # Framework (and release) details read by lrdoctor.replay.packing (see
    # docs/replay-frameworks.md). Unset: the top-level ``framework`` key decides, else
    # the newest release of the strategy's framework.
    # karmarkar_karp: verl (>= 0.9.1, count raised until every micro-batch fits) |
    #   verl_ceildiv (< 0.9.1) | openrlhf;
    # token_budget: roll | nemo_rl (per global batch, one update each);
    # balanced_first_fit: skyrl (>= 0.2.0, mini-batch then dp) | skyrl_rank_first (< 0.2.0)
    flavor: Literal[FLAVORS] | None = None  # type: ignore[valid-type]
    balance_dp: bool = True  # karmarkar_karp: verl balance_batch over dp ranks
    keep_minibatch: bool = False  # karmarkar_karp: verl balance_batch per mini-batch
    # sequence_packing (NeMo-RL policy.sequence_packing.algorithm)
    algorithm: Literal["modified_first_fit_decreasing", "first_fit_decreasing",
                       "concatenative"] = "modified_first_fit_decreasing"
    prompts_per_mini_batch: int | None = Field(default=None, ge=1)  # prompt_unit
    pad_mode: Literal["copy", "slice"] = "copy"  # prompt_unit: slice = tensor[:pad_size]
    inner: Literal["static", "balanced_first_fit"] = "static"  # prompt_unit micro-batches
    # doc_target: what each micro-batch divides its loss by. step_total is right;
    # micro_batch reproduces a loop dividing by its own micro-batch's documents (LRD207).
    loss_divisor: Literal["step_total", "micro_batch"] = "step_total"
    # What the loss of every strategy is divided by under accumulation and dp, for the
    # effective LR scale per update (lrdoctor.replay.loss_scale, LRD215); null: not judged.
    loss_normalization: Literal["per_micro_batch_tokens", "window_tokens",
                                "global_window_tokens"] | None = None
    # Micro-batch cost for the token cap (LRD209) and the probe's shape: true = real
    # tokens packed in one row, false = rows x padded length; null = the strategy's
    # framework default (PACKED_STRATEGIES).
    packed: bool | None = None

    @property
    def is_packed(self) -> bool:
        return self.strategy in PACKED_STRATEGIES if self.packed is None else self.packed

    @model_validator(mode="after")
    def _check(self) -> _BatchingBase:
        # The packer's own params model says what it needs (one home per packer).
        try:
            PACKERS[self.strategy].params_from(self)
        except UnusableInput as exc:
            raise ValueError(str(exc).replace("batching.", "")) from None
        return self


def _packer_only_fields() -> dict[str, Any]:
    """Keys only some packer reads (declared in its own params model, not above): added
    to the ``batching`` section so a new packer's keys need no edit here."""
    out: dict[str, Any] = {}
    for p in PACKERS.values():
        for name, f in p.params.model_fields.items():
            ann = f.annotation
            if ann is not None and name not in _BatchingBase.model_fields and name not in out:
                out[name] = (ann | None, None)
    return out


if TYPE_CHECKING:
    BatchingCfg = _BatchingBase
else:
    BatchingCfg = create_model(
        "BatchingCfg", __base__=_BatchingBase, __doc__="The framework's micro-batching.",
        **_packer_only_fields())


class AccumulationCfg(_Section):
    rule: Literal["correct", "off_by_one"] = "correct"
    # True: the micro-step counter restarts and a short last window is flushed at the
    # end of every train step/epoch (ROLL, verl). False: one counter for the whole run
    # (a plain pre-training loop, OneVision-Encoder).
    flush_at_step_end: bool = True
    # With flush_at_step_end, what the loop does with a short last window: "step" it
    # (HF Trainer, accelerate at the end of the dataloader) or "drop" it: never stepped,
    # its gradients join the next window (``(i + 1) % GA == 0`` with ``i`` reset each
    # epoch). See lrdoctor.epochs for the three shapes' update counts.
    short_window: Literal["step", "drop"] = "step"


class SchedulerCfg(_Section):
    step_on: Literal["update", "micro_step", "rollout_step"] = "update"
    increment: float | Literal["samples", "micro_batches"] = 1.0
    multiplier: int = Field(default=1, ge=1)
    step_on_failed_update: bool = False
    failed_updates: list[int] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> SchedulerCfg:
        if not isinstance(self.increment, str) and self.increment <= 0:
            raise ValueError(f"increment must be > 0, samples or micro_batches, "
                             f"got {self.increment}")
        if any(i < 0 for i in self.failed_updates):
            raise ValueError("failed_updates holds update indices (>= 0)")
        return self


class DataCfg(_Section):
    """Where the sample lengths come from when the command line does not say."""

    batch_log: str | None = None
    synthetic: str | None = None
    seed: int = 0


def _version(text: str) -> tuple[int, ...]:
    nums = re.findall(r"\d+", text)
    return tuple(int(x) for x in nums[:3]) or (0,)


# framework name -> (release that changed the packer, flavor from it on, flavor before it)
_RELEASE_SWITCH = {
    "verl": ((0, 9, 1), "verl", "verl_ceildiv"),
    "skyrl": ((0, 2, 0), "skyrl", "skyrl_rank_first"),
}
_FRAMEWORK_FLAVOR = {"openrlhf": "openrlhf", "roll": "roll", "nemo_rl": "nemo_rl",
                     "nemo-rl": "nemo_rl"}


def flavor_for(framework: str) -> str | None:
    """``verl==0.9.1`` -> the packer flavor of that release (None: no release-specific packer).

    A bare name means its newest release; ``skyrl-train`` counts as skyrl.
    """
    name, _, ver = framework.strip().partition("==")
    name = name.strip().lower().replace("skyrl-train", "skyrl")
    if name in _RELEASE_SWITCH:
        since, new, old = _RELEASE_SWITCH[name]
        return new if not ver.strip() or _version(ver) >= since else old
    return _FRAMEWORK_FLAVOR.get(name)


class RunConfig(_Section):
    # The framework and release the run uses, e.g. "verl==0.9.1" or "skyrl==0.1.0":
    # picks the release's packer when batching.flavor is not set.
    framework: str | None = None
    schedule: ScheduleCfg = Field(default_factory=ScheduleCfg)
    budget: BudgetCfg = Field(default_factory=BudgetCfg)
    train: TrainCfg
    dp: DpCfg = Field(default_factory=DpCfg)
    batching: BatchingCfg = Field(default_factory=BatchingCfg)
    accumulation: AccumulationCfg = Field(default_factory=AccumulationCfg)
    scheduler: SchedulerCfg = Field(default_factory=SchedulerCfg)
    data: DataCfg = Field(default_factory=DataCfg)
    # Where it came from: "run-config" or "roll-yaml" (set by load_config).
    _format: str = PrivateAttr(default="run-config")
    # The config file's directory: paths inside the config are relative to it.
    _base_dir: Path | None = PrivateAttr(default=None)
    # A framework's own config: the keys the translation read, and the keys it saw that
    # would change step accounting but are not modelled (LRD213).
    _keys_used: dict[str, Any] | None = PrivateAttr(default=None)
    _unmodelled: list[dict[str, Any]] = PrivateAttr(default_factory=list)
    # Where a translated config came from: the launch script, its entry point, the base
    # config tree, what it left unresolved (shown in the report's notes).
    _source: dict[str, Any] = PrivateAttr(default_factory=dict)
    # Where the replay's sample lengths came from (lengths_origin), set by the
    # replay that read them: the replay rules' severity follows it.
    _lengths: dict[str, Any] | None = PrivateAttr(default=None)

    def lengths_origin(self, batch_log: str | None = None, synthetic: str | None = None,
                       seed: int | None = None) -> dict[str, Any]:
        """Where the replay's sample lengths come from, as a record: ``kind``
        ("batch_log": a file holds them; "synthetic": lrdoctor drew them, no file holds
        them; "counts": static batching reads the sample counts alone), ``source`` (the
        file or the spec), ``given_by`` (the flag or config key that chose it) and, for
        synthetic lengths, the ``seed``.

        Why a record: the replay rules' severity follows it
        (:func:`lrdoctor.rules.replay_context.provenance`), and the JSON evidence carries it.
        Why here: a function of the config and the flags alone, which the replay rules ask
        of the config they are handed without importing ``replay/``. The same precedence as
        :func:`lrdoctor.replay.samples.load_samples`: the command line, then ``data``."""
        seed = self.data.seed if seed is None else seed
        if batch_log:
            return {"kind": "batch_log", "source": batch_log, "given_by": "--batch-log"}
        if synthetic:
            return {"kind": "synthetic", "source": synthetic, "given_by": "--synthetic",
                    "seed": seed}
        if self.data.batch_log:
            return {"kind": "batch_log", "source": self.data.batch_log,
                    "given_by": "data.batch_log"}
        if self.data.synthetic:
            by = ("drawn up to the config's own maximum lengths: no batch log given"
                  if self._keys_used is not None else "data.synthetic")
            return {"kind": "synthetic", "source": self.data.synthetic, "given_by": by,
                    "seed": seed}
        return {"kind": "counts", "source": "sample counts only",
                "given_by": "static batching: lengths do not change the accounting"}

    def resolve_path(self, p: str) -> str:
        """A path written in the config, relative to the config file (not the cwd)."""
        path = Path(p).expanduser()
        if not path.is_absolute() and self._base_dir is not None:
            path = self._base_dir / path
        return str(path)

    @model_validator(mode="after")
    def _check(self) -> RunConfig:
        _check_sizes(self)
        if self.framework and self.batching.flavor is None:
            name = self.framework.partition("==")[0].strip().lower()
            if name not in (*_RELEASE_SWITCH, *_FRAMEWORK_FLAVOR, "skyrl-train", "fast-llm",
                            "fast_llm", "slime", "areal"):
                raise ValueError(f"framework {self.framework!r}: known: verl, skyrl, openrlhf, "
                                 "roll, nemo_rl, fast-llm, slime, areal (as name or "
                                 "name==version)")
            flavor = flavor_for(self.framework)
            if flavor is not None:
                self.batching.flavor = flavor
        if self.budget.formula == "roll" and self.train.samples_per_step is None:
            raise ValueError("budget.formula roll needs train.samples_per_step")
        if self.train.drop_last and self.batching.strategy != "static":
            raise ValueError("train.drop_last goes with batching.strategy static (a "
                             "DataLoader's fixed batches)")
        for ch in self.dp.changes:
            if ch.at_step >= self.train.steps:
                raise ValueError(f"dp.changes at_step {ch.at_step} is past train.steps "
                                 f"{self.train.steps}")
        return self


def _check_sizes(cfg: RunConfig) -> None:
    """What a replay materialises (a row per sample, per micro-batch and per step) must fit
    in memory and time: bounded by ``replay_steps`` / ``replay_samples`` (lrdoctor.read.bytes.limits)."""
    from lrdoctor.read.bytes import limits

    t, b = cfg.train, cfg.batching
    if t.steps > limits.get("replay_steps"):
        raise ValueError(f"train.steps {t.steps:,} is more than one replay simulates "
                         f"(limit {limits.LIMITS['replay_steps'].env}={limits.get('replay_steps')})")
    per_step = max(t.samples_per_step or 1, t.gradient_accumulation * t.micro_batch_size,
                   b.num_micro_batches or 1, b.docs_per_step or 1, t.mini_batch_size or 1)
    dp = max([cfg.dp.size, *(c.size for c in cfg.dp.changes)])
    # The planners hold a list per data-parallel rank per step: dp is a size too.
    if dp > limits.get("replay_ranks"):
        raise ValueError(f"dp.size {dp:,} is more data-parallel ranks than one replay "
                         f"simulates (limit {limits.LIMITS['replay_ranks'].env}="
                         f"{limits.get('replay_ranks')})")
    if b.strategy == "static":
        # A static loop materialises a row per micro-batch, not per sample: without lengths
        # its steps share one plan (planning.StepRuns); drawn synthetic lengths are counted
        # where they are drawn (samples.load_samples), a batch log is its own rows.
        dp_min = min([cfg.dp.size, *(c.size for c in cfg.dp.changes)])
        mbs = math.ceil((t.samples_per_step or per_step) / dp_min / t.micro_batch_size)
        rows = t.steps * mbs * t.epochs_per_step
        _rows_limit(rows, "train.steps x micro-batches per step")
        _check_memory(rows * 160, t.steps, mbs, dp)  # ~20 columns of 8 bytes per row
        return
    rows = t.steps * per_step * t.epochs_per_step
    _rows_limit(rows, "train.steps x samples (or micro-batches) per step")
    # A rank's plan of one mini-batch (its rows, its packer run) costs about ten sample rows.
    minis = max(1, per_step // (t.mini_batch_size or per_step))
    rank_rows = t.steps * t.epochs_per_step * dp * minis
    if rank_rows * 10 > limits.get("replay_samples"):
        raise ValueError(f"train.steps x mini-batches x dp ranks is {rank_rows:,} per-rank "
                         f"plans, more than one replay materialises (limit "
                         f"{limits.LIMITS['replay_samples'].env}={limits.get('replay_samples')}"
                         ", one plan counting as ten rows)")
    # ~100 bytes per sample row (lengths, ids, plan entries), ~200 per rank plan
    _check_memory(rows * 100 + rank_rows * 200, t.steps, per_step, dp)


def _rows_limit(rows: int, what: str) -> None:
    """``rows`` sample or micro-batch rows against ``replay_samples``."""
    from lrdoctor.read.bytes import limits

    if rows > limits.get("replay_samples"):
        raise ValueError(f"{what} is {rows:,} rows, more than one replay materialises "
                         f"(limit {limits.LIMITS['replay_samples'].env}="
                         f"{limits.get('replay_samples')})")


def _check_memory(need: int, steps: int, per_step: int, dp: int) -> None:
    from lrdoctor.read.bytes import limits

    have = limits.machine_memory()
    if have is not None and need > have // 2:
        raise ValueError(f"the replay would hold about {need / 2**30:,.1f} GiB (train.steps "
                         f"{steps:,}, {per_step:,} rows per step, dp {dp:,}), more than half "
                         f"of this machine's {have / 2**30:,.1f} GiB")


def _clean_loc(err: Mapping[str, Any]) -> list[str]:
    # pydantic appends the union member it tried ("float", "literal['auto']"): drop it.
    return [str(p) for p in err.get("loc", ()) if not (
        str(p).startswith(("literal[", "function-")) or str(p) in ("float", "int", "str", "bool"))]


def _allowed_phrase(msg: str) -> str:
    msg = msg.removeprefix("Input should be ")
    if msg.startswith("a valid number"):
        return "a number"
    if msg.startswith("a valid integer"):
        return "an integer"
    return msg


def _describe(errs: Sequence[Mapping[str, Any]], model: type[BaseModel] = RunConfig) -> str:
    """One line for the first pydantic error: the key, the bad value, what is allowed."""
    err = errs[0]
    parts = _clean_loc(err)
    loc = ".".join(parts)
    kind = err.get("type", "")
    value = err.get("input")
    if kind == "extra_forbidden":
        allowed = _allowed_keys(parts[:-1], model)
        return (f"unknown key '{loc}'" + (f" (allowed: {', '.join(allowed)})" if allowed else ""))
    if kind == "missing":
        return f"missing key '{loc}'"
    if isinstance(value, dict) or not loc:
        where = f"{loc}: " if loc else ""
        return where + err.get("msg", "invalid").removeprefix("Value error, ")
    # A union reports one error per member at the same key: merge them.
    same = [e for e in errs if _clean_loc(e) == parts]
    if len(same) > 1:
        alternatives = " or ".join(_allowed_phrase(e.get("msg", "")) for e in same)
        return f"key '{loc}': got {value!r}; allowed: {alternatives}"
    msg = err.get("msg", "invalid").removeprefix("Value error, ")
    return f"key '{loc}': got {value!r}; {msg[0].lower() + msg[1:]}"


def _allowed_keys(parts: list[str], model: type[BaseModel]) -> list[str]:
    m: Any = model
    for p in parts:
        field = m.model_fields.get(p) if hasattr(m, "model_fields") else None
        if field is None:
            return []
        ann = field.annotation
        m = ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
        if m is None:
            return []
    return list(m.model_fields)


def config_from_dict(data: Any, source: str | None = None) -> RunConfig:
    """Validate a mapping; bad input becomes one :class:`UnusableInput` line."""
    if not isinstance(data, dict):
        raise UnusableInput("the run config must be a YAML mapping", source)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as exc:
        problems = describe_all(exc.errors())
        # Every problem at once (a hidden second one was the typo), in the one line and
        # structured for --json.
        raise UnusableInput("; ".join(problems), source,
                            detail={"errors": problems} if len(problems) > 1 else None) \
            from None


def describe_all(errs: Sequence[Mapping[str, Any]], model: type[BaseModel] = RunConfig) -> list[str]:
    """One description per key with a problem (a union's per-member errors merged),
    unknown keys first: a typo often explains the rest."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for e in errs:
        groups.setdefault(tuple(_clean_loc(e)), []).append(e)
    ordered = sorted(groups.values(), key=lambda g: g[0].get("type") != "extra_forbidden")
    return [_describe(g, model) for g in ordered]


def load_config(path: str | Path, sets: tuple[str, ...] | list[str] = (),
                config_root: str | Path | None = None) -> RunConfig:
    """Read an lrdoctor run config, a framework's own config or a launch script
    (:mod:`lrdoctor.replay.sources`). ``sets``: ``--set KEY=VALUE``; ``config_root``:
    the folder ``defaults:`` may read from (default: the config's own folder)."""
    from lrdoctor.read.bytes import safetext

    path = Path(path)
    try:
        text = safetext.read_text(path, "config_bytes", "a YAML run config")
    except NotText:
        raise UnusableInput("not a YAML text file (binary content)", str(path)) from None
    from lrdoctor.replay import sources

    return sources.load(path, text, tuple(sets), Path(config_root) if config_root else None)


def parse_value(text: str) -> Any:
    """A sweep value as YAML would read it (``4096`` -> int, ``off_by_one`` -> str)."""
    import yaml

    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _unknown_key(key: str, node: Any, prefix: list[str]) -> str:
    """``unknown key 'x.y'`` and the keys that can be set there: a section's keys
    (``batching.max_tokens_per_microbatch, ...``), or the sections at the top."""
    if not isinstance(node, dict):
        return f"unknown key '{key}' ({'.'.join(prefix)} has no keys)"
    dotted = ".".join(prefix)
    names = [f"{dotted}.{k}" if dotted else k for k in node]
    if not prefix:
        return (f"unknown key '{key}' (sweepable sections: {', '.join(names)}; "
                "e.g. batching.max_tokens_per_microbatch)")
    return f"unknown key '{key}' (sweepable: {', '.join(names)})"


def with_key(cfg: RunConfig, key: str, value: Any, source: str | None = None) -> RunConfig:
    """A copy of ``cfg`` with the dotted ``key`` set to ``value`` (for ``--sweep``)."""
    data = cfg.model_dump()
    node: Any = data
    parts = key.split(".")
    prefix: list[str] = []
    for p in parts[:-1]:
        if not isinstance(node, dict) or p not in node:
            raise UnusableInput(_unknown_key(key, node, prefix), source or "--sweep")
        node = node[p]
        prefix.append(p)
    if not isinstance(node, dict) or parts[-1] not in node:
        raise UnusableInput(_unknown_key(key, node, prefix), source or "--sweep")
    node[parts[-1]] = value
    out = config_from_dict(data, source or "--sweep")
    out._format, out._base_dir = cfg._format, cfg._base_dir
    out._keys_used, out._unmodelled = cfg._keys_used, cfg._unmodelled
    out._source, out._lengths = cfg._source, cfg._lengths
    return out
