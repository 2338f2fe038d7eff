"""Issue 29, item 4: a counter is labelled by what it counts. The torch loop sample
(torch.save; CosineAnnealingLR stepped 4x per update) saves ``scheduler.last_epoch`` 240
after 60 optimizer updates: 240 scheduler calls, which the text, the plot's axis and JSON
``scheduler_progress.unit`` called "optimizer updates" while ``state.evidence`` said
"scheduler calls"; the fix table called extend-horizon's T_max 400 "optimizer updates"."""

from __future__ import annotations

import json

import matplotlib
from typer.testing import CliRunner

from lrdoctor.cli import app
from tests.helpers.paths import REPO

runner = CliRunner()
SAMPLE = REPO / "sample_checkpoints" / "torch-microstep" / "checkpoint_60.pt"


def test_scheduler_counters_say_scheduler_calls_everywhere(tmp_path, monkeypatch):
    r = runner.invoke(app, ["inspect", "--json", str(SAMPLE)])
    doc = json.loads(r.stdout)
    st = doc["state"]
    ev = {tuple(e["ref"]["key"]): e["unit"] for e in st["evidence"]}
    assert ev[("scheduler", "last_epoch")] == "scheduler calls"
    assert st["scheduler_progress"]["unit"] == ev[("scheduler", "last_epoch")]
    assert st["derived"]["horizon_unit"] == ev[("scheduler", "T_max")] == "scheduler calls"
    # the optimizer's own count stays in updates: labels follow the field, not the row
    nominal = st["nominal_progress"]
    assert nominal["value"] == 60 and nominal["unit"] == "optimizer updates"

    r = runner.invoke(app, ["inspect", str(SAMPLE)], env={"COLUMNS": "200"})
    row = next(ln for ln in r.stdout.splitlines() if "scheduler.last_epoch" in ln)
    assert "scheduler calls" in row and "optimizer updates" not in row, row
    assert "decay horizon 100 scheduler calls" in " ".join(r.stdout.split())

    labels: list[str] = []
    from matplotlib.axes import Axes

    real = Axes.set_xlabel
    monkeypatch.setattr(Axes, "set_xlabel", lambda self, s, *a, **k: (labels.append(s),
                                                                       real(self, s, *a, **k)))
    matplotlib.use("Agg")
    r = runner.invoke(app, ["inspect", str(SAMPLE), "--plot", str(tmp_path / "lr.png")])
    assert (tmp_path / "lr.png").is_file(), r.output
    assert "scheduler progress (scheduler calls)" in labels, labels

    r = runner.invoke(app, ["fix", str(SAMPLE), "--out", str(tmp_path / "x.pt"), "--policy",
                            "extend-horizon"])
    text = " ".join(r.stdout.split())
    assert "scheduler progress 240 -> 240 scheduler calls" in text
    assert "decay horizon 100 -> 400 scheduler calls" in text


def test_a_sample_counting_scheduler_keeps_samples():
    """Megatron-LM's sample (megatron-healthy, written with Megatron's own checkpoint
    layout): ``num_steps`` grows by the global batch per call, so it counts samples; the
    evidence's "scheduler's own count" must not relabel it "scheduler calls"."""
    r = runner.invoke(app, ["inspect", "--json", str(REPO / "sample_checkpoints" /
                                                     "megatron-healthy")])
    doc = json.loads(r.stdout)
    st = (doc[-1] if isinstance(doc, list) else doc)["state"]
    assert st["scheduler_progress"]["unit"] == "samples"
    assert st["derived"]["horizon_unit"] == "samples"


def test_rule_messages_label_the_horizon_as_the_counter_table_does():
    """torch (the torch-microstep sample: CosineAnnealingLR stepped per micro-batch,
    T_max 100): LRD101's message names the decay horizon in what T_max counts, scheduler
    calls, the label of the counter table, schedule line and JSON derived.horizon_unit,
    never the model's "optimizer updates"."""
    from lrdoctor.inspect_api import inspect_path
    from tests.helpers.paths import REPO

    rep = inspect_path(REPO / "sample_checkpoints" / "torch-microstep" / "checkpoint_60.pt")[-1]
    f = next(f for f in rep.findings if f.code == "LRD101")
    assert "the decay horizon 100 scheduler calls" in f.message, f.message
    assert "100 optimizer updates" not in f.message
    assert f.evidence.get("unit") == "scheduler calls"
    assert rep.state["derived"]["horizon_unit"] == "scheduler calls"
