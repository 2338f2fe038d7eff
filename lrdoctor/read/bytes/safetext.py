"""JSON, YAML, TOML and CSV from untrusted files, within :mod:`lrdoctor.read.bytes.limits`.

Sidecars (``trainer_state.json``, ``ds_config.json``), replay configs and CI
configs are read here and nowhere else, so each gets the same guarantees:
a size cap before the text is read, a nesting cap while it is parsed (the
stdlib JSON and TOML parsers and PyYAML recurse), no more containers than the
``items`` limit, no YAML alias or merge-key expansion beyond the ``nodes``
limit, no YAML mapping key that can flood a dict (huge integers), no more CSV
cells than the ``items`` limit, and every failure is one line naming the file.
"""

from __future__ import annotations

import json
import os
from typing import Any

from lrdoctor.core.errors import NotParsed, NotText, UnusableInput, cannot_read
from lrdoctor.read.bytes import limits

__all__ = ["read_text", "json_loads", "read_json", "yaml_loads", "read_yaml", "toml_loads",
           "csv_loads", "read_csv"]


def read_text(path: str | os.PathLike[str], limit: str, what: str) -> str:
    """The text of ``path``, refused (before reading) when larger than the byte limit ``limit``."""
    from lrdoctor.read.bytes.storage import (  # a URL too (s3://...: range reads)
        as_path,
        open_binary,
    )

    p = str(path)
    try:
        size = as_path(p).stat().st_size
        limits.check_size(limit, size, p, what)
        with open_binary(p) as f:
            raw = f.read(limits.get(limit) + 1)
    except OSError as exc:
        raise cannot_read(exc, p) from None
    limits.check_size(limit, len(raw), p, what)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise NotText(f"not a UTF-8 text file (binary content?): expected {what}",
                      p) from None


def json_loads(text: str, path: str | None, what: str = "JSON") -> Any:
    """``json.loads`` with the container count bounded before parsing and the depth after."""
    # Every container starts with a bracket: their count bounds the containers parsed.
    if text.count("[") + text.count("{") > limits.get("items"):
        raise limits.over("items", path, f"the {what} holds too many arrays/objects")
    try:
        obj = json.loads(text)
    except RecursionError:
        raise limits.over("depth", path, f"the {what} nests too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and integers of over 4300 digits
        line = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        raise NotParsed("JSON", f"not valid JSON: {line}", path) from None
    limits.check_tree(obj, path, what=f"the {what}")
    return obj


def read_json(path: str | os.PathLike[str], what: str = "JSON") -> Any:
    p = str(path)
    return json_loads(read_text(p, "json_bytes", what), p, what)


_YAML_LOADER: Any = None
_INT_TAG = "tag:yaml.org,2002:int"


def _loader() -> Any:
    """PyYAML's pure-Python SafeLoader with depth, merge-key and key checks (built once)."""
    global _YAML_LOADER
    if _YAML_LOADER is not None:
        return _YAML_LOADER
    import yaml

    class Loader(yaml.SafeLoader):
        def __init__(self, stream: Any, path: str | None):
            super().__init__(stream)
            self._lrd_path = path
            self._lrd_depth = 0
            self._lrd_max_depth = limits.get("depth")
            self._lrd_items = limits.get("items")

        def compose_node(self, parent: Any, index: Any) -> Any:
            self._lrd_depth += 1
            if self._lrd_depth > self._lrd_max_depth:
                raise limits.over("depth", self._lrd_path, "the YAML nests too deeply")
            try:
                return super().compose_node(parent, index)
            finally:
                self._lrd_depth -= 1

        def flatten_mapping(self, node: Any) -> None:
            # merge keys ("<<: [*a, *a]") copy entries: a chain of them doubles each level
            super().flatten_mapping(node)
            self._lrd_items -= len(node.value)
            if self._lrd_items < 0:
                raise limits.over("items", self._lrd_path,
                                  "the YAML's merge keys expand to too many entries")

        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            if isinstance(node, yaml.MappingNode):
                for key_node, _ in node.value:
                    # ints of 19+ digits can collide in a dict's hash table on purpose
                    if getattr(key_node, "tag", None) == _INT_TAG and len(key_node.value) > 18:
                        raise UnusableInput(f"line {key_node.start_mark.line + 1}: a mapping key "
                                            "that is a huge integer", self._lrd_path)
            return super().construct_mapping(node, deep=deep)

    _YAML_LOADER = Loader
    return Loader


def _flow_depth_check(text: str, path: str | None, what: str) -> None:
    """Refuse deep flow nesting (``[[[[...``) before PyYAML's scanner sees it.

    Its scanner keeps a possible simple key per open bracket and rescans them all for
    every token, so thousands of nested brackets cost seconds before the composer's
    depth cap is reached. Brackets in quoted strings and comments are not counted
    (block scalars may overcount: only when they hold over ``depth`` unbalanced ones).
    """
    if text.count("[") + text.count("{") <= limits.get("depth"):
        return
    import re

    text = re.sub(r"(?:^|\s)#.*$", "", re.sub(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\n]|\'\')*\'', "",
                                               text), flags=re.M)
    depth = deepest = 0
    for m in re.finditer(r"[\[\]{}]", text):
        depth = depth + 1 if m.group() in "[{" else max(0, depth - 1)
        deepest = max(deepest, depth)
    if deepest > limits.get("depth"):
        raise limits.over("depth", path, f"the {what} nests too deeply")


