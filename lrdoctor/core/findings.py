"""What a rule is and what it reports: :class:`Rule`, :class:`Finding`, :class:`Evidence`.

The rules themselves live one per file in :mod:`lrdoctor.rules` (code, title,
explanation, example, fix, the check and the evidence type together); this module
is the vocabulary they share with everything that shows or acts on findings.

Why typed evidence: a finding's numbers are read back by the verdict line, the repair
and the JSON contract. A frozen dataclass per rule says which numbers a finding
carries, and mypy checks every reader; :meth:`Evidence.to_dict` is the JSON
(``evidence`` keys stay what they were when they were dicts).
"""

from __future__ import annotations

import dataclasses
import math
import re
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import Enum, IntEnum
from pathlib import Path
from typing import Any, ClassVar

if sys.version_info >= (3, 11):
    from typing import dataclass_transform
else:  # pragma: no cover - Python 3.10
    from typing_extensions import dataclass_transform


class Severity(IntEnum):
    INFO = 1
    WARNING = 2
    ERROR = 3

    def __str__(self) -> str:
        return self.name.lower()


#: ``dataclasses.field`` metadata: leave the key out of the JSON when the value is None
#: (evidence a finding only sometimes has, e.g. ``k`` when the ratio is a whole number).
OMIT_NONE: Mapping[str, bool] = {"omit_none": True}


def optional() -> Any:
    """A field that defaults to None and is left out of :meth:`Evidence.to_dict` then."""
    return dataclasses.field(default=None, metadata=OMIT_NONE)


_AS_DATACLASS = threading.RLock()


class _FieldsWhenAsked:
    """``__dataclass_fields__`` of a :class:`Record` class not made a dataclass yet: asking
    for it makes the class one, so ``dataclasses.fields(cls)`` and ``is_dataclass`` answer
    as if it had been one from its definition."""

    def __get__(self, obj: object, owner: type[Record]) -> dict[str, dataclasses.Field[Any]]:
        owner._as_dataclass()
        fields: dict[str, dataclasses.Field[Any]] = owner.__dict__["__dataclass_fields__"]
        return fields


@dataclass_transform(frozen_default=True, field_specifiers=(dataclasses.field,))
@dataclass(frozen=True)
class Record(Mapping[str, Any]):
    """A frozen dataclass whose JSON form is its fields by name, None-valued fields
    marked :func:`optional` left out. It is also a read-only mapping of that form
    (``ev["k"]``), the way the JSON contract names the same values.

    Every subclass is a frozen dataclass by being one (``class X(Evidence):`` and its
    fields; ``class X(Evidence, kw_only=True):`` for keyword-only fields): said here
    once instead of a decorator on every evidence type, and mypy knows it
    (``dataclass_transform``)."""

    _record_kw_only: ClassVar[bool] = False  # the class's ``kw_only=``, for dataclass()

    def raw(self) -> dict[str, Any]:
        """The record by its JSON keys, values as they are (tuples, int keys)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is None and f.metadata.get("omit_none"):
                continue
            out[f.metadata.get("key", f.name)] = v
        return out

    def to_dict(self) -> dict[str, Any]:
        """The JSON form: :meth:`raw` through :func:`jsonable`."""
        return {k: jsonable(v) for k, v in self.raw().items()}

    def __init_subclass__(cls, *, kw_only: bool = False, **kwargs: Any) -> None:
        # Equal to any mapping with the same JSON keys and values (a test's dict, another
        # record): Record's __eq__, so dataclass() writes none (eq=False). Its __repr__ and
        # __hash__ are written once here, the same as dataclass() would generate for each
        # class: generating them per class (an exec each) was a tenth of ``inspect``'s
        # start-up over the ~60 evidence types. dataclass() itself runs when the class is
        # first used as one: its first record built (:meth:`__new__`) or its fields asked
        # for (``dataclasses.fields``, ``is_dataclass``, a subclass made one). A healthy
        # checkpoint builds none of the ~40 evidence types its rules import, and their
        # three generated methods each were another tenth.
        super().__init_subclass__(**kwargs)
        cls.__eq__ = Record.__eq__  # type: ignore[method-assign]
        cls._record_kw_only = kw_only
        cls.__dataclass_fields__ = _FieldsWhenAsked()  # type: ignore[assignment]
        if "__repr__" not in cls.__dict__:
            cls.__repr__ = Record._field_repr  # type: ignore[method-assign,assignment]
        if "__hash__" not in cls.__dict__:
            cls.__hash__ = Record._field_hash  # type: ignore[method-assign,assignment]

    def __new__(cls, *args: Any, **kwargs: Any) -> Record:  # noqa: ARG004 - __init__'s
        if not isinstance(cls.__dict__["__dataclass_fields__"], dict):
            cls._as_dataclass()
        return super().__new__(cls)

    @classmethod
    def _as_dataclass(cls) -> None:
        """Make ``cls`` and every record class it derives from the frozen dataclass its
        definition declares, bases first (a subclass's fields follow its base's). Once
        per class, under a lock: readers build evidence in threads, and dataclass() run
        twice on one class would lose its fields' default factories."""
        with _AS_DATACLASS:
            for c in reversed(cls.__mro__):
                if isinstance(c.__dict__.get("__dataclass_fields__"), _FieldsWhenAsked):
                    dataclass(frozen=True, kw_only=c.__dict__["_record_kw_only"], eq=False,
                              repr=False)(c)

    def _field_repr(self) -> str:
        """What dataclass() generates: ``Name(field=value, ...)`` over the repr fields."""
        return (f"{type(self).__qualname__}("
                + ", ".join(f"{f.name}={getattr(self, f.name)!r}"
                            for f in dataclasses.fields(self) if f.repr) + ")")

    def _field_hash(self) -> int:
        """What dataclass(frozen=True) generates: the hash of the compared fields."""
        return hash(tuple(getattr(self, f.name) for f in dataclasses.fields(self)
                          if (f.hash is None and f.compare) or f.hash))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        return self.raw() == {k: other[k] for k in other}

    __hash__ = None  # type: ignore[assignment]  # equal to dicts, so not hashable

    def __getitem__(self, key: str) -> Any:
        return self.raw()[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.raw())

    def __len__(self) -> int:
        return len(self.raw())


