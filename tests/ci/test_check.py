"""``lrdoctor check``: the CI gate over [tool.lrdoctor], on real Megatron checkpoints."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import jsonschema
import pytest
from typer.testing import CliRunner

from lrdoctor.ci import check as ci_check
from lrdoctor.ci import config as ci_config
from lrdoctor.cli import app
from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.report import Report
from lrdoctor.findings import finding
from tests.helpers.docs import reports as doc_reports
from tests.helpers.paths import TESTS

HERE = TESTS
PROJECTS = HERE / "projects"
SCHEMA = json.loads((HERE / "data" / "sarif-2.1.0.json").read_text())
runner = CliRunner()


def project(name: str, tmp_path: Path, monkeypatch, config: str | None = None) -> Path:
    """A copy of tests/projects/<name> as a repo of its own, made the working directory."""
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    monkeypatch.delenv("GITHUB_WORKSPACE", raising=False)
    dst = tmp_path / name
    shutil.copytree(PROJECTS / name, dst)
    (dst / ".git").mkdir()
    if config is not None:
        (dst / "pyproject.toml").write_text(config)
    monkeypatch.chdir(dst)
    return dst


def codes(doc) -> list[str]:
    return sorted(f["code"] for d in doc_reports(doc) for f in d["findings"])


def ignore_line(root: Path) -> int:
    text = (root / "pyproject.toml").read_text().splitlines()
    return next(n for n, t in enumerate(text, 1) if "LRD105" in t and "ignore" in t)


def test_ok_project_passes(tmp_path, monkeypatch):
    project("ok", tmp_path, monkeypatch)
    res = runner.invoke(app, ["check", "--json"])
    assert res.exit_code == 0, res.output
    doc, rdoc = doc_reports(json.loads(res.stdout))
    assert doc["command"] == "inspect" and doc["findings"] == []
    # The replayed loop steps its scheduler once per update: on budget.
    assert rdoc["command"] == "replay" and rdoc["findings"] == []
    assert rdoc["summary"]["progress_ratio"] == pytest.approx(1.0)
    # The LR-by-hand finding is suppressed, with its reason kept in the document.
    assert doc["ignored"][0]["code"] == "LRD105"
    assert doc["ignored"][0]["reason"] == "LR set by hand on resume"
    assert doc["fail_on"] == "warning"


def test_bad_project_fails_with_the_drift(tmp_path, monkeypatch):
    root = project("bad", tmp_path, monkeypatch)
    res = runner.invoke(app, ["check", "--json"])
    assert res.exit_code == 1, res.output
    doc, rdoc = doc_reports(json.loads(res.stdout))
    assert {"LRD104", "LRD302", "LRD301"} <= set(codes(doc))
    f302 = next(f for f in doc["findings"] if f["code"] == "LRD302")
    assert f302["evidence"]["progress_ratio"] == pytest.approx(4.0)
    assert f302["evidence"]["max_progress_ratio"] == 1.05
    # The replay of the loop that steps its scheduler per micro-batch (k = 4).
    assert rdoc["command"] == "replay"
    assert {"LRD201", "LRD205", "LRD302"} <= set(codes(rdoc))
    r302 = next(f for f in rdoc["findings"] if f["code"] == "LRD302")
    assert r302["evidence"]["progress_ratio"] == pytest.approx(4.0)
    # The ignore of LRD105 matched nothing here (no LR was set by hand): stale.
    f301 = next(f for f in doc["findings"] if f["code"] == "LRD301")
    assert "tool.lrdoctor.inspect[0].ignore[0]" in f301["message"]
    assert f301["location"] == f"pyproject.toml:{ignore_line(root)}"


def test_text_output_and_summary(tmp_path, monkeypatch):
    project("bad", tmp_path, monkeypatch)
    res = runner.invoke(app, ["check"])
    assert res.exit_code == 1
    assert "FAIL inspect checkpoints/run-a/iter_0000050" in res.stdout
    assert "FAIL replay configs/run.yaml" in res.stdout
    assert "2 target(s), 2 failing" in res.stdout


def test_max_progress_ratio_flag_and_fail_on_flag(tmp_path, monkeypatch):
    project("bad", tmp_path, monkeypatch)
    # A tolerance above the drift removes LRD302, the other errors remain.
    res = runner.invoke(app, ["check", "--json", "--max-progress-ratio", "5"])
    assert "LRD302" not in codes(json.loads(res.stdout)) and res.exit_code == 1
    res = runner.invoke(app, ["check", "--json", "--fail-on", "never"])
    assert res.exit_code == 0 and "LRD302" in codes(json.loads(res.stdout))


def test_per_target_fail_on_override(tmp_path, monkeypatch):
    cfg = """[tool.lrdoctor]
