"""Issue 29 item 11: one JSON schema for every command (docs/json-schema.json, docs/cli.md).

Each command's real ``--json`` on the committed samples (a HF Trainer run, a torch.save
checkpoint whose scheduler stepped per micro-batch) and on the CI test project (a
Megatron checkpoint and a replayed run config): every document validates, carries the
schema version, and its ``target`` is the path it was given; the same file is the same
``format`` in ``fix`` and ``inspect``; ``inspect --all`` is one document.
"""

from __future__ import annotations

import json
import shutil

import jsonschema
import pytest
from typer.testing import CliRunner

from lrdoctor.cli import app
from lrdoctor.core.report import SCHEMA
from tests.helpers.paths import REPO, TESTS

DOC_SCHEMA = json.loads((REPO / "docs" / "json-schema.json").read_text())
SAMPLES = REPO / "sample_checkpoints"
runner = CliRunner()


def valid(doc: dict) -> dict:
    jsonschema.Draft7Validator(DOC_SCHEMA).validate(doc)
    return doc


def json_of(*args: str) -> dict:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code in (0, 1), res.output
    doc = json.loads(res.stdout)
    assert isinstance(doc, dict), f"{args}: a {type(doc).__name__}, not one document"
    return valid(doc)


def reports_of(doc: dict) -> list[dict]:
    if "reports" in doc:
        return doc["reports"]
    if "runs" in doc:
        return [r for run in doc["runs"] for r in run["reports"]]
    return [doc]


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    dst = tmp_path / "bad"
    shutil.copytree(TESTS / "projects" / "bad", dst)
    (dst / ".git").mkdir()
    monkeypatch.chdir(dst)
    return dst


def test_every_command_prints_one_document_of_the_schema(project, tmp_path):
    ckpt = str(SAMPLES / "torch-microstep")
    docs = {
        "inspect": json_of("inspect", ckpt),
        "inspect --all": json_of("inspect", str(SAMPLES / "hf-healthy"), "--all"),
        "replay": json_of("replay", "-c", "configs/run.yaml", "--synthetic", "fixed:1024",
                          "--fast"),
        "fix": json_of("fix", ckpt, "--out", str(tmp_path / "fixed"), "--dry-run"),
        "check": json_of("check"),
        "report": json_of("report", "--out", str(tmp_path / "page")),
    }
    for name, doc in docs.items():
        assert doc["schema"] == SCHEMA == 1, name
        assert doc["command"] == name.split()[0], name
        for rep in reports_of(doc):
            assert isinstance(rep["target"], str), (name, rep["target"])
    assert docs["fix"]["target"] == ckpt  # the path given; inspect's: the checkpoint in it
    assert docs["inspect"]["target"] == ckpt + "/checkpoint_60.pt"
    assert docs["replay"]["target"] == "configs/run.yaml"
    assert docs["check"]["target"] == docs["report"]["target"] == "pyproject.toml"
    # inspect --all of a run: one document, each checkpoint's report in it.
    all_ = docs["inspect --all"]
    assert all_["target"] == str(SAMPLES / "hf-healthy")
    assert [r["target"].rsplit("/", 1)[-1] for r in all_["reports"]] == \
        ["checkpoint-10", "checkpoint-20"]
    # fix: the repair chosen is its own key; the same file has inspect's format name.
    assert docs["fix"]["repair"]["policy"] == docs["fix"]["policy"] == "rescale"
    assert docs["fix"]["format"] == docs["inspect"]["format"] == "torch"


def test_the_schema_takes_a_folder_of_runs():
    """inspect of a folder holding several runs (issue 28, d28): the envelope and ``runs``,
    each run's reports of the same shape; a document mixing the shapes is refused."""
    single = json_of("inspect", str(SAMPLES / "hf-healthy"))
    report = {k: v for k, v in single.items() if k != "schema"}
    doc = {"schema": SCHEMA, "lrdoctor": single["lrdoctor"], "command": "inspect",
           "target": str(SAMPLES),
           "runs": [{"root": str(SAMPLES / "hf-healthy"), "format": single["format"],
                     "worst": None, "reports": [report]}],
           "not_runs": []}
    valid(doc)
    with pytest.raises(jsonschema.ValidationError):
        valid({**doc, "reports": [report]})
    with pytest.raises(jsonschema.ValidationError):
        valid({**single, "schema": 0})
    with pytest.raises(jsonschema.ValidationError):
        valid({**single, "target": {"policy": "rescale"}})
