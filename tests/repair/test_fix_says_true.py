"""Issue 29, items 3, 5, 6 and 7: what ``fix`` and the findings print is true and runs.

- "verified" means the copy inspects clean at error level (else exit 1, what remains and
  what clears it);
- a suggested repair is the full ``lrdoctor fix PATH --out NEW ...`` and runs as printed,
  and never a policy ``fix`` refuses (a ROLL checkpoint copied out of its run);
- LRD101's title claims no planned end the checkpoint does not hold; LRD202's message
  agrees with its title;
- a fix whose copy is not verified names the copy where it is (never the temporary
  holder that is gone), and says so when the copy lies inside the run's folder.

Layouts: the torch loop sample (torch.save), the HF Trainer sample (checkpoint-N folders
written by transformers' Trainer), the ROLL sample (Megatron-style scheduler, no config
beside a copied checkpoint), and RLinf's replayed YAML for LRD202."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

from typer.testing import CliRunner

from lrdoctor.cli import app
from tests.helpers.paths import REPO

runner = CliRunner()
SAMPLES = REPO / "sample_checkpoints"


def _inspect(path: Path) -> dict:
    r = runner.invoke(app, ["inspect", "--json", str(path)])
    doc = json.loads(r.stdout)
    doc = doc[0] if isinstance(doc, list) else doc
    for f in doc["findings"]:  # every command a fix text shows names the checkpoint
        for cmd in re.findall(r"`(lrdoctor fix [^`]+)`", f["fix"]):  # not the bare name
            assert not cmd.split()[2].startswith("-"), (f["code"], cmd)
    return doc


def test_the_suggested_repair_runs_as_printed_and_verifies(tmp_path, monkeypatch):
    src = tmp_path / "run" / "checkpoint_60.pt"
    src.parent.mkdir()
    shutil.copy(SAMPLES / "torch-microstep" / "checkpoint_60.pt", src)
    monkeypatch.chdir(tmp_path)
    doc = _inspect(Path("run/checkpoint_60.pt"))
    fix = next(f["fix"] for f in doc["findings"] if f["code"] == "LRD103")
    cmd = fix.split("repair this checkpoint with `", 1)[1].split("`", 1)[0]
    assert cmd == "lrdoctor fix run/checkpoint_60.pt --out run/checkpoint_60-fixed.pt", fix
    assert "(it applies `--policy rescale --k 4`" in fix
    argv = shlex.split(cmd)
    r = runner.invoke(app, argv[1:])
    assert r.exit_code == 0, r.output
    assert "verified by inspecting it again" in " ".join(r.stdout.split())
    after = _inspect(Path("run/checkpoint_60-fixed.pt"))
    assert not [f for f in after["findings"] if f["severity"] == "error"], after["findings"]


def test_no_recommendation_that_fix_refuses_for_a_roll_copy(tmp_path):
    """A ROLL checkpoint copied out of its run holds no planned end: fix refuses
    extend-horizon there, so no finding recommends it, and LRD101's title does not say
    "before the planned end"."""
    ck = tmp_path / "checkpoint-299"
    shutil.copytree(SAMPLES / "roll-overshoot" / "actor_train" / "checkpoint-299", ck)
    doc = _inspect(ck)
    lrd101 = next(f for f in doc["findings"] if f["code"] == "LRD101")
    assert "planned end of training" not in lrd101["title"]
    assert "holds no planned end" in lrd101["title"]
    for f in doc["findings"]:
        assert "repair this checkpoint with" not in f["fix"], f["fix"]
    assert "cannot apply `--policy extend-horizon`" in lrd101["fix"]
    r = runner.invoke(app, ["fix", str(ck), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2  # what the finding said: fix refuses it as it stands
    # In its run, the planned end is known: the recommended command runs as printed.
    run = tmp_path / "roll"
    shutil.copytree(SAMPLES / "roll-overshoot", run)
    ck = run / "actor_train" / "checkpoint-299"
    doc = _inspect(ck)
    fix = next(f["fix"] for f in doc["findings"] if f["code"] == "LRD103")
    cmd = fix.split("repair this checkpoint with `", 1)[1].split("`", 1)[0]
    assert cmd == f"lrdoctor fix {ck} --out {ck}-fixed", cmd
    r = runner.invoke(app, shlex.split(cmd)[1:])
    assert r.exit_code == 0, r.output


def test_an_unverified_copy_in_the_run_names_itself_and_says_so(tmp_path):
    """The issue's command: `fix hf-healthy/checkpoint-20 --out
    hf-healthy/checkpoint-20-fixed --policy rescale --k 2` (a healthy run wrongly rescaled)."""
    run = tmp_path / "hf-healthy"
    shutil.copytree(SAMPLES / "hf-healthy", run)
    out = run / "checkpoint-20-fixed"
    r = runner.invoke(app, ["fix", str(run / "checkpoint-20"), "--out", str(out), "--policy",
                            "rescale", "--k", "2"])
    text = " ".join(r.stdout.split())
    assert r.exit_code == 1, r.output
    assert "lrdoctor-tmp" not in text and ".as-input" not in text, text
    assert f"{out}/trainer_state.json" in text
    assert "the input shows none of" in text and "`--policy rescale` caused them" in text
    assert f"the unverified copy stays at {out}, inside {run}" in text
    r = runner.invoke(app, ["fix", str(run / "checkpoint-20"), "--out", str(out), "--policy",
                            "rescale", "--k", "2", "--force", "--json"])
    doc = json.loads(r.stdout)
    assert doc["verified"] is False and doc["unverified_copy_in_run"] == str(run)
    assert "lrdoctor-tmp" not in json.dumps(doc["findings_after"])


def test_lrd202_says_what_its_numbers_say():
    """RLinf's elastic run: every budgeted update ran, the scheduler still stops short
    (dp changes move it less per update); "200 optimizer updates vs 200 budgeted" under
    "stops short" read as a contradiction."""
    from lrdoctor.rules.replay_context import updates_vs_budget

    assert updates_vs_budget({"actual_updates": 200, "budget_updates": 200.0}, "less") == \
        ("all 200 budgeted optimizer updates ran, but they advanced the scheduler less than "
         "the horizon assumes")
    assert updates_vs_budget({"actual_updates": 150, "budget_updates": 200}, "less") == \
        "150 optimizer updates vs 200 budgeted"
    r = runner.invoke(app, ["replay", "-c", str(REPO / "examples" / "rlinf-elastic.yaml"),
                            "--json"])
    doc = json.loads(r.stdout)
    doc = doc[0] if isinstance(doc, list) else doc
    for f in doc["findings"]:
        if f["code"] in ("LRD201", "LRD202"):
            ev = f["evidence"]
            done, budget = ev.get("actual_updates"), ev.get("budget_updates")
            if done is not None and budget is not None and done == budget:
                assert f"{done} optimizer updates vs" not in f["message"], f


def test_every_generic_fix_command_becomes_one_that_runs(tmp_path):
    """A rule's generic `lrdoctor fix --policy X` (LRD118's and LRD119's texts name it
    outside any recommendation) becomes the command on the checkpoint, or says what fix
    lacks to apply it there: the torch sample holds a planned end, a ROLL checkpoint copied
    out of its run holds none."""
    from lrdoctor.core.findings import Finding, FreeEvidence, Severity
    from lrdoctor.diagnose import _runnable
    from lrdoctor.inspect_api import read_state

    def finding() -> Finding:
        return Finding("LRD119", Severity.ERROR, "t", "m", FreeEvidence({}),
                       fix="Size the horizon; `lrdoctor fix --policy extend-horizon` rewrites "
                           "a checkpoint's horizon.")

    src = SAMPLES / "torch-microstep" / "checkpoint_60.pt"
    f = finding()
    _runnable([f], read_state(src, "torchsave"))
    assert (f"`lrdoctor fix {src} --out {src.with_name('checkpoint_60-fixed.pt')} "
            "--policy extend-horizon` rewrites") in f.fix, f.fix
    ck = tmp_path / "checkpoint-299"
    shutil.copytree(SAMPLES / "roll-overshoot" / "actor_train" / "checkpoint-299", ck)
    f = finding()
    _runnable([f], read_state(ck, "roll"))
    assert "`--policy extend-horizon` (which `lrdoctor fix` cannot apply here: the " \
           "checkpoint does not say where training is planned to end" in f.fix, f.fix
