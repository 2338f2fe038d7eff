"""Errors keep the path and the message apart, and callers choose by the error's type,
never by matching or splitting its text."""

from __future__ import annotations

import pytest

from lrdoctor.core.errors import NotParsed, NotText, UnusableInput
from lrdoctor.read.bytes import safetext


def test_path_and_message_are_kept_apart():
    exc = UnusableInput("not valid JSON: Expecting value: line 1", "/x/a: b.json")
    assert exc.path == "/x/a: b.json" and exc.message == "not valid JSON: Expecting value: line 1"
    assert str(exc) == "/x/a: b.json: not valid JSON: Expecting value: line 1"
    assert UnusableInput("bad\nline").message == "bad\\nline"  # one printable line


def test_safetext_says_what_went_wrong_by_type(tmp_path):
    binary = tmp_path / "cfg.yaml"
    binary.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(NotText) as exc:
        safetext.read_text(binary, "config_bytes", "a YAML run config")
    assert exc.value.path == str(binary)
    with pytest.raises(NotParsed) as bad:
        safetext.yaml_loads("a: [1, 2", str(binary))
    assert bad.value.language == "YAML" and bad.value.message.startswith("not valid YAML")
    with pytest.raises(NotParsed) as js:
        safetext.json_loads("{nope", "r.json")
    assert js.value.language == "JSON"


def test_load_config_refuses_a_binary_file_in_one_line(tmp_path):
    from lrdoctor.replay.config import load_config

    f = tmp_path / "run.yaml"
    f.write_bytes(b"\x00\xff\xfe\x80" * 8)
    with pytest.raises(UnusableInput) as exc:
        load_config(f)
    assert exc.value.message == "not a YAML text file (binary content)"
    assert exc.value.path == str(f)


def test_fix_from_replay_names_a_report_that_is_not_json(tmp_path):
    from lrdoctor.repair.policies import _replay_doc

    f = tmp_path / "replay.json"
    f.write_text("{not json")
    with pytest.raises(UnusableInput) as exc:
        _replay_doc(f)
    assert exc.value.message == "not JSON: expected the output of `lrdoctor replay --json`"
