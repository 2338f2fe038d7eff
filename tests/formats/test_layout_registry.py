"""The layout registry (lrdoctor.read.layouts): one typed entry per layout, the best claim
wins, and only the layouts whose cheap hint matches the listing are imported."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.read import layouts
from lrdoctor.read.layouts import LAYOUTS, Entry, Hint
from lrdoctor.read.scan.listing import list_tree
from tests.helpers.paths import REPO

SAMPLES = REPO / "sample_checkpoints"

# inspect --json in a fresh interpreter; prints the lrdoctor modules it imported.
INSPECT = """
import json, sys
from typer.testing import CliRunner
from lrdoctor.cli import app

r = CliRunner().invoke(app, ["inspect", "--json", sys.argv[1]])
doc = json.loads(r.stdout)
doc = doc["reports"][-1] if "reports" in doc else doc
print(json.dumps({"exit": r.exit_code, "format": doc["format"],
                  "modules": sorted(m for m in sys.modules if m.startswith("lrdoctor"))}))
"""


def _inspect_modules(path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", INSPECT, str(path)], capture_output=True,
                         text=True, check=True, timeout=120, cwd=REPO)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _layouts_imported(modules: list[str]) -> set[str]:
    names = {e.name for e in LAYOUTS}
    return {m.rsplit(".", 1)[-1] for m in modules
            if m.startswith("lrdoctor.read.layouts.") and m.rsplit(".", 1)[-1] in names}


def test_inspect_of_a_megatron_checkpoint_imports_no_other_layout():
    """The committed Megatron sample: only megatron's module is imported; HF's sample (which
    also holds a scheduler.pt, ROLL's hint) imports HF's alone: ROLL's claim cannot beat a
    trainer's own record, so its module is never loaded."""
    meg = _inspect_modules(SAMPLES / "megatron-healthy")
    assert meg["exit"] in (0, 1) and meg["format"] == "megatron"
    assert _layouts_imported(meg["modules"]) == {"megatron"}, meg["modules"]
    hf = _inspect_modules(SAMPLES / "hf-healthy")
    assert hf["format"] == "hf"
    assert _layouts_imported(hf["modules"]) == {"hf"}, hf["modules"]


def test_megatron_core_checkpoint_imports_only_megatron(megatron_run_dir):
    """The same on a run written by megatron-core's own classes (not the committed sample)."""
    got = _inspect_modules(megatron_run_dir.root)
    assert got["format"] == "megatron"
    assert _layouts_imported(got["modules"]) == {"megatron"}, got["modules"]


def test_a_framework_recognised_by_content_imports_only_its_layout(tmp_path):
    """verl (FSDP, written with the classes verl saves) is read by the generic content read
    and recognised on the classified checkpoint: only torchsave and verl are imported, not
    the other layouts recognised by content (their hints, names or keys, do not match the
    checkpoint) nor any other reader (no other hint matches the run's names)."""
    from tests.formats.test_formats_layouts import verl_run

    got = _inspect_modules(verl_run(tmp_path / "v", step=3, sched_per_update=False))
    assert got["format"] == "verl"
    assert _layouts_imported(got["modules"]) == {"torchsave", "verl"}, got["modules"]
    torch = _inspect_modules(SAMPLES / "torch-microstep")
    assert torch["format"] == "torch"
    assert _layouts_imported(torch["modules"]) == {"torchsave"}, torch["modules"]


def test_registry_entries_meet_their_protocol():
    """Every entry loads its module by a static import (a missing one raises, never skipped),
    and every module implements the one Layout protocol, whichever evidence it is claimed on."""
    assert len({e.name for e in LAYOUTS}) == len(LAYOUTS)
    for e in LAYOUTS:
        mod = e.load()
        assert mod.__name__ == f"lrdoctor.read.layouts.{e.name}"
        assert isinstance(mod.NAME, str)
        assert callable(mod.claims) and callable(mod.find_checkpoints) and callable(mod.read)
        assert not hasattr(mod, "claims_content"), e.name  # one claim per layout
        assert e.on_names or e.on_content, e.name
    assert layouts.FORMAT_MODULES == [e.name for e in LAYOUTS if e.on_names]


def test_a_registered_module_that_is_missing_is_an_error(tmp_path, monkeypatch):
    def missing():
        raise ModuleNotFoundError("No module named 'lrdoctor.read.layouts.gone'",
                                  name="lrdoctor.read.layouts.gone")

    (tmp_path / "gone.marker").write_text("x")
    monkeypatch.setattr(layouts, "LAYOUTS", [
        *LAYOUTS, Entry("gone", Hint(frozenset({"gone.marker"})), 1000, missing)])
    with pytest.raises(ModuleNotFoundError, match="gone"):
        layouts.detect(tmp_path)


@pytest.mark.parametrize("sample,name", [("megatron-healthy", "megatron"), ("hf-healthy", "hf"),
                                         ("roll-overshoot", "roll"),
                                         ("torch-microstep", "torchsave")])
def test_best_claim_wins_in_any_registry_order(sample, name, monkeypatch):
    """Reversing the registry changes nothing: the choice is by score, not by position."""
    path = SAMPLES / sample
    assert layouts._claim(path).name == name
    monkeypatch.setattr(layouts, "LAYOUTS", list(reversed(LAYOUTS)))
    assert layouts._claim(path).name == name


def test_hints_never_hide_a_layout(tmp_path):
    """A listing cut short by its bound matches every hint (no silent miss), and the
    listing of a file is its own name."""
    for i in range(30):
        (tmp_path / f"f{i}.txt").write_text("")
    tree = list_tree(tmp_path, limit=10)
    assert not tree.complete
    assert all(e.hint.matches(tree.names, complete=tree.complete) for e in LAYOUTS)
    f = SAMPLES / "megatron-healthy" / "iter_0000200" / "mp_rank_00" / "model_optim_rng.pt"
    assert list_tree(f).names == {"model_optim_rng.pt"}


def test_unknown_and_content_only_names_are_refused():
    with pytest.raises(UnusableInput, match="unknown format 'nope'"):
        layouts.get("nope")
    with pytest.raises(UnusableInput, match="use --format torchsave"):
        layouts.get("verl")
