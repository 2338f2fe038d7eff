"""Logged LRs are evidence items (issue 19's gap): each run's log is summarised as its
first, last, lowest and highest LR, every item with role lr, the step it was logged at and
the field it was read from, in the JSON evidence list and in the findings that use it.
Every ref is followed through its file with the writer's own reader (json, csv,
tensorboard's EventAccumulator) and must land on the same value and step.

The summary was written against the HF Trainer's ``log_history``
(:func:`test_hf_trainer_log_history_items_follow_to_their_fields`); Lightning's CSVLogger
``metrics.csv`` rows and TensorBoardLogger scalars are layouts it was not written for
(:func:`test_lightning_csv_and_tensorboard_logs_are_items_too`).
"""

from __future__ import annotations

import csv
import json
import shutil
import textwrap
from pathlib import Path

import pytest

from lrdoctor.core.evidence import EvidenceItem, LoggedLr, Role, logged_lr_items
from lrdoctor.core.fieldref import FieldRef
from lrdoctor.inspect_api import inspect_path
from tests.formats.test_formats_lightning_lrlog import generate
from tests.helpers.factories import hf_run

pytestmark = pytest.mark.frameworks


def _logged(rep) -> list[dict]:
    return [e for e in rep.state["evidence"] if e["role"] == "lr" and "step" in e]


def _check_summary(items: list[dict], log: list[tuple[float, float]]) -> None:
    """The items are the log's first, last, min and max (first step of each), in step
    order, and no more: a bounded summary, never one item per logged step."""
    log = sorted(log)
    want_steps = sorted({log[0][0], log[-1][0],
                         min(log, key=lambda p: (p[1], p[0]))[0],
                         max(log, key=lambda p: (p[1], -p[0]))[0]})
    assert [e["step"] for e in items] == want_steps
    assert all(e["unit"] == "lr" and e["step_unit"] == "optimizer steps" for e in items)
    assert len(items) <= 4 < len(log)


def test_summary_is_bounded_and_cites_each_point():
    """A 5000-point log gives 4 items; ties take the first step; each cites its own field."""
    ref = FieldRef("trainer_state.json", ("log_history",))
    log = [LoggedLr(float(s), 1e-3 * (1 - s / 5000), ref.child(s, "learning_rate"))
           for s in range(5000)]
    log[10] = LoggedLr(10.0, 2e-3, ref.child(10, "learning_rate"))
    items = logged_lr_items(log)
    assert [(e.at, e.value) for e in items] == [(0.0, 1e-3), (10.0, 2e-3),
                                                (4999.0, pytest.approx(2e-7))]
    assert all(isinstance(e, EvidenceItem) and e.role is Role.LR and e.logged for e in items)
    assert str(items[1].ref) == "trainer_state.json:log_history[10].learning_rate"
    assert "at step 10" in items[1].describe()
    assert logged_lr_items([]) == []


def test_hf_trainer_log_history_items_follow_to_their_fields(tmp_path):
    """transformers' own Trainer, cosine with warmup, logging every step: the items'
    refs walk trainer_state.json to the logged value, and the entry's step is the item's."""
    hf_run(tmp_path / "out", max_steps=12, save_steps=12, scheduler="cosine", warmup_steps=3)
    (rep,) = inspect_path(tmp_path / "out" / "checkpoint-12")
    items = _logged(rep)
    ts = json.loads((tmp_path / "out" / "checkpoint-12" / "trainer_state.json").read_text())
    log = [(float(h["step"]), h["learning_rate"]) for h in ts["log_history"]
           if "learning_rate" in h]
    _check_summary(items, log)
    for e in items:
        file, (top, i, key) = Path(e["ref"]["file"]), e["ref"]["key"]
        assert file.name == "trainer_state.json" and (top, key) == ("log_history",
                                                                    "learning_rate")
        entry = json.loads(file.read_text())[top][i]
        assert entry[key] == e["value"] and entry["step"] == e["step"]
        assert e["where"] == f"{file}:log_history[{i}].learning_rate"
    # The peak is the warmup's end, the floor the last step: both are items.
    assert max(lr for _, lr in log) in [e["value"] for e in items]
    assert rep.state["lr_log"] == [[s, lr] for s, lr in log]  # the data, as pairs
    # inspect --verbose prints the same summary, each point with its field.
    import io

    from rich.console import Console

    from lrdoctor.render.text import render_inspect

    out = io.StringIO()
    render_inspect(rep, con=Console(file=out, width=400, highlight=False), verbose=True)
    (line,) = [ln for ln in out.getvalue().splitlines() if ln.startswith("logged lr:")]
    assert line.count("trainer_state.json:log_history[") == len(items)


def test_hf_log_stuck_at_zero_cites_the_first_logged_zero(tmp_path):
    """LRD131 on a logged 0: the finding names the field of the first 0, and following it
    gives 0 at the step the finding says (the log is transformers' own)."""
    from tests.diagnose.test_lr_evidence import stuck_at_zero_report

    rep = stuck_at_zero_report(tmp_path)
    (z,) = [f for f in rep.findings if f.code == "LRD131"]
    where = z.evidence["zero_from_field"]
    file, key = where.rsplit(":", 1)
    assert key.startswith("log_history[") and key.endswith("].learning_rate")
    i = int(key[len("log_history["):key.index("]")])
    entry = json.loads(Path(file).read_text())["log_history"][i]
    assert entry["learning_rate"] == 0 and entry["step"] == z.evidence["zero_from"] == 11
    assert where in z.message
    # The floor is an evidence item too: its field is the same first 0.
    assert any(e["value"] == 0 and e["where"] == where for e in _logged(rep))