fail-on = "warning"
[[tool.lrdoctor.inspect]]
path = "checkpoints/run-a"
fail-on = "{}"
"""
    project("ok", tmp_path, monkeypatch, cfg.format("warning"))
    res = runner.invoke(app, ["check", "--json"])
    assert res.exit_code == 1 and codes(json.loads(res.stdout)) == ["LRD105"]
    assert len(doc_reports(json.loads(res.stdout))) == 1  # a list even for one target
    (Path.cwd() / "pyproject.toml").write_text(cfg.format("error"))
    res = runner.invoke(app, ["check", "--json"])
    assert res.exit_code == 0 and codes(json.loads(res.stdout)) == ["LRD105"]


def test_ignore_without_reason_is_a_config_error(tmp_path, monkeypatch):
    project("ok", tmp_path, monkeypatch, """[tool.lrdoctor]
[[tool.lrdoctor.inspect]]
path = "checkpoints/run-a"
ignore = [{code = "LRD105"}]
""")
    res = runner.invoke(app, ["check"])
    assert res.exit_code == 2
    err = res.stderr.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in res.output
    assert "pyproject.toml: tool.lrdoctor.inspect[0].ignore[0].reason: required" in err


@pytest.mark.parametrize("body, key", [
    ('fail-on = "sometimes"\n', "tool.lrdoctor.fail-on"),
    ('max-progress-ratio = -1\n', "tool.lrdoctor.max-progress-ratio"),
    ('fial-on = "error"\n', "tool.lrdoctor.fial-on"),
    ('[[tool.lrdoctor.inspect]]\nformat = "hf"\n', "tool.lrdoctor.inspect[0].path"),
    ('[[tool.lrdoctor.inspect]]\npath = "x"\nignore = [{code = "LRD999", reason = "r"}]\n',
     "tool.lrdoctor.inspect[0].ignore[0].code"),
    ('[[tool.lrdoctor.replay]]\nconfig = "r.yaml"\nbatch-log = "a"\nsynthetic = "b"\n',
     "tool.lrdoctor.replay[0].synthetic"),
])
def test_config_errors_name_the_key(tmp_path, body, key):
    p = tmp_path / "pyproject.toml"
    p.write_text("[tool.lrdoctor]\n" + body)
    with pytest.raises(ci_config.ConfigError) as exc:
        ci_config.load(p)
    assert exc.value.key == key
    assert str(exc.value).startswith(f"{p}: {key}: ")


@pytest.mark.parametrize("body, key, problem", [
    ('[[tool.lrdoctor.inspect]]\npath = "x"\nall = 1\n', "tool.lrdoctor.inspect[0].all",
     "must be true or false, got 1"),
    ('[[tool.lrdoctor.inspect]]\npath = "x"\nignore = ["LRD105"]\n',
     "tool.lrdoctor.inspect[0].ignore[0]", 'must be a table like {code = "LRD105"'),
    ('[[tool.lrdoctor.inspect]]\npath = "x"\nignore = [{code = "LRD105", reason = "r", '
     'path = "a"}]\n', "tool.lrdoctor.inspect[0].ignore[0].path",
     "unknown key (expected one of code, reason)"),
    ('inspect = 3\n', "tool.lrdoctor.inspect", "must be an array of tables"),
])
def test_config_shape_errors_keep_their_one_line(tmp_path, body, key, problem):
    p = tmp_path / "pyproject.toml"
    p.write_text("[tool.lrdoctor]\n" + body)
    with pytest.raises(ci_config.ConfigError) as exc:
        ci_config.load(p)
    assert exc.value.key == key and str(exc.value).startswith(f"{p}: {key}: {problem}")


def test_snake_case_keys_read_like_kebab_case(tmp_path):
    p = tmp_path / "pyproject.toml"
    p.write_text('[tool.lrdoctor]\nfail_on = "error"\n[[tool.lrdoctor.replay]]\n'
                 'config = "r.yaml"\nbatch_log = "b.jsonl"\nmax-progress-ratio = 2\n'
                 'options = {knob-check = false}\n')
    cfg = ci_config.load(p)
    (t,) = cfg.targets
    assert cfg.fail_on == "error" and t.batch_log == "b.jsonl" and t.max_progress_ratio == 2.0
    assert t.options == {"knob_check": False} and t.line == 4  # the config key's line


def test_invalid_toml_is_one_line(tmp_path, monkeypatch):
    project("ok", tmp_path, monkeypatch, "[tool.lrdoctor\n")
    res = runner.invoke(app, ["check", "--config", "pyproject.toml"])
    assert res.exit_code == 2 and "not valid TOML" in res.stderr


def test_missing_path_is_lrd303_and_exit_2(tmp_path, monkeypatch):
    project("ok", tmp_path, monkeypatch, """[tool.lrdoctor]
