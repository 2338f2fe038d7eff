"""Diagnose a normalized :class:`RunState` with the checkpoint rules, and the one repair
their findings call for.

The rules live one per file in :mod:`lrdoctor.rules` (framework-blind: they judge the
counters and facts a reader filled in); this module runs them in the registry's order
and ends every repairable finding's fix with the checkpoint's one recommendation. A
healthy checkpoint of any supported framework must produce no warning or error.
"""

from __future__ import annotations

import re

from lrdoctor.core.findings import Finding
from lrdoctor.core.state import RunState
from lrdoctor.diagnose_policy import decide, recommend
from lrdoctor.rules import CHECKPOINT


def diagnose(state: RunState) -> list[Finding]:
    """Every checkpoint rule's findings, in the registry's order, fixes agreed."""
    out: list[Finding] = []
    for rule in CHECKPOINT:
        out.extend(rule.check(state, out))
    from lrdoctor.rules.evidence_checks import after_checks

    after_checks(state, out)  # the explained horizon replaces its unexplained forms; harm ahead
    _agree(out, state)
    return out


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
    what is missing. ``fix`` decides through the same function
    (:func:`lrdoctor.diagnose_policy.decide`), so the text never recommends what it refuses. DCP folders are rewritten too (their changed
    items go to a new storage file), so the text is the same for them."""
    from lrdoctor.core.errors import UnusableInput

    rec = recommend(findings)
    if rec is None or rec.policy == "sync-lr":
        _runnable(findings, state)
        return
    try:
        decide(state, findings)
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
            generic = _GENERIC_FIX.sub(r"`\1`", f.fix)
            f.fix = f"{generic.rstrip('.')}; {repair}"
        else:
            f.fix = f"Follows from {cause} (fix that at the source); {repair}"
    _runnable([f for f in findings if f.code not in rec.because], state)


def _runnable(findings: list[Finding], state: RunState) -> None:
    """Every `lrdoctor fix --policy X` a finding's text names (the rules' generic wording:
    no checkpoint, no --out, so it fails as printed) becomes the command on this
    checkpoint, or, where ``fix`` would refuse that policy here, the policy with what is
    missing (decided by :func:`~lrdoctor.diagnose_policy.decide`, as for the
    recommendation)."""
    from lrdoctor.core.errors import UnusableInput

    def command(m: re.Match[str]) -> str:
        flags = m.group(1)
        policy = re.match(r"--policy ([\w-]+)$", flags)
        if policy is None:
            return m.group(0)
        try:
            decide(state, findings, policy=policy.group(1))
        except UnusableInput as exc:
            return f"`{flags}` (which `lrdoctor fix` cannot apply here: {exc.message})"
        return f"`{fix_command(state.path, flags)}`"

    for f in findings:
        f.message = _GENERIC_FIX.sub(command, f.message)
        f.fix = _GENERIC_FIX.sub(command, f.fix)


_GENERIC_FIX = re.compile(r"`lrdoctor fix (--[^`]+)`")


def fix_command_placeholder(text: str) -> str:
    """The rules' generic `lrdoctor fix --policy X` as the catalog page prints it: the
    command :func:`fix_command` builds at run time, on a ``PATH`` placeholder
    (``lrdoctor fix PATH --out PATH-fixed --policy X``), so the page and what ``inspect``
    prints read the same, and what the page shows runs once PATH is filled in."""

    def command(m: re.Match[str]) -> str:
        flags = m.group(1)
        if re.match(r"--policy ([\w-]+)$", flags) is None:
            return m.group(0)
        return f"`{fix_command('PATH', flags)}`"

    return _GENERIC_FIX.sub(command, text)
