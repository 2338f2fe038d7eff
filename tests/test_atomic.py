"""lrdoctor.atomic: the one temp-sibling + fsync + rename writer every output uses."""

from __future__ import annotations

import os
import stat

import pytest

from lrdoctor.atomic import replacing, write_text


def _mode(p) -> int:
    return stat.S_IMODE(os.stat(p).st_mode)


def test_write_text_replaces_whole_file_with_the_umask_mode(tmp_path):
    target = tmp_path / "out.txt"
    target.write_text("old")
    old = os.umask(0o027)
    try:
        write_text(target, "new")
    finally:
        os.umask(old)
    assert target.read_text() == "new"
    assert _mode(target) == 0o640  # 0666 less the umask, not mkstemp's 0600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.txt"]


def test_a_failed_write_leaves_the_old_file_and_no_temp(tmp_path):
    target = tmp_path / "out.csv"
    target.write_text("old")
    with pytest.raises(RuntimeError), replacing(target) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".csv"  # writers go by the ending
        tmp.write_text("half")
        raise RuntimeError("writer failed")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.csv"]


def test_parents_are_made_only_when_asked(tmp_path):
    deep = tmp_path / "a" / "b" / "x.json"
    with pytest.raises(OSError):
        write_text(deep, "{}")
    write_text(deep, "{}", parents=True)
    assert deep.read_text() == "{}"
