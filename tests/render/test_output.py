"""SARIF / JUnit / GitHub output: schema-valid, counts right, exact workflow-command syntax."""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from lrdoctor import __version__
from lrdoctor.cli import app
from lrdoctor.core.report import Report
from lrdoctor.findings import RULES, finding
from lrdoctor.render import document
from lrdoctor.render import machine as output
from tests.helpers.paths import TESTS

HERE = TESTS
SCHEMA = json.loads((HERE / "data" / "sarif-2.1.0.json").read_text())
PROJECTS = HERE / "projects"
runner = CliRunner()


def validate_sarif(doc: dict) -> None:
    jsonschema.Draft7Validator(SCHEMA).validate(doc)


@pytest.fixture
def repo(tmp_path, monkeypatch):
    """A fake repository root with a config file and a checkpoint file in it."""
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    (tmp_path / ".git").mkdir()
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "run.yaml").write_text(
        "train:\n  steps: 10\nschedule:\n  max_lr: 1.0e-4\n  horizon: 2400\n")
    ck = tmp_path / "ckpt" / "iter_0000010"
    ck.mkdir(parents=True)
    (ck / "model_optim_rng.pt").write_bytes(b"PK\x03\x04")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def reports(repo: Path) -> list[Report]:
    f1 = finding("LRD101", "num_steps 8429 is 3.51x the decay horizon 2400",
                 {"num_steps": 8429, "horizon": 2400})
    f2 = finding("LRD105", "param group lr 1e-4, schedule says 3e-5")
    f3 = finding("LRD110", "at the floor")
    f4 = finding("LRD201", "budget 1024, 2 updates per step",
                 location=str(repo / "configs" / "run.yaml") + "#horizon")
    return [
        Report("inspect", "ckpt/iter_0000010", "megatron", findings=[f1, f2, f3]),
        Report("inspect", "ckpt", "megatron", findings=[]),
        Report("replay", "configs/run.yaml", None, findings=[f4]),
    ]