class Evidence(Record):
    """The numbers that prove a finding; each rule file subclasses it."""

    def replaced(self, **changes: Any) -> Evidence:
        """A copy with ``changes`` (the live guard counts occurrences this way)."""
        return dataclasses.replace(self, **changes)

    def headline(self) -> str | None:
        """The finding's one number in words, for the verdict line; None: use the title."""
        return None


class FreeEvidence(Evidence):
    """Evidence whose keys are open by nature: a refusal's record of what was scanned
    (LRD303 carries :class:`~lrdoctor.core.errors.UnusableInput`'s ``detail`` verbatim)."""

    data: Mapping[str, Any] = dataclasses.field(default_factory=dict)

    def raw(self) -> dict[str, Any]:
        return {str(k): v for k, v in self.data.items()}

    def replaced(self, **changes: Any) -> Evidence:
        return FreeEvidence({**self.data, **changes})


@dataclass(frozen=True)
class Rule:
    """One finding code: what it means (the catalog page is made from these fields).
    Its file in :mod:`lrdoctor.rules` holds it with its check and ``evidence``: the
    evidence types a finding of this code carries."""

    code: str
    name: str
    severity: Severity
    title: str
    explanation: str
    example: str
    fix: str
    evidence: tuple[type[Evidence], ...] = ()

    @classmethod
    def from_doc(cls, doc: str, severity: Severity, *,
                 evidence: tuple[type[Evidence], ...] = ()) -> Rule:
        """The rule a rule file's docstring declares (see :func:`rule_doc`).

        The words a reader sees (title, explanation, example, fix) are written once, as
        prose where the code is, like ruff's rule files; the severity is typed code."""
        code, name, text = rule_doc(doc)
        return cls(code=code, name=name, severity=severity, evidence=evidence, **text)

    @classmethod
    def from_module(cls, module: str, severity: Severity, *,
                    evidence: tuple[type[Evidence], ...] = ()) -> Rule:
        """:meth:`from_doc` of ``module``'s docstring: ``RULE = Rule.from_module(__name__,
        Severity.ERROR)`` in a rule file. Under ``python -OO`` (docstrings stripped) the
        docstring is read back from the module's source, so the catalog never goes blank."""
        mod = sys.modules[module]
        doc = mod.__doc__
        if doc is None:
            import ast

            origin = mod.__spec__.origin if mod.__spec__ is not None else None
            src = Path(origin).read_text(encoding="utf-8") if origin else ""
            doc = ast.get_docstring(ast.parse(src), clean=False)
        if doc is None:
            raise ValueError(f"{module}: a rule file starts with the rule's docstring")
        try:
            return cls.from_doc(doc, severity, evidence=evidence)
        except ValueError as e:
            raise ValueError(f"{module}: {e}") from None

    def finding(self, message: str, evidence: Evidence, *, fix: str | None = None,
                severity: Severity | None = None, location: str | None = None) -> Finding:
        """A finding of this rule; ``fix``/``severity`` override the rule's defaults."""
        return Finding(code=self.code,
                       severity=severity if severity is not None else self.severity,
                       title=self.title, message=message, evidence=evidence,
                       fix=fix if fix is not None else self.fix, location=location)


