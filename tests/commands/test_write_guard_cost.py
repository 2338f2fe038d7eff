"""Issue 29, items 1-2: the write guard (``lrdoctor.atomic.refuse_checkpoint``) costs the
output's depth, gives a true reason, and runs before the work; a missing input is said first.

The guard once ran discovery (``grouping.run_checkpoints``) under each ancestor of the
output: minutes for an output one level below a busy temporary folder. Now each ancestor
is one listing of its own entries. Layouts: the torch loop sample (``checkpoint_60.pt``,
torch.save) copied into folders, and the HF Trainer sample (``checkpoint-N``)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lrdoctor import atomic
from lrdoctor.cli import app
from tests.helpers.paths import REPO

SAMPLES = REPO / "sample_checkpoints"
TORCH_CKPT = SAMPLES / "torch-microstep" / "checkpoint_60.pt"


class _Calls:
    """Counts the directory listings and stat calls made through ``os``."""

    def __init__(self, monkeypatch) -> None:
        self.n = 0
        for name in ("scandir", "listdir", "stat", "lstat"):
            real = getattr(os, name)
            monkeypatch.setattr(os, name, self._counting(real))

    def _counting(self, real):
        def f(*a, **kw):
            self.n += 1
            return real(*a, **kw)
        return f


def _big_tree(root: Path) -> None:
    """A large tree, with checkpoint-looking files deep inside, that a recursive guard
    would walk: 60 step folders of 4 sub-folders, each with a pickle and a JSON."""
    for i in range(60):
        for j in range(4):
            d = root / f"checkpoint-{i}" / f"part{j}"
            d.mkdir(parents=True)
            shutil.copy(TORCH_CKPT, d / "model.pt")
            (d / "trainer_state.json").write_text("{}")


def test_the_guard_looks_only_at_the_outputs_ancestors(tmp_path, monkeypatch):
    big = tmp_path / "big"
    _big_tree(big)
    empty = tmp_path / "empty"
    empty.mkdir()
    costs = {}
    for name, out in (("empty", empty / "new" / "x.png"), ("big", big / "new" / "x.png"),
                      ("deep", big / "checkpoint-3" / "mine" / "x.png")):
        with monkeypatch.context() as m:
            calls = _Calls(m)
            atomic.refuse_checkpoint(out)  # none of these lies in a checkpoint folder
            costs[name] = calls.n
    # One listing per ancestor (GUARD_LEVELS), never the tree below: the big tree's output
    # costs what the empty folder's does (the recursive guard made thousands of calls).
    assert costs["big"] <= costs["empty"] + 2, costs
    assert costs["deep"] <= costs["empty"] + 2, costs
    assert max(costs.values()) <= 3 * atomic.GUARD_LEVELS, costs


def test_the_reason_is_true(tmp_path):
    """A text file named ``text.pt`` and an empty ``empty.pt`` are no checkpoint (discovery
    calls them "not a checkpoint"); two torch.save files are, and the refusal names them."""
    w = tmp_path / "w"
    w.mkdir()
    (w / "text.pt").write_text("hello")
    (w / "empty.pt").write_bytes(b"")
    assert atomic.checkpoint_holding(w / "x" / "rep" / "index.html") is None
    atomic.write_text(w / "x" / "rep" / "index.html", "ok", parents=True)
    ck = tmp_path / "ck"
    ck.mkdir()
    shutil.copy(TORCH_CKPT, ck / "model.pt")
    shutil.copy(TORCH_CKPT, ck / "optimizer.pt")
    (ck / "notes.txt").write_text("not state")
    with pytest.raises(Exception, match=r"checkpoint folder .*ck \(it holds model\.pt, "
                                        r"optimizer\.pt\)"):
        atomic.refuse_checkpoint(ck / "y" / "index.html")
    # two earlier fix outputs (each with its record beside it) make no checkpoint folder
    fixes = tmp_path / "fixes"
    fixes.mkdir()
    for n in ("a.pt", "b.pt"):
        shutil.copy(TORCH_CKPT, fixes / n)
        (fixes / f"{n}.lrdoctor-fix.json").write_text("{}")
    assert atomic.checkpoint_holding(fixes / "a" / "b" / "trace.csv") is None
    # a workspace with sub-folders of its own (a busy /tmp) is none either
    busy = tmp_path / "busy"
    (busy / "someone").mkdir(parents=True)
    for n in ("x.pt", "y.pt"):
        shutil.copy(TORCH_CKPT, busy / n)
    assert atomic.checkpoint_holding(busy / "mine" / "fixed.pt") is None
    # numbered checkpoints, each a file of its own, make a run folder, not a checkpoint
    run = tmp_path / "run"
    run.mkdir()
    for n in (100, 200):
        shutil.copy(TORCH_CKPT, run / f"ckpt_{n}.pt")
    assert atomic.checkpoint_holding(run / "trace.csv") is None


def test_an_hf_step_folder_is_named_with_what_it_holds(tmp_path):
    hf = tmp_path / "hf"
    shutil.copytree(SAMPLES / "hf-healthy", hf)
    held = atomic.checkpoint_reason(hf / "checkpoint-20" / "page" / "index.html")
    assert held is not None and held.folder == hf / "checkpoint-20"
    assert set(held.because) <= {p.name for p in (hf / "checkpoint-20").iterdir()}


def _cli(argv: list[str], cwd: Path, monkeypatch) -> tuple[int, str]:
    monkeypatch.chdir(cwd)
    r = CliRunner().invoke(app, argv)
    return r.exit_code, r.output


def test_a_missing_input_is_said_before_the_output_and_the_output_before_the_work(
        tmp_path, monkeypatch):
    w = tmp_path / "w"
    w.mkdir()
    shutil.copy(TORCH_CKPT, w / "a.pt")
    shutil.copy(TORCH_CKPT, w / "b.pt")  # two earlier outputs: w reads as a checkpoint
    code, out = _cli(["report", str(w / "nope"), "--out", str(w / "x" / "rep")], tmp_path,
                     monkeypatch)
    assert code == 2 and "no such file or directory" in out and "refused" not in out, out

    def no_work(*a, **kw):
        raise AssertionError("the work ran before the output was checked")

    import lrdoctor.inspect_api
    import lrdoctor.repair.engine
    import lrdoctor.replay

    monkeypatch.setattr(lrdoctor.inspect_api, "inspect_path", no_work)
    monkeypatch.setattr(lrdoctor.replay, "replay_full", no_work)
    monkeypatch.setattr(lrdoctor.repair.engine, "plan_fix", no_work)
    for argv in (
            ["replay", "-c", str(REPO / "examples" / "skyrl-trainer.yaml"), "--fast",
             "--trace", str(w / "a" / "b" / "trace.csv")],
            ["inspect", str(TORCH_CKPT), "--plot", str(w / "p" / "lr.png")],
            ["fix", str(TORCH_CKPT), "--out", str(w / "f" / "fixed.pt"), "--policy",
             "rescale", "--k", "4"],
            ["check", "--inspect", str(TORCH_CKPT), "--report", str(w / "page")]):
        code, out = _cli(argv, tmp_path, monkeypatch)
        assert code == 2 and "never writes into a checkpoint" in out, (argv, out)
        assert "a.pt, b.pt" in out, (argv, out)
