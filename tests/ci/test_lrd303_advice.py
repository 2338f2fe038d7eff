"""LRD303's fix follows the cause of the refusal, read from the error's type
(:func:`lrdoctor.rules.lrd303_check_input_unusable.advice`), never "Correct the path."
for every unusable input.

Inputs written with torch's own ``torch.save`` (then cut short), an empty file, a pickle
that asks for ``os.system``, a folder of junk and a missing path; the fleet path
(``--jobs 2``) carries the advice back from the worker processes as plain data."""

from __future__ import annotations

import json
import pickle

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.extras import MissingExtra
from lrdoctor.rules.lrd303_check_input_unusable import GENERIC_FIX, advice
from tests.commands.test_cli_convention import _project, lrd
from tests.helpers.docs import reports as doc_reports


@pytest.fixture()
def bad_inputs(tmp_path):
    torch = pytest.importorskip("torch")
    d = tmp_path / "fleet"
    d.mkdir()
    good = tmp_path / "good.pt"
    torch.save({"optimizer": {"state": {}, "param_groups": [{"lr": 0.1}]}, "step": 3}, good)
    raw = good.read_bytes()
    (d / "a-truncated.pt").write_bytes(raw[: len(raw) // 2])
    (d / "b-empty.pt").write_bytes(b"")
    (d / "c-hostile.pt").write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("hello")
    return d, junk, tmp_path / "missing.pt"


def _fixes(doc) -> dict[str, str]:
    return {r["target"].rsplit("/", 1)[-1]: f["fix"]
            for r in doc_reports(doc) for f in r["findings"] if f["code"] == "LRD303"}


def test_check_advice_follows_the_cause(bad_inputs):
    fleet, junk, missing = bad_inputs
    p = lrd("check", "--inspect", f"{fleet}/*.pt", "--inspect", junk, "--inspect", missing,
            "--jobs", "2", "--json")
    assert p.returncode == 2, p.stderr
    fixes = _fixes(json.loads(p.stdout))
    assert set(fixes) == {"a-truncated.pt", "b-empty.pt", "c-hostile.pt", "junk", "missing.pt"}
    assert "truncated or corrupt" in fixes["a-truncated.pt"]
    assert fixes["b-empty.pt"] == fixes["a-truncated.pt"]
    assert "--allow-unsafe-global os.system" in fixes["c-hostile.pt"]
    assert "--format" in fixes["junk"] and "Correct the path" not in fixes["junk"]
    assert fixes["missing.pt"].startswith("Correct the path")
    assert len(set(fixes.values())) == 4  # four causes, four different pieces of advice


def test_inspect_json_refusal_carries_the_advice(bad_inputs):
    fleet, _, _ = bad_inputs
    p = lrd("inspect", fleet / "c-hostile.pt", "--json")
    assert p.returncode == 2
    (f,) = json.loads(p.stdout)["findings"]
    assert "--allow-unsafe-global os.system" in f["fix"]


def test_a_config_error_names_the_key(tmp_path):
    proj = _project(tmp_path, '[tool.lrdoctor]\nfoo = 1\n')
    doc = json.loads(lrd("check", "--json", cwd=proj).stdout)
    (f,) = doc_reports(doc)[0]["findings"]
    assert f["code"] == "LRD303" and "tool.lrdoctor" in f["fix"] and "pyproject.toml" in f["fix"]


def test_a_read_limit_names_its_variable(bad_inputs, tmp_path):
    import torch

    big = tmp_path / "big.pt"
    torch.save({"optimizer": {"state": {}, "param_groups": [{"lr": 0.1}]},
                "pad": list(range(5000))}, big)
    p = lrd("check", "--inspect", big, "--json", env={"LRDOCTOR_MAX_PICKLE_OPS": "1000"})
    (f,) = doc_reports(json.loads(p.stdout))[0]["findings"]
    assert f["code"] == "LRD303" and "LRDOCTOR_MAX_PICKLE_OPS" in f["message"], f
    assert "raise the environment variable LRDOCTOR_MAX_PICKLE_OPS" in f["fix"]


def test_advice_reads_the_type_never_the_message():
    # A missing extra: its pip install, whatever the message says.
    assert "pip install 'lrdoctor[plots]'" in advice(MissingExtra("matplotlib", "--plot"))
    # A plain refusal whose text looks like another cause gets the generic advice.
    assert advice(UnusableInput("no such file or directory; truncated pickle", "x.pt")) \
        == GENERIC_FIX
    assert pickle.loads(pickle.dumps(advice(UnusableInput("m"))))  # plain data
