"""Issue 28: point lrdoctor anywhere. Every checkpoint under a folder is found at any depth,
grouped into runs by its own evidence, and each run judged apart: a folder of runs, one
folder above a run, ``sample_checkpoints --all``, and AReaL's recover checkpoint five
folders below its run root each give the verdict of the run itself.

Frameworks reproduced: the committed samples (HF Trainer, Megatron-LM, ROLL, a torch loop),
AReaL's Megatron-engine recover checkpoint written by megatron-core 0.19.2's own
``dist_checkpointing.save`` (tests/data/areal_recover/make_fixtures.py), and a model saved
by ``torch.save`` as the stray weights file beside runs.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from lrdoctor.cli import app
from lrdoctor.core.findings import Severity
from lrdoctor.core.report import Report
from lrdoctor.inspect_api import inspect_path
from lrdoctor.read.layouts._runs import find_runs
from lrdoctor.read.scan.runs import checkpoint_units
from tests.helpers.paths import REPO, TESTS

SAMPLES = REPO / "sample_checkpoints"
AREAL = TESTS / "data" / "areal_recover"
AREAL_CKPT = Path("checkpoints", "root", "gsm8k-grpo-megatron", "trial0", "default",
                  "recover_checkpoint")


def _verdicts(reports: list[Report], base: Path) -> dict[str, list[str]]:
    """Each report's target (relative to ``base``) -> its finding codes at warning or above."""
    return {str(Path(r.target).relative_to(base)): sorted(
        f.code for f in r.findings if f.severity >= Severity.WARNING) for r in reports}


def _cli(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, ["inspect", *args])
    return r.exit_code, r.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """runs/exp1 = hf-healthy, exp2 = megatron-healthy, exp3 = roll-overshoot (issue 28)."""
    root = tmp_path_factory.mktemp("d") / "runs"
    for name, sample in (("exp1", "hf-healthy"), ("exp2", "megatron-healthy"),
                         ("exp3", "roll-overshoot")):
        shutil.copytree(SAMPLES / sample, root / name)
    return root


def test_each_checkpoint_is_one_unit_the_outermost_step_folder(runs):
    """ROLL's checkpoint-N/iter_0000001 is part of checkpoint-N, never a second checkpoint."""
    units = checkpoint_units(runs).units
    paths = {str(u.path.relative_to(runs)) for u in units}
    assert not [p for p in paths if "iter_0000001" in p]
    assert paths == {"exp1/checkpoint-10", "exp1/checkpoint-20",
                     "exp2/iter_0000200", "exp2/iter_0000400",
                     "exp3/actor_train/checkpoint-100", "exp3/actor_train/checkpoint-200",
                     "exp3/actor_train/checkpoint-299"}
    # ROLL's run is read at its layout root (its config is there), the others where they lie.
    assert find_runs(runs).roots == [runs / "exp1", runs / "exp2", runs / "exp3"]


def test_folder_of_three_runs_judges_each_as_alone(runs):
    together = inspect_path(runs, all=True)
    alone = [r for name in ("exp3", "exp1", "exp2") for r in inspect_path(runs / name, all=True)]
    assert _verdicts(together, runs) == _verdicts(alone, runs)
    codes = {c for cs in _verdicts(together, runs).values() for c in cs}
    assert "LRD113" not in codes and "LRD114" not in codes  # never compared across runs
    # worst run first: ROLL's overshoot, then the two healthy runs, each report naming its run
    assert [r.run.root for r in together if r.run] == [str(runs / "exp3")] * 3 + [
        str(runs / "exp1")] * 2 + [str(runs / "exp2")] * 2
    roll = [r for r in together if r.run and r.run.root.endswith("exp3")]
    assert all({"LRD103", "LRD101"} <= {f.code for f in r.findings} for r in roll)
    assert not [f for r in together if not r.run.root.endswith("exp3") for f in r.findings
                if f.severity >= Severity.WARNING]