[[tool.lrdoctor.inspect]]
path = "checkpoints/run-z*/"
""")
    res = runner.invoke(app, ["check", "--output-format", "junit"])
    assert res.exit_code == 2
    root = ET.fromstring(res.stdout)
    assert root.get("errors") == "1"
    assert "matches nothing" in root.find(".//error").get("message")


def test_unrecognised_path_is_lrd303_with_what_was_scanned(tmp_path, monkeypatch):
    """--json carries the survey as the LRD303 finding's evidence, structured."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    (tmp_path / "weights").mkdir()
    (tmp_path / "weights" / "model.safetensors").write_bytes(b"\x08" + b"\x00" * 7 + b"{}")
    (tmp_path / "weights" / "README.md").write_text("# a model\n")
    res = runner.invoke(app, ["check", "--inspect", "weights", "--json"])
    assert res.exit_code == 2
    (rep,) = doc_reports(json.loads(res.stdout))
    (f,) = rep["findings"]
    assert f["code"] == "LRD303" and f["severity"] == "error"
    assert "scanned 2 files in 1 folder: model.safetensors: weights only" in f["message"]
    assert f["evidence"]["scanned"] == {
        "path": "weights", "files": 2, "folders": 1, "hidden": 0, "cut_by_bound": None,
        "seen": [{"file": "model.safetensors",
                  "found": "weights only (safetensors), no scheduler/optimizer/trainer state"},
                 {"file": "README.md", "found": "not checkpoint state (.md)"}],
        "not_described": 0}
    assert f["evidence"]["target"] == "weights"


def test_no_config_at_all(tmp_path, monkeypatch):
    """Issue 29 item 12: with no config anywhere, check and report said
    "pyproject.toml: nothing to check", naming a file that is not there. The line says
    where none was found (the working directory up to the repository root)."""
    (tmp_path / ".git").mkdir()
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    for command, what in (("check", "nothing to check"), ("report", "nothing to report on")):
        res = runner.invoke(app, [command])
        assert res.exit_code == 2, res.output
        line = res.stderr.strip()
        assert line.startswith(f"lrdoctor: error: {what}: no lrdoctor.toml, nor a "
                               "pyproject.toml with [tool.lrdoctor], in "
                               f"{(tmp_path / 'sub').resolve()} or above it up to "
                               f"{tmp_path.resolve()};"), line
        assert "error: pyproject.toml" not in line and not (tmp_path / "sub" /
                                                           "pyproject.toml").exists()


def test_lrdoctor_toml_and_flags(tmp_path, monkeypatch):
    root = project("bad", tmp_path, monkeypatch)
    (root / "pyproject.toml").unlink()
    (root / "lrdoctor.toml").write_text('fail-on = "error"\nmax-progress-ratio = 3.5\n'
                                        '[[inspect]]\npath = "checkpoints/*"\n')
    res = runner.invoke(app, ["check", "--json"])
    doc = json.loads(res.stdout)
    assert res.exit_code == 1 and "LRD302" in codes(doc)  # 4.0 > 3.5
    # --inspect replaces the config's targets; the thresholds stay.
    ok_ckpt = str(PROJECTS / "ok" / "checkpoints" / "run-a")
    res = runner.invoke(app, ["check", "--json", "--inspect", ok_ckpt])
    assert res.exit_code == 0 and codes(json.loads(res.stdout)) == ["LRD105"]  # a warning


