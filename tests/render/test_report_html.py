"""``lrdoctor report`` and ``check --report``: one self-contained page plus the PNGs."""

from __future__ import annotations

import base64
import os
import re
import shutil
import struct
from html.parser import HTMLParser

from typer.testing import CliRunner

from lrdoctor.cli import app
from lrdoctor.core.report import Report
from lrdoctor.findings import finding
from lrdoctor.render.html import render_html, write_report
from tests.helpers.paths import TESTS

PROJECTS = TESTS / "projects"
SAMPLES = TESTS.parent / "sample_checkpoints"
runner = CliRunner()


class _Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.imgs: list[str] = []
        self.external: list[str] = []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "img":
            self.imgs.append(a["src"])
        if tag in ("script", "link") or (tag == "img" and not a["src"].startswith("data:")):
            self.external.append(tag)


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def parse(page: str) -> _Page:
    p = _Page()
    p.feed(page)
    return p


def test_report_command_on_a_drifting_checkpoint(tmp_path):
    out = tmp_path / "rep"
    ckpt = PROJECTS / "bad" / "checkpoints" / "run-a"
    res = runner.invoke(app, ["report", str(ckpt), "--out", str(out)])
    assert res.exit_code == 0, res.output
    page = (out / "index.html").read_text()
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 1
    w, h = png_size(pngs[0].read_bytes())
    assert w >= 600 and h >= 300
    doc = parse(page)
    assert doc.external == []  # self-contained: no scripts, styles or images fetched
    assert len(doc.imgs) == 1
    embedded = base64.b64decode(doc.imgs[0].split(",", 1)[1])
    assert embedded == pngs[0].read_bytes()
    for code in ("LRD101", "LRD104"):
        assert code in page
    assert '<span class="fail">FAIL</span>' not in page  # --fail-on never by default
    assert re.search(r"progress ratio \(actual / nominal\)</th><td>4</td>", page)
    # A threshold turns it into a gate.
    res = runner.invoke(app, ["report", str(ckpt), "--out", str(out), "--fail-on", "error"])
    assert res.exit_code == 1


