"""Repair policies on hand-built RunStates, and the format-blind writer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lrdoctor.core.errors import UnusableInput
from lrdoctor.core.state import Counter, RunState, ScheduleSpec, Unit
from lrdoctor.diagnose import diagnose
from lrdoctor.findings import finding
from lrdoctor.repair.policies import Refusal, make_target
from lrdoctor.repair.writer import Change, check_output, write_output
from lrdoctor.schedules import group_lr, lr_at


def state(progress=400.0, nominal=100.0, done=100, end=200, horizon=200.0, fmt="torch"):
    return RunState(
        format=fmt, path="ckpt.pt",
        schedule=ScheduleSpec(family="megatron", kind="linear", max_lr=1e-3, min_lr=1e-5,
                              unit=Unit.UPDATES, warmup=10, horizon=horizon),
        scheduler_progress=Counter("scheduler.last_epoch", progress, Unit.UPDATES),
        nominal_progress=Counter("optimizer.step", nominal, Unit.UPDATES) if nominal else None,
        trainer_progress=Counter("step", done, Unit.UPDATES),
        planned_end=Counter("total_steps", end, Unit.UPDATES))


def test_k_times_fast_suggests_rescale_with_inferred_k():
    st = state()
    fs = diagnose(st)
    assert {f.code for f in fs} >= {"LRD103", "LRD101"}
    t = make_target(st, fs)
    assert (t.policy, t.k, t.progress) == ("rescale", 4.0, 100)
    assert t.lr == pytest.approx(lr_at(st.schedule, 100))
    assert t.lr_before == 1e-5


def test_one_recommendation_per_checkpoint_and_every_finding_names_it():
    # A whole k: rescale; LRD101 follows from LRD103 and names the same repair.
    fs = diagnose(state())
    t = make_target(state(), fs)
    assert (t.policy, t.k, t.chosen_by, t.alternative) == ("rescale", 4.0, "findings",
                                                             "--policy nominal")
    by = {f.code: f for f in fs}
    for code in ("LRD103", "LRD101"):
        assert "`--policy rescale --k 4`" in by[code].fix, by[code].fix
        assert "extend-horizon" not in by[code].fix
    assert by["LRD101"].fix.startswith("Follows from LRD103")
    # 2.5x: not a whole k -> dynamic batching -> nominal (ROLL issue 442), both findings agree.
    st = state(progress=250.0, nominal=100.0)
    fs = diagnose(st)
    t = make_target(st, fs)
    assert (t.policy, t.progress, t.alternative) == ("nominal", 100, "--policy extend-horizon")
    assert all("`--policy nominal`" in f.fix for f in fs if f.code in ("LRD103", "LRD101"))
    # LRD101 alone (no nominal progress known): keep progress, move the horizon.
    st = state(progress=250.0, nominal=None)
    fs = diagnose(st)
    assert [f.code for f in fs if f.code.startswith("LRD10")] == ["LRD101"]
    t = make_target(st, fs)
    assert (t.policy, t.progress, t.horizon) == ("extend-horizon", 250, 500)
    assert t.alternative == "--policy nominal --progress N"


def test_options_refused_when_the_intent_is_unclear():
    st = state(progress=250.0, nominal=None)
    with pytest.raises(Refusal, match="--progress N or --from-replay"):
        make_target(st, [], policy="nominal")
    with pytest.raises(Refusal, match="--k N"):
        make_target(st, [], policy="rescale")
    with pytest.raises(Refusal, match="--progress only"):
        make_target(st, [], policy="extend-horizon", progress=3)
    # --policy rescale --from-replay takes the report's schedule only (issue 20): allowed,
    # so a report that is not there is unusable input, not a refusal of the combination.
    with pytest.raises(UnusableInput, match="replay report"):
        make_target(st, [], policy="rescale", k=2, replay=Path("/nonexistent/x.json"))
    with pytest.raises(Refusal, match="not both"):
        make_target(st, [], progress=3, replay="x.json")


def test_nothing_to_fix_and_lr_only():
    st = state(progress=100.0, nominal=100.0)
    assert make_target(st, diagnose(st)) is None
    t = make_target(st, [finding("LRD105", "lr off")])
    assert t.policy == "sync-lr" and t.progress == 100


def test_extend_horizon_extrapolates_the_observed_pace():
    st = state(progress=250.0, nominal=100.0, done=100, end=200)
    t = make_target(st, diagnose(st), policy="extend-horizon")
    assert t.horizon == 500 and t.progress == 250
    assert t.schedule.horizon == 500 and st.schedule.horizon == 200  # input spec untouched
    # linear from 1e-3 (after warmup 10) to 1e-5 at 500: at 250 exactly half way down.
    assert t.lr == pytest.approx(1e-5 + (1e-3 - 1e-5) * (1 - (250 - 10) / (500 - 10)))
    st = state(progress=250.0, nominal=100.0, done=200, end=200)
    with pytest.raises(Refusal, match="no horizon to extend"):
        make_target(st, [], policy="extend-horizon")


def test_replay_ratio(tmp_path):
    rep = tmp_path / "r.json"
    rep.write_text(json.dumps([{"summary": {"nominal_updates": 10, "actual_updates": 25}}]))
    st = state(progress=250.0)
    assert make_target(st, [], replay=rep).progress == 100
    assert make_target(st, [], replay=rep, policy="extend-horizon").horizon == 500
    rep.write_text("{not json")
    with pytest.raises(UnusableInput, match="not JSON"):
        make_target(st, [], replay=rep)


def test_group_lr_per_family():
    spec = ScheduleSpec(family="megatron", kind="constant", max_lr=1e-3, unit=Unit.UPDATES)
    assert group_lr(spec, 5, {"max_lr": 2e-3}) == 2e-3
    hf = ScheduleSpec(family="hf", kind="constant", max_lr=1e-3, unit=Unit.UPDATES)
    assert group_lr(hf, 5, {"initial_lr": 5e-4}) == pytest.approx(5e-4)
    assert group_lr(None, 5, {}) is None


def test_writer_json_edit_keeps_layout_and_refuses_stale_plans(tmp_path):
    src = tmp_path / "ck"
    src.mkdir()
    (src / "state.json").write_text(json.dumps({"a": 1, "b": {"c": 2}}, indent=2) + "\n")
    (src / "blob").write_bytes(b"x" * 100)
    out = tmp_path / "out"
    w = write_output(src, out, ["state.json", "blob"],
                     [Change("state.json", ("b", "c"), 2, 3, kind="json")], {"policy": "t"})
    assert json.loads((out / "state.json").read_text()) == {"a": 1, "b": {"c": 3}}
    assert (out / "state.json").read_text().startswith('{\n  "a"')
    assert (out / "blob").read_bytes() == b"x" * 100 and w.copied == 1
    with pytest.raises(UnusableInput, match="expected 5"):
        write_output(src, tmp_path / "o2", ["state.json"],
                     [Change("state.json", ("b", "c"), 5, 3, kind="json")], {})
    assert not (tmp_path / "o2").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck", "out"]
    for bad in (src, src / "inner"):
        with pytest.raises(UnusableInput):
            check_output(src, bad, force=True)
    with pytest.raises(UnusableInput, match="--force"):
        check_output(src, out, force=False)
    check_output(src, out, force=True)



@pytest.mark.parametrize("writer_kind", ["torchzip", "torch.save"])
def test_disk_full_is_one_line_and_leaves_nothing(tmp_path, monkeypatch, writer_kind):
    import errno

    import torch

    import lrdoctor.repair.writer as writer
    from lrdoctor.repair import plan_fix, write_fix

    m = torch.nn.Linear(2, 2)
    o = torch.optim.SGD(m.parameters(), lr=0.1)
    s = torch.optim.lr_scheduler.LinearLR(o, 1.0, 0.1, total_iters=10)
    for _ in range(3):
        o.step()
        s.step()
        s.step()
    torch.save({"optimizer": o.state_dict(), "scheduler": s.state_dict()}, tmp_path / "c.pt")
    plan = plan_fix(tmp_path / "c.pt", policy="rescale", k=2)

    def full(obj, dst):
        dst.write_bytes(b"partial")
        raise OSError(errno.ENOSPC, "No space left on device", str(dst))

    if writer_kind == "torch.save":
        monkeypatch.setenv("LRDOCTOR_TORCH_FREE_FIX", "0")
        monkeypatch.setattr(writer, "write_pickle", full)
    else:
        from lrdoctor.repair import torchzip

        monkeypatch.setattr(torchzip, "write", full)
    with pytest.raises(UnusableInput, match="No space left on device"):
        write_fix(plan, tmp_path / "out.pt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["c.pt"]


def test_a_writer_refusal_names_the_input(monkeypatch):
    """Writers name the file inside the checkpoint as the refusal's path; the one line the
    user reads names the input given on the command line, once (it used to read
    'X/checkpoint_60.pt: checkpoint_60.pt: ...')."""
    from pathlib import Path

    from lrdoctor.read.layouts import torchsave as layout  # the torch.save layout's repair
    from lrdoctor.repair import Refusal, plan_fix

    def refuse(path, state, target, tools):
        raise Refusal("no torch scheduler state with last_epoch 240", "checkpoint_60.pt")

    monkeypatch.setattr(layout, "repair", refuse)
    src = Path(__file__).resolve().parents[2] / "sample_checkpoints" / "torch-microstep"
    with pytest.raises(Refusal) as e:
        plan_fix(src / "checkpoint_60.pt")
    assert str(e.value).startswith(f"{src / 'checkpoint_60.pt'}: no torch")
    # the run folder as input: the file inside it, named once
    with pytest.raises(Refusal) as e:
        plan_fix(src)
    assert str(e.value).startswith(f"{src / 'checkpoint_60.pt'}: no torch")
