"""``lrdoctor check``'s engine: run every target of a :class:`CheckConfig`, apply
thresholds and ignores, and return one report per checked thing.

Rules the gate adds on top of ``inspect``/``replay``:

- LRD302 when actual/nominal scheduler progress exceeds ``max-progress-ratio``;
- LRD303 when a named input is missing or unreadable (exit code 2 after output);
- LRD301 for every ignore that matched no finding (a stale suppression).

Each report carries its effective threshold in ``extra["fail_on"]`` and the
findings it suppressed (with their reasons) in ``extra["ignored"]``.
"""

from __future__ import annotations

import glob
import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lrdoctor.ci.config import CheckConfig, Ignore, Target
from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.findings import Finding, exit_code
from lrdoctor.core.report import Report
from lrdoctor.rules import lrd301_unused_ignore as lrd301
from lrdoctor.rules import lrd302_progress_ratio_exceeded as lrd302

InspectFn = Callable[..., list[Report]]
# A replay function returns its report, or the whole ReplayResult (``.report`` and the
# replay itself, which the report page draws its figures from).
ReplayFn = Callable[..., Any]


def _default_inspect(path: str, format: str | None = None, all: bool = False) -> list[Report]:
    from lrdoctor.inspect_api import inspect_path

    return inspect_path(path, format=format, all=all)


def _default_replay(config: str, batch_log: str | None = None, synthetic: str | None = None,
                    **options: Any) -> Any:
    from lrdoctor import replay

    opts = replay.ReplayOptions.from_mapping(options, config)
    return replay.replay_full(config, batch_log, synthetic, opts)


