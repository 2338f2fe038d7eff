"""The rules registry is the one place a finding is added: every rule file registers,
every code is documented, and every evidence type serialises to the JSON keys the
report contract names."""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import json
import os
import subprocess
import sys
import types
import typing
from pathlib import Path

import pytest

import lrdoctor.rules as rules
from lrdoctor.core.findings import RULE_SECTIONS, Evidence, Record, rule_doc
from lrdoctor.findings import RULES, catalog_markdown
from tests.helpers.paths import REPO

RULE_FILES = sorted(p.stem for p in (REPO / "lrdoctor" / "rules").glob("lrd*.py"))
REGISTERED = [*rules.CHECKPOINT, *rules.REPLAY, *rules.RAISED]


def _module(name: str) -> types.ModuleType:
    # The test walks the folder on purpose: a file the registry forgot is what it finds.
    return importlib.import_module(f"lrdoctor.rules.{name}")


def test_every_rule_file_is_registered_once_under_its_code():
    names = [m.__name__.rsplit(".", 1)[-1] for m in REGISTERED]
    assert sorted(names) == RULE_FILES, "a rule file is missing from lrdoctor.rules or twice"
    assert len(set(names)) == len(names)
    for name in RULE_FILES:
        rule = _module(name).RULE
        assert name.startswith(rule.code.lower() + "_"), (name, rule.code)
        assert name == f"{rule.code.lower()}_{rule.name.replace('-', '_')}"
    assert [r.code for r in rules.RULES] == sorted(RULES) == sorted(rules.BY_CODE)


def test_checks_have_the_protocol_of_their_kind():
    for m in rules.CHECKPOINT:
        assert list(inspect.signature(m.check).parameters) == ["state", "found"], m.__name__
    for m in rules.REPLAY:
        assert list(inspect.signature(m.check).parameters) == ["c"], m.__name__
    for m in rules.RAISED:  # raised elsewhere: a check here would never run
        assert not hasattr(m, "check"), m.__name__


def test_every_code_is_documented():
    from lrdoctor.diagnose import fix_command_placeholder as runnable

    doc = (REPO / "docs" / "findings.md").read_text()
    assert doc == catalog_markdown() + "\n"
    for r in rules.RULES:  # the page shows each generic fix command on a PATH placeholder
        assert f"## {r.code} `{r.name}` ({r.severity})" in doc
        assert runnable(r.explanation) in doc and runnable(r.fix) in doc


def _sample(tp: object, name: str) -> object:
    """A value of the annotated type (the first member of a union that is not None)."""
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        tp = next(a for a in typing.get_args(tp) if a is not type(None))
        origin = typing.get_origin(tp)
    if tp is typing.Any:
        return name
    if origin in (list, tuple):
        args = [a for a in typing.get_args(tp) if a is not Ellipsis]
        item = _sample(args[0], name) if args else name
        return [item] if origin is list else (item,)
    if origin is dict:
        k, v = typing.get_args(tp)
        return {_sample(k, name): _sample(v, name)}
    if isinstance(tp, type) and issubclass(tp, Record):
        return _instance(tp)
    return {str: name, int: 3, float: 2.5, bool: True}.get(tp, name)  # type: ignore[call-overload]


def _instance(cls: type[Record]) -> Record:
    hints = typing.get_type_hints(cls)
    return cls(**{f.name: _sample(hints[f.name], f.name) for f in dataclasses.fields(cls)
                  if f.init})


def _evidence_types() -> list[type[Evidence]]:
    found: dict[str, type[Evidence]] = {}
    for name in [*RULE_FILES, "common"]:
        mod = _module(name)
        for obj in vars(mod).values():
            if isinstance(obj, type) and issubclass(obj, Evidence) and obj.__module__ == \
                    mod.__name__:
                found[obj.__qualname__ + obj.__module__] = obj
    return list(found.values())


@pytest.mark.parametrize("cls", _evidence_types(), ids=lambda c: c.__name__)
def test_evidence_serialises_to_its_json_keys(cls):
    ev = _instance(cls)
    doc = json.loads(json.dumps(ev.to_dict(), allow_nan=False))
    keys = {f.metadata.get("key", f.name) for f in dataclasses.fields(cls)}
    if cls.raw is not Record.raw:  # an evidence that flattens an open record (LRD303)
        assert doc and set(doc) >= {"target"}
    else:
        assert set(doc) == keys  # every field filled: every key present
    assert ev.to_dict() == doc  # JSON values already: nothing changes on the way through
    # A field marked optional and left None is left out; one not marked stays as null.
    omitted = [f for f in dataclasses.fields(cls) if f.metadata.get("omit_none")]
    if omitted:
        sparse = dataclasses.replace(ev, **{f.name: None for f in omitted})
        assert not set(sparse.to_dict()) & {f.name for f in omitted}
    headline = ev.headline()
    assert headline is None or isinstance(headline, str) and headline


@pytest.mark.parametrize("cls", _evidence_types(), ids=lambda c: c.__name__)
def test_evidence_is_a_frozen_dataclass_by_being_evidence(cls):
    """No decorator on each evidence type: Record makes every subclass a frozen dataclass."""
    assert "@dataclass" not in inspect.getsource(cls).split("class ", 1)[0]
    ev = _instance(cls)
    assert dataclasses.is_dataclass(ev) and cls.__dataclass_params__.frozen
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(ev, dataclasses.fields(cls)[0].name, None)


