"""``lrdoctor report`` takes ``--output-format``/``--json`` as every command does
(docs/cli.md): the page goes to ``--out``, stdout gets the findings in the chosen format.

Why: a CI job that writes the page wants the same Markdown for ``$GITHUB_STEP_SUMMARY``
(figures linked) without a second run through ``check --report``. Layout: a plain torch
loop checkpoint (sample_checkpoints/torch-microstep), not one the Markdown was written for.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from tests.commands.test_cli_convention import TORCH_CKPT, lrd
from tests.helpers.docs import reports as doc_reports


def test_report_prints_markdown_with_figure_links_and_the_json_findings(tmp_path):
    out = tmp_path / "page"
    md = lrd("report", TORCH_CKPT, "--output-format", "markdown", "-o", out)
    assert md.returncode == 0, md.stderr
    assert (out / "index.html").is_file()
    assert "report written to" not in md.stdout  # stdout is the document alone
    links = re.findall(r"\]\(([^)]+\.png)\)", md.stdout)
    assert links and all(Path(p).is_file() for p in links), md.stdout
    doc = json.loads(lrd("report", TORCH_CKPT, "--json", "-o", tmp_path / "page2").stdout)
    assert doc["command"] == "report" and len(doc_reports(doc)) == 1
    codes = [f["code"] for f in doc_reports(doc)[0]["findings"]]
    assert "LRD103" in codes
    assert re.findall(r"\*\*(LRD\d+) ", md.stdout) == codes
