"""SIGKILL `lrdoctor fix` mid-write: no partial output under the final name, input untouched."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from lrdoctor.repair import MANIFEST
from tests.helpers.fix_support import megatron_run, tree_hash

pytestmark = [pytest.mark.frameworks, pytest.mark.slow]


def fix_cmd(src, out):
    return [sys.executable, "-m", "lrdoctor", "fix", str(src), "--out", str(out)]


def wait_for_temp(parent, name, p):
    """Block until the write phase has begun (the hidden temporary sibling exists)."""
    deadline = time.monotonic() + 120
    while not list(parent.glob(f".{name}.lrdoctor-tmp-*")) and p.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    return time.monotonic()


def assert_complete(out, src):
    """A present output is the whole output: every file, matching its manifest."""
    doc = json.loads((out / MANIFEST).read_text())
    want = {"latest_checkpointed_iteration.txt", MANIFEST} | {
        str(p.relative_to(src)) for p in src.rglob("*.pt")}
    assert {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()} == want
    for c in doc["changed_files"]:
        assert hashlib.sha256((out / c["file"]).read_bytes()).hexdigest() == c["sha256"]
    for p in src.rglob("*"):
        if p.is_file() and str(p.relative_to(src)) not in {c["file"] for c in doc["changed_files"]}:
            assert (out / p.relative_to(src)).read_bytes() == p.read_bytes()


def test_sigkill_at_any_moment_leaves_no_partial_output(tmp_path):
    src = megatron_run(tmp_path / "run", width=1200)  # ~2 x 17 MB rank files
    size = sum(p.stat().st_size for p in src.rglob("*") if p.is_file())
    assert size > 30e6
    before = tree_hash(src)
    env = dict(os.environ, PYTHONWARNINGS="ignore")

    # Reference run: how long the write phase lasts (temporary sibling -> final name).
    ref = tmp_path / "ref"
    p = subprocess.Popen(fix_cmd(src, ref), env=env, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    started = wait_for_temp(tmp_path, "ref", p)
    while not ref.exists() and p.poll() is None:
        time.sleep(0.002)
    window = time.monotonic() - started
    assert p.wait(timeout=300) == 0
    assert_complete(ref, src)

    mid_write = 0
    for i, frac in enumerate((0.0, 0.2, 0.5, 0.8, 1.5)):
        out = tmp_path / f"out{i}"
        p = subprocess.Popen(fix_cmd(src, out), env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        wait_for_temp(tmp_path, f"out{i}", p)
        time.sleep(window * frac)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
        if out.exists():
            assert_complete(out, src)
        else:
            mid_write += 1
            assert list(tmp_path.glob(f".out{i}.lrdoctor-tmp-*"))  # only the hidden temp
        assert tree_hash(src) == before
    assert mid_write >= 2  # kills landed inside the write, not only after it

    # A run after the kills still succeeds next to the leftovers.
    done = subprocess.run(fix_cmd(src, tmp_path / "final"), env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert_complete(tmp_path / "final", src)
    assert tree_hash(src) == before