#: A rule docstring's sections, in order, and the :class:`Rule` field each fills.
RULE_SECTIONS: Mapping[str, str] = {"Explanation": "explanation", "Example": "example",
                                    "Fix": "fix"}
_HEADER = re.compile(r"(LRD\d{3}) `([a-z0-9]+(?:-[a-z0-9]+)*)`: (\S.*)")


def rule_doc(doc: str) -> tuple[str, str, dict[str, str]]:
    """``(code, name, {title, explanation, example, fix})`` from a rule docstring::

        LRD102 `min-lr-tail`: A min-LR tail is configured

        Notes for whoever reads the code (why the check is written as it is); not shown.

        ## Explanation
        What the finding means, wrapped as prose.

        ## Example
        ...

        ## Fix
        ...

    The first paragraph is the header; each section is one paragraph of the catalog,
    its lines joined by single spaces. A section missing, unknown, repeated, out of
    order or empty is a ValueError (at import: a rule never ships half-documented)."""
    paragraphs = doc.strip().split("\n\n", 1)
    header = " ".join(paragraphs[0].split())
    m = _HEADER.fullmatch(header)
    if m is None:
        raise ValueError(f"the docstring's first paragraph is not 'LRDnnn `name`: Title': "
                         f"{header!r}")
    code, name, title = m.groups()
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in (paragraphs[1] if len(paragraphs) > 1 else "").splitlines():
        if line.startswith("## "):
            heading = line[3:].strip()
            if heading not in RULE_SECTIONS or heading in sections:
                raise ValueError(f"{code}: section {heading!r} unknown or repeated "
                                 f"(sections: {', '.join(RULE_SECTIONS)})")
            current = sections[heading] = []
        elif current is not None:
            current.append(line.strip())
    if list(sections) != list(RULE_SECTIONS) or not all(map(any, sections.values())):
        raise ValueError(f"{code}: the docstring needs the sections "
                         f"{', '.join('## ' + s for s in RULE_SECTIONS)}, in that order, "
                         f"none empty (found {', '.join(sections) or 'none'})")
    text = {"title": title}
    for heading, lines in sections.items():
        text[RULE_SECTIONS[heading]] = " ".join(w for w in lines if w)
    return code, name, text


@dataclass
class Finding:
    code: str
    severity: Severity
    title: str
    message: str
    evidence: Evidence = dataclasses.field(default_factory=FreeEvidence)
    fix: str = ""
    # The file (or config key) the finding is about, for SARIF/GitHub output.
    location: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "code": self.code,
            "severity": str(self.severity),
            "title": self.title,
            "message": self.message,
            "evidence": self.evidence.to_dict(),
            "fix": self.fix,
        }
        if self.location:
            d["location"] = self.location
        return d


FAIL_ON: dict[str, Severity | None] = {"info": Severity.INFO, "warning": Severity.WARNING,
                                       "error": Severity.ERROR, "never": None}


def exit_code(findings: list[Finding], fail_on: str) -> int:
    """0 when nothing reaches the threshold, 1 otherwise (2 is for unusable input)."""
    threshold = FAIL_ON[fail_on]
    if threshold is None:
        return 0
    return 1 if any(f.severity >= threshold for f in findings) else 0


def jsonable(obj: Any) -> Any:
    """``obj`` as JSON values: enums by value, tuples as lists, NaN/inf as null, nested
    evidence as its dict, anything else by ``repr``."""
    if isinstance(obj, Record):
        return obj.to_dict()
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, Mapping):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, float) and not math.isfinite(obj):  # NaN and ±inf are not JSON
        return None
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    return repr(obj)



__all__ = ["OMIT_NONE", "FAIL_ON", "RULE_SECTIONS", "Evidence", "Finding", "FreeEvidence",
           "Record", "Rule", "Severity", "exit_code", "jsonable", "optional", "rule_doc"]
