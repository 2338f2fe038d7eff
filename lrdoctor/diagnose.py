"""Diagnose a normalized :class:`RunState` with the checkpoint rules, and the one repair
their findings call for.

The rules live one per file in :mod:`lrdoctor.rules` (framework-blind: they judge the
counters and facts a reader filled in); this module runs them in the registry's order
and ends every repairable finding's fix with the checkpoint's one recommendation. A
healthy checkpoint of any supported framework must produce no warning or error.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lrdoctor.core.findings import Finding, Severity
from lrdoctor.core.state import RunState
from lrdoctor.rules import CHECKPOINT
from lrdoctor.rules.common import ProgressEvidence, fmt


def diagnose(state: RunState) -> list[Finding]:
    """Every checkpoint rule's findings, in the registry's order, fixes agreed."""
    out: list[Finding] = []
    for rule in CHECKPOINT:
        out.extend(rule.check(state, out))
    from lrdoctor.rules.evidence_checks import after_checks

    after_checks(state, out)  # the explained horizon replaces its unexplained forms; harm ahead
    _agree(out, state)
    return out


@dataclass(frozen=True)
class Recommendation:
    """The one repair a checkpoint's findings call for, and the other one that works.

    One per checkpoint, so that every finding's fix text and ``lrdoctor fix`` without
    ``--policy`` say the same thing: LRD101 past the horizon is usually a consequence
    of LRD103/LRD104/LRD109 and must not recommend a different repair than its cause.
    """

    policy: str  # nominal | rescale | extend-horizon | sync-lr
    because: tuple[str, ...]  # the finding codes this repair resolves, the cause first
    k: float | None = None  # rescale: the whole number of scheduler steps per update
    alternative: str | None = None  # the other option, as `lrdoctor fix` flags
    why: str = ""  # one clause: why this policy over the alternative

    @property
    def flags(self) -> str:
        """``--policy rescale --k 4``: what `lrdoctor fix` does without --policy."""
        f = f"--policy {self.policy}"
        return f + (f" --k {fmt(self.k)}" if self.k is not None else "")

    def to_dict(self) -> dict[str, Any]:
        return {"policy": self.policy, "k": self.k, "because": list(self.because),
                "alternative": self.alternative, "why": self.why}


def recommend(findings: list[Finding]) -> Recommendation | None:
    """The repair the findings call for; None when none of them calls for one.

    A scheduler k times too fast (whole k) is rescaled; a non-whole ratio (dynamic
    micro-batching, ROLL issue 442) goes back to the nominal budget, as that issue
    proposes; Megatron's and DeepSpeed's own invariants (LRD104/LRD109) name the right
    count, so nominal; LRD101 alone (no nominal count known) keeps the progress and
    moves the horizon; an LR that only disagrees with the schedule (LRD105) is synced.
    """
    # An LR the schedule explains one call behind its counter (LRD105 info) needs no sync.
    by = {f.code: f for f in findings
          if not (f.code == "LRD105" and f.severity < Severity.WARNING)}
    codes = [c for c in ("LRD103", "LRD104", "LRD109", "LRD101", "LRD105") if c in by]
    resume = tuple(c for c in ("LRD112", "LRD113", "LRD116") if c in by)
    if resume and not {"LRD103", "LRD104", "LRD109"} & set(codes):
        # A run whose scheduler lost continuity at a resume (restarted, stepped again, a
        # changed rate): the trainer's counters say where it should be.
        return Recommendation(
            "nominal", resume + tuple(c for c in codes if c in ("LRD101", "LRD105")),
            alternative="--policy extend-horizon",
            why="the run's checkpoints show the scheduler lost continuity at a resume: back "
                "to the trainer's counters")
    if not codes:
        return None
    if "LRD103" in by:
        k = _whole_k(by["LRD103"])
        if k is not None:
            return Recommendation(
                "rescale", _with("LRD103", codes, ("LRD101", "LRD105")), k=k,
                alternative="--policy nominal",
                why=f"the scheduler ran a whole {fmt(k)} times too fast")
        return Recommendation(
            "nominal", _with("LRD103", codes, ("LRD101", "LRD105")),
            alternative="--policy extend-horizon",
            why="a non-whole ratio means the updates per step varied (dynamic "
                "micro-batching): back to the trainer's nominal count")
    for code in ("LRD104", "LRD109"):
        if code in by:
            k = _whole_k(by[code])
            return Recommendation(
                "nominal", _with(code, codes, ("LRD101", "LRD105")),
                alternative=f"--policy rescale --k {fmt(k)}" if k else "--policy extend-horizon",
                why="the framework's own counters say where the scheduler should be")
    if "LRD101" in by:
        return Recommendation(
            "extend-horizon", _with("LRD101", codes, ("LRD105",)),
            alternative="--policy nominal --progress N",
            why="the checkpoint has no nominal count to move progress back to")
    return Recommendation("sync-lr", ("LRD105",),
                          why="only the param-group lr disagrees with the schedule")


def _with(cause: str, codes: Sequence[str], consequences: tuple[str, ...]) -> tuple[str, ...]:
    return (cause,) + tuple(c for c in codes if c in consequences)


def _whole_k(f: Finding) -> float | None:
    """The whole number of scheduler steps per update a progress finding names."""
    k = f.evidence.k if isinstance(f.evidence, ProgressEvidence) else None
    if k is not None and k >= 2 and float(k).is_integer():
        return float(k)
    return None


def fix_command(path: str, flags: str = "") -> str:
    """``lrdoctor fix PATH --out PATH-fixed FLAGS``: a command that runs as printed (the
    checkpoint's real path, quoted for a shell; the copy beside it, as the help's examples
    do), where "`lrdoctor fix --out NEW`" named neither."""
    import shlex

    p = path.rstrip("/") or path
    head, sep, name = p.rpartition("/")
    stem, dot, ext = name.rpartition(".") if "." in name.lstrip(".") else (name, "", "")
    new = f"{head}{sep}{stem}-fixed{dot}{ext}"
    return f"lrdoctor fix {shlex.quote(path)} --out {shlex.quote(new)}" + \
        (f" {flags}" if flags else "")


def _agree(findings: list[Finding], state: RunState) -> None:
    """End every repairable finding's fix with the checkpoint's one recommendation: the
    command that applies it, or, where ``fix`` would refuse it (an extend-horizon for a
    checkpoint that holds no planned end, e.g. a ROLL checkpoint copied out of its run),
    what is missing. ``fix`` decides through the same function (``make_target``), so the
    text never recommends what it refuses. DCP folders are rewritten too (their changed
    items go to a new storage file), so the text is the same for them."""
    from lrdoctor.core.errors import UnusableInput
    from lrdoctor.repair.policies import make_target

    rec = recommend(findings)
    if rec is None or rec.policy == "sync-lr":
        return
    try:
        make_target(state, findings)
    except UnusableInput as exc:
        repair = (f"`lrdoctor fix` cannot apply `{rec.flags}` to this checkpoint as it "
                  f"stands: {exc.message}.")
    else:
        repair = (f"repair this checkpoint with `{fix_command(state.path)}` (it applies "
                  f"`{rec.flags}`"
                  + (f"; the alternative: `{rec.alternative}`" if rec.alternative else "")
                  + ").")
    cause = rec.because[0]
    for f in findings:
        if f.code not in rec.because:
            continue
        if f.code == cause:
            # The rule's own text names policies as `lrdoctor fix --policy X`, a command
            # without the checkpoint or --out that fails as printed: here it is the policy's
            # flags, and the sentence added names the command that runs.
            generic = re.sub(r"`lrdoctor fix (--[^`]+)`", r"`\1`", f.fix)
            f.fix = f"{generic.rstrip('.')}; {repair}"
        else:
            f.fix = f"Follows from {cause} (fix that at the source); {repair}"