def test_sarif_to_file(tmp_path, monkeypatch):
    root = project("bad", tmp_path, monkeypatch)
    res = runner.invoke(app, ["check", "--output-format", "sarif", "-o", "out/lrdoctor.sarif"])
    assert res.exit_code == 1 and res.stdout == ""
    doc = json.loads((root / "out" / "lrdoctor.sarif").read_text())
    jsonschema.Draft7Validator(SCHEMA).validate(doc)
    where = {}
    for r in doc["runs"][0]["results"]:
        pl = r["locations"][0]["physicalLocation"]
        where.setdefault(r["ruleId"], []).append(
            (pl["artifactLocation"]["uri"], pl["region"]["startLine"]))
    assert where["LRD301"] == [("pyproject.toml", ignore_line(root))]
    run_yaml = (root / "configs" / "run.yaml").read_text().splitlines()
    sched = run_yaml.index("scheduler:") + 1
    assert where["LRD302"] == [
        ("checkpoints/run-a/iter_0000050/mp_rank_00/model_optim_rng.pt", 1),
        ("configs/run.yaml", sched)]
    # The replay's own finding points at the key to change.
    assert where["LRD205"] == [("configs/run.yaml", run_yaml.index("  step_on: micro_step") + 1)]


# ------------------------------------------------- the engine, on its own

def _cfg(tmp_path: Path, text: str) -> ci_config.CheckConfig:
    p = tmp_path / "lrdoctor.toml"
    p.write_text(text)
    return ci_config.load(p)