def test_folder_of_runs_json_is_one_document_with_runs(runs):
    code, out = _cli(str(runs), "--json")
    assert code == 1
    doc = json.loads(out)
    assert doc["command"] == "inspect" and doc["target"] == str(runs) and doc["not_runs"] == []
    assert [(r["root"], r["format"], r["worst"]) for r in doc["runs"]] == [
        (str(runs / "exp3"), "roll", "error"), (str(runs / "exp1"), "hf", None),
        (str(runs / "exp2"), "megatron", None)]
    # each run's report is the document the run alone prints
    code3, out3 = _cli(str(runs / "exp3"), "--json")
    alone = json.loads(out3)  # the one schema: the document's envelope holds its version
    assert alone.pop("schema") == doc["schema"] == 1
    assert code3 == 1 and doc["runs"][0]["reports"] == [alone]


def test_text_gives_one_section_per_run_worst_first(runs):
    code, out = _cli(str(runs))
    assert code == 1
    heads = [line for line in out.splitlines() if " of 3: " in line]
    assert len(heads) == 3
    assert "run 1 of 3: " in heads[0] and "exp3 (roll, 3 checkpoints): error" in heads[0]
    assert "exp1 (hf, 2 checkpoints): ok" in heads[1]
    assert "exp2 (megatron, 2 checkpoints): ok" in heads[2]


def test_one_folder_above_healthy_megatron_is_the_run(tmp_path):
    shutil.copytree(SAMPLES / "megatron-healthy", tmp_path / "up" / "a")
    code, out = _cli(str(tmp_path / "up"), "--json")
    code_a, out_a = _cli(str(tmp_path / "up" / "a"), "--json")
    assert code == code_a == 0
    assert json.loads(out) == json.loads(out_a)  # the same document, format megatron
    assert json.loads(out)["format"] == "megatron"