def test_every_rule_with_a_check_has_typed_evidence():
    by_module = {}
    for cls in _evidence_types():
        by_module.setdefault(cls.__module__, []).append(cls)
    for m in [*rules.CHECKPOINT, *rules.REPLAY]:
        src = Path(m.__file__).read_text()
        own = by_module.get(m.__name__, [])
        shared = [c.__name__ for c in by_module.get("lrdoctor.rules.common", [])
                  if c.__name__ in src]
        assert own or shared, f"{m.__name__}: no evidence type"


def test_every_rule_is_declared_once_by_its_docstring():
    """A rule's words live in its file's docstring, nowhere else: the catalog entry is the
    docstring's sections, and no file spells the rule out a second time as a ``Rule(...)``."""
    for name in RULE_FILES:
        mod = _module(name)
        code, rule_name, text = rule_doc(mod.__doc__)
        assert (code, rule_name) == (mod.RULE.code, mod.RULE.name), name
        assert text == {k: getattr(mod.RULE, k) for k in text}, name
        assert set(text) == {"title", *RULE_SECTIONS.values()}
        assert "Rule(" not in Path(mod.__file__).read_text(), name


DOC = """LRD999 `made-up`: A made-up rule

Notes for the reader of the code.

## Explanation
What it
means.

## Example
An example.

## Fix
The fix.
"""


def test_rule_doc_reads_the_sections_and_refuses_a_half_documented_rule():
    assert rule_doc(DOC) == ("LRD999", "made-up", {
        "title": "A made-up rule", "explanation": "What it means.", "example": "An example.",
        "fix": "The fix."})
    broken = {
        "no header": DOC.replace("LRD999 `made-up`: ", ""),
        "no fix": DOC.split("## Fix")[0],
        "empty example": DOC.replace("An example.", ""),
        "out of order": DOC.replace("## Example", "## Tmp").replace("## Fix", "## Example")
                           .replace("## Tmp", "## Fix"),
        "unknown section": DOC.replace("## Fix", "## Remedy"),
        "repeated": DOC + "\n## Fix\nAgain.\n",
    }
    for why, doc in broken.items():
        with pytest.raises(ValueError):
            rule_doc(doc)
            pytest.fail(why)


def test_the_catalog_survives_stripped_docstrings():
    """``python -OO`` drops docstrings; the rules read theirs back from the source."""
    out = subprocess.run([sys.executable, "-OO", "-m", "lrdoctor.findings"], cwd=REPO,
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    assert out == (REPO / "docs" / "findings.md").read_text()


def test_evidence_records_repr_and_hash_as_a_dataclass_would():
    """Record writes one __repr__ and __hash__ for every evidence type (start-up: one
    exec per method per class was a tenth of ``inspect``'s); they equal what
    dataclass(frozen=True) generates, and equality stays the JSON-mapping one."""
    import dataclasses

    from lrdoctor.core.findings import Evidence

    class Probe(Evidence):
        a: int
        b: tuple = ()
        c: str | None = dataclasses.field(default=None, repr=False, compare=False)

    @dataclasses.dataclass(frozen=True)
    class Probe_:  # noqa: N801 - the plain dataclass twin
        a: int
        b: tuple = ()
        c: str | None = dataclasses.field(default=None, repr=False, compare=False)

    p, q = Probe(1, (2, 3), "x"), Probe_(1, (2, 3), "x")
    assert repr(p) == repr(q).replace("Probe_", "Probe")
    assert hash(p) == hash(q)
    assert p == {"a": 1, "b": (2, 3), "c": "x"} and p != {"a": 2, "b": (2, 3), "c": "x"}
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.a = 2  # type: ignore[misc]


def test_evidence_becomes_a_dataclass_when_first_built_bases_first_once():
    """Record runs dataclass() when a class's first record is built or its fields are
    asked for (a healthy checkpoint builds none of the evidence types its rules import:
    start-up). A subclass built first still gets its base's fields first; records built at
    once in threads (the readers) make each class once, so a default factory survives."""
    import dataclasses
    from concurrent.futures import ThreadPoolExecutor

    from lrdoctor.core.findings import Evidence

    class Base(Evidence):
        a: int
        tags: list = dataclasses.field(default_factory=list)

    class Child(Base, kw_only=True):
        b: float

    assert "__init__" not in Child.__dict__ and "__init__" not in Base.__dict__  # not yet

    class Asked(Evidence):
        x: int = 3

    assert [f.name for f in dataclasses.fields(Asked)] == ["x"] and Asked() == {"x": 3}
    with ThreadPoolExecutor(8) as pool:
        built = list(pool.map(lambda i: Child(i, b=0.5), range(64)))
    assert [f.name for f in dataclasses.fields(Child)] == ["a", "tags", "b"]
    assert built[3] == {"a": 3, "tags": [], "b": 0.5} and built[3].tags is not built[4].tags
    assert Base(1) == {"a": 1, "tags": []}
    with pytest.raises(TypeError):
        Child(1, 0.5)  # type: ignore[misc]  # b is keyword-only
    assert dataclasses.replace(built[0], a=9) == {"a": 9, "tags": [], "b": 0.5}
