"""Never silent: a path in which no checkpoint is found is refused with what was scanned.

The survey (``refusal.survey``) reuses discovery's one bounded walk and its classification;
these tests write the files with the frameworks' own writers (``torch.save``,
``safetensors``) and read the one-line message and the structured record back.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.inspect_api import inspect_path
from lrdoctor.read import layouts as formats
from lrdoctor.read.scan import listing, refusal


def refused(path: Path) -> UnusableInput:
    with pytest.raises(UnusableInput) as exc:
        formats.detect(path)
    line = str(exc.value)
    assert "\n" not in line and line.startswith(f"{path}: not a checkpoint lrdoctor recognises")
    assert line.endswith(f"(use --format to force one of: {', '.join(formats.FORMAT_MODULES)})")
    return exc.value


def test_empty_folder_says_it_holds_no_files(tmp_path):
    (tmp_path / "empty").mkdir()
    exc = refused(tmp_path / "empty")
    assert "scanned 1 folder: no files" in str(exc)
    assert exc.detail["scanned"] == {"path": str(tmp_path / "empty"), "files": 0, "folders": 1,
                                     "hidden": 0, "cut_by_bound": None, "seen": [],
                                     "not_described": 0}


def test_unrelated_files_each_say_what_they_are(tmp_path):
    d = tmp_path / "e"
    (d / "sub").mkdir(parents=True)
    (d / "notes.txt").write_text("hi\n")
    (d / "sub" / "x.json").write_text(json.dumps({"a": 1, "b\nc": 2}))
    (d / "blob").write_bytes(b"\x00\x01 not a pickle")
    (d / ".cache").write_text("x")
    exc = refused(d)
    line = str(exc)
    assert "scanned 3 files in 2 folders: " in line
    # The state-bearing kinds first: the JSON sidecar, then the unknown blob, then text.
    assert line.index("sub/x.json: JSON with keys [a, b\\nc], no scheduler/optimizer/trainer "
                      "state") < line.index("blob: not torch/pickle, JSON or YAML") \
        < line.index("notes.txt: not checkpoint state (.txt)")
    assert "1 hidden name skipped" in line
    seen = exc.detail["scanned"]["seen"]
    assert [s["file"] for s in seen] == ["sub/x.json", "blob", "notes.txt"]
    assert exc.detail["scanned"]["files"] == 3 and exc.detail["scanned"]["folders"] == 2


def test_folder_of_safetensors_weights(tmp_path):
    import torch
    from safetensors.torch import save_file

    d = tmp_path / "weights"
    d.mkdir()
    save_file({"w": torch.zeros(2, 2)}, str(d / "model.safetensors"))
    (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 8}))
    line = str(refused(d))
    assert ("model.safetensors: weights only (safetensors), no scheduler/optimizer/trainer "
            "state; config.json: JSON with keys [model_type, hidden_size]") in line
    # The one file named on its own: what it is, no folder count.
    assert str(refused(d / "model.safetensors")).split("recognises: ")[1].startswith(
        "looked at 1 file: weights only (safetensors)")


def test_torch_file_of_tensors_only_names_what_it_holds(tmp_path):
    """A torch.save of weights is read (a pickle) but holds no training state: unusable
    input (exit 2, like an empty folder), the one line saying what it is."""
    import torch

    d = tmp_path / "run"
    d.mkdir()
    torch.save({"w": torch.zeros(2), "b": torch.ones(3)}, d / "model.pt")
    what = "weights only: a torch pickle holding 2 tensors, no scheduler/optimizer/trainer state"
    with pytest.raises(UnusableInput) as exc:
        inspect_path(d)
    assert "model.pt: no training state here" in str(exc.value)
    assert f"looked at 1 file: {what}" in str(exc.value)
    # A single tensor, not a dict: refused, saying what it is.
    torch.save(torch.zeros(3), tmp_path / "t.pt")
    with pytest.raises(UnusableInput, match=r"t\.pt: expected a dict of training state, found "
                       r"weights only: a torch pickle holding 1 tensor"):
        inspect_path(tmp_path / "t.pt")


def test_torch_file_holding_an_unrelated_dict(tmp_path):
    import torch

    torch.save({"foo": 1, "bar": "x", "baz": [1, 2], "q1": 0, "q2": 0, "q3": 0},
               tmp_path / "a.pt")
    with pytest.raises(UnusableInput) as exc:
        inspect_path(tmp_path / "a.pt")
    assert ("a.pt: no training state here (no scheduler, optimizer or trainer counters): "
            "looked at 1 file: a torch pickle with keys [foo, bar, baz, q1, q2, +1 more], "
            "no scheduler/optimizer/trainer state") in str(exc.value)
    # The survey reads it the same way when asked directly.
    sv = refusal.survey(tmp_path)
    assert sv.seen == [("a.pt", "a torch pickle with keys [foo, bar, baz, q1, q2, +1 more], "
                                "no scheduler/optimizer/trainer state")]


def test_names_are_capped_grouped_and_counted(tmp_path):
    """A model folder: its weight shards are one entry, the rest counted, not listed."""
    import numpy as np
    from safetensors.numpy import save_file

    for i in range(1, 5):
        save_file({"w": np.zeros(2, dtype=np.float32)},
                  str(tmp_path / f"model-0000{i}-of-00004.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    for i in range(12):
        (tmp_path / f"n{i:02d}.log").write_text("x")
    sv = refusal.survey(tmp_path)
    assert len(sv.seen) == refusal.SURVEY_READ
    assert sv.line() == (
        "scanned 17 files in 1 folder: model-00001-of-00004.safetensors (+3 alike): weights "
        "only (safetensors), no scheduler/optimizer/trainer state; config.json: JSON with keys "
        "[model_type], no scheduler/optimizer/trainer state; n00.log (+2 alike): not "
        "checkpoint state (.log); +9 more")
    assert sv.to_dict()["not_described"] == 17 - refusal.SURVEY_READ


def test_scan_cut_by_a_bound_is_said(tmp_path):
    deep = tmp_path.joinpath(*[f"l{i}" for i in range(listing.MAX_DEPTH + 2)])
    deep.mkdir(parents=True)
    (deep / "x.json").write_text("{}")
    sv = refusal.survey(tmp_path)
    assert sv.files == 0 and sv.folders == listing.MAX_DEPTH + 1
    assert sv.cut == f"1 folder deeper than {listing.MAX_DEPTH} levels not looked at"
    assert sv.line().endswith("scan cut by a bound: " + sv.cut)
    for i in range(5):
        (tmp_path / f"s{i}.json").write_text("{}")
    sv = refusal.survey(tmp_path, max_files=3)
    assert sv.cut == "stopped after 3 checkpoint-looking files" and sv.files == 4


def test_format_names_have_one_home():
    """Every module under lrdoctor/read/layouts is a registered layout (forceable, or recognised
    by content); the names --format takes, its help and the refusal all come from
    FORMAT_MODULES."""
    here = Path(formats.__file__).parent
    modules = {p.stem for p in here.glob("*.py") if not p.stem.startswith("_")}
    assert modules == {e.name for e in formats.LAYOUTS}
    for name in formats.FORMAT_MODULES:
        mod = formats.get(name)
        assert callable(mod.detect) and callable(mod.read) and callable(mod.find_checkpoints)
    for name in formats.by_content():
        with pytest.raises(UnusableInput, match="use --format torchsave"):
            formats.get(name)
    assert formats.get("torch") is formats.get("torchsave")
    from lrdoctor.commands._common import _format_help

    assert formats.forceable() in _format_help()


@pytest.mark.parametrize("forced, none_here", [
    ("hf", "no checkpoint-N/trainer_state.json here"),
    ("lightning", "no Lightning *.ckpt files here"),
    ("torchtitan", "no torchtitan step-N checkpoint folders here"),
])
def test_forced_format_that_finds_nothing_says_what_is_there(tmp_path, forced, none_here):
    """--format FMT on another layout: the reader's 'none here' names what the files are,
    so the user sees the state is there, in another layout."""
    import torch

    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=1e-3)
    sched = torch.optim.lr_scheduler.LinearLR(opt, total_iters=10)
    torch.save(sched.state_dict(), tmp_path / "sched.pt")
    with pytest.raises(UnusableInput) as exc:
        inspect_path(tmp_path, format=forced)
    assert str(exc.value) == (f"{tmp_path}: {none_here}: scanned 1 file in 1 folder: sched.pt: "
                              "a torch pickle holding torch scheduler state at top level")
    assert exc.value.detail["scanned"]["seen"][0]["file"] == "sched.pt"
