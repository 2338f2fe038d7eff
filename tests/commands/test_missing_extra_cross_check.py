"""Issue 29, item 13: a missing extra is one line and exit 2 for ``replay --cross-check``
as for ``--torch`` (it once ran the fast replay and exited 1 on its findings, with the
cross-check's absence buried in the output), and the demo repairs torch.save files
without torch, as ``fix`` does (lrdoctor.repair.torchzip), instead of saying it cannot.

Framework: none; the replayed config is SkyRL's trainer YAML (examples/)."""

from __future__ import annotations

import importlib.util

from typer.testing import CliRunner

from lrdoctor import extras
from lrdoctor.cli import app
from tests.helpers.paths import REPO


def _no_torch(monkeypatch) -> None:
    real = extras.have
    monkeypatch.setattr(extras, "have", lambda m: False if m.split(".")[0] == "torch"
                        else real(m))


def test_cross_check_without_torch_is_one_line_exit_2(monkeypatch):
    _no_torch(monkeypatch)
    for flag in ("--cross-check", "--torch"):
        r = CliRunner().invoke(app, ["replay", "-c", str(REPO / "examples" /
                                                          "skyrl-trainer.yaml"), flag])
        lines = r.output.strip().splitlines()
        assert r.exit_code == 2, (flag, r.output)
        assert len(lines) == 1 and f"replay {flag} needs torch" in lines[0], (flag, lines)
        assert "pip install 'lrdoctor[torch]'" in lines[0]


def test_the_demo_repairs_without_torch(monkeypatch):
    spec = importlib.util.spec_from_file_location("lrd_demo", REPO / "scripts" / "demo.py")
    assert spec is not None and spec.loader is not None
    demo = importlib.util.module_from_spec(spec)
    real_find = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda n, *a: None if n == "torch" else real_find(n, *a))
    spec.loader.exec_module(demo)  # the light install: no torch to be found
    ran: list[tuple[str, ...]] = []
    monkeypatch.setattr(demo, "run", lambda *a, expect: ran.append(a))
    monkeypatch.setattr(demo, "OUT", REPO / "out" / "demo-test-no-torch")
    try:
        demo.main()
    finally:
        import shutil

        shutil.rmtree(REPO / "out" / "demo-test-no-torch", ignore_errors=True)
    fixes = [a for a in ran if a[0] == "fix" and "--dry-run" not in a]
    assert len(fixes) == 2, ran