def test_format_forced_one_level_up_reads_the_run_below(tmp_path):
    shutil.copytree(SAMPLES / "megatron-healthy", tmp_path / "up" / "a")
    code, out = _cli(str(tmp_path / "up"), "--format", "megatron", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["format"] == "megatron" and doc["target"] == str(
        tmp_path / "up" / "a" / "iter_0000400")


def test_sample_checkpoints_all_errors_where_each_run_alone_errors():
    together = _verdicts(inspect_path(SAMPLES, all=True), SAMPLES)
    alone = {}
    for name in ("hf-healthy", "megatron-healthy", "roll-overshoot", "torch-microstep"):
        alone.update(_verdicts(inspect_path(SAMPLES / name, all=True), SAMPLES))
    assert together == alone
    erring = {t.split("/")[0] for t, codes in together.items() if codes}
    assert erring == {"roll-overshoot", "torch-microstep"}  # the two bugs, nothing else


@pytest.mark.parametrize("case,codes", [("decay_twice", {"LRD119"}),
                                        ("decay_twice_mid", {"LRD119"}), ("healthy", set())])
def test_areal_recover_checkpoint_five_folders_down(case, codes):
    """AReaL's run root: the megatron-core DCP recover checkpoint is found and judged as
    when pointed at directly (before: 'not a checkpoint lrdoctor recognises'), and AReaL
    PR 1289 is found by the saved numbers alone: lr_decay_steps 198 = the run's length
    wd_incr_steps 220 - warmup 22, even at step 100 before the horizon."""
    root = AREAL / case
    (rep,) = inspect_path(root)
    (direct,) = inspect_path(root / AREAL_CKPT)
    assert rep.target == direct.target == str(root / AREAL_CKPT)
    got = {f.code for f in rep.findings if f.severity >= Severity.WARNING}
    assert got == {f.code for f in direct.findings if f.severity >= Severity.WARNING}
    assert got == codes
    assert rep.state["planned_end"]["value"] == 220
    assert rep.state["planned_end"]["source"].endswith("lr_scheduler.wd_incr_steps")
    if codes:  # every number is the saved scheduler's
        (f,) = [f for f in rep.findings if f.code == "LRD119"]
        assert f.severity == Severity.ERROR
        assert "220 - warmup 22 = 198" in f.message and "update 198 of 220" in f.message


def test_a_folder_with_weights_only_is_named_not_judged(runs, tmp_path):
    """A torch.save of model weights beside runs is no run: said (not_runs), never an error."""
    import torch

    root = tmp_path / "mixed"
    shutil.copytree(runs / "exp1", root / "exp1")
    shutil.copytree(SAMPLES / "torch-microstep", root / "exp4")
    (root / "export").mkdir()
    torch.save(torch.nn.Linear(2, 1).state_dict(), root / "export" / "weights.pt")
    reports = inspect_path(root)
    assert [r.run.root for r in reports if r.run] == [str(root / "exp4"), str(root / "exp1")]
    (path, why), = reports[0].run.not_runs
    assert path == str(root / "export") and "no training state" in why
    code, out = _cli(str(root), "--json")
    assert code == 1 and json.loads(out)["not_runs"][0]["path"] == str(root / "export")


def test_format_forced_says_where_its_files_are(tmp_path):
    """--format megatron on a ROLL run: megatron's files are ROLL's inner iter_0000001, one
    level below each checkpoint-N; the one line says which folder to point at instead of
    listing them as if they were not there."""
    shutil.copytree(SAMPLES / "roll-overshoot", tmp_path / "r")
    r = CliRunner().invoke(app, ["inspect", str(tmp_path / "r"), "--format", "megatron"])
    assert r.exit_code == 2
    where = tmp_path / "r" / "actor_train" / "checkpoint-100"
    assert (f"--format megatron reads the checkpoints in {where}: point lrdoctor at that "
            "folder") in r.output.replace("\n", " ")


def test_a_run_folder_holding_another_run_reads_only_its_own(tmp_path):
    """A torch loop's ckpt_10.pt/ckpt_20.pt (torch.save of model, AdamW, CosineAnnealingLR)
    with another run's folder inside it: two runs, each read by one reader; the outer
    run's reader never takes the inner run's file."""
    import torch

    d = tmp_path / "d"
    d.mkdir()
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=40)
    for step in range(1, 21):
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
        opt.zero_grad()
        sched.step()
        if step % 10 == 0:
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                        "scheduler": sched.state_dict(), "step": step}, d / f"ckpt_{step}.pt")
    shutil.copytree(SAMPLES / "torch-microstep", d / "other")
    reports = inspect_path(d, all=True)
    by_run = {r.target: (r.run.root, sorted(r.state["files"])) for r in reports if r.run}
    assert by_run == {
        str(d / "other" / "checkpoint_60.pt"): (str(d / "other"),
                                                [str(d / "other" / "checkpoint_60.pt")]),
        str(d / "ckpt_10.pt"): (str(d), [str(d / "ckpt_10.pt")]),
        str(d / "ckpt_20.pt"): (str(d), [str(d / "ckpt_20.pt")])}
    assert [r.target for r in reports if any(f.severity >= Severity.WARNING
                                             for f in r.findings)] == [
        str(d / "other" / "checkpoint_60.pt")]


def test_counters_that_continue_keep_one_run_together(tmp_path):
    """Lightning's resumed run logs into version_0 then version_1: its layout lists both
    folders' *.ckpt as its own and their steps continue (10, then 20): one run. Two runs
    saved at the same step are two runs. The planner reads names and steps only (no
    content), so the files are torch.save'd placeholders named as Lightning names them."""
    import torch

    names = ["run/lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt",
             "run/lightning_logs/version_1/checkpoints/epoch=1-step=20.ckpt",
             "two/a/lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt",
             "two/b/lightning_logs/version_0/checkpoints/epoch=0-step=10.ckpt"]
    for name in names:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        torch.save({"global_step": 10}, tmp_path / name)
    assert find_runs(tmp_path / "run").roots == [tmp_path / "run"]
    assert find_runs(tmp_path).roots == [tmp_path / "run", tmp_path / "two" / "a",
                                         tmp_path / "two" / "b"]


