"""`fix --out` never deletes what the user did not ask to replace (issue 12, item 0).

Each data-loss shape once reported: a file input whose folder is `--out`, a rank file
whose run folder is `--out`, an `--out` inside the input, concurrent runs to one `--out`,
an existing output replaced only with --force and only after the new one is complete,
and the leftovers of a killed run removed by the next one.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.repair import MANIFEST
from lrdoctor.repair.writer import Change, OutputLock, write_output
from tests.helpers.paths import REPO

ROOT = REPO
SAMPLES = ROOT / "sample_checkpoints"


def tree(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def fix(*args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lrdoctor", "fix", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, timeout=300)


def one_line_refusal(p: subprocess.CompletedProcess, *words: str) -> str:
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    assert "Traceback" not in p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])
    return lines[0]


@pytest.fixture
def torch_run(tmp_path: Path) -> Path:
    """A folder holding a one-file torch checkpoint and siblings the user cares about."""
    run = tmp_path / "ckpt"
    run.mkdir()
    shutil.copy(SAMPLES / "torch-microstep" / "checkpoint_60.pt", run / "checkpoint_1000.pt")
    (run / "notes.txt").write_text("my experiment notes\n")
    (run / "checkpoint_500.pt").write_bytes((run / "checkpoint_1000.pt").read_bytes())
    return run


@pytest.mark.parametrize("force", [False, True])
def test_out_is_the_folder_holding_a_file_input(torch_run, tmp_path, force):
    before = tree(torch_run)
    p = fix(torch_run / "checkpoint_1000.pt", "--out", torch_run, "--policy", "rescale",
            "--k", "4", *(["--force"] if force else []), cwd=tmp_path)
    one_line_refusal(p, "--out contains the input", str(torch_run))
    assert tree(torch_run) == before


def test_out_is_an_ancestor_of_the_input_folder(tmp_path):
    """A Megatron rank file with --out set to the whole run folder."""
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "megatron-healthy", run)
    before = tree(run)
    rank = run / "iter_0000400" / "mp_rank_00" / "model_optim_rng.pt"
    for out in (run, run / "iter_0000400", tmp_path):
        p = fix(rank, "--out", out, "--policy", "rescale", "--k", "2", "--force", cwd=tmp_path)
        one_line_refusal(p, "--out contains the input")
        assert tree(run) == before


def test_out_inside_the_input_folder_and_through_a_symlink(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "roll-overshoot", run)
    before = tree(run)
    ck = run / "actor_train" / "checkpoint-299"
    p = fix(ck, "--out", ck / "fixed", "--force", "--policy", "nominal", cwd=tmp_path)
    one_line_refusal(p, "inside the input")
    link = tmp_path / "link"
    link.symlink_to(run, target_is_directory=True)
    p = fix(ck, "--out", link, "--force", "--policy", "nominal", cwd=tmp_path)
    one_line_refusal(p, "--out contains the input")
    assert tree(run) == before


def test_existing_output_kept_without_force_and_replaced_whole_with_it(torch_run, tmp_path):
    out = tmp_path / "fixed"
    out.mkdir()
    (out / "keep.txt").write_text("older output")
    p = fix(torch_run / "checkpoint_1000.pt", "--out", out, "--policy", "rescale", "--k", "4",
            cwd=tmp_path)
    one_line_refusal(p, "--force")
    assert (out / "keep.txt").read_text() == "older output"
    p = fix(torch_run / "checkpoint_1000.pt", "--out", out, "--policy", "rescale", "--k", "4",
            "--force", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert not (out / "keep.txt").exists()
    assert sorted(x.name for x in tmp_path.iterdir()) == [
        "ckpt", "fixed", "fixed." + MANIFEST]  # nothing hidden


def test_failed_verification_leaves_the_old_output(tmp_path):
    src = tmp_path / "ck"
    src.mkdir()
    (src / "state.json").write_text(json.dumps({"a": 1}))
    out = tmp_path / "out"
    out.mkdir()
    (out / "old").write_text("previous result")

    def refuse(_tmp: Path) -> None:
        raise UnusableInput("verification failed")

    with pytest.raises(UnusableInput, match="verification"):
        write_output(src, out, ["state.json"], [Change("state.json", ("a",), 1, 2, kind="json")],
                     {"command": "fix"}, force=True, verify=refuse)
    assert (out / "old").read_text() == "previous result"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["ck", "out"]


def test_concurrent_runs_to_one_out_cannot_both_succeed(tmp_path):
    """While one fix holds the output, a second is refused at once; the first's output
    is untouched. The lock is the kernel's (flock): a killed holder frees it."""
    src = tmp_path / "ck"
    src.mkdir()
    (src / "state.json").write_text(json.dumps({"a": 1}))
    out = tmp_path / "out"
    ch = [Change("state.json", ("a",), 1, 2, kind="json")]
    with OutputLock(out):
        with pytest.raises(UnusableInput, match="another `lrdoctor fix` is writing"):
            write_output(src, out, ["state.json"], ch, {"command": "fix"})
    assert not out.exists()
    write_output(src, out, ["state.json"], ch, {"command": "fix"})
    assert json.loads((out / "state.json").read_text()) == {"a": 2}
    # An output that appeared meanwhile (another process, no lock) is never removed
    # without --force: the run fails at publish time and the other output stays.
    out2 = tmp_path / "out2"

    def someone_else_writes(_tmp: Path) -> None:
        out2.mkdir()
        (out2 / "theirs").write_text("not ours")

    with pytest.raises(UnusableInput, match="appeared"):
        write_output(src, out2, ["state.json"], ch, {"command": "fix"},
                     verify=someone_else_writes)
    assert (out2 / "theirs").read_text() == "not ours"