def test_check_report_option(tmp_path, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    dst = tmp_path / "ok"
    shutil.copytree(PROJECTS / "ok", dst)
    (dst / ".git").mkdir()
    monkeypatch.chdir(dst)
    res = runner.invoke(app, ["check", "--report", "report"])
    assert res.exit_code == 0, res.output
    page = (dst / "report" / "index.html").read_text()
    assert '<span class="ok">ok</span>' in page
    assert "ignored <code>LRD105</code>: LR set by hand on resume" in page
    # The checkpoint's LR plot, and the replay's LR/window and updates-per-step plots.
    pngs = sorted(p.name for p in (dst / "report").glob("*.png"))
    assert len(pngs) == 3 and sum("replay" in p for p in pngs) == 2
    assert len(parse(page).imgs) == 3


def test_report_from_config_and_unusable_target(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".git").mkdir()
    res = runner.invoke(app, ["report", "missing-ckpt/", "--out", "r"])
    assert res.exit_code == 2
    page = (tmp_path / "r" / "index.html").read_text()
    assert "LRD303" in page and "missing-ckpt" in page


def test_html_escapes_untrusted_text(tmp_path):
    f = finding("LRD105", "<script>alert(1)</script> & more")
    page = render_html([Report("inspect", "<b>x</b>", "torchsave", findings=[f])], {}, {})
    assert "<script>" not in page and "&lt;script&gt;" in page and "&lt;b&gt;x" in page


def test_code_spans_in_finding_texts_are_code_not_backticks(tmp_path):
    """Issue 29 item 14: the page showed the fix texts' Markdown backticks raw. The real
    report of the torch-microstep sample (a torch.save checkpoint whose CosineAnnealingLR
    stepped per micro-batch: LRD103, LRD101, fixes naming `lrdoctor fix ... --policy`)."""
    res = runner.invoke(app, ["report", str(SAMPLES / "torch-microstep"), "--out",
                              str(tmp_path / "r"), "-q"])
    assert res.exit_code == 0, res.output
    page = (tmp_path / "r" / "index.html").read_text()
    table = page.split('<table class="findings">', 1)[1].split("</table>", 1)[0]
    prose = re.sub(r"<pre>.*?</pre>", "", table, flags=re.S)  # the evidence is JSON
    assert "fix" in prose and "`" not in prose
    assert re.search(r"<code>[^<]*--policy [a-z-]+[^<]*</code>", prose), prose
    # Escaping first: a code span in untrusted text is still escaped inside <code>.
    f = finding("LRD105", "set `<b>lr</b>` by hand", fix="run `a & b`")
    page = render_html([Report("inspect", "x", "torch", findings=[f])], {}, {})
    assert "<code>&lt;b&gt;lr&lt;/b&gt;</code>" in page and "<code>a &amp; b</code>" in page


def test_report_replays_a_launch_script_as_replay_does(tmp_path):
    """Issue 29 item 18: `report examples/fast-llm-train.sh` (Fast-LLM's launch script) was
    refused as "not a checkpoint" while `replay -c` and `check --replay` take it. It is
    replayed: the page's report is a replay of the script, with replay's own findings."""
    import json

    script = str(TESTS.parent / "examples" / "fast-llm-train.sh")
    res = runner.invoke(app, ["report", script, "--out", str(tmp_path / "r"), "--json"])
    assert res.exit_code == 0, res.output
    (rep,) = json.loads(res.stdout)["reports"]
    assert (rep["command"], rep["target"]) == ("replay", script)
    alone = json.loads(runner.invoke(app, ["replay", "-c", script, "--json"]).stdout)
    assert [f["code"] for f in rep["findings"]] == [f["code"] for f in alone["findings"]]
    assert "not a checkpoint" not in res.output
    assert "replay" in (tmp_path / "r" / "index.html").read_text()


def test_figure_failure_is_a_note_not_a_crash(tmp_path):
    rep = Report("inspect", "ckpt", "torchsave", state={"schedule": {"family": "nope"}},
                 findings=[])
    old = os.umask(0o022)
    try:
        index = write_report([rep], tmp_path / "r")
    finally:
        os.umask(old)
    page = index.read_text()
    assert "figure not drawn" in page
    assert index.stat().st_mode & 0o777 == 0o644  # shareable, not mkstemp's 0600


def test_report_on_a_replay_with_a_sweep(tmp_path):
    out = tmp_path / "rep"
    cfg = PROJECTS / "bad" / "configs" / "run.yaml"
    res = runner.invoke(app, ["report", str(cfg), "--synthetic", "fixed:1024", "--engine", "fast",
                              "--sweep", "scheduler.step_on=update,micro_step", "--out", str(out),
                              "--fail-on", "error"])
    assert res.exit_code == 1, res.output  # LRD201/LRD205 are errors
    names = sorted(p.name for p in out.glob("*.png"))
    assert [n.rsplit("-", 1)[1] for n in names] == ["lr.png", "sweep.png", "updates.png"]
    for p in out.glob("*.png"):
        w, h = png_size(p.read_bytes())
        assert w >= 800 and h >= 300
        assert p.stat().st_mode & 0o044  # not mkstemp's private 0600
    page = (out / "index.html").read_text()
    assert len(parse(page).imgs) == 3
    assert "Sweep over scheduler.step_on" in page
    assert "<th>progress ratio</th><td>4</td>" in page


def test_png_names_never_take_the_folder_the_user_stands_in(tmp_path, monkeypatch):
    """Issue 29 item 17: a PNG was named after the clone's folder
    (01-inspect-fresh-lrd-checkpoint_60-lr.png) for a checkpoint given by its full path.
    The name takes the parts the target has below the working directory (a run's folder
    the user named stays), else the target's own name."""
    from lrdoctor.render.html import figure_stem

    clone = tmp_path / "fresh-lrd"
    (clone / "runs" / "exp1").mkdir(parents=True)
    monkeypatch.chdir(clone)

    def stem(target: str) -> str:
        return figure_stem(1, Report("inspect", target, "torch"), [Report("inspect", target,
                                                                          "torch")])

    assert stem(str(clone / "checkpoint_60.pt")) == "01-inspect-checkpoint_60"
    assert stem("checkpoint_60.pt") == "01-inspect-checkpoint_60"
    assert stem(str(tmp_path / "elsewhere" / "checkpoint_60.pt")) == "01-inspect-checkpoint_60"
    assert stem("runs/exp1/checkpoint-3") == "01-inspect-exp1-checkpoint-3"
    assert stem(str(clone / "runs" / "exp1" / "checkpoint-3")) == "01-inspect-exp1-checkpoint-3"
