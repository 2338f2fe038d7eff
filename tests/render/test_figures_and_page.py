"""Pictures that show the bug at a glance, checked without pixels: every axis named with
its unit, the step axis named for the framework, the first windows and window sizes
against k, the run's schedule drawn between checkpoints, no label on another at two
figure sizes; the report page's structure (failing targets first, an honest gate verdict,
findings before the folded numbers).

Frameworks: a plain torch loop (OneVision's config), ROLL's own YAML (pipeline steps),
ROLL and HF Trainer checkpoints (the run plot), a megatron checkpoint (the page)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from itertools import combinations

import pytest

from lrdoctor.inspect_api import inspect_path
from lrdoctor.render import html, plots, replay_plots
from lrdoctor.replay import ReplayOptions, replay_full
from tests.helpers.paths import REPO

SAMPLES = REPO / "sample_checkpoints"
EX = REPO / "examples"
FAST = ReplayOptions(engine="fast", knob_check=False)


@pytest.fixture
def figs(monkeypatch):
    """Every figure a plot function would save, kept open for the test."""
    out = []
    monkeypatch.setattr(plots, "_save", lambda fig, path, **kw: out.append(fig))
    yield out
    import matplotlib.pyplot as plt

    for f in out:
        plt.close(f)


def short_onevision(tmp_path, rule="off_by_one"):
    """OneVision's plain loop (both bugs), 200 micro-steps long."""
    text = (REPO / "examples/onevision-offbyone.yaml").read_text()
    for a, b in (("  rule: off_by_one", f"  rule: {rule}"), ("warmup: 400", "warmup: 10"),
                 ("horizon: 8000", "horizon: 200"), ("total: 8000", "total: 200"),
                 ("steps: 8000", "steps: 200")):
        text = text.replace(a, b)
    p = tmp_path / f"ov-{rule}.yaml"
    p.write_text(text)
    return p


UNIT = re.compile(r"\(.+\)")


def assert_axes_named(fig) -> None:
    """Every axes: a y label with its unit; an x label with its unit unless it shares
    the x axis with the axes below it (which names it)."""
    for ax in fig.axes:
        assert UNIT.search(ax.get_ylabel()), f"y label without a unit: {ax.get_ylabel()!r}"
        shared = [o for o in ax.get_shared_x_axes().get_siblings(ax) if o is not ax]
        if not shared or ax is fig.axes[-1]:
            assert UNIT.search(ax.get_xlabel()), f"x label without a unit: {ax.get_xlabel()!r}"