def test_sarif_validates_and_carries_the_catalog(repo):
    doc = output.sarif(reports(repo))
    validate_sarif(doc)
    run = doc["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["name"] == "lrdoctor" and driver["version"] == __version__
    assert driver["informationUri"].startswith("https://")
    assert [r["id"] for r in driver["rules"]] == list(RULES)
    r101 = next(r for r in driver["rules"] if r["id"] == "LRD101")
    assert r101["shortDescription"]["text"] == RULES["LRD101"].title
    assert r101["fullDescription"]["text"] == RULES["LRD101"].explanation
    assert RULES["LRD101"].fix in r101["help"]["text"]
    assert r101["defaultConfiguration"]["level"] == "error"
    assert next(r for r in driver["rules"] if r["id"] == "LRD110")[
        "defaultConfiguration"]["level"] == "note"

    res = run["results"]
    assert [r["ruleId"] for r in res] == ["LRD101", "LRD105", "LRD110", "LRD201"]
    assert [r["level"] for r in res] == ["error", "warning", "note", "error"]
    for r in res:
        assert driver["rules"][r["ruleIndex"]]["id"] == r["ruleId"]
    loc = res[0]["locations"][0]["physicalLocation"]
    # A checkpoint directory is annotated at a file in it, relative to the repo root.
    assert loc["artifactLocation"] == {"uri": "ckpt/iter_0000010/model_optim_rng.pt",
                                       "uriBaseId": "%SRCROOT%"}
    assert loc["region"]["startLine"] == 1
    # A config key is located at its line.
    loc4 = res[3]["locations"][0]["physicalLocation"]
    assert loc4["artifactLocation"]["uri"] == "configs/run.yaml"
    assert loc4["region"]["startLine"] == 5
    assert run["originalUriBaseIds"]["%SRCROOT%"]["uri"] == repo.resolve().as_uri() + "/"
    assert res[0]["properties"]["evidence"] == {"num_steps": 8429, "horizon": 2400}


def test_sarif_rejects_a_broken_document(repo):
    """The schema check is not vacuous: a result without a message is refused."""
    doc = output.sarif(reports(repo))
    del doc["runs"][0]["results"][0]["message"]
    with pytest.raises(jsonschema.ValidationError):
        validate_sarif(doc)


def test_location_with_explicit_line_and_outside_repo(repo, tmp_path_factory):
    outside = tmp_path_factory.mktemp("elsewhere") / "x.pt"
    outside.write_bytes(b"x")
    f = finding("LRD103", "k = 4", location="configs/run.yaml:7")
    assert (output.locate(f).path, output.locate(f).line) == ("configs/run.yaml", 7)
    g = finding("LRD103", "k = 4", location=str(outside))
    assert output.locate(g).path == outside.resolve().as_posix()
    doc = output.sarif([Report("inspect", str(outside), "torchsave", findings=[g])])
    validate_sarif(doc)
    uri = doc["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["artifactLocation"]
    assert uri == {"uri": outside.resolve().as_uri()}


def test_key_lines_follow_yaml_nesting(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text("train:\n  steps: 10\n  # step_on: no\nscheduler:\n  increment: 1\n"
                   "  step_on: micro_step\nother:\n  step_on: x\n")
    assert output.key_line(str(cfg), "scheduler.step_on") == 6
    assert output.key_line(str(cfg), "other.step_on") == 8
    assert output.key_line(str(cfg), "train.step_on") == 6  # not under train: first leaf
    assert output.key_line(str(cfg), "scheduler") == 4
    assert output.key_line(str(cfg), "nope.nothing") == 1
    assert output.key_line(str(tmp_path / "missing.yaml"), "a") == 1
    f = finding("LRD205", "k = 4", location=f"{cfg}:scheduler.step_on")
    assert (output.locate(f).path, output.locate(f).line) == (cfg.resolve().as_posix(), 6)


def test_junit_counts_and_threshold(repo):
    xml = output.junit(reports(repo), fail_on="warning")
    root = ET.fromstring(xml)
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "2", "0")
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    insp = suites["lrdoctor inspect"]
    assert (insp.get("tests"), insp.get("failures")) == ("2", "1")
    cases = insp.findall("testcase")
    assert [c.get("name") for c in cases] == ["ckpt/iter_0000010", "ckpt"]
    fail = cases[0].find("failure")
    assert fail is not None and fail.get("type") == "LRD101"
    assert "LRD101" in fail.text and "LRD105" in fail.text and "LRD110" not in fail.text
    assert "LRD110" in cases[0].find("system-out").text  # below the threshold: logged only
    assert cases[1].find("failure") is None
    # With fail-on error only LRD101 counts; with never nothing fails.
    root = ET.fromstring(output.junit(reports(repo), fail_on="error"))
    first = root.find("testsuite").find("testcase").find("failure")
    assert "LRD105" not in first.text and "LRD101" in first.text
    assert ET.fromstring(output.junit(reports(repo), fail_on="never")).get("failures") == "0"


def test_junit_per_report_threshold_and_unusable_input(repo):
    reps = reports(repo)
    reps[0].extra["fail_on"] = "never"
    bad = Report("inspect", "ckpt/missing", None,
                 findings=[finding("LRD303", "ckpt/missing: no such file or directory")])
    root = ET.fromstring(output.junit(reps + [bad], fail_on="warning"))
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("4", "1", "1")
    err = root.find("testsuite").findall("testcase")[-1].find("error")
    assert err.get("type") == "LRD303" and "no such file" in err.get("message")


def test_github_escaping_is_exact(tmp_path, monkeypatch):
    assert output.escape_data("50% a\r\nb") == "50%25 a%0D%0Ab"
    assert output.escape_property("a:b,c%d\n") == "a%3Ab%2Cc%25d%0A"
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    (tmp_path / "dir,x").mkdir()
    (tmp_path / "dir,x" / "f:a.yaml").write_text("k: 4\n")  # a text file: annotated
    f = finding("LRD103", "k = 4: 400 vs 100,\n100% off", fix="", location="dir,x/f:a.yaml")
    line = output.github_line(f)
    assert line == ("::error file=dir%2Cx/f%3Aa.yaml,line=1,title=LRD103 "
                    + output.escape_property(RULES["LRD103"].title)
                    + "::k = 4: 400 vs 100,%0A100%25 off")


def test_github_lines_match_the_workflow_command_syntax(repo):
    text = output.github(reports(repo))
    lines = text.splitlines()
    pat = re.compile(r"^::(error|warning|notice) (?:file=([^,:]+),line=(\d+),)?"
                     r"title=([^,:]+)::(.*)$")
    commands = [ln for ln in lines if ln.startswith("::")]
    assert len(commands) == 4
    parsed = [pat.match(ln) for ln in commands]
    assert all(parsed), commands
    assert [m[1] for m in parsed] == ["error", "error", "warning", "notice"]  # worst first
    # A binary checkpoint file never: a run-level annotation naming the target instead.
    assert parsed[0][2] is None and parsed[0][5].startswith("ckpt/iter_0000010: ")
    # A run config's key: its file and line.
    assert (parsed[1][2], parsed[1][3]) == ("configs/run.yaml", "5")
    assert parsed[0][4].startswith("LRD101 ")
    assert "\n" not in parsed[0][5] and "%0AFix%3A" not in parsed[0][5]
    assert "%0AFix: " in parsed[0][5]
    assert "lrdoctor inspect ckpt: no findings" in lines


def test_render_dispatch():
    with pytest.raises(ValueError, match="unknown output format"):
        document([], "xml")
    assert json.loads(document([], "sarif"))["runs"][0]["results"] == []


# ----------------------------------------------------------------- the CLI

@pytest.fixture
def bad_project(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    dst = tmp_path / "bad"
    shutil.copytree(PROJECTS / "bad", dst)
    (dst / ".git").mkdir()
    monkeypatch.chdir(dst)
    return dst


CKPT = "checkpoints/run-a"
CKPT_FILE = "checkpoints/run-a/iter_0000050/mp_rank_00/model_optim_rng.pt"


def test_cli_inspect_sarif(bad_project):
    res = runner.invoke(app, ["inspect", CKPT, "--output-format", "sarif"])
    assert res.exit_code == 1, res.output
    doc = json.loads(res.stdout)
    validate_sarif(doc)
    results = doc["runs"][0]["results"]
    assert {"LRD101", "LRD104"} <= {r["ruleId"] for r in results}
    uris = {r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] for r in results}
    assert uris == {CKPT_FILE}


def test_cli_inspect_junit_and_exit_codes(bad_project):
    res = runner.invoke(app, ["inspect", CKPT, "--output-format", "junit"])
    assert res.exit_code == 1
    root = ET.fromstring(res.stdout)
    assert (root.get("tests"), root.get("failures")) == ("1", "1")
    res = runner.invoke(app, ["inspect", CKPT, "--output-format", "junit", "--fail-on", "never"])
    assert res.exit_code == 0
    assert ET.fromstring(res.stdout).get("failures") == "0"
    res = runner.invoke(app, ["inspect", "nope/", "--output-format", "sarif"])
    assert res.exit_code == 2 and "nope" in res.stderr and "Traceback" not in res.output


def _github_vs_sarif() -> tuple[dict, dict]:
    """``check``'s annotations and SARIF results of the bad project, as {code@file: line}."""
    sarif = json.loads(runner.invoke(app, ["check", "--output-format", "sarif"]).stdout)
    in_sarif = {}
    for r in sarif["runs"][0]["results"]:
        loc = r["locations"][0]["physicalLocation"]
        in_sarif[r["ruleId"], loc["artifactLocation"]["uri"]] = loc["region"]["startLine"]
    in_github = {}
    for ln in runner.invoke(app, ["check", "--output-format", "github"]).stdout.splitlines():
        m = re.match(r"::\w+ file=([^,]+),line=(\d+),title=(LRD\d+) ", ln)
        if m:
            in_github[m[3], m[1]] = int(m[2])
    return in_github, in_sarif


def test_github_annotations_match_sarif_in_a_subfolder_of_the_repo(tmp_path, monkeypatch):
    """Issue 29 item 10: the project (tests/projects/bad: a Megatron checkpoint and a
    replayed run config) as a subfolder of a git repository. The annotations pointed at
    pyproject.toml lines while SARIF pointed at configs/run.yaml:26: the text-file test
    opened the repo-relative path from the project's folder. Every annotation with a
    text file is at SARIF's file and line, as when the project is its own repository."""
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    (tmp_path / ".git").mkdir()
    project = tmp_path / "ci" / "bad"
    shutil.copytree(PROJECTS / "bad", project)
    monkeypatch.chdir(project)
    in_github, in_sarif = _github_vs_sarif()
    assert in_github[("LRD201", "ci/bad/configs/run.yaml")] == 26
    text_files = {k: v for k, v in in_sarif.items() if not k[1].endswith(".pt")}
    assert text_files and all(in_github[k] == v for k, v in text_files.items()), \
        (in_github, in_sarif)
    # The same project as its own repository: the same lines, paths without the prefix.
    (project / ".git").mkdir()
    own_github, _ = _github_vs_sarif()
    assert {(c, "ci/bad/" + f): n for (c, f), n in own_github.items()} == in_github


def test_cli_github_annotations_added_on_actions(bad_project, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    res = runner.invoke(app, ["inspect", CKPT])
    assert res.exit_code == 1
    lines = res.stdout.splitlines()
    assert " LRD10" in lines[0]  # the verdict line first: text, and annotations after it
    assert any(ln.startswith("::error title=LRD104 ") for ln in lines)
    assert not any(CKPT_FILE in ln for ln in lines if ln.startswith("::"))
    # --json still wins over the environment.
    res = runner.invoke(app, ["inspect", CKPT, "--json"])
    assert json.loads(res.stdout)["command"] == "inspect"


def test_output_format_choices_are_the_renderers():
    """One list: --output-format's choices and help are render.FORMATS (plus text)."""
    from lrdoctor import render
    from lrdoctor.commands._common import OutputFormat

    assert [m.value for m in OutputFormat] == ["text", *render.FORMATS]
    names = ["text", *render.FORMATS]
    for command in ("inspect", "check", "replay", "fix"):
        res = runner.invoke(app, [command, "--help"])
        assert res.exit_code == 0
        text = " ".join(res.stdout.split())  # the help as wrapped, joined
        assert f"--output-format <{'|'.join(names)}>" in text, command
        assert f"{', '.join(names[:-1])} or {names[-1]} (default: text" in text, command


_NEW_FORMAT = """
import sys
from lrdoctor import render
render.FORMATS["tsv"] = lambda reports, fail_on: "tsv:" + ",".join(r.command for r in reports)
from typer.testing import CliRunner
from lrdoctor.cli import app
runner = CliRunner()
r = runner.invoke(app, ["inspect", sys.argv[1], "--output-format", "tsv"])
h = runner.invoke(app, ["inspect", "--help"])
print(r.exit_code, r.stdout.strip())
print(" ".join(h.stdout.split()))
"""


def test_a_format_registered_in_render_is_a_cli_choice_with_no_other_edit():
    import subprocess
    import sys

    from tests.helpers.paths import REPO

    sample = REPO / "sample_checkpoints" / "torch-microstep"
    p = subprocess.run([sys.executable, "-c", _NEW_FORMAT, str(sample)], capture_output=True,
                       text=True, timeout=120, cwd=REPO, check=True)
    ran, helpline = p.stdout.strip().splitlines()[-2:]
    assert ran.split(" ", 1)[1] == "tsv:inspect" and ran.split()[0] in ("0", "1"), ran
    assert "--output-format <text|json|sarif|junit|github|markdown|tsv>" in helpline
    assert "text, json, sarif, junit, github, markdown or tsv (default" in helpline
