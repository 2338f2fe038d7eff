"""``lrdoctor fix``: read -> diagnose -> policy -> the layout's plan -> atomic write -> verify.

Which edits a checkpoint needs is the knowledge of the layout that read it: the engine
asks the layout registry for that layout's repair side
(:func:`lrdoctor.read.layouts.repairs`, typed :class:`~lrdoctor.read.layouts.Repairs`)
and hands it the framework-blind arithmetic (:data:`lrdoctor.repair.torchstate.TOOLS`).
A state stored in torch.distributed.checkpoint folders goes to the DCP writer
(:mod:`lrdoctor.repair.dcp`) whatever the layout, because the storage, not the trainer,
decides how an item can be rewritten. A layout with no repair side is refused in one
line; nothing is imported by a name built from a string.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lrdoctor import __version__
from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.facts import Storage
from lrdoctor.core.findings import Finding
from lrdoctor.core.repair import Builder, FormatPlan, Refusal, Target, tree_files
from lrdoctor.core.state import RunState
from lrdoctor.repair.policies import make_target
from lrdoctor.repair.writer import TMP_TAG, Change, Written, sha256, write_output

if TYPE_CHECKING:
    from lrdoctor.core.report import Report

__all__ = ["FixFailed", "FixPlan", "FixResult", "FormatPlan", "fix_report", "plan_fix",
           "read_state", "write_fix"]


class FixFailed(UnusableInput):
    """The written copy did not pass verification; nothing was left behind."""


@dataclass
class FixPlan:
    path: Path
    format: str
    state: RunState
    findings: list[Finding]
    target: Target | None
    root: Path | None = None
    files: list[str] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # One line each, shown as "warning:": what the fix could not set and how to set it.
    warnings: list[str] = field(default_factory=list)
    link: bool = False
    builders: dict[str, Builder] = field(default_factory=dict)

    @property
    def noop(self) -> bool:
        return self.target is None or not self.changes

    def to_dict(self) -> dict[str, Any]:
        # "repair", not "target": a document's target is the path it was given (one JSON
        # schema for every command, lrdoctor.core.report).
        return {"policy": self.target.policy if self.target else None,
                "repair": self.target.to_dict() if self.target else None,
                "changes": [c.to_dict() for c in self.changes],
                "notes": self.notes, "warnings": self.warnings, "noop": self.noop}


def read_state(path: Path, format: str | None = None) -> tuple[str, RunState, list[Finding]]:
    """The format name, normalized state and findings of ``path``."""
    from lrdoctor.diagnose import diagnose
    from lrdoctor.inspect_api import read_state as read_one
    from lrdoctor.read import layouts

    mod = layouts.detect(path, format)
    name = layouts.ALIASES.get(mod.NAME, mod.NAME)  # the registry's name (torch -> torchsave)
    if path.is_dir():  # a run: the resume shapes show only between its checkpoints
        from lrdoctor.diagnose_run import diagnose_run
        from lrdoctor.inspect_api import read_run

        states = read_run(path, name)
        state = states[-1]
        return name, state, list(diagnose(state)) + diagnose_run(states)
    state = read_one(path, name)
    from lrdoctor.diagnose_run import diagnose_run

    return name, state, list(diagnose(state)) + diagnose_run([state])


def resume_policy(state: RunState, findings: list[Finding], policy: str | None) -> str | None:
    """A one-line refusal where the run-level evidence does not allow a repair (a scheduler
    state that is not there, a schedule that changed between checkpoints). The resume
    shapes that do (LRD112/LRD113/LRD116) go back to the nominal count through
    :func:`lrdoctor.diagnose_policy.recommend`."""
    from pathlib import Path as _P

    here = [f for f in findings if f.location == state.path]
    for f in here:
        if f.code == "LRD115":
            other = f.evidence.get("checkpoint_with_scheduler")
            upd = (f.evidence.get("updates") or {}).get("value")
            raise Refusal(
                f"LRD115: {_P(state.path).name} saves no scheduler state, so there is none to "
                "repair: resume from "
                + (f"{_P(other).name} (which has one)" if other else "a checkpoint that has one")
                + (f" or rebuild the scheduler with last_epoch = {upd:g}" if upd is not None
                   else ""), state.path)
    if policy is None:
        for f in findings:
            if f.code == "LRD114":
                from lrdoctor.diagnose_run import fmt_any

                what = ", ".join(f"{c['what']} {fmt_any(c['from'])} -> {fmt_any(c['to'])}"
                                 for c in f.evidence.get("changes", []))
                raise Refusal(
                    f"LRD114: the schedule changed between {_P(f.evidence['from_checkpoint']).name}"
                    f" and {_P(f.evidence['to_checkpoint']).name} ({what}); lrdoctor cannot tell "
                    "which is meant: resume with the original settings, or give --policy to "
                    "repair the latest checkpoint as it stands", state.path)
    return policy


def plan_fix(path: str | Path, *, policy: str | None = None, k: float | None = None,
             progress: float | None = None, replay: str | Path | None = None,
             format: str | None = None, schedule: str | None = None) -> FixPlan:
    """Decide every field a fix changes, without writing anything.

    ``schedule``: the ``--schedule`` text, the schedule the LR is set from (a LambdaLR's
    lambda is code: the checkpoint cannot say it)."""
    path = Path(path)
    name, state, findings = read_state(path, format)
    if k is None and progress is None and replay is None:
        policy = resume_policy(state, findings, policy)
    target = make_target(state, findings, policy=policy, k=k, progress=progress,
                         replay=Path(replay) if replay else None, schedule=schedule)
    plan = FixPlan(path=path, format=name, state=state, findings=findings, target=target)
    if target is None:
        plan.notes.append("nothing to fix: no finding calls for a repair")
        return plan
    from lrdoctor.read import layouts
    from lrdoctor.repair import dcp
    from lrdoctor.repair.torchstate import TOOLS

    try:
        if state.facts.storage is Storage.DCP or dcp.folders(state):
            # torch_dist, torch_dcp, torchtitan, NeMo-RL, any DCP folder: by the storage
            fp = dcp.plan(path, state, target)
        else:
            repairs = layouts.repairs(name)
            if repairs is None:
                raise Refusal(f"`fix` cannot write the {name} format yet", str(path))
            fp = repairs.repair(path, state, target, TOOLS)
    except Refusal as exc:  # a layout names the file inside the checkpoint; say which input
        raise exc.inside(str(path)) from None
    plan.root = fp.root
    plan.files = fp.files if fp.files is not None else tree_files(fp.root)
    plan.link, plan.builders = fp.link, fp.builders
    plan.changes = [c for c in fp.changes if not _equal(c.before, c.after)]
    plan.notes += target.reasons + fp.notes
    left = lr_left_warning(state, target)
    if left:
        plan.warnings.append(left)
    useless = _changes_nothing_useful(state, target)
    if useless:
        plan.notes.append(useless)
    if not plan.changes:
        plan.notes.append("already repaired: every field already holds its target value")
    return plan


def lr_left_warning(state: RunState, target: Target) -> str | None:
    """The one warning line when no schedule is known (a LambdaLR, nothing fitted, no
    ``--schedule``) and the progress moved: the counters are written, the param-group
    LR is left as saved, and the line says which LR, what it should be and how to set it."""
    from lrdoctor.repair.schedule_option import example_for

    if target.lr is not None or target.policy == "sync-lr":
        return None
    if target.progress == target.progress_before and target.horizon is None:
        return None
    lrs = ", ".join(f"{x:.6g}" for x in state.optimizer_lrs) or "as saved"
    unit = target.unit.value if target.unit else "steps"
    return (f"param-group lr left at {lrs}: it should be the schedule's LR at "
            f"{target.progress:g} {unit} (initial_lr x your lr_lambda({target.progress:g})), "
            "which the checkpoint cannot say; give --schedule " + example_for(state)
            + ", or --from-replay REPORT.json, to set it")


def _changes_nothing_useful(state: RunState, target: Target) -> str | None:
    """Say so when the repair cannot change what a resumed run does: the LR is the same
    before and after and training already reached its planned end (the final checkpoint
    of a finished run)."""
    if target.lr_before is None or target.lr is None \
            or not math.isclose(target.lr_before, target.lr, rel_tol=1e-9, abs_tol=1e-15):
        return None
    done, end = state.trainer_progress, state.planned_end
    if done is None or end is None or done.unit != end.unit or done.value < end.value:
        return None
    return (f"this changes nothing useful: the LR is {target.lr:.6g} before and after, and "
            f"training already reached its planned end ({done.name} {done.value:g} of "
            f"{end.value:g}); only a run continued past its plan would see the new counters")


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return float(a) == float(b)
    return a == b


@dataclass
class FixResult:
    """What was written and what inspecting it again showed.

    ``verified`` only when the copy inspects clean at error level, shows none of the
    findings the fix was asked to repair and nothing new at warning or above;
    ``unresolved`` lists those it does show (the command then exits 1, never says
    "verified", and names what clears them: :func:`clearing_step`)."""

    plan: FixPlan
    written: Written | None
    after_findings: list[Finding] = field(default_factory=list)
    unresolved: list[Finding] = field(default_factory=list)

    @property
    def verified(self) -> bool:
        return self.written is not None and not self.unresolved


def manifest(plan: FixPlan) -> dict[str, Any]:
    inputs = {}
    root = plan.root
    if root is not None:
        for rel in sorted({c.file for c in plan.changes}):
            inputs[rel] = sha256(root if root.is_file() else root / rel)
    return {"lrdoctor": __version__, "command": "fix", "input": str(plan.path),
            "format": plan.format, "policy": plan.target.policy if plan.target else None,
            "target": plan.target.to_dict() if plan.target else None,
            "changes": [c.to_dict() for c in plan.changes],
            "input_sha256": [{"file": f, "sha256": h} for f, h in inputs.items()],
            "notes": plan.notes}


def write_fix(plan: FixPlan, out: str | Path, *, force: bool = False, progress: Any = None,
              verify: bool = True) -> FixResult:
    """Write the repaired copy to ``out`` (atomically), verified by re-reading it."""
    out = Path(out)
    if plan.noop:
        return FixResult(plan, None)
    result = FixResult(plan, None)

    def check(tmp: Path) -> None:
        # The findings name the copy where it will be, never the temporary holder that
        # is gone once the copy is renamed into place.
        result.after_findings = _verify(plan, tmp, out)
        result.unresolved = unresolved(plan, result.after_findings)
        if result.unresolved:
            _mark_unverified(tmp, result.unresolved)

    root = plan.root
    assert root is not None, "plan_fix sets the root of every plan that changes something"
    if _names_the_file(plan, out):
        root = root / plan.files[0]  # `--out fixed.pt` for a one-file checkpoint dir
    try:
        result.written = write_output(root, out, plan.files, plan.changes, manifest(plan),
                                      force=force, verify=check if verify else None,
                                      progress=progress, protect=(plan.path,),
                                      link=plan.link, builders=plan.builders)
    except (OSError, MemoryError) as exc:  # disk full, permissions: one line, nothing left
        where = getattr(exc, "filename", None) or out
        what = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        raise UnusableInput(f"cannot write the repaired copy: {what}", str(where)) from None
    return result




def _names_the_file(plan: FixPlan, out: Path) -> bool:
    """A one-file checkpoint found in a directory, and an ``--out`` that names a file:
    write that file, not a directory called ``fixed.pt/`` holding it."""
    if plan.root is None or not plan.root.is_dir() or len(plan.files) != 1 or out.is_dir():
        return False
    suffix = out.suffix.lower()
    from lrdoctor.read.bytes.safeload import PICKLE_SUFFIXES  # names that say "a file"

    return bool(suffix) and (suffix in PICKLE_SUFFIXES
                             or suffix == Path(plan.files[0]).suffix.lower())


def unresolved(plan: FixPlan, after: list[Finding]) -> list[Finding]:
    """The findings that stop a written copy from counting as verified: any error ("verified"
    means the copy inspects clean at error level: an extend-horizon copy that still has
    the input's LRD103 is no repaired checkpoint), one the fix was asked to repair
    (``target.motivated_by``) that is still there, or one at warning or above that the
    input did not have (the policy caused it)."""
    from lrdoctor.core.findings import Severity

    asked = set(plan.target.motivated_by) if plan.target else set()
    before = {f.code for f in plan.findings}
    return [f for f in after if f.severity >= Severity.ERROR or f.code in asked
            or (f.code not in before and f.severity >= Severity.WARNING)]


def clearing_step(plan: FixPlan, left: list[Finding]) -> str:
    """What clears the findings a written copy still shows: the repair the input's own
    findings recommend, as a command on the input, when it is another policy and covers
    them; else each finding's own fix (its cause at the source)."""
    from lrdoctor.diagnose import fix_command
    from lrdoctor.diagnose_policy import recommend

    rec = recommend(plan.findings)
    used = plan.target.policy if plan.target else None
    codes = {f.code for f in left}
    if not codes & {f.code for f in plan.findings}:  # the policy made them
        return (f"the input shows none of {', '.join(sorted(codes))}: `--policy {used}` "
                "caused them; " + (f"its findings call for `{rec.flags}`: "
                                   f"`{fix_command(str(plan.path), rec.flags)}`"
                                   if rec is not None and rec.policy != "sync-lr"
                                   else "it needs no repair of this kind"))
    if rec is not None and rec.policy not in (used, "sync-lr") and codes <= set(rec.because):
        return (f"`{rec.flags}` clears {', '.join(sorted(codes))}: "
                f"`{fix_command(str(plan.path), rec.flags)}`")
    return "; ".join(f"{f.code}: {f.fix}" for f in left if f.fix) or \
        "no policy of `lrdoctor fix` clears it: fix the training config at the source"


def left_in_run(plan: FixPlan, out: Path) -> Path | None:
    """The folder holding the input checkpoint when the written copy lies inside it too (a
    run's folder: ``fix run/checkpoint-20 --out run/checkpoint-20-fixed``); None otherwise.
    An unverified copy there is said, never left silently beside the run's checkpoints."""
    holder = Path(os.path.abspath(plan.path)).parent
    where = Path(os.path.abspath(out))
    return holder if where != holder and where.is_relative_to(holder) else None


def renamed(findings: list[Finding], names: dict[str, str]) -> list[Finding]:
    """``findings`` with every path in ``names`` (the old prefix) said as its new name, in
    the message, the fix, the location and the evidence's fields."""
    import dataclasses

    order = sorted(names, key=len, reverse=True)  # the longest (most specific) first

    def text(s: str) -> str:
        for old in order:
            s = s.replace(old, names[old])
        return s

    def value(v: Any) -> Any:
        if isinstance(v, str):
            return text(v)
        if isinstance(v, dict):
            return {value(k): value(x) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            return type(v)(value(x) for x in v) if type(v) in (list, tuple) else v
        if dataclasses.is_dataclass(v) and not isinstance(v, type):
            try:
                return dataclasses.replace(v, **{
                    f.name: value(getattr(v, f.name)) for f in dataclasses.fields(v)
                    if f.init})
            except (TypeError, ValueError):
                return v
        return v

    return [dataclasses.replace(f, message=text(f.message), fix=text(f.fix),
                                location=text(f.location) if f.location else f.location,
                                evidence=value(f.evidence)) for f in findings]


def _mark_unverified(tmp: Path, left: list[Finding]) -> None:
    """Record in the copy's manifest that it is not verified, and why."""
    import json

    from lrdoctor.repair.writer import MANIFEST

    m = tmp / MANIFEST if tmp.is_dir() else tmp.with_name(tmp.name + "." + MANIFEST)
    doc = json.loads(m.read_text())
    doc["verified"] = False
    doc["unresolved_findings"] = [{"code": f.code, "severity": str(f.severity),
                                   "message": f.message} for f in left]
    m.write_text(json.dumps(doc, indent=2, allow_nan=False) + "\n")


def _as_named(plan: FixPlan, tmp: Path) -> Path:
    """The written copy under the input's own folder name (a symlink beside it in the
    temporary holder), so a layout whose reader finds checkpoints by their name (NeMo-RL's
    ``step_N``) reads an ``--out fixed/`` copy as it read the input; ``tmp`` otherwise."""
    if not tmp.is_dir() or not plan.path.is_dir() or tmp.name == plan.path.name:
        return tmp
    view = tmp.parent / ".as-input" / plan.path.name
    try:
        view.parent.mkdir()
        os.symlink(tmp.resolve(), view, target_is_directory=True)  # a relative --out too
    except OSError:
        return tmp
    return view


def _verify(plan: FixPlan, tmp: Path, out: Path | None = None) -> list[Finding]:
    """Inspect the written copy. A copy that cannot be read back or does not hold the
    planned progress is a writer failure (nothing is published); the findings it shows
    are judged by :func:`unresolved`, and name the copy as ``out`` (where it is published)."""
    target = plan.target
    assert target is not None
    view = _as_named(plan, tmp)
    try:
        _, state, findings = read_state(view, plan.format)
    except UnusableInput as exc:
        raise FixFailed(f"verification: the written copy cannot be read back: {exc}") from None
    finally:
        if view != tmp:
            view.unlink()
            view.parent.rmdir()
    sp = state.scheduler_progress
    if sp is None or not math.isclose(sp.value, target.progress, rel_tol=1e-9, abs_tol=1e-9):
        raise FixFailed(f"verification: the written copy holds scheduler progress "
                        f"{sp.value if sp else None}, planned {target.progress}; "
                        "no output was written")
    if out is None:
        return findings
    names = {}
    places = [(view, out), (tmp, out)]
    if TMP_TAG in tmp.parent.name:  # the holder: a name made from the copy's own (ckpt-fixed.pt)
        places.append((tmp.parent, out.parent))
    for held, final in places:
        for form in {str(held), os.path.abspath(held), str(Path(held).resolve())}:
            names[form] = str(final)
    return renamed(findings, names)


def fix_report(plan: FixPlan, *, dry_run: bool, out: Path | None,
               result: FixResult | None = None) -> Report:
    """The fix's :class:`~lrdoctor.core.report.Report`: the plan (policy, target, changes),
    and after a write the output, its manifest, the rewritten files and the findings
    that re-inspecting the copy gave. The JSON document ``fix --json`` prints."""
    from lrdoctor.core.report import Report

    extra: dict[str, Any] = plan.to_dict()
    extra.update({"dry_run": dry_run, "output": str(out) if out and result and result.written
                  else None})
    if result is not None and result.written is not None:
        extra["manifest"] = str(result.written.manifest)
        extra["changed_files"] = [{"file": f, "sha256": h}
                                  for f, h in result.written.changed.items()]
        extra["findings_after"] = [f.to_dict() for f in result.after_findings]
        extra["verified"] = result.verified
        extra["unresolved_findings"] = [f.to_dict() for f in result.unresolved]
        if result.unresolved:
            extra["clearing_step"] = clearing_step(plan, result.unresolved)
            run = left_in_run(plan, result.written.out)
            extra["unverified_copy_in_run"] = str(run) if run is not None else None
        extra["removed_leftovers"] = [str(x) for x in result.written.cleaned]
    # The format as inspect names it (the reader's NAME: "torch"), not the registry name
    # the plan re-reads with ("torchsave"): one file, one name in every command's JSON.
    return Report(command="fix", target=str(plan.path), format=plan.state.format,
                  state=plan.state.to_dict(), findings=plan.findings, extra=extra)
