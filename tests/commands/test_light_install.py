"""The light core install: `pip install .` into an empty venv, no torch, no matplotlib.

inspect, check, report, fix and replay --fast work there; what needs an extra is one
line naming the pip install to run. Slow (a venv and a pip install): marked `slow`.
"""

from __future__ import annotations

import json
import subprocess
import venv
from pathlib import Path

import pytest

from tests.helpers.docs import reports as doc_reports
from tests.helpers.paths import REPO

ROOT = REPO
SAMPLES = ROOT / "sample_checkpoints"
EXAMPLES = ROOT / "examples"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def light(tmp_path_factory) -> Path:
    """An empty venv with `pip install .` and nothing else: its bin directory."""
    where = tmp_path_factory.mktemp("light") / "venv"
    venv.create(where, with_pip=True, system_site_packages=False)
    py = where / "bin" / "python"
    p = subprocess.run([str(py), "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        str(ROOT)], capture_output=True, text=True, timeout=1200)
    if p.returncode != 0:
        text = p.stderr + p.stdout
        if any(s in text for s in ("No matching distribution", "Could not find a version",
                                   "NewConnectionError", "Network is unreachable")):
            pytest.skip("no package index reachable to build the light venv: "
                        + text.strip().splitlines()[-1][:200])
        raise AssertionError(text[-2000:])
    for heavy in ("torch", "matplotlib"):
        q = subprocess.run([str(py), "-c", f"import {heavy}"], capture_output=True, text=True)
        assert q.returncode != 0, f"{heavy} came with the core install"
    return where / "bin"


def lrd(bin_dir: Path, *args, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(bin_dir / "lrdoctor"), *map(str, args)], cwd=cwd,
                          capture_output=True, text=True, timeout=600,
                          env={"PATH": f"{bin_dir}:/usr/bin:/bin", "COLUMNS": "120"})


def one_line(p: subprocess.CompletedProcess, *words: str) -> None:
    assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and all(w in lines[0] for w in words), lines


SAMPLE_CODES = {"hf-healthy": 0, "megatron-healthy": 0, "roll-overshoot": 1,
                "torch-microstep": 1}


@pytest.mark.parametrize("sample", sorted(SAMPLE_CODES))
def test_inspect_and_fix_every_sample_without_torch(light, sample, tmp_path):
    p = lrd(light, "inspect", SAMPLES / sample, "--all", "--json", cwd=tmp_path)
    assert p.returncode == SAMPLE_CODES[sample], p.stderr
    docs = doc_reports(json.loads(p.stdout))
    assert docs, "no report"
    fixed = tmp_path / "fixed"
    p = lrd(light, "fix", SAMPLES / sample, "--out", fixed, cwd=tmp_path)
    if SAMPLE_CODES[sample] == 0:
        assert p.returncode == 0 and "nothing to fix" in p.stdout, p.stderr
        return
    # torch.save zip files are rewritten without torch (lrdoctor.repair.torchzip).
    assert p.returncode == 0, p.stderr
    again = lrd(light, "inspect", fixed, "--json", cwd=tmp_path)
    assert again.returncode == 0, again.stdout[-2000:]


def test_check_report_and_replay_fast_without_torch(light, tmp_path):
    p = lrd(light, "check", "--inspect", f"{SAMPLES}/*/", "--json", cwd=tmp_path)
    assert p.returncode == 1, p.stderr  # the two broken samples fail the gate
    codes = {f["code"] for d in doc_reports(json.loads(p.stdout)) for f in d["findings"]}
    assert {"LRD101", "LRD103"} <= codes and "LRD303" not in codes
    p = lrd(light, "report", *(SAMPLES / s for s in sorted(SAMPLE_CODES)), "-o", "rep",
            cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    page = (tmp_path / "rep" / "index.html").read_text()
    assert "pip install &#x27;lrdoctor[plots]&#x27;" in page or "lrdoctor[plots]" in page
    p = lrd(light, "replay", "-c", EXAMPLES / "skyrl-stepwise.yaml", "--fast", "--json",
            cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["summary"]["engine"] == "fast"
    # The default says its torch cross-check did not run, how to run it, what it needs.
    p = lrd(light, "replay", "-c", EXAMPLES / "skyrl-stepwise.yaml", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    text = " ".join(p.stdout.split())
    assert "real execution: not run: not asked for (--cross-check" in text, p.stdout
    assert "torch, which is not installed: pip install 'lrdoctor[torch]'" in text, p.stdout


def test_a_missing_extra_is_one_line_naming_the_install(light, tmp_path):
    for flag in ("--torch", "--cross-check"):  # the README's promise, for both (issue 29)
        one_line(lrd(light, "replay", "-c", EXAMPLES / "skyrl-stepwise.yaml", flag,
                     cwd=tmp_path), f"replay {flag} needs torch", "pip install 'lrdoctor[torch]'")
    one_line(lrd(light, "inspect", SAMPLES / "hf-healthy", "--plot", "x.png", cwd=tmp_path),
             "needs matplotlib", "pip install 'lrdoctor[plots]'")
    assert not (tmp_path / "x.png").exists()


def test_the_core_dependencies_hold_no_torch_or_matplotlib():
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = {d.split(">")[0].split(";")[0].strip().lower() for d in project["dependencies"]}
    assert not core & {"torch", "matplotlib"}, core
    extras = project["optional-dependencies"]
    assert any(d.startswith("torch") for d in extras["torch"])
    assert any(d.startswith("matplotlib") for d in extras["plots"])
    assert set(extras["all"]) >= set(extras["torch"]) | set(extras["plots"])
