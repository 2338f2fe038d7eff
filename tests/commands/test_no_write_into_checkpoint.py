"""Issue 23, item 5: every command that writes refuses to write into a checkpoint folder,
and the guard lives in the library writer (``lrdoctor.atomic.refuse_checkpoint``, called
by ``atomic.replacing``, the report folder and ``fix``'s output), not in one command.

Layouts: the HF Trainer sample (``checkpoint-N`` folders), the Megatron sample (an
``iter_N`` folder whose files sit in ``mp_rank_XX/``; the guard was not written with it in
mind) and a DCP folder saved by torch.distributed.checkpoint itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lrdoctor import atomic
from lrdoctor.core.errors import UnusableInput
from tests.helpers.paths import REPO

SAMPLES = REPO / "sample_checkpoints"
SKYRL = REPO / "examples" / "skyrl-trainer.yaml"


@pytest.fixture
def runs(tmp_path) -> dict[str, Path]:
    hf = tmp_path / "hf"
    shutil.copytree(SAMPLES / "hf-healthy", hf)
    meg = tmp_path / "meg"
    shutil.copytree(SAMPLES / "megatron-healthy", meg)
    return {"hf": hf, "meg": meg}


def _tree(p: Path) -> dict[str, bytes]:
    return {str(f.relative_to(p)): f.read_bytes() for f in sorted(p.rglob("*")) if f.is_file()}


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lrdoctor", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


def test_every_writing_command_refuses_a_checkpoint_folder(runs, tmp_path):
    hf, meg = runs["hf"], runs["meg"]
    ck = hf / "checkpoint-20"
    it = meg / "iter_0000400"
    before = {"hf": _tree(hf), "meg": _tree(meg)}
    cases = {
        "report": (["report", str(hf), "--out", str(ck)], ck),
        "report (Megatron iter folder)": (["report", str(meg), "--out", str(it / "page")], it),
        "check --report": (["check", "--inspect", str(hf), "--report", str(ck)], ck),
        "check --report (Megatron rank folder)": (
            ["check", "--inspect", str(hf), "--report", str(it / "mp_rank_00")], it),
        "replay --trace": (["replay", "--config", str(SKYRL), "--fast", "--trace",
                            str(ck / "trace.csv")], ck),
        "replay --plot": (["replay", "--config", str(SKYRL), "--fast", "--plot",
                           str(it / "lr.png")], it),
        "inspect --plot": (["inspect", str(meg), "--plot", str(ck / "lr.png")], ck),
        "fix": (["fix", str(ck), "--out", str(hf / "checkpoint-10" / "fixed"), "--policy",
                 "rescale", "--k", "2"], hf / "checkpoint-10"),
    }
    for name, (argv, where) in cases.items():
        p = _run(argv, tmp_path)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2, (name, p.stderr)
        assert len(lines) == 1 and "never writes into" in lines[0], (name, p.stderr)
        assert "Traceback" not in p.stderr
        assert str(where) in lines[0] or str(where.relative_to(tmp_path)) in lines[0] \
            or where.name in lines[0], (name, lines)
    assert _tree(hf) == before["hf"] and _tree(meg) == before["meg"]
    assert not list(tmp_path.rglob(".*lrdoctor-tmp*"))


def test_the_guard_is_the_writers(runs):
    """A library caller gets the same refusal from the writer itself."""
    ck = runs["hf"] / "checkpoint-20"
    with pytest.raises(UnusableInput, match="never writes into a checkpoint"):
        atomic.write_text(ck / "notes.txt", "x")
    with pytest.raises(UnusableInput, match="never writes into a checkpoint"):
        atomic.write_text(runs["meg"] / "iter_0000200" / "mp_rank_01" / "x.txt", "x")
    assert not (ck / "notes.txt").exists()
    # a run folder, a new folder beside the checkpoints, or a folder holding one
    # checkpoint file are not checkpoint folders
    atomic.write_text(runs["hf"] / "summary.txt", "ok")
    atomic.write_text(runs["hf"] / "pages" / "index.html", "ok", parents=True)
    one = runs["hf"].parent / "single"
    one.mkdir()
    shutil.copy(SAMPLES / "torch-microstep" / "checkpoint_60.pt", one)
    atomic.write_text(one / "trace.csv", "ok")
    # a folder with a checkpoint folder and a stray pickle beside it is no checkpoint
    shutil.copy(SAMPLES / "torch-microstep" / "checkpoint_60.pt", runs["hf"] / "stray.bin")
    atomic.write_text(runs["hf"] / "summary.txt", "ok")

def test_a_dcp_folder_is_a_checkpoint_folder(tmp_path):
    import torch
    import torch.distributed.checkpoint as dcp

    d = tmp_path / "step-5"
    dcp.save({"w": torch.zeros(3), "sched": {"last_epoch": 5}},
             storage_writer=dcp.FileSystemWriter(str(d)))
    assert atomic.checkpoint_holding(d / "x.png") == d
    with pytest.raises(UnusableInput):
        atomic.write_bytes(d / "x.png", b"")


def test_a_report_page_never_goes_inside_its_input_whichever_command(runs, tmp_path):
    """`report --out RUN/page` was refused by the command while `check --inspect RUN
    --report RUN/page` wrote into the run folder: the refusal is now the page writer's
    (``atomic.refuse_inside_inputs`` from ``write_report_files``), so both refuse, and so
    does a library caller. Layout: the Megatron sample (a run folder of iter_N folders)."""
    from lrdoctor.inspect_api import inspect_path
    from lrdoctor.render.html import write_report_files

    meg = runs["meg"]
    before = _tree(meg)
    for argv in (["report", str(meg), "--out", str(meg / "page")],
                 ["check", "--inspect", str(meg), "--report", str(meg / "page")]):
        p = _run(argv, tmp_path)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1, (argv, p.stderr)
        assert "never writes into its input" in lines[0] and str(meg) in lines[0], lines
    with pytest.raises(UnusableInput, match="never writes into its input"):
        write_report_files(inspect_path(str(meg)), meg / "page", inputs=[meg])
    with pytest.raises(UnusableInput, match="never writes into its input"):  # a report's target
        write_report_files(inspect_path(str(meg)), meg / "iter_0000400" / "page")
    assert _tree(meg) == before and not (meg / "page").exists()
    # beside the run, it is written
    index, _ = write_report_files(inspect_path(str(meg)), tmp_path / "page", inputs=[meg])
    assert index.is_file()


def test_an_output_beside_the_checkpoint_named_through_dotdot_is_not_inside_it(runs, monkeypatch):
    """From inside a checkpoint folder, ``--out ../out/x.pt`` lands beside it (a fresh
    folder): the guard resolves '..' before walking up, where the textual parents of
    ``ckpt/../out`` once led back into ``ckpt`` and refused a legal output."""
    ck = runs["hf"] / "checkpoint-20"
    monkeypatch.chdir(ck)
    assert atomic.checkpoint_holding("../out/fixed.pt") is None
    assert atomic.checkpoint_holding("../checkpoint-10/x.pt") == runs["hf"] / "checkpoint-10"
    assert atomic.checkpoint_holding("x.pt") == ck
