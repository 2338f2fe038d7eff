"""A Lightning LambdaLR's schedule fitted to LearningRateMonitor's TensorBoardLogger log.

TensorBoardLogger is Lightning's default logger: the LR is then only in
``version_N/events.out.tfevents.*``. The runs are the CSV tests' runs
(tests/formats/test_formats_lightning_lrlog.py) with Lightning's own
TensorBoardLogger in place of the CSVLogger, so the findings must be the same;
lrdoctor's reader (lrdoctor/read/bytes/tfevents.py) is checked against tensorboard's own
EventAccumulator on the same files, and against hostile bytes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lrdoctor.core.errors import LimitExceeded
from lrdoctor.core.facts import LrLog
from lrdoctor.inspect_api import inspect_path
from lrdoctor.read.bytes import tfevents
from lrdoctor.read.layouts import lightning as pl_fmt
from lrdoctor.schedules import lr_at
from tests.formats.test_formats_lightning_lrlog import GEN as CSV_GEN
from tests.formats.test_formats_lightning_lrlog import (
    assert_per_batch_findings,
    codes,
    generate,
    the_ckpt,
    truth,
    version_dir,
)
from tests.formats.test_tfevents import event, f32, record

pytestmark = pytest.mark.frameworks

GEN = (CSV_GEN.replace("from pytorch_lightning.loggers import CSVLogger",
                       "from pytorch_lightning.loggers import TensorBoardLogger")
       .replace("logger=CSVLogger(out / name)", "logger=TensorBoardLogger(out / name)"))
assert GEN.count("TensorBoardLogger") == 2 and "CSVLogger" not in GEN


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    return generate(tmp_path_factory, "lightning_tblog", GEN)


def events_file(runs: Path, name: str) -> Path:
    (f,) = version_dir(runs, name).glob("events.out.tfevents.*")
    return f


def accumulated(f: Path) -> dict[str, list[tuple[int, float]]]:
    """tensorboard's own reading of every scalar of ``f``."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(f), size_guidance={"scalars": 0})
    acc.Reload()
    return {t: [(e.step, e.value) for e in acc.Scalars(t)] for t in acc.Tags()["scalars"]}


def test_the_fixture_is_lightnings_own_tensorboard_layout(runs):
    """Only an event file beside checkpoints/ (no metrics.csv); lrdoctor's decoder reads
    every scalar exactly as tensorboard's EventAccumulator does."""
    vd = version_dir(runs, "healthy")
    assert not list(vd.glob("*.csv"))
    for name in ("healthy", "per_batch"):
        f = events_file(runs, name)
        mine = tfevents.read(f)
        theirs = accumulated(f)
        assert "lr-AdamW" in theirs and "train_loss" in theirs
        assert mine.values == theirs and not mine.truncated
    history, col, why = pl_fmt.read_lr_log(events_file(runs, "healthy"))
    assert (col, why) == ("lr-AdamW", "")
    lam = [n / 3 if n < 3 else (12 - n) / 9 for n in range(8)]
    # simple_value is a float32
    assert [p.step for p in history] == list(range(8))
    assert [p.lr for p in history] == pytest.approx([1e-3 * x for x in lam], rel=1e-7)


def test_healthy_lambda_is_fitted_from_the_event_file(runs):
    t = truth(runs, "healthy")
    st_ = pl_fmt.read(runs / "healthy")
    ev = str(events_file(runs, "healthy"))
    s = st_.schedule
    assert (s.family, s.kind, s.max_lr, s.warmup, s.horizon) == ("hf", "linear", 1e-3, 3, 12)
    assert ev in s.source and "column 'lr-AdamW'" in s.source
    assert "8 points logged as lambda(step)" in s.source
    assert st_.facts.lr_log == LrLog(file=ev, column="lr-AdamW", points=8)
    assert ev in st_.files and not st_.facts.lr_log_unused
    assert st_.scheduler_progress.value == t["last_epoch"] == 8
    assert lr_at(s, st_.scheduler_progress.value) == pytest.approx(t["lr"][0], rel=1e-12)
    (r,) = inspect_path(runs / "healthy")
    assert codes(r) == ["LRD107"] and r.exit_code("warning") == 0
    assert ev in r.findings[0].message


def test_per_batch_step_under_accumulation(runs):
    """The CSV test's 3-calls-per-update run: the same findings from the event file."""
    assert_per_batch_findings(runs, "events.out.tfevents.")


def test_no_budget_saved_the_horizon_is_fitted_too(runs):
    s = pl_fmt.read(runs / "cosine_nobudget").schedule
    assert (s.kind, s.warmup, s.horizon) == ("cosine", 2, 10)


def test_a_metrics_csv_beside_it_is_preferred(runs, tmp_path):
    """In one folder metrics.csv is read first; the event file is the fallback."""
    vd = tmp_path / "version_0"
    shutil.copytree(version_dir(runs, "healthy"), vd)
    (vd / "metrics.csv").write_text("step,lr-AdamW\n" + "".join(
        f"{n},{1e-3 * (n / 3 if n < 3 else (12 - n) / 9)!r}\n" for n in range(8)))
    st_ = pl_fmt.read(vd)
    assert st_.facts.lr_log.file == str(vd / "metrics.csv")