def test_hf_log_that_cycles_cites_the_floor_and_the_climb(tmp_path):
    """LRD132 on a log that falls to 0 and climbs back (a cosine T_max 5 driving a run
    whose args say linear): the floor's and the climb's fields give the finding's numbers."""
    from tests.diagnose.test_lr_evidence import _cosine_callback

    hf_run(tmp_path / "out", max_steps=16, save_steps=16, scheduler="linear", warmup_steps=0,
           callbacks=[_cosine_callback(5)])
    (rep,) = inspect_path(tmp_path / "out" / "checkpoint-16")
    (f,) = [f for f in rep.findings if f.code == "LRD132"]
    ev = f.evidence
    for which in ("low", "back"):
        file, key = ev[f"{which}_from"].rsplit(":", 1)
        i = int(key[len("log_history["):key.index("]")])
        entry = json.loads(Path(file).read_text())["log_history"][i]
        assert (entry["step"], entry["learning_rate"]) == (ev[f"{which}_step"],
                                                           ev[f"{which}_lr"])
        assert ev[f"{which}_from"] in f.message


GEN = textwrap.dedent('''
import math, sys, warnings, torch, pytorch_lightning as pl
from pathlib import Path
from torch.utils.data import DataLoader, TensorDataset
from pytorch_lightning.callbacks import LearningRateMonitor, ModelCheckpoint
from pytorch_lightning.loggers import CSVLogger, TensorBoardLogger
warnings.filterwarnings("ignore")
out = Path(sys.argv[1])
torch.manual_seed(0)

class M(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.save_hyperparameters()
        self.l = torch.nn.Linear(4, 1)

    def training_step(self, batch, i):
        return self.l(batch[0]).pow(2).mean()

    def configure_optimizers(self):
        o = torch.optim.AdamW(self.parameters(), lr=1e-3)
        f = lambda n: n / 3 if n < 3 else max(0.0, (12 - n) / 9)  # transformers' linear
        s = torch.optim.lr_scheduler.LambdaLR(o, f)
        return {"optimizer": o, "lr_scheduler": {"scheduler": s, "interval": "step"}}

dl = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=2)
t = pl.Trainer(default_root_dir=out / "run",
               logger=[CSVLogger(out / "run", version=0),
                       TensorBoardLogger(out / "run", version=0)],
               callbacks=[LearningRateMonitor(logging_interval="step"),
                          ModelCheckpoint(save_top_k=-1, every_n_train_steps=10)],
               log_every_n_steps=1, enable_progress_bar=False, enable_model_summary=False,
               accelerator="cpu", max_steps=10)
t.fit(M(), dl)
''')


@pytest.fixture(scope="module")
def lightning_run(tmp_path_factory) -> Path:
    """One Lightning run logging its LR (LearningRateMonitor) to a CSVLogger and a
    TensorBoardLogger at once: metrics.csv and an event file in the same version_0/."""
    return generate(tmp_path_factory, "logged_lr_items", GEN) / "run" / "lightning_logs" / \
        "version_0"


def test_lightning_csv_and_tensorboard_logs_are_items_too(lightning_run, tmp_path):
    """Layouts the summary was not written for: Lightning's metrics.csv (refs are
    ``[row].<column>``, followed with csv.DictReader) and, with the CSV gone, its
    TensorBoard event file (refs are ``<tag>[i]``, followed with tensorboard's own
    EventAccumulator). Both logs give the same summary steps and values."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    (ckpt,) = (lightning_run / "checkpoints").glob("*.ckpt")
    (rep,) = inspect_path(ckpt)
    items = _logged(rep)
    rows = list(csv.DictReader((lightning_run / "metrics.csv").open()))
    log = sorted({float(r["step"]): float(r["lr-AdamW"]) for r in reversed(rows)
                  if r.get("lr-AdamW")}.items())
    _check_summary(items, log)
    for e in items:
        file, (row, col) = Path(e["ref"]["file"]), e["ref"]["key"]
        assert file == lightning_run / "metrics.csv" and col == "lr-AdamW"
        assert float(rows[row][col]) == e["value"] and float(rows[row]["step"]) == e["step"]
        assert e["where"] == f"{file}:[{row}].lr-AdamW"
    csv_points = [(e["step"], e["value"]) for e in items]

    # The same run with only its TensorBoard log.
    copy = tmp_path / "version_0"
    shutil.copytree(lightning_run, copy)
    (copy / "metrics.csv").unlink()
    (ev,) = copy.glob("events.out.tfevents.*")
    (rep,) = inspect_path(next((copy / "checkpoints").glob("*.ckpt")))
    items = _logged(rep)
    acc = EventAccumulator(str(ev), size_guidance={"scalars": 0})
    acc.Reload()
    for e in items:
        file, (tag, i) = Path(e["ref"]["file"]), e["ref"]["key"]
        assert file == ev and tag == "lr-AdamW"
        scalar = acc.Scalars(tag)[i]
        assert scalar.value == e["value"] and scalar.step == e["step"]
        assert e["where"] == f"{ev}:lr-AdamW[{i}]"
    assert [e["step"] for e in items] == [s for s, _ in csv_points]
    assert [e["value"] for e in items] == pytest.approx([v for _, v in csv_points], rel=1e-7)
