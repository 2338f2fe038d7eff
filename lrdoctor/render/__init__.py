"""Presentation: everything a command shows or writes for a person or a CI system.

The commands hand their :class:`~lrdoctor.core.report.Report` objects to :func:`emit`,
which picks the output by two registries:

- :data:`FORMATS`: the machine formats, one function per name (``json``, the CI
  formats in :mod:`lrdoctor.render.machine`: SARIF 2.1.0, JUnit XML, GitHub Actions,
  and GitHub-flavoured Markdown in :mod:`lrdoctor.render.markdown`);
- :data:`lrdoctor.render.text.TEXT`: per command, how its reports read on a terminal.

The HTML report page is :mod:`lrdoctor.render.html`, the figures
:mod:`lrdoctor.render.plots` (inspect's) and :mod:`lrdoctor.render.replay_plots`
(replay's), progress bars :mod:`lrdoctor.render.progress`.
Nothing here decides a finding or an exit code beyond "the worst finding against
``fail_on``": that stays with diagnosis and the commands.

Importing this package is light (no rich, numpy or matplotlib): each renderer is
imported when it is used, so ``lrdoctor --help`` and ``inspect`` stay fast.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lrdoctor.core.report import Report


def run_groups(reports: Sequence[Report]) -> list[list[Report]]:
    """``reports`` in runs (consecutive reports of one ``Report.run``); one group when
    they are of one run."""
    groups: list[list[Report]] = []
    for r in reports:
        key = r.run.root if r.run is not None else None
        if groups and (groups[-1][0].run.root if groups[-1][0].run is not None else None) == key:
            groups[-1].append(r)
        else:
            groups.append([r])
    return groups if len(groups) > 1 else [list(reports)]


def _json(reports: Sequence[Report], fail_on: str, *, command: str | None = None,
          target: str | None = None) -> str:
    """The one JSON document (:func:`lrdoctor.core.report.json_document`)."""
    import json

    from lrdoctor.core.report import json_document

    doc = json_document(list(reports), command, target, many=command in JSON_ARRAY)
    return json.dumps(doc, indent=2, allow_nan=False)


def _sarif(reports: Sequence[Report], fail_on: str) -> str:
    import json

    from lrdoctor.render.machine import sarif

    return json.dumps(sarif(list(reports)), indent=2, allow_nan=False)


def _junit(reports: Sequence[Report], fail_on: str) -> str:
    from lrdoctor.render.machine import junit

    return junit(list(reports), fail_on)


def _github(reports: Sequence[Report], fail_on: str) -> str:
    from lrdoctor.render.machine import github

    return github(list(reports))


def _markdown(reports: Sequence[Report], fail_on: str) -> str:
    from lrdoctor.render.markdown import markdown

    return markdown(list(reports), fail_on).rstrip("\n")


#: Machine formats: name -> ``fn(reports, fail_on) -> document``. A new format is one
#: function here: ``--output-format``'s choices (``commands._common.OutputFormat``) and
#: its help are made from this dict.
FORMATS: dict[str, Callable[[Sequence[Report], str], str]] = {
    "json": _json,
    "sarif": _sarif,
    "junit": _junit,
    "github": _github,
    "markdown": _markdown,
}


#: The commands whose ``--json`` always holds a ``reports`` list (``check``, and ``report``
#: which prints check's document), even for one target.
JSON_ARRAY = frozenset({"check", "report"})


def document(reports: Sequence[Report], fmt: str, fail_on: str = "warning") -> str:
    """The whole machine-readable document for ``reports`` in ``fmt`` (see :data:`FORMATS`)."""
    fmt = getattr(fmt, "value", fmt)
    try:
        fn = FORMATS[fmt]
    except KeyError:
        raise ValueError(f"unknown output format {fmt!r}; expected one of "
                         f"{', '.join(FORMATS)}") from None
    return fn(reports, fail_on)


def github_annotations(reports: Sequence[Report]) -> str:
    """The GitHub Actions annotations of ``reports`` (``--output-format github``'s lines)."""
    return FORMATS["github"](reports, "warning")


def on_github_actions() -> bool:
    import os

    return os.environ.get("GITHUB_ACTIONS") == "true"


def emit(reports: Report | Sequence[Report], fmt: str, fail_on: str, *,
         command: str | None = None, quiet: bool = False, verbose: bool = False,
         annotate: bool | None = None, target: str | None = None, **context: Any) -> int:
    """Print ``reports`` in ``fmt`` (text or a :data:`FORMATS` name) and return the exit
    code of the worst finding against ``fail_on``.

    Text starts with one verdict line per target (:mod:`lrdoctor.render.verdict`), then
    the details; ``quiet``: the verdict lines only; ``verbose``: every counter read.
    ``context`` goes to the command's text renderer only (the files a replay wrote, the
    plan a fix applied): the machine formats are the reports alone.

    ``annotate`` (default: on GitHub Actions): text is followed by the annotations, so the
    job log keeps its verdicts and summary and the annotations come in addition.
    ``target``: the path the command was given (the JSON document's ``target``).
    """
    from lrdoctor.core.report import Report

    if isinstance(reports, Report):
        reports = [reports]
    reports = list(reports)
    fmt, fail_on = getattr(fmt, "value", fmt), getattr(fail_on, "value", fail_on)
    name = command or (reports[0].command if reports else "report")
    if fmt == "text":
        from lrdoctor.render.text import TEXT  # rich: imported only for text

        view = TEXT.get(name, TEXT["report"])
        if view.verdicts:
            from lrdoctor.render.verdict import print_verdicts

            print_verdicts(reports)
        if quiet:
            if view.quiet:
                for r in reports:
                    view.quiet(r, **context)
            if (on_github_actions() if annotate is None else annotate) and \
                    (lines := github_annotations(reports)):
                print(lines)
            return max((r.exit_code(fail_on) for r in reports), default=0)
        if verbose and view.verbose:
            context["verbose"] = True
        groups = run_groups(reports) if name == "inspect" else [reports]
        for group in groups:
            if len(groups) > 1:  # a folder of runs: one section per run, worst first
                from lrdoctor.render.runs import render_run_header

                render_run_header(group, groups)
            if view.before:
                view.before(group)
            for r in group:
                view.each(r, **context)
        if len(groups) > 1:
            from lrdoctor.render.runs import render_not_runs

            render_not_runs(reports)
        if view.after:
            view.after(reports)
        if on_github_actions() if annotate is None else annotate:
            lines = github_annotations(reports)
            if lines:
                print(lines)
    elif fmt == "json":
        print(_json(reports, fail_on, command=name, target=target))
    else:
        print(document(reports, fmt, fail_on))
    return max((r.exit_code(fail_on) for r in reports), default=0)


__all__ = ["FORMATS", "JSON_ARRAY", "document", "emit"]
