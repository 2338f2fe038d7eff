"""One CLI convention for every command (docs/cli.md), one error style, settings read by
every command, CI output (annotations in addition to text, never at a binary file) and
the Markdown format (valid GFM, the same findings as --json)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from lrdoctor.cli import app
from tests.helpers.docs import reports as doc_reports
from tests.helpers.paths import REPO

COMMANDS = ("inspect", "replay", "fix", "check", "report")
ROLL_CKPT = "sample_checkpoints/roll-overshoot"
TORCH_CKPT = REPO / "sample_checkpoints/torch-microstep"


def lrd(*args, cwd=REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    e = {**os.environ, "COLUMNS": "120", "PYTHONPATH": str(REPO), **(env or {})}
    for k in ("GITHUB_ACTIONS", "GITHUB_STEP_SUMMARY", "GITHUB_WORKSPACE"):
        if k not in (env or {}):
            e.pop(k, None)
    return subprocess.run([sys.executable, "-m", "lrdoctor", *map(str, args)], cwd=cwd,
                          env=e, capture_output=True, text=True, timeout=600)


def convention() -> list[tuple[list[str], set[str]]]:
    """docs/cli.md's option table: (option names, commands that must have them)."""
    text = (REPO / "docs/cli.md").read_text()
    table = text.split("## Options", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[0].startswith("`"):
            continue
        names = re.findall(r"`(-[^`]+)`", cells[0])
        cmds = set(COMMANDS) if cells[1] == "all" else {c.strip() for c in cells[1].split(",")}
        assert cmds <= set(COMMANDS), cells[1]
        rows.append((names, cmds))
    assert len(rows) >= 9
    return rows


def options_of(name: str) -> set[str]:
    group = typer.main.get_command(app)
    ctx = group.make_context("lrdoctor", [name, "--help"], resilient_parsing=True)
    cmd = group.get_command(ctx, name)
    sub = cmd.make_context(name, [], parent=ctx, resilient_parsing=True)
    opts: set[str] = set()
    for p in cmd.get_params(sub):
        if getattr(p, "param_type_name", "") == "option":
            opts.update(p.opts)
            opts.update(p.secondary_opts)
    return opts


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_follows_docs_cli_md(command):
    have = options_of(command)
    for names, cmds in convention():
        if command in cmds:
            assert set(names) <= have, f"{command}: {names} missing (have {sorted(have)})"
        else:
            assert not set(names) & have, f"{command} has {names}, docs/cli.md says not"
    # One meaning per one-letter flag: every short option of a command is in the table.
    shorts = {o for o in have if re.fullmatch(r"-[A-Za-z]", o)}
    documented = {n for names, _ in convention() for n in names}
    assert shorts <= documented, shorts - documented


def test_root_has_version_help_and_completion():
    p = lrd("-V")
    assert p.returncode == 0 and p.stdout.startswith("lrdoctor ")
    h = lrd("-h")
    assert h.returncode == 0
    for flag in ("--version", "-V", "--install-completion", "--show-completion", "-h"):
        assert flag in h.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_usage_names_arguments_plainly(command):
    p = lrd(command, "-h")
    assert p.returncode == 0
    assert "{" not in p.stdout.splitlines()[0], p.stdout.splitlines()[0]
    assert "<str>" not in p.stdout.split("Options:")[0]  # no 'PATH <str>' in the arguments


@pytest.mark.parametrize("args", [
    ["inspect", ROLL_CKPT, "--fail-on", "bogus"],
    ["inspect"],
    ["replay", "-c", "examples/onevision-offbyone.yaml", "--bogus"],
    ["bogus"],
])
def test_a_command_line_mistake_is_one_error_line(args):
    p = lrd(*args)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lrdoctor: error: "), p.stderr
    assert "Value error" not in p.stderr and "Error:" not in p.stderr
    assert "-h'" in lines[0]


def test_an_unknown_option_names_the_close_ones_or_all():
    """Issue 29 item 19: "no such option: --bogus (Possible options: --out, --verbose)"
    named 2 of inspect's options as if they were near it. A misspelling gets the close
    option; anything else every option the command has, as its --help lists them."""
    from typer.testing import CliRunner

    runner = CliRunner()
    res = runner.invoke(app, ["inspect", ROLL_CKPT, "--jsn"])
    assert res.exit_code == 2
    assert "no such option: --jsn (did you mean --json?)" in res.stderr
    res = runner.invoke(app, ["inspect", ROLL_CKPT, "--bogus"])
    assert res.exit_code == 2 and "Possible options" not in res.stderr
    listed = res.stderr.split("the options are ", 1)[1].split(" (see", 1)[0].split(", ")
    helped = re.findall(r"^\s+(?:-\w, )?(--[\w-]+)", runner.invoke(app, ["inspect", "-h"]).stdout,
                        re.M)
    assert sorted(listed) == sorted(dict.fromkeys(helped)) and len(listed) >= 12


def test_every_problem_of_a_run_config_is_listed_also_in_json(tmp_path):
    bad = (REPO / "examples/onevision-offbyone.yaml").read_text() \
        .replace("  rule: off_by_one", "  rule: off_by_onee") \
        .replace("  step_on: micro_step", "  stepon: micro_step")
    cfg = tmp_path / "bad.yaml"
    cfg.write_text(bad)
    p = lrd("replay", "-c", cfg)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1
    assert "unknown key 'scheduler.stepon'" in p.stderr
    assert "'accumulation.rule': got 'off_by_onee'" in p.stderr
    assert "more)" not in p.stderr
    doc = json.loads(lrd("replay", "-c", cfg, "--json").stdout)
    errors = doc["findings"][0]["evidence"]["errors"]
    assert len(errors) == 2 and errors[0].startswith("unknown key 'scheduler.stepon'")


def test_an_unknown_sweep_key_names_the_sweepable_keys():
    p = lrd("replay", "-c", "examples/onevision-offbyone.yaml", "--sweep", "batching.cap=1,2")
    assert p.returncode == 2
    assert "unknown key 'batching.cap'" in p.stderr
    assert "batching.max_tokens_per_microbatch" in p.stderr


def _project(tmp_path: Path, toml: str) -> Path:
    (tmp_path / ".git").mkdir()
    (tmp_path / "pyproject.toml").write_text(toml)
    return tmp_path


def test_every_problem_of_tool_lrdoctor_is_listed(tmp_path):
    proj = _project(tmp_path, '[tool.lrdoctor]\nfail-on = "bogus"\nfoo = 1\n')
    for cmd in (["check"], ["inspect", TORCH_CKPT]):
        p = lrd(*cmd, cwd=proj)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "tool.lrdoctor.foo: unknown key" in p.stderr
        assert "tool.lrdoctor.fail-on: must be one of" in p.stderr
    doc = json.loads(lrd("check", "--json", cwd=proj).stdout)
    assert len(doc_reports(doc)[0]["findings"][0]["evidence"]["errors"]) == 2


def test_inspect_and_fix_read_tool_lrdoctor(tmp_path):
    # Written for check; inspect, fix and replay read the same table (a torch checkpoint).
    assert lrd("inspect", TORCH_CKPT, cwd=tmp_path).returncode == 1
    proj = _project(tmp_path, '[tool.lrdoctor]\nfail-on = "never"\n'
                    'ignore = [{code = "LRD103", reason = "known, fixed in the next run"}]\n')
    p = lrd("inspect", TORCH_CKPT, "--json", cwd=proj)
    assert p.returncode == 0
    doc = json.loads(p.stdout)
    assert "LRD103" not in {f["code"] for f in doc["findings"]}
    assert doc["ignored"][0]["code"] == "LRD103"
    # --fail-on on the command line wins over the file.
    assert lrd("inspect", TORCH_CKPT, "--fail-on", "error", cwd=proj).returncode == 1
    # A per-path entry's fail-on applies to that path only.
    (proj / "pyproject.toml").write_text(
        f'[tool.lrdoctor]\n[[tool.lrdoctor.inspect]]\npath = "{TORCH_CKPT}"\n'
        'fail-on = "never"\n')
    assert lrd("inspect", TORCH_CKPT, cwd=proj).returncode == 0
    assert lrd("inspect", REPO / ROLL_CKPT, cwd=proj).returncode == 1
    assert lrd("fix", TORCH_CKPT, "--dry-run", "--fail-on", "error", cwd=proj).returncode == 1
    (proj / "pyproject.toml").write_text('[tool.lrdoctor]\nfail-on = "error"\n')
    assert lrd("fix", TORCH_CKPT, "--dry-run", cwd=proj).returncode == 1
    (proj / "pyproject.toml").write_text('[tool.lrdoctor]\nfail-on = "never"\n')
    assert lrd("fix", TORCH_CKPT, "--dry-run", cwd=proj).returncode == 0


def test_quiet_fix_is_one_line(tmp_path):
    p = lrd("fix", TORCH_CKPT, "--dry-run", "-q")
    assert p.returncode == 0
    assert p.stdout.splitlines() == [
        "dry run: 4 field(s) would change (--policy rescale); nothing written"]


def test_out_writes_the_output_document(tmp_path):
    out = tmp_path / "o" / "inspect.json"
    p = lrd("inspect", TORCH_CKPT, "--json", "-o", out)
    assert p.stdout == "" and json.loads(out.read_text())["command"] == "inspect"


def test_a_verdict_is_one_line_whatever_the_path_length(tmp_path):
    """A fresh clone in a deep folder once wrapped the verdict over two lines at 120
    columns; logs and `grep LRD` read one line per target."""
    import shutil

    deep = tmp_path / ("d" * 100) / "torch-microstep"
    shutil.copytree(TORCH_CKPT, deep)
    p = lrd("inspect", deep, "-q")
    assert p.stdout.splitlines() == [
        f"{deep}/checkpoint_60.pt: LRD103 error 4x the nominal progress (+1 more)"]


def test_github_actions_adds_annotations_to_the_text_never_instead(tmp_path):
    env = {"GITHUB_ACTIONS": "true"}
    p = lrd("inspect", TORCH_CKPT, env=env)
    lines = p.stdout.splitlines()
    assert lines[0].endswith("LRD103 error 4x the nominal progress (+1 more)")
    assert "Progress counters" in p.stdout  # the details are still there
    notes = [ln for ln in lines if ln.startswith("::")]
    assert notes and all(ln.startswith("::error title=LRD") for ln in notes)
    assert not any(".pt" in ln.split("::")[1] for ln in notes)  # never at a binary file
    assert "checkpoint_60.pt: " in notes[0]  # the target named in the message instead
    # A checkpoint whose budget came from a text config (ROLL's YAML): at that line.
    roll = lrd("inspect", ROLL_CKPT, "--output-format", "github").stdout.splitlines()
    assert roll[0].startswith("::error file=sample_checkpoints/roll-overshoot/rlvr_config.yaml,"
                              "line=2,title=LRD103 ")
    assert "::sample_checkpoints/roll-overshoot/actor_train/checkpoint-299: " in roll[0]
    # Only annotations when asked for, as ruff does.
    g = lrd("inspect", TORCH_CKPT, "--output-format", "github")
    assert all(ln.startswith("::") for ln in g.stdout.splitlines())
    # A replay's finding points at its run config's line; a checked checkpoint at the
    # [tool.lrdoctor] line declaring it.
    r = lrd("replay", "-c", "examples/onevision-offbyone.yaml", "--fast",
            "--output-format", "github")
    rule_line = next(i for i, ln in enumerate(
        (REPO / "examples/onevision-offbyone.yaml").read_text().splitlines(), 1)
        if ln.strip().startswith("rule: off_by_one"))  # the key LRD204 is about
    assert f"file=examples/onevision-offbyone.yaml,line={rule_line},title=LRD204" in r.stdout
    proj = _project(tmp_path, f'[tool.lrdoctor]\n\n[[tool.lrdoctor.inspect]]\n'
                    f'path = "{TORCH_CKPT}"\n')
    c = lrd("check", "--output-format", "github", cwd=proj)
    assert "::error file=pyproject.toml,line=4,title=LRD103" in c.stdout


def test_github_annotations_are_capped_with_a_count():
    from lrdoctor.core.report import Report
    from lrdoctor.findings import finding
    from lrdoctor.render.machine import GITHUB_LIMIT, github

    reps = [Report("inspect", f"ckpt-{i}", "torch", findings=[
        finding("LRD103", "m", {"ratio": 4.0})]) for i in range(GITHUB_LIMIT + 3)]
    out = github(reps).splitlines()
    assert sum(ln.startswith("::error") for ln in out) == GITHUB_LIMIT
    assert "3 error finding(s) not annotated" in out[-1]


def _gfm_tables(md: str) -> list[list[list[str]]]:
    from markdown_it import MarkdownIt

    tokens = MarkdownIt("commonmark").enable("table").parse(md)
    tables, rows, row = [], None, None
    for t in tokens:
        if t.type == "table_open":
            rows = []
        elif t.type == "tr_open":
            row = []
        elif t.type == "inline" and row is not None:
            row.append(t.content)
        elif t.type == "tr_close":
            rows.append(row)
            row = None
        elif t.type == "table_close":
            tables.append(rows)
    return tables


def test_markdown_is_gfm_with_the_same_findings_as_json(tmp_path):
    args = ["check", "--inspect", "sample_checkpoints/*/", "--replay",
            "examples/onevision-offbyone.yaml"]
    md = lrd(*args, "--output-format", "markdown", "--report", tmp_path / "rep").stdout
    docs = doc_reports(json.loads(lrd(*args, "--json").stdout))
    tables = _gfm_tables(md)
    verdicts = tables[0]
    assert verdicts[0][:2] == ["verdict", "target"]
    assert len(verdicts) == 1 + len(docs)  # one row per target
    # Failing targets first.
    failing = [r for r in verdicts[1:] if r[0].startswith("❌")]
    assert verdicts[1:1 + len(failing)] == failing and failing
    # Every finding of --json, with its message, numbers and fix.
    for d in docs:
        for f in d["findings"]:
            assert f"**{f['code']} {f['severity']}: " in md
            assert " ".join(f["message"].split())[:60] in " ".join(md.split())
            if f["fix"]:
                assert f["fix"][:40] in md
    ev = [t for t in tables if t[0] == ["evidence", "value"]]
    assert ev and ["`window_sizes_head`", "[1, 4, 4, 4]"] in [r for t in ev for r in t]
    # Figures linked (the report page's PNGs).
    links = re.findall(r"\]\(([^)]+\.png)\)", md)
    assert links and all(Path(p).is_file() for p in links)