def yaml_loads(text: str, path: str | None, what: str = "YAML") -> Any:
    """One YAML document, safely: refuses what :func:`_loader` refuses, then checks the tree."""
    import yaml

    limits.check_size("config_bytes", len(text.encode("utf-8", "replace")), path, f"the {what}")
    _flow_depth_check(text, path, what)
    loader = None
    try:
        loader = _loader()(text, path)  # the reader checks characters as it is built
        obj = loader.get_single_data()
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise NotParsed("YAML", f"not valid YAML{where}", path) from None
    except RecursionError:
        raise limits.over("depth", path, f"the {what} nests too deeply") from None
    except (ValueError, OverflowError, TypeError) as exc:  # !!timestamp out of range, ...
        raise NotParsed("YAML", f"not valid YAML ({type(exc).__name__}: "
                        f"{(str(exc).splitlines() or [''])[0][:120]})", path) from None
    finally:
        if loader is not None:
            loader.dispose()
    limits.check_tree(obj, path, what=f"the {what}")
    return obj


def read_yaml(path: str | os.PathLike[str], what: str = "YAML") -> Any:
    p = str(path)
    return yaml_loads(read_text(p, "config_bytes", what), p, what)


def toml_loads(text: str, path: str | None) -> dict[str, Any]:
    """``tomllib.loads`` with the size and nesting caps; TOMLDecodeError is the caller's."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]

    limits.check_size("config_bytes", len(text.encode("utf-8", "replace")), path, "the TOML")
    try:
        data = tomllib.loads(text)
    except RecursionError:
        raise limits.over("depth", path, "the TOML nests too deeply") from None
    limits.check_tree(data, path, what="the TOML")
    return data



def csv_loads(text: str, path: str | None, what: str = "CSV") -> tuple[list[str], list[list[str]]]:
    """(header, rows) of a CSV text: strict quoting, cells counted against ``items``.

    The stdlib reader keeps its per-field cap (131,072 characters); a row may be
    shorter or longer than the header (the caller pairs cells with names)."""
    import csv
    import io

    budget = limits.get("items")
    rows: list[list[str]] = []
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        for row in reader:
            budget -= len(row) + 1
            if budget < 0:
                raise limits.over("items", path, f"the {what} holds too many cells")
            rows.append(row)
    except csv.Error as exc:
        raise NotParsed("CSV", f"not valid CSV: line {reader.line_num}: {exc}", path) from None
    if not rows or not any(rows[0]):
        raise UnusableInput(f"no header row: expected {what}", path)
    return rows[0], rows[1:]


def read_csv(path: str | os.PathLike[str], what: str = "CSV") -> tuple[list[str], list[list[str]]]:
    p = str(path)
    return csv_loads(read_text(p, "csv_bytes", what), p, what)