def test_engine_top_level_ignore_by_path_and_replay_ratio(tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    cfg = _cfg(tmp_path, """max-progress-ratio = 1.05
ignore = [{code = "LRD110", reason = "run a finished", path = "*a"},
          {code = "LRD207", reason = "not this one"}]
[[inspect]]
path = "[ab]"
[[replay]]
config = "run.yaml"
synthetic = "lognormal:mean=7"
options = {device = "cpu"}
""")
    seen = {}

    def fake_inspect(path, format=None, all=False):
        return [Report("inspect", path, "torchsave",
                       findings=[finding("LRD110", "at the floor")])]

    def fake_replay(config, batch_log=None, synthetic=None, **kw):
        seen.update(config=config, synthetic=synthetic, **kw)
        return Report("replay", config, None, findings=[],
                      extra={"summary": {"nominal_updates": 100, "actual_updates": 180}})

    reps = ci_check.run_check(cfg, inspect_fn=fake_inspect, replay_fn=fake_replay)
    by_target = {Path(r.target).name: r for r in reps}
    assert [f.code for f in by_target["a"].findings] == []
    assert [f.code for f in by_target["b"].findings] == ["LRD110"]
    assert [f.code for f in by_target["run.yaml"].findings] == ["LRD302"]
    assert seen["synthetic"] == "lognormal:mean=7" and seen["device"] == "cpu"
    assert len(reps) == 4
    stale = next(r for r in reps if r.command == "check")
    assert [f.code for f in stale.findings] == ["LRD301"]
    assert "LRD207" in stale.findings[0].message
    assert stale.findings[0].location.endswith("lrdoctor.toml:3")
    assert ci_check.check_exit_code(reps) == 1


def test_engine_unusable_input_becomes_lrd303(tmp_path):
    cfg = _cfg(tmp_path, '[[replay]]\nconfig = "run.yaml"\n')

    def broken(config, **kw):
        raise UnusableInput("train.steps: field required", config)

    reps = ci_check.run_check(cfg, replay_fn=broken)
    assert [f.code for f in reps[0].findings] == ["LRD303"]
    assert "train.steps" in reps[0].findings[0].message
    assert reps[0].findings[0].location.endswith("lrdoctor.toml:2")
    assert ci_check.check_exit_code(reps) == 2


def test_pre_commit_hook_definition():
    import re

    import yaml

    hooks = yaml.safe_load((HERE.parent / ".pre-commit-hooks.yaml").read_text())
    hook = next(h for h in hooks if h["id"] == "lrdoctor-check")
    assert hook["entry"] == "lrdoctor check" and hook["pass_filenames"] is False
    files = re.compile(hook["files"])
    for path in ("pyproject.toml", "sub/lrdoctor.toml", "configs/run.yaml", "logs/b.parquet"):
        assert files.search(path), path
    for path in ("README.md", "lrdoctor/cli.py", "mypyproject.toml"):
        assert not files.search(path), path


def test_installed_entry_point_on_github_actions(tmp_path, monkeypatch):
    """The real ``lrdoctor`` script, as a workflow step runs it."""
    import os
    import subprocess
    import sys

    root = project("bad", tmp_path, monkeypatch)
    exe = Path(sys.executable).with_name("lrdoctor")
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "lrdoctor"]
    summary = tmp_path / "step-summary.md"
    summary.write_text("earlier step\n")
    env = {**os.environ, "GITHUB_ACTIONS": "true", "GITHUB_WORKSPACE": str(root),
           "GITHUB_STEP_SUMMARY": str(summary)}
    proc = subprocess.run(cmd + ["check"], cwd=root, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    # The text first (verdicts, details, the count), the annotations in addition.
    assert lines[0].startswith("checkpoints/run-a/iter_0000050: ")
    assert "lrdoctor check: 2 target(s), 2 failing" in lines
    # A checkpoint's finding lands on the [tool.lrdoctor] line that declares the target
    # (never on the binary model_optim_rng.pt, where an annotation never shows).
    text = (root / "pyproject.toml").read_text().splitlines()
    declared = next(n for n, t in enumerate(text, 1) if t.startswith('path = "checkpoints'))
    assert any(ln.startswith(f"::error file=pyproject.toml,line={declared},title=LRD302 ")
               for ln in lines)
    assert not any(".pt," in ln for ln in lines if ln.startswith("::"))
    assert any(ln.startswith(f"::warning file=pyproject.toml,line={ignore_line(root)},"
                             "title=LRD301 ")
               for ln in lines)
    assert proc.stderr == ""
    md = summary.read_text().splitlines()
    assert md[0] == "earlier step"  # appended, not overwritten
    assert md[1] == "## lrdoctor: 2 target(s), 2 failing"
    assert any(ln.startswith("| ❌ fail | `checkpoints/run-a/iter_0000050` | inspect | ")
               for ln in md)
    assert any(ln.startswith("**LRD205 error: ") for ln in md)


def test_the_documented_configuration_is_valid(tmp_path):
    """The TOML example in docs/ci.md parses, and means what the page says."""
    import re

    text = (HERE.parent / "docs" / "ci.md").read_text()
    block = re.search(r"```toml\n(.*?)```", text, re.S)[1]
    p = tmp_path / "pyproject.toml"
    p.write_text(block)
    cfg = ci_config.load(p)
    assert (cfg.fail_on, cfg.max_progress_ratio, cfg.report) == ("warning", 1.05,
                                                                 "lrdoctor-report")
    assert [t.kind for t in cfg.targets] == ["inspect", "replay"]
    insp, rep = cfg.targets
    assert (insp.path, insp.format, insp.fail_on) == ("checkpoints/run-*/", "megatron", "error")
    assert insp.ignores[0].reason == "LR set by hand on resume"
    assert rep.max_progress_ratio == 1.2 and rep.options["engine"] == "fast"
    assert cfg.ignores[0].path == "*/final"


def test_unknown_replay_option_is_lrd303(tmp_path, monkeypatch):
    root = project("ok", tmp_path, monkeypatch)
    (root / "pyproject.toml").write_text(
        '[tool.lrdoctor]\n[[tool.lrdoctor.replay]]\nconfig = "configs/run.yaml"\n'
        'synthetic = "fixed:1024"\noptions = {engine = "fast", warp-speed = 9}\n')
    res = runner.invoke(app, ["check", "--json"])
    assert res.exit_code == 2
    (doc,) = doc_reports(json.loads(res.stdout))
    assert codes(doc) == ["LRD303"]
    assert "unknown warp_speed" in doc["findings"][0]["message"]
    assert doc["findings"][0]["location"] == "pyproject.toml:3"


@pytest.mark.frameworks
@pytest.mark.slow
def test_committed_checkpoints_are_what_megatron_core_writes(tmp_path):
    """Regenerate the projects' checkpoints with megatron-core: same scheduler state."""
    import argparse
    import importlib.util

    import torch

    spec = importlib.util.spec_from_file_location("make_checkpoints",
                                                  PROJECTS / "make_checkpoints.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    rel = Path("checkpoints/run-a/iter_0000050/mp_rank_00/model_optim_rng.pt")
    for name in ("ok", "bad"):
        mod.build(name, tmp_path / name)
        with torch.serialization.safe_globals([argparse.Namespace]):
            fresh = torch.load(tmp_path / name / rel, weights_only=True)
            kept = torch.load(PROJECTS / name / rel, weights_only=True)
        assert fresh["opt_param_scheduler"] == kept["opt_param_scheduler"]
        assert vars(fresh["args"]) == vars(kept["args"])
        assert ([g["lr"] for g in fresh["optimizer"]["optimizer"]["param_groups"]]
                == [g["lr"] for g in kept["optimizer"]["optimizer"]["param_groups"]])
    assert kept["opt_param_scheduler"]["num_steps"] == 6400  # bad: 4 x 50 x 32


def test_junit_of_the_bad_project(tmp_path, monkeypatch):
    project("bad", tmp_path, monkeypatch)
    res = runner.invoke(app, ["check", "--output-format", "junit"])
    assert res.exit_code == 1
    root = ET.fromstring(res.stdout)
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("2", "2", "0")
    cases = root.findall(".//testcase")
    assert [c.get("classname") for c in cases] == ["lrdoctor.inspect", "lrdoctor.replay"]
    assert all(float(c.get("time")) > 0 for c in cases)
    assert float(root.get("time")) == pytest.approx(sum(float(c.get("time")) for c in cases),
                                                    abs=2e-3)
    assert cases[1].find("failure").get("type") == "LRD201"


def test_config_lines_for_every_toml_spelling(tmp_path):
    """Annotations land on the ignore's own line, however the TOML spells the table."""
    p = tmp_path / "pyproject.toml"
    p.write_text("""[tool.lrdoctor]
fail-on = "error"
report = "r"

[[tool.lrdoctor.inspect]]
path = "a"

[[tool.lrdoctor.inspect.ignore]]
code = "LRD110"
reason = "done"

[[tool.lrdoctor.inspect]]
path = "b"
ignore = [
  {code = "LRD105", reason = "x"},
  {code = "LRD110", reason = "y"},
]

[[tool.lrdoctor.ignore]]
code = "LRD107"
reason = "lambda"

[[tool.lrdoctor.ignore]]
code = "LRD107"
reason = "again"
path = "x*"
""")
    cfg = ci_config.load(p)
    assert [(t.key, t.line) for t in cfg.targets] == [("tool.lrdoctor.inspect[0]", 6),
                                                      ("tool.lrdoctor.inspect[1]", 13)]
    assert [(i.code, i.line) for i in cfg.targets[0].ignores] == [("LRD110", 9)]
    assert [(i.code, i.line) for i in cfg.targets[1].ignores] == [("LRD105", 15),
                                                                  ("LRD110", 16)]
    assert [(i.code, i.line, i.path) for i in cfg.ignores] == [
        ("LRD107", 20, None), ("LRD107", 24, "x*")]
    p.write_text('[tool.lrdoctor]\nignore = [\n  {code = "LRD110", reason = "a"},\n'
                 '  {code = "LRD110", reason = "b", path = "x*"},\n]\n')
    assert [i.line for i in ci_config.load(p).ignores] == [3, 4]


def test_trailing_slash_glob_matches_directories_only(tmp_path, monkeypatch):
    """'checkpoints/*/' (as docs/ci.md writes it) is directories: a README beside the
    runs is not a target, from the command line or from the config."""
    root = project("ok", tmp_path, monkeypatch)
    (root / "checkpoints" / "README.md").write_text("runs live here\n")
    flags = ["check", "--json", "--fail-on", "error"]  # LRD105 there is a warning
    res = runner.invoke(app, [*flags, "--inspect", "checkpoints/*/"])
    docs = doc_reports(json.loads(res.stdout))
    assert res.exit_code == 0, res.stdout
    assert [d["target"] for d in docs] == [str(Path("checkpoints/run-a/iter_0000050"))]
    assert [f["code"] for d in docs for f in d["findings"]] == ["LRD105"]
    # Without the slash the README is matched, and is unusable input (the contrast).
    res = runner.invoke(app, [*flags, "--inspect", "checkpoints/*"])
    assert res.exit_code == 2 and "LRD303" in codes(json.loads(res.stdout))
    # The config's own glob keeps the slash too.
    (root / "pyproject.toml").write_text('[tool.lrdoctor]\n[[tool.lrdoctor.inspect]]\n'
                                         'path = "checkpoints/*/"\n')
    res = runner.invoke(app, flags)
    assert res.exit_code == 0 and codes(json.loads(res.stdout)) == ["LRD105"]