def test_second_process_is_refused_while_the_lock_is_held(tmp_path, torch_run):
    out = tmp_path / "fixed"
    lock = tmp_path / f".{out.name}.lrdoctor-lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    try:
        p = fix(torch_run / "checkpoint_1000.pt", "--out", out, "--policy", "rescale",
                "--k", "4", cwd=tmp_path)
        one_line_refusal(p, "another `lrdoctor fix` is writing", str(out))
    finally:
        os.close(fd)
    assert not out.exists()
    p = fix(torch_run / "checkpoint_1000.pt", "--out", out, "--policy", "rescale", "--k", "4",
            cwd=tmp_path)
    assert p.returncode == 0, p.stderr


def test_next_run_removes_what_a_killed_run_left(tmp_path, torch_run):
    """Hidden holders of this output name and an orphan one-file manifest are stale once
    the lock is ours; the next run removes them and says so."""
    out = tmp_path / "fixed.pt"
    stale = tmp_path / f".{out.name}.lrdoctor-tmp-999999-abcd"
    (stale / out.name).mkdir(parents=True)
    (stale / out.name / "big").write_bytes(b"x" * 1000)
    orphan = out.with_name(out.name + "." + MANIFEST)
    orphan.write_text(json.dumps({"lrdoctor": "0.1.0", "command": "fix"}))
    other = tmp_path / ".another.lrdoctor-tmp-1-x"  # another output's: not ours to touch
    other.mkdir()
    p = fix(torch_run / "checkpoint_1000.pt", "--out", out, "--policy", "rescale", "--k", "4",
            cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert not stale.exists()
    assert other.exists()
    assert "interrupted earlier fix" in p.stderr and stale.name in p.stderr
    assert orphan.is_file() and json.loads(orphan.read_text())["changed_files"]


def test_report_out_refuses_a_checkpoint_folder(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(SAMPLES / "hf-healthy", run)
    before = tree(run)
    for out in (run / "checkpoint-20", run / "report", run):
        p = subprocess.run([sys.executable, "-m", "lrdoctor", "report", str(run),
                            "--out", str(out)], cwd=tmp_path, capture_output=True, text=True,
                           timeout=300)
        one_line_refusal(p, str(out), "never")
        assert tree(run) == before and not (run / "report").exists()
    p = subprocess.run([sys.executable, "-m", "lrdoctor", "report", str(run / "checkpoint-20"),
                        "--out", str(run / "checkpoint-10")], cwd=tmp_path, capture_output=True,
                       text=True, timeout=300)
    one_line_refusal(p, "checkpoint folder")
    assert tree(run) == before