def label_boxes(fig):
    """Titles, axis labels, texts/annotations and legends of every axes, as display boxes."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    boxes = []
    for ax in fig.axes:
        items = [ax.title, ax.xaxis.label, ax.yaxis.label, ax.yaxis.get_offset_text(),
                 *ax.texts]
        if ax.get_legend() is not None:
            items.append(ax.get_legend())
        for it in items:
            if it.get_visible() and (not hasattr(it, "get_text") or it.get_text()):
                boxes.append((f"{type(it).__name__}:{getattr(it, 'get_text', str)()[:30]}",
                              it.get_window_extent(r)))
    return boxes


def assert_no_overlap(fig) -> None:
    for (a, ba), (b, bb) in combinations(label_boxes(fig), 2):
        inter = ba.intersection(ba, bb)
        area = 0 if inter is None else inter.width * inter.height
        assert area < 4, f"{a!r} overlaps {b!r}"


def test_the_overlap_check_sees_an_overlap():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.set_xlabel("x (unit)")
    ax.set_ylabel("y (unit)")
    ax.text(0.5, 0.5, "floor at step 10", transform=ax.transAxes)
    ax.text(0.52, 0.5, "floor at step 12", transform=ax.transAxes)
    try:
        with pytest.raises(AssertionError, match="overlaps"):
            assert_no_overlap(fig)
    finally:
        plt.close(fig)


@pytest.mark.parametrize("size", [(10, 10), (7, 8.5)])
def test_replay_figure_shows_both_bugs_without_overlaps(tmp_path, size):
    rep = replay_full(str(short_onevision(tmp_path)), options=FAST).replay
    fig = replay_plots.replay_figure([(None, rep)], size=size)
    try:
        ax_lr, ax_mb, ax_w = fig.axes
        assert_axes_named(fig)
        assert_no_overlap(fig)
        # A plain loop: a train step is a data-loader batch, not a rollout.
        assert ax_lr.get_xlabel() == "train step (one data-loader batch)"
        # Window sizes against k: the first bar is 1 (short, its own colour), then 4s.
        bars = [p.get_height() for p in ax_w.patches]
        assert sorted(bars)[0] == 1 and bars.count(4) == len(bars) - 1
        ref = next(ln for ln in ax_w.get_lines() if "nominal" in ln.get_label())
        assert set(ref.get_ydata()) == {4}
        # The first windows micro-batch by micro-batch: shaded windows 1, 4, 4, ...
        sizes = [t.get_text() for t in ax_mb.texts]
        assert sizes[:3] == ["1", "4", "4"]
        lr = next(ln for ln in ax_mb.get_lines() if "LR this micro-batch" in ln.get_label())
        y = list(lr.get_ydata())
        assert len(set(y[1:5])) > 1  # the LR moves inside the second window (LRD205)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


@pytest.mark.parametrize("size", [(10, 7), (6.5, 5.5)])
def test_sweep_figure_labels_do_not_overlap(tmp_path, size):
    res = replay_full(str(short_onevision(tmp_path)), options=ReplayOptions(
        engine="fast", knob_check=False, sweep="accumulation.rule=correct,off_by_one"))
    fig = replay_plots.replay_figure(res.sweep, key=res.sweep_key, size=size)
    try:
        assert_axes_named(fig)
        assert_no_overlap(fig)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_step_axis_is_named_per_framework():
    class Cfg:
        framework = None
        _format = "roll-yaml"

    assert replay_plots.step_axis(Cfg()) == "pipeline step (ROLL max_steps)"
    Cfg.framework, Cfg._format = "verl==0.9.1", "run-config"
    assert replay_plots.step_axis(Cfg()).startswith("train step (verl")
    Cfg.framework = None
    assert replay_plots.step_axis(Cfg()) == "train step (one data-loader batch)"
    rep = replay_full(str(REPO / "examples/roll-sokoban-dynamic.yaml"),
                      str(REPO / "examples/batchlogs/roll-sokoban.csv"), options=FAST).replay
    assert replay_plots.step_axis(rep.cfg) == "pipeline step (ROLL max_steps)"


@pytest.mark.parametrize("sample", ["roll-overshoot", "hf-healthy"])
def test_run_plot_draws_the_schedule_between_checkpoints(figs, tmp_path, sample):
    reps = inspect_path(str(SAMPLES / sample), all=True)
    plots.plot_inspect(reps, tmp_path / "run.png")
    fig = figs[0]
    assert_axes_named(fig)
    assert_no_overlap(fig)
    bot = fig.axes[1]
    curve = next(ln for ln in bot.get_lines()
                 if ln.get_label() == "schedule at the scheduler's progress (curve)")
    xs = list(curve.get_xdata())
    ckpts = [r["updates"]["value"] for r in reps[-1].extra["run"]["checkpoints"]]
    # Many points between two checkpoints, not a segment joining them.
    between = [x for x in xs if ckpts[0] < x < ckpts[1]]
    assert len(between) > 20
    # The saved optimizer LR is markers at the checkpoints only.
    saved = next(ln for ln in bot.get_lines() if "saved at the checkpoint" in ln.get_label())
    assert saved.get_linestyle() == "None" and list(saved.get_xdata()) == ckpts


def test_inspect_and_updates_figures_name_their_axes(figs, tmp_path):
    plots.plot_inspect(inspect_path(str(SAMPLES / "megatron-healthy")), tmp_path / "a.png")
    rep = replay_full(str(short_onevision(tmp_path)), options=FAST).replay
    replay_plots.updates_per_step_plot(rep, tmp_path / "u.png")
    for fig in figs:
        assert_axes_named(fig)
        assert_no_overlap(fig)


class _Page(HTMLParser):
    """The report page's structure: target rows in order, their verdicts, and per
    section the order of its findings table, figures and folded numbers."""

    def __init__(self):
        super().__init__()
        self.rows, self.sections, self._cell, self._in = [], [], None, []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and a.get("class") in ("failing", "passing"):
            self.rows.append({"class": a["class"], "cells": []})
        elif tag == "td" and self.rows and self._cell is None and not self.sections:
            self._cell = ""
        elif tag == "h2":
            self.sections.append({"id": a.get("id"), "parts": []})
        elif self.sections and (tag == "figure" or (tag in ("table", "details")
                                                     and a.get("class"))):
            self.sections[-1]["parts"].append(a.get("class") or tag)

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None:
            self.rows[-1]["cells"].append(" ".join(self._cell.split()))
            self._cell = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell += data


def test_report_page_failing_first_honest_verdict_findings_before_numbers(tmp_path):
    from lrdoctor.core.findings import exit_code

    healthy = inspect_path(str(SAMPLES / "megatron-healthy"))
    roll = inspect_path(str(SAMPLES / "roll-overshoot"))
    torch_ = inspect_path(str(SAMPLES / "torch-microstep"))
    for r in healthy + roll:
        r.extra["fail_on"] = "never"
    for r in torch_:
        r.extra["fail_on"] = "error"
    reports = healthy + roll + torch_  # the failing one given last
    page = html.render_html(reports, {}, {}, "t")
    p = _Page()
    p.feed(page)
    assert [r["class"] for r in p.rows] == ["failing", "passing", "passing"]
    first, second, third = (r["cells"] for r in p.rows)
    assert "torch-microstep" in first[0] and first[-1].startswith("FAIL")
    assert exit_code(torch_[0].findings, "error") == 1
    # Errors under --fail-on never: named with their count, never a bare "not gated".
    assert "roll-overshoot" in second[0]
    assert second[-1] == "2 errors (not gated: --fail-on never)"
    assert third[-1] == "ok"
    # Sections in the same order; each: findings first, the numbers last and folded.
    assert [s["id"] for s in p.sections] == ["t2", "t1", "t0"]
    for s in p.sections[:2]:
        assert s["parts"][0] == "findings" and s["parts"][-1] == "summary", s["parts"]
    assert '<details class="summary"><summary>' in page


def test_elastic_replay_figure_marks_dp_changes_failed_updates_whole_window_panel():
    """Issue 29 item 15, RLinf's elastic example (dp changes, failed updates). What is
    expected is read from the replay's own data (its per-step dp and the trace's failed
    rows), not from the example's numbers: every dp change is a line on the LR panel and
    on the window panel, every failed update a cross at its step, and the window panel
    shows every update (it showed the first 60 of 200, all 64, under a text saying
    32..64)."""
    from lrdoctor.rules.replay_context import per_step

    rep = replay_full(str(EX / "rlinf-elastic.yaml"), options=FAST).replay
    dp = [int(x) for x in per_step(rep)["dp"]]
    changes = [s for s in range(1, len(dp)) if dp[s] != dp[s - 1]]
    t = rep.trace
    failed = sorted({int(s) for s in t["train_step"][t["is_update"] & t["failed"]]})
    assert changes and failed  # the example is elastic and has failed updates
    fig = replay_plots.replay_figure([(None, rep)])
    try:
        ax_lr, _, ax_w = fig.axes
        dp_lines = [ln for ln in ax_lr.get_lines() if ln.get_color() == "#9467bd"]
        assert sorted(ln.get_xdata()[0] for ln in dp_lines) == changes
        legend = [tx.get_text() for tx in ax_lr.get_legend().get_texts()]
        assert any(all(f"step {s}: {dp[s - 1]} -> {dp[s]}" in x for s in changes)
                   for x in legend), legend
        crosses = next(c for c in ax_lr.collections if "failed update" in c.get_label())
        assert sorted(int(x) for x, _ in crosses.get_offsets()) == failed
        sizes = t["window_size"][t["is_update"]]
        bars = [p.get_height() for p in ax_w.patches]
        assert len(bars) == int(t["is_update"].sum()) and "first" not in ax_w.get_title()
        assert (min(bars), max(bars)) == (int(sizes.min()), int(sizes.max()))
        assert_no_overlap(fig)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)


def test_inspect_plot_names_each_line_once_and_the_continuation_is_not_intended(figs, tmp_path):
    """Issue 29 item 16, the torch-microstep sample (a torch CosineAnnealingLR stepped per
    micro-batch, T_max 100 = the planned end): the curve past T_max is what the scheduler
    computes there, not the "intended schedule"; the horizon and the planned end, the same
    number here, are one line with one name (it was "decay horizon" on the plot and
    "planned end" in the legend)."""
    plots.plot_inspect(inspect_path(str(SAMPLES / "torch-microstep")), tmp_path / "a.png")
    ax = figs[0].axes[0]
    intended = next(ln for ln in ax.get_lines() if ln.get_label().startswith("intended"))
    assert max(intended.get_xdata()) <= 100
    past = next(ln for ln in ax.get_lines() if "past the decay horizon" in ln.get_label())
    assert min(past.get_xdata()) <= 100 < max(past.get_xdata())
    vlines = [ln for ln in ax.get_lines() if len(set(ln.get_xdata())) == 1
              and ln.get_xdata()[0] == 100]
    assert [ln.get_label() for ln in vlines] == \
        ["decay horizon = planned end of training (100)"]
    assert not ax.texts  # no second name written beside it


def test_floor_labels_at_their_line_and_the_budget_note_covers_no_line(figs, tmp_path):
    """Issue 29 item 17, ROLL's sokoban config with its batch log (2 updates per pipeline
    step): "floor at step 512" sat at x~0, and the "budget used up" box covered the
    nominal line."""
    import numpy as np

    rep = replay_full(str(EX / "roll-sokoban-dynamic.yaml"),
                      str(EX / "batchlogs" / "roll-sokoban.csv"), options=FAST).replay
    fig = replay_plots.replay_figure([(None, rep)])
    try:
        ax_lr = fig.axes[0]
        (floor,) = [a for a in ax_lr.texts if a.get_text().startswith("floor at step")]
        step = int(floor.get_text().split()[3])
        assert floor.xy[0] == step and step > 0.25 * rep.cfg.train.steps
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
    replay_plots.updates_per_step_plot(rep, tmp_path / "u.png")
    ax_c = figs[-1].axes[1]
    fig = figs[-1]
    fig.canvas.draw()
    (note,) = [a for a in ax_c.texts if a.get_text().startswith("budget used up")]
    box = note.get_window_extent(fig.canvas.get_renderer())
    for line in ax_c.get_lines():
        xs = np.linspace(min(line.get_xdata()), max(line.get_xdata()), 400)
        ys = np.interp(xs, line.get_xdata(), line.get_ydata())
        pts = ax_c.transData.transform(np.c_[xs, ys])
        inside = [(x, y) for x, y in pts if box.x0 < x < box.x1 and box.y0 < y < box.y1]
        assert not inside, f"the note covers {line.get_label()!r}"
