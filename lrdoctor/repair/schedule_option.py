"""The schedule a user gives ``fix``: ``--schedule`` and the schedule of ``--from-replay``.

A torch ``LambdaLR`` saves no lambda, so a checkpoint alone cannot say which LR a
repaired scheduler must start from. The user knows the schedule: ``--schedule`` takes
it in the vocabulary of the replay config's ``schedule:`` section (family, kind, max_lr,
min_lr, init_lr, warmup, horizon, params), inline (``"{family: hf, kind: cosine,
max_lr: 1e-3, warmup: 100, horizon: 3000}"``) or as a YAML file holding that section
(or a whole run config with one). ``--from-replay`` reports carry the config they
replayed, so their schedule is used the same way when the checkpoint has none.

The schedule is a function of the scheduler's own counter (``last_epoch``,
``num_steps``), in the checkpoint's scheduler unit: the progress the repair writes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.state import ScheduleSpec, Unit

OPTION = "--schedule"
# What the one-line refusals and the "LR left" warning show as an example.
EXAMPLE = "'{family: hf, kind: cosine, max_lr: 1e-3, warmup: 100, horizon: 3000}'"


# The keys ``--schedule`` takes, with the placeholder shown where the checkpoint holds no value.
_PLACEHOLDERS = {"family": "<hf|torch|megatron|deepspeed>", "kind": "<KIND>",
                 "max_lr": "<MAX_LR>", "warmup": "<WARMUP>", "horizon": "<HORIZON>"}
# Where a schedule that is code (a LambdaLR) still saves its peak: the base LR it multiplies.
_BASE_LR_FIELDS = ("initial_lr", "base_lrs")


def example_for(state: Any) -> str:
    """``--schedule`` for this checkpoint: the values it holds (a schedule's max_lr, warmup
    and horizon as read, else the base LR a LambdaLR multiplies) and placeholders for the
    rest, with where each value came from. Why: a fixed example (max_lr 1e-3, warmup 100,
    horizon 3000) read as advice, and matched one real run by chance."""
    spec = getattr(state, "schedule", None)
    got: dict[str, str] = {}
    said: list[str] = []
    if spec is not None:
        for name in ("warmup", "horizon"):
            ref = spec.refs.get(name)
            v = getattr(spec, name)
            if ref is not None and v is not None:
                got[name] = f"{v:g}"
                said.append(f"{name} from {ref}")
    from lrdoctor.core.evidence import Role

    base = next((e for e in getattr(state, "evidence", []) if e.role is Role.LR
                 and e.name in _BASE_LR_FIELDS and e.value > 0), None)
    if base is not None:
        got["max_lr"] = f"{base.value:g}"
        said.append(f"max_lr from {base.where} (the LR your lambda multiplies)")
    text = ", ".join(f"{k}: {got.get(k, ph)}" for k, ph in _PLACEHOLDERS.items())
    return "'{" + text + "}'" + (f" ({'; '.join(said)}; the rest from your training code)"
                                 if said else " (each value from your training code)")


def parse(text: str, unit: Unit) -> ScheduleSpec:
    """``--schedule`` as a :class:`ScheduleSpec` in ``unit``; one-line UnusableInput if bad."""
    from lrdoctor.read.bytes import safetext

    where = OPTION
    path = Path(text)
    try:
        is_file = len(text) < 4096 and path.is_file()
    except OSError:
        is_file = False
    if is_file:
        where = str(path)
        src = safetext.read_text(path, "config_bytes", "a YAML schedule")
    else:
        src = text.strip()
        if not src.startswith("{"):
            src = "{" + src + "}"
    data = safetext.yaml_loads(src, where, "--schedule")
    if isinstance(data, dict) and isinstance(data.get("schedule"), dict):
        data = data["schedule"]  # a whole run config: its schedule section
    if not isinstance(data, dict):
        raise UnusableInput("--schedule must be a mapping like " + EXAMPLE, where)
    return from_section(data, unit, where, source=f"{OPTION} {text if not is_file else where}")


def from_section(data: dict[str, Any], unit: Unit, where: str, source: str) -> ScheduleSpec:
    """A replay-config ``schedule:`` section as a spec, validated like the config is."""
    from pydantic import ValidationError

    from lrdoctor.replay.config import ScheduleCfg

    try:
        cfg = ScheduleCfg(**data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err.get("loc", ())) or "schedule"
        raise UnusableInput(f"schedule {loc}: {err.get('msg')}", where) from None
    except TypeError as exc:
        raise UnusableInput(f"schedule: {exc}", where) from None
    horizon = None if cfg.horizon == "auto" else float(cfg.horizon)
    spec = ScheduleSpec(family=cfg.family, kind=cfg.kind, max_lr=cfg.max_lr, unit=unit,
                        min_lr=cfg.min_lr, init_lr=cfg.init_lr, warmup=cfg.warmup,
                        horizon=horizon, params=dict(cfg.params), source=source)
    from lrdoctor.schedules import lr_or_none, problems

    bad = problems(spec)
    if bad:
        raise UnusableInput(f"schedule: {bad[0]}", where)
    if lr_or_none(spec, 0) is None or lr_or_none(spec, max(1.0, spec.warmup + 1)) is None:
        raise UnusableInput(f"schedule: {spec.family} {spec.kind} cannot be evaluated with "
                            "these settings (a horizon missing?)", where)
    return spec


def from_replay(doc: Any, unit: Unit, where: str) -> ScheduleSpec | None:
    """The schedule a ``replay --json`` report replayed (its config's section, with the
    horizon the replay resolved), or None when the report holds none or counts another unit.

    A scheduler that advances by 1 per call (``scheduler.increment: 1``) is a function of
    its call count whatever the loop calls it on (micro-steps in a k x stepped loop): the
    ``last_epoch`` a repair writes counts the same calls."""
    if isinstance(doc, list) and doc:
        doc = doc[0]
    if not isinstance(doc, dict):
        return None
    state, summary = doc.get("state"), doc.get("summary")
    cfg = state.get("config") if isinstance(state, dict) else None
    section = cfg.get("schedule") if isinstance(cfg, dict) else None
    if not isinstance(section, dict):
        return None
    section = dict(section)
    if section.get("horizon") in (None, "auto") and isinstance(summary, dict) \
            and isinstance(summary.get("horizon"), (int, float)):
        section["horizon"] = float(summary["horizon"])
    sched = cfg.get("scheduler") if isinstance(cfg, dict) else None
    per_call = isinstance(sched, dict) and sched.get("increment") in (1, 1.0)
    if not per_call and isinstance(summary, dict) \
            and summary.get("scheduler_unit") not in (None, unit.value):
        return None  # counted in another unit (samples) than the checkpoint's counter
    return from_section(section, unit, where, source=f"--from-replay {where}")