def test_a_bound_that_cuts_the_search_is_said(runs, monkeypatch):
    """The walk is bounded (depth, folders, names); a cut search is said, never silent: in
    the folder of runs' not_runs, or in a single run's notes."""
    from lrdoctor.read.scan import runs as scan_runs

    cut = scan_runs.checkpoint_units(runs, depth=2)
    assert cut.cut == "10 folders deeper than 2 levels not looked at"
    assert {u.root for u in cut.units} == {runs / "exp1"}  # Megatron's and ROLL's deeper
    real = scan_runs.checkpoint_units
    monkeypatch.setattr("lrdoctor.read.layouts._runs.checkpoint_units",
                        lambda p: real(p, depth=2))
    (rep,) = inspect_path(runs)  # only exp1 found within 2 levels: its report says so
    assert rep.target == str(runs / "exp1" / "checkpoint-20")
    assert (f"{runs}: the search for runs 10 folders deeper than 2 levels not looked at"
            in rep.state["notes"])
    monkeypatch.setattr("lrdoctor.read.layouts._runs.checkpoint_units",
                        lambda p: real(p, depth=3))
    reports = inspect_path(runs)  # every run found within 3 levels, deeper folders cut
    assert len({r.run.root for r in reports}) == 3
    (path, why), = reports[0].run.not_runs
    assert path == str(runs) and why.startswith("the search for runs ") and "deeper than 3" in why


def test_check_of_a_folder_of_runs_keeps_its_reports(runs):
    """check's document is always its targets' `reports` (docs/cli.md "JSON"): a folder of
    runs among them gives one report per run, each judged apart, never a `runs` document."""
    r = CliRunner().invoke(app, ["check", "--inspect", str(runs), "--json"])
    assert r.exit_code == 1
    doc = json.loads(r.stdout)
    assert "runs" not in doc
    assert [(x["target"], sorted(f["code"] for f in x["findings"] if f["severity"] != "info"))
            for x in doc["reports"]] == [
        (str(runs / "exp3" / "actor_train" / "checkpoint-299"), ["LRD101", "LRD103"]),
        (str(runs / "exp1" / "checkpoint-20"), []), (str(runs / "exp2" / "iter_0000400"), [])]


def test_plot_of_a_folder_of_runs_is_the_worst_run_and_says_so(runs, tmp_path):
    """--plot draws one run: of a folder of runs, the worst (ROLL's overshoot), named in the
    line; never the last, healthy one in silence."""
    png = tmp_path / "lr.png"
    code, out = _cli(str(runs), "--plot", str(png))
    assert code == 1 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"plot written to {png} (the worst of 3 runs: {runs / 'exp3'})" in out.replace(
        "\n", " ")


def test_a_fix_copy_left_in_the_run_is_named_not_skipped_in_silence(tmp_path):
    """transformers (HF Trainer, the hf-healthy sample): `fix hf-healthy/checkpoint-20 --out
    hf-healthy/checkpoint-20-fixed --policy rescale --k 2` leaves its unverified copy in the
    run; the HF layout does not list `checkpoint-20-fixed`, and `inspect` of the run says
    so, with why and the command that reads it, in its text and its JSON notes."""
    run = tmp_path / "hf-healthy"
    shutil.copytree(SAMPLES / "hf-healthy", run)
    out = run / "checkpoint-20-fixed"
    r = CliRunner().invoke(app, ["fix", str(run / "checkpoint-20"), "--out", str(out),
                                 "--policy", "rescale", "--k", "2"])
    assert r.exit_code == 1 and (out / "lrdoctor-fix.json").is_file(), r.output
    reports = inspect_path(run)
    assert reports[-1].target == str(run / "checkpoint-20")
    notes = [n for n in reports[-1].state["notes"] if str(out) in n]
    assert notes and "not read with this run" in notes[0], reports[-1].state["notes"]
    assert "`lrdoctor fix` wrote" in notes[0] and f"`lrdoctor inspect {out}`" in notes[0]
    r = CliRunner().invoke(app, ["inspect", str(run)])
    assert "not read with this run" in " ".join(r.stdout.split()), r.stdout
    # the run as left by training alone: no such note
    clean = tmp_path / "clean"
    shutil.copytree(SAMPLES / "hf-healthy", clean)
    assert not any("not read" in n for r in inspect_path(clean) for n in r.state["notes"])
