"""The figures say what they claim: a run's trend for `inspect --all --plot`, replay
windows against the right reference, markers off the x-axis, sweep curves that stay
distinguishable when equal. The figures are captured before they are saved."""

from __future__ import annotations

import numpy as np
import pytest

from lrdoctor.inspect_api import inspect_path
from lrdoctor.render import plots, replay_plots
from lrdoctor.replay import ReplayOptions, replay_full
from tests.helpers.paths import REPO

ROOT = REPO
SAMPLES = ROOT / "sample_checkpoints"
EX = ROOT / "examples"


@pytest.fixture
def figs(monkeypatch):
    """Every figure a plot function would save, kept open for the test."""
    out = []
    monkeypatch.setattr(plots, "_save", lambda fig, path, **kw: out.append(fig))
    yield out
    import matplotlib.pyplot as plt

    for f in out:
        plt.close(f)


def test_inspect_all_plot_draws_the_run(figs, tmp_path):
    reps = inspect_path(str(SAMPLES / "roll-overshoot"), all=True)
    plots.plot_inspect(reps, tmp_path / "run.png")
    top, bot = figs[0].axes[:2]
    assert "progress and LR per checkpoint" in top.get_title()
    nominal = next(ln for ln in top.get_lines() if "nominal" in ln.get_label())
    assert list(nominal.get_xdata()) == [808, 1608, 2400]  # every checkpoint, not the last


def test_healthy_markers_sit_off_the_x_axis_and_equal_lines_both_show(figs, tmp_path):
    reps = inspect_path(str(SAMPLES / "hf-healthy" / "checkpoint-20"))
    plots.plot_inspect(reps, tmp_path / "one.png")
    ax = figs[0].axes[0]
    assert ax.get_ylim()[0] < 0  # the finished cosine's LR 0 is above the axis line
    ring, cross = ax.collections[-2:]
    assert ring.get_sizes()[0] > cross.get_sizes()[0]  # the ring shows around the cross
    reps = inspect_path(str(SAMPLES / "hf-healthy"), all=True)
    plots.plot_inspect(reps, tmp_path / "run.png")
    top, bot = figs[1].axes[:2]
    assert top.get_ylim()[0] < 0 and bot.get_ylim()[0] < 0
    widths = {ln.get_label(): ln.get_linewidth() for ln in top.get_lines()}
    assert widths["nominal (trainer's counters)"] > widths["scheduler's progress"]


@pytest.mark.parametrize("name, lo, hi", [("verl-dynamic-bsz", 3, 10),
                                          ("skyrl-stepwise", 3, 4)])
def test_strategy_windows_get_a_static_reference_not_k_1(name, lo, hi):
    rep = replay_full(str(EX / f"{name}.yaml"), options=ReplayOptions(engine="fast", knob_check=False)).replay
    ref, label = replay_plots.nominal_windows(rep)
    assert "static equivalent" in label
    assert lo <= min(ref) and max(ref) <= hi and min(ref) > 1
    sizes = rep.trace["window_size"][rep.trace["is_update"]]
    assert len(ref) == len(sizes)
    if name == "skyrl-stepwise":  # static micro-batches inside prompt-unit mini-batches
        assert np.array_equal(ref, sizes)


def test_equal_sweep_curves_stay_distinguishable(figs, tmp_path):
    res = replay_full(str(EX / "rlinf-elastic.yaml"), options=ReplayOptions(engine="fast", sweep="batching.max_tokens_per_microbatch=4096,8192,16384"))
    replay_plots.plot_replay(res.sweep, tmp_path / "sweep.png", key=res.sweep_key)
    ax_lr = figs[0].axes[0]
    curves = [ln for ln in ax_lr.get_lines() if ln.get_label().startswith("max_tokens")]
    assert len(curves) == 3
    ys = [np.asarray(c.get_ydata()) for c in curves]
    assert all(np.array_equal(ys[0], y) for y in ys)  # the values give the same LR...
    styles = {(c.get_linestyle(), c.get_linewidth()) for c in curves}
    assert len(styles) == 3  # ...drawn three ways
    assert curves[0].get_linewidth() > curves[-1].get_linewidth()
