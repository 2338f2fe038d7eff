"""``lrdoctor --help`` and ``inspect`` run where torch is absent and must start fast.

Each reader has its own import check; this one covers the whole CLI path
(commands, rendering, every output format) on the committed samples, so a
module-level ``import torch`` anywhere on that path fails here.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers.paths import REPO

SAMPLES = REPO / "sample_checkpoints"
HEAVY = ("torch", "numpy", "pandas", "matplotlib", "fsspec")

CODE = """
import json, sys
from typer.testing import CliRunner
from lrdoctor.cli import app

heavy, samples = json.loads(sys.argv[1]), json.loads(sys.argv[2])
runner, seen = CliRunner(), []
r = runner.invoke(app, ["--help"])
seen.append(["--help", r.exit_code, [m for m in heavy if m in sys.modules]])
for p in samples:
    for extra in ([], ["--json"], ["--all"], ["--output-format", "sarif"]):
        r = runner.invoke(app, ["inspect", p, *extra])
        seen.append([p, extra, r.exit_code, [m for m in heavy if m in sys.modules]])
print(json.dumps(seen))
"""


def test_help_and_inspect_import_no_heavy_modules():
    samples = sorted(str(p) for p in SAMPLES.iterdir() if p.is_dir())
    assert samples, "no sample checkpoints to inspect"
    out = subprocess.run([sys.executable, "-c", CODE, json.dumps(HEAVY), json.dumps(samples)],
                         capture_output=True, text=True, check=True, timeout=120)
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen[0][1] == 0
    for row in seen:
        assert row[-1] == [], f"{row[:-2]} imported {row[-1]}"
    # inspect exits 0 (healthy) or 1 (findings at --fail-on), never 2 on the samples
    assert all(row[2] in (0, 1) for row in seen[1:]), seen


START = """
import json, sys
from typer.testing import CliRunner
from lrdoctor.cli import app

r = CliRunner().invoke(app, json.loads(sys.argv[1]))
print(json.dumps([r.exit_code, sorted(sys.modules)]))
"""


def _modules_after(args: list[str]) -> tuple[int, list[str]]:
    out = subprocess.run([sys.executable, "-c", START, json.dumps(args)], cwd=REPO,
                         capture_output=True, text=True, check=True, timeout=120)
    code, mods = json.loads(out.stdout.strip().splitlines()[-1])
    return code, mods


def test_help_imports_no_reader_rule_or_pydantic():
    """Issue 29 item 20: ``lrdoctor --help`` pays for typer and the command table only.
    --format's help lists the layouts from their registry, which must not import the
    byte readers; typer's pydantic coercion is built only for a value that needs it."""
    code, mods = _modules_after(["--help"])
    assert code == 0
    loaded = [m for m in mods if m.startswith(("pydantic", "lrdoctor.read.bytes",
                                               "lrdoctor.rules", "rich"))]
    assert loaded == []


def test_inspect_quiet_imports_only_what_it_judges_with():
    """Issue 29 item 21 (the hf-healthy sample, a HF Trainer run): ``inspect -q`` imports the
    checkpoint rules, not the replay rules; no pydantic (no option needs coercion, no
    [tool.lrdoctor] here), no machine-format renderer, and no rich: off a terminal the
    verdict lines are the same characters without it."""
    code, mods = _modules_after(["inspect", str(SAMPLES / "hf-healthy"), "-q"])
    assert code == 0
    assert "lrdoctor.rules.lrd101_past_decay_horizon" in mods  # judged, so imported
    loaded = [m for m in mods if m.startswith(("pydantic", "lrdoctor.rules.lrd2", "rich",
                                               "lrdoctor.render.machine", "lrdoctor.ci.config"))]
    assert loaded == []
    # No finding, so no repair recommended: not the repair package, nor argparse (a
    # Namespace is looked for in a repair's key paths); only the HF schedule family of the
    # seven; pickletools reads a pickle outside a torch zip only.
    assert "lrdoctor.schedules.hf" in mods
    off = [m for m in mods if m.startswith(("lrdoctor.repair", "argparse", "pickletools"))
           or m in ("lrdoctor.schedules.megatron", "lrdoctor.schedules.deepspeed",
                    "lrdoctor.schedules.timm", "lrdoctor.schedules.torchtitan",
                    "lrdoctor.schedules.onevision")]
    assert off == []


def test_inspect_quiet_makes_no_evidence_dataclass_it_does_not_build():
    """Issue 29 item 21: an evidence type becomes a dataclass when a record of it is built
    (or its fields are asked for); a healthy HF run builds none, so none is made."""
    out = subprocess.run([sys.executable, "-c", START + """
from lrdoctor.core.findings import Record
seen, todo = [], list(Record.__subclasses__())
while todo:
    c = todo.pop()
    seen.append(c)
    todo.extend(c.__subclasses__())
made = [c.__name__ for c in seen if isinstance(c.__dict__.get("__dataclass_fields__"), dict)]
print(json.dumps([len(seen), made]))
""", json.dumps(["inspect", str(SAMPLES / "hf-healthy"), "-q"])], cwd=REPO,
        capture_output=True, text=True, check=True, timeout=120)
    classes, made = json.loads(out.stdout.strip().splitlines()[-1])
    assert classes > 20 and made == []  # the rules' evidence types were imported, none made