# ---------------------------------------------------------------- the decoder itself

def test_new_style_tensor_scalars_match_tensorboard(tmp_path):
    """SummaryWriter.add_scalar(new_style=True) writes a TensorProto (float_val, or
    double_val with double_precision): read as the same (step, value) pairs."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util
    from torch.utils.tensorboard import SummaryWriter

    w = SummaryWriter(str(tmp_path))
    for s in range(5):
        w.add_scalar("lr-SGD", 0.1 * (5 - s) / 5, s, new_style=True)
        w.add_scalar("lr-SGD-double", 0.1 * (5 - s) / 5, s, new_style=True, double_precision=True)
        w.add_scalar("old", float(s), s)
    w.close()
    (f,) = tmp_path.glob("events.out.tfevents.*")
    mine = tfevents.read(f).values
    acc = EventAccumulator(str(f), size_guidance={"tensors": 0, "scalars": 0})
    acc.Reload()
    for tag in ("lr-SGD", "lr-SGD-double"):
        theirs = [(e.step, float(tensor_util.make_ndarray(e.tensor_proto)))
                  for e in acc.Tensors(tag)]
        assert mine[tag] == theirs and len(theirs) == 5
    assert mine["lr-SGD-double"][1][1] == 0.08  # a double stays a double
    assert mine["old"] == [(e.step, e.value) for e in acc.Scalars("old")]


HOSTILE = {
    "empty": (b"", "no complete record"),
    "text": (b"step,lr-AdamW\n0,0.001\n", "bad length checksum"),
    "bad_data_crc": (record(b"\x08\x01")[:-1] + b"\x00", "bad data checksum"),
    "bad_proto": (record(b"\x2a\x05\x0a\xff\xff\xff\xff"), "not a valid TensorBoard Event"),
    "wire_type_7": (record(b"\x0f"), "wire type 7"),
    "endless_varint": (record(b"\x10" + b"\xff" * 12), "varint"),
    "no_lr_tag": (record(event(3, b"loss", f32(1.0))),
                  "no LearningRateMonitor 'lr-<Optimizer>' scalar (tags: loss)"),
    "negative_lr": (record(event(3, b"lr-AdamW", f32(-1.0))), "holds no logged LR values"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_malformed_event_file_is_reported_not_skipped(runs, tmp_path, case):
    content, why = HOSTILE[case]
    vd = tmp_path / "version_0"
    (vd / "checkpoints").mkdir(parents=True)
    ckpt = vd / "checkpoints" / "x.ckpt"
    shutil.copy(the_ckpt(runs, "healthy"), ckpt)
    ev = vd / "events.out.tfevents.1.host.1.0"
    ev.write_bytes(content)
    st_ = pl_fmt.read(ckpt)
    assert st_.schedule is None
    (unused,) = st_.facts.lr_log_unused
    assert unused["file"] == str(ev) and why in unused["reason"]
    assert "\n" not in unused["reason"] and str(ev) not in unused["reason"]
    (r,) = inspect_path(ckpt)
    # (the LambdaLR itself is recognised from the saved LR, so no LRD107 beside it)
    assert codes(r) == ["LRD111"]
    f = r.findings[0]
    assert str(ev) in f.message and why in f.message and str(f.severity) == "warning"
    assert r.exit_code("warning") == 1


def test_a_truncated_tail_is_tolerated_and_said(runs, tmp_path):
    """A writer mid-flush leaves a cut-short last record: the records before it are used
    (as tensorboard does), and a note says so."""
    data = events_file(runs, "healthy").read_bytes()
    sc = tfevents.parse(data[:-3], "x")
    full = tfevents.parse(data, "x")
    assert sc.truncated and sc.records == full.records - 1 and not full.truncated
    vd = tmp_path / "version_0"
    (vd / "checkpoints").mkdir(parents=True)
    shutil.copy(the_ckpt(runs, "healthy"), vd / "checkpoints" / "x.ckpt")
    ev = vd / events_file(runs, "healthy").name
    ev.write_bytes(data + data[:20])  # a record's header and a few bytes of its data
    st_ = pl_fmt.read(vd / "checkpoints" / "x.ckpt")
    assert st_.schedule.kind == "linear" and st_.facts.lr_log.file == str(ev)
    assert f"{ev}: its last record is cut short (a writer mid-flush?): read up to it" \
        in st_.notes


def test_event_file_limits(runs, tmp_path, monkeypatch):
    f = events_file(runs, "healthy")
    assert tfevents.read(f).records > 8
    monkeypatch.setenv("LRDOCTOR_MAX_TFEVENTS_BYTES", "100")
    with pytest.raises(LimitExceeded, match="LRDOCTOR_MAX_TFEVENTS_BYTES"):
        tfevents.read(f)
    monkeypatch.delenv("LRDOCTOR_MAX_TFEVENTS_BYTES")
    monkeypatch.setenv("LRDOCTOR_MAX_ITEMS", "5")
    with pytest.raises(LimitExceeded, match="LRDOCTOR_MAX_ITEMS"):
        tfevents.read(f)