def _finite(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    return float(x) if math.isfinite(x) else None


def progress_ratio(report: Report) -> float | None:
    """actual/nominal scheduler progress a report states, wherever its command put it."""
    st = report.state if isinstance(report.state, dict) else {}
    derived = st.get("derived") or {}
    r = _finite(derived.get("progress_ratio"))
    if r is not None:
        return r
    for holder in (report.extra.get("summary") or {}, report.extra, st):
        if not isinstance(holder, dict):
            continue
        for key in ("progress_ratio", "ratio"):
            r = _finite(holder.get(key))
            if r is not None:
                return r
        for a, n in (("actual_updates", "nominal_updates"), ("actual", "nominal"),
                     ("actual_progress", "nominal_progress")):
            av, nv = _finite(holder.get(a)), _finite(holder.get(n))
            if av is not None and nv is not None and nv > 0:
                return av / nv
    sp, nom = st.get("scheduler_progress"), st.get("nominal_progress")
    if isinstance(sp, dict) and isinstance(nom, dict):
        av, nv = _finite(sp.get("value")), _finite(nom.get("value"))
        if av is not None and nv is not None and nv > 0:
            return av / nv
    return None


def _unusable(cfg: CheckConfig, target: Target, message: str, label: str,
              detail: dict | None = None, fix: str | None = None) -> Report:
    """An LRD303 report; ``detail`` (what was scanned, :class:`UnusableInput`'s record)
    joins the evidence so that --json carries it structured, not only in the line."""
    from lrdoctor.rules.lrd303_check_input_unusable import unusable_report

    loc = f"{cfg.source}:{target.line}" if cfg.source else None
    return unusable_report(target.kind, label, message, detail, format=target.format,
                           location=loc, fix=fix, config_key=target.key)


def _expand(cfg: CheckConfig, pattern: str) -> list[str]:
    from lrdoctor.read.bytes import storage

    if storage.is_url(pattern):  # s3://bucket/runs/*/checkpoints: one target per match
        return storage.glob(pattern) if storage.has_magic(pattern) else [pattern]
    full = cfg.resolve(pattern)
    if glob.has_magic(pattern):
        # 'run-*/' matches directories only; report them without the slash glob keeps.
        return sorted(m.rstrip("/" + os.sep) or m for m in glob.glob(full))
    return [full]


# A crash inside one target (a value no reader check caught) is that target's unusable
# finding; it never aborts the run or changes another target's result.
_TARGET_ERRORS = (TypeError, ValueError, ArithmeticError, KeyError, IndexError, AttributeError,
                  RecursionError, MemoryError, OSError)


def _unexpected(path: str, exc: BaseException) -> str:
    from lrdoctor.core.errors import reason

    detail = reason(exc)[:160]  # an OSError's own text would name the path again
    return f"{path}: unexpected {type(exc).__name__} ({detail})"


# An unusable target's result: (its one line, its structured record, the advice for its
# cause); plain data, so that it crosses a process boundary as it is.
Failed = tuple[str, dict | None, str]


def _failed(exc: UnusableInput) -> Failed:
    """The refusal as :data:`Failed`, its advice taken from the exception's type while
    the type is still known (a worker returns data, not the exception)."""
    from lrdoctor.rules.lrd303_check_input_unusable import advice

    return str(exc), exc.detail, advice(exc)


def _crashed(path: str, exc: BaseException) -> Failed:
    from lrdoctor.rules.lrd303_check_input_unusable import CRASH_FIX

    return _unexpected(path, exc), None, CRASH_FIX


def _inspect_task(args: tuple[str, str | None, bool]) -> list[Report] | Failed:
    """One fleet member, in a worker: its reports, or the one-line reason it is unusable."""
    path, format, all_ = args
    try:
        return _default_inspect(path, format=format, all=all_)
    except UnusableInput as exc:
        return _failed(exc)
    except _TARGET_ERRORS as exc:  # this run only: the fleet's other results stand
        return _crashed(path, exc)


def _run_target(cfg: CheckConfig, t: Target, inspect_fn: InspectFn,
                replay_fn: ReplayFn, jobs: int = 1, executor: str = "process",
                progress: Callable[[int, int], None] | None = None
                ) -> tuple[list[Report], Any]:
    """The target's reports, and the ReplayResult behind a replayed one (else None).

    An inspect target's matches (a fleet) run on ``jobs`` workers of ``executor``.
    """
    if t.kind == "inspect":
        try:
            paths = _expand(cfg, t.path)
        except UnusableInput as exc:
            return [_unusable(cfg, t, str(exc), t.path, *_failed(exc)[1:])], None
        if not paths:
            from lrdoctor.rules.lrd303_check_input_unusable import NOT_FOUND_FIX

            return [_unusable(cfg, t, f"{t.path!r} matches nothing (from {cfg.label})",
                              t.path, fix=NOT_FOUND_FIX)], None
        reports: list[Report] = []
        if inspect_fn is _default_inspect and (jobs > 1 or executor != "process"):
            from lrdoctor.parallel import run_map

            results = run_map(_inspect_task, [(p, t.format, t.all) for p in paths], jobs=jobs,
                              executor=executor, progress=progress,
                              preload=["lrdoctor.inspect_api", "lrdoctor.read.layouts.megatron",
                                       "lrdoctor.read.layouts.hf"])
        else:
            results = []
            for n, p in enumerate(paths):
                try:
                    results.append(inspect_fn(p, format=t.format, all=t.all))
                except UnusableInput as exc:
                    results.append(_failed(exc))
                except _TARGET_ERRORS as exc:  # this target only: the others' results stand
                    results.append(_crashed(p, exc))
                if progress:
                    progress(n + 1, len(paths))
        for p, res in zip(paths, results, strict=True):
            if isinstance(res, tuple):
                reports.append(_unusable(cfg, t, res[0], p, res[1], res[2]))
            else:
                reports.extend(res)
        return reports, None
    config = cfg.resolve(t.path)
    kwargs: dict[str, Any] = dict(t.options)
    kwargs["batch_log"] = cfg.resolve(t.batch_log) if t.batch_log else None
    kwargs["synthetic"] = t.synthetic
    try:
        got = replay_fn(config, **kwargs)
    except UnusableInput as exc:
        return [_unusable(cfg, t, str(exc), config, *_failed(exc)[1:])], None
    except _TARGET_ERRORS as exc:
        line, _, fix = _crashed(config, exc)
        return [_unusable(cfg, t, line, config, fix=fix)], None
    rep = got if isinstance(got, Report) else got.report
    if not rep.target:
        rep.target = config
    return [rep], None if got is rep else got


def _ratio_finding(rep: Report, limit: float, t: Target | None) -> Finding | None:
    ratio = progress_ratio(rep)
    if ratio is None or ratio <= limit:
        return None
    return lrd302.RULE.finding(
        f"scheduler progress is {ratio:.3g}x the nominal progress, above the tolerated "
        f"max-progress-ratio {limit:g}",
        lrd302.ProgressRatioExceeded(progress_ratio=ratio, max_progress_ratio=limit,
                                     config_key=t.key if t else None),
        # A replay is annotated at the run config's scheduler section; a checkpoint at its file.
        location=f"{rep.target}:scheduler" if rep.command == "replay" else None)


def _apply_ignores(rep: Report, ignores: list[Ignore]) -> None:
    kept, dropped = [], []
    for f in rep.findings:
        hit = next((i for i in ignores if i.matches(f.code, rep.target)), None)
        if hit is None:
            kept.append(f)
        else:
            hit.used += 1
            dropped.append({"code": f.code, "message": f.message, "reason": hit.reason,
                            "config_key": hit.key})
    rep.findings = kept
    if dropped:
        rep.extra.setdefault("ignored", []).extend(dropped)


def _unused(cfg: CheckConfig, i: Ignore) -> Finding:
    where = f" for {i.path!r}" if i.path else ""
    return lrd301.RULE.finding(
        f"{i.key}: ignore of {i.code}{where} matched no finding (reason given: {i.reason!r})",
        lrd301.UnusedIgnore(code=i.code, config_key=i.key, reason=i.reason),
        location=f"{cfg.source}:{i.line}" if cfg.source else None)


def run_check(cfg: CheckConfig, *, fail_on: str | None = None,
              inspect_fn: InspectFn | None = None,
              replay_fn: ReplayFn | None = None,
              replays: dict[int, Any] | None = None, jobs: int = 1,
              executor: str = "process",
              progress: Callable[[int, int], None] | None = None) -> list[Report]:
    """Every target of ``cfg``, gated. ``fail_on`` (the command-line flag) wins over
    the config's thresholds. ``replays``, when given, is filled with index in the
    returned list -> the ReplayResult of that replayed target (for the report page).

    A target that is a glob (``s3://bucket/runs/*/checkpoints``) is a fleet: one
    report per match, inspected on ``jobs`` workers of ``executor`` ("process":
    a local process pool; "ray": Ray). The reports are the same, in the same
    order, whatever the executor.
    """
    inspect_fn = inspect_fn or _default_inspect
    replay_fn = replay_fn or _default_replay
    out: list[Report] = []
    for t in cfg.targets:
        started = time.perf_counter()
        reports, replayed = _run_target(cfg, t, inspect_fn, replay_fn, jobs, executor, progress)
        if replayed is not None and replays is not None:
            replays[len(out)] = replayed
        seconds = (time.perf_counter() - started) / max(1, len(reports))
        for rep in reports:
            rep.seconds = seconds
        limit = t.max_progress_ratio or cfg.max_progress_ratio
        threshold = fail_on or t.fail_on or cfg.fail_on
        for rep in reports:
            if limit is not None and not any(f.code == "LRD303" for f in rep.findings):
                extra = _ratio_finding(rep, limit, t)
                if extra is not None:
                    rep.findings.append(extra)
            _apply_ignores(rep, t.ignores + cfg.ignores)
            rep.extra["fail_on"] = threshold
            rep.extra["check_key"] = t.key
            if cfg.source is not None:  # where CI annotations land for a binary checkpoint
                rep.extra["config_location"] = f"{cfg.source}:{t.line}"
        # Stale ignores belong to the target that declares them.
        for i in t.ignores:
            if not i.used and reports:
                reports[0].findings.append(_unused(cfg, i))
        out.extend(reports)
    stale = [_unused(cfg, i) for i in cfg.ignores if not i.used]
    if stale:
        out.append(Report(command="check", target=cfg.label, format=None, findings=stale,
                          extra={"fail_on": fail_on or cfg.fail_on}))
    return out


def check_exit_code(reports: list[Report]) -> int:
    """2 when an input could not be used, else 1 when a report's findings reach its own
    threshold, else 0."""
    if any(f.code == "LRD303" for r in reports for f in r.findings):
        return 2
    return max((exit_code(r.findings, r.extra.get("fail_on", "warning")) for r in reports),
               default=0)


def _from_cwd(cfg: CheckConfig, p: str) -> str:
    """A command-line path (relative to the working directory) as the config's targets
    hold them (relative to the config's root), so that reports show it as typed and a
    trailing slash (directories only, in a glob) survives."""
    if os.path.isabs(p):
        return p
    slash = os.sep if p.endswith(("/", os.sep)) else ""
    try:
        return os.path.relpath(os.path.abspath(p), cfg.root) + slash
    except ValueError:  # pragma: no cover - another drive on Windows
        return os.path.abspath(p) + slash


def batch_logs_for(configs: list[str], values: list[str]) -> dict[str, str]:
    """Which ``--batch-log`` belongs to which replayed config: ``CONFIG=LOG`` names its
    config; a bare ``LOG`` is only taken when one config is replayed. A bare log with
    several configs is refused (one line): applied to all of them, ROLL's log silently
    judged OneVision's config. A config without a log uses its own ``data``.

    Returns config (as given) -> log (as given)."""
    out: dict[str, str] = {}
    bare: list[str] = []

    def same(a: str, b: str) -> bool:
        return Path(a).resolve() == Path(b).resolve()

    for v in values:
        name, eq, log = v.partition("=")
        if eq and not Path(v).exists() and name and log:
            hit = [c for c in configs if same(c, name)]
            if not hit:
                raise UnusableInput(
                    f"--batch-log {v}: {name} is not one of the replayed configs ("
                    f"{', '.join(configs) or 'none'})")
            if hit[0] in out:
                raise UnusableInput(f"--batch-log {v}: {name} already has a batch log "
                                    f"({out[hit[0]]})")
            out[hit[0]] = log
        else:
            bare.append(v)
    if bare and not configs:
        raise UnusableInput(f"--batch-log {bare[0]}: no run config is replayed "
                            "(give a .yaml target or --replay CONFIG)")
    if bare:
        if len(bare) > 1 or len(configs) != 1 or out:
            raise UnusableInput(
                f"--batch-log {bare[0]}: ambiguous with {len(configs)} replayed configs "
                f"({', '.join(configs)}): name the config it belongs to, "
                f"--batch-log CONFIG={bare[0]} (a config without one uses its own data)")
        out[configs[0]] = bare[0]
    return out


def config_from_flags(cfg: CheckConfig, inspect: list[str], replay: list[str],
                      batch_log: str | list[str] | None, synthetic: str | None,
                      max_progress_ratio: float | None) -> CheckConfig:
    """Command-line targets replace the config's; thresholds and ignores stay.
    ``batch_log``: ``--batch-log`` values, matched to configs by :func:`batch_logs_for`."""
    logs = batch_logs_for(replay, [batch_log] if isinstance(batch_log, str)
                          else list(batch_log or []))
    if inspect or replay:
        # Paths on the command line are relative to the working directory.
        cfg.targets = []
        from lrdoctor.read.bytes.storage import is_url

        for n, p in enumerate(inspect):
            cfg.targets.append(Target(kind="inspect", key=f"--inspect[{n}]", line=1,
                                      path=p if is_url(p) else _from_cwd(cfg, p)))
        for n, p in enumerate(replay):
            log = logs.get(p)
            cfg.targets.append(Target(kind="replay", key=f"--replay[{n}]", line=1,
                                      path=_from_cwd(cfg, p),
                                      batch_log=_from_cwd(cfg, log) if log else None,
                                      synthetic=None if log else synthetic))
    if max_progress_ratio is not None:
        cfg.max_progress_ratio = max_progress_ratio
    return cfg


__all__ = ["run_check", "check_exit_code", "progress_ratio", "config_from_flags"]
