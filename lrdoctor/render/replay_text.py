"""What ``lrdoctor replay`` prints on a terminal: the replay's numbers against the
config's promise, the context lines (what was read, what was assumed), the cross-check,
then the findings.

Split from :mod:`lrdoctor.render.text` (the other commands' views and the console they
share); ``text.TEXT`` names :func:`render_replay` as replay's view.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lrdoctor.core.numbers import number
from lrdoctor.render.text import console, render_findings

if TYPE_CHECKING:
    from rich.console import Console


def _rnum(x) -> str:
    return number(x, grouping=False)


def render_replay(report, trace=None, plot=None, con: Console | None = None,
                  verbose: bool = False) -> None:
    """The nominal-vs-replayed table, the sweep table, findings, and what was written."""
    from rich.table import Table
    from rich.text import Text
    con = con or console()
    s = report.extra["summary"]
    t = Table(title=f"replay of {report.target} ({s['engine']} path on {s['device']})",
              show_header=True, header_style="bold")
    t.add_column("")
    t.add_column("nominal", justify="right")
    t.add_column("replayed", justify="right")
    ups = s["updates_per_step"]
    t.add_row("optimizer updates per train step", _rnum(s["nominal_updates_per_step"]),
              _rnum(ups["mean"]) + ("" if ups["min"] == ups["max"]
                                    else f" ({_rnum(ups['min'])}..{_rnum(ups['max'])})"))
    t.add_row("optimizer updates in total", _rnum(s["budget_updates"]),
              _rnum(s["actual_updates"]))
    t.add_row(f"scheduler progress ({s['scheduler_unit']})", _rnum(s["horizon"]),
              _rnum(s["scheduler_progress_end"]) + f"  ({s['progress_ratio']:.3g}x)")
    floor = (f"after step {s['floor_step']} of {s['train_steps']}" if s["floor_step"]
             else "never")
    # A schedule that never reached its floor even at >= the planned progress (constant)
    # does not reach it on plan either: 'at step N' beside 'never' read as a finding.
    never = not s["floor_step"] and (s.get("progress_ratio") or 0) >= 1
    t.add_row("LR reaches its floor",
              "never" if never else f"at step {s['train_steps']}", floor)
    ws = s["window_sizes"]
    by_strategy = s.get("windows_by") == "strategy"
    t.add_row("micro-batches per update",
              "set by the strategy" if by_strategy else _rnum(ws["nominal"]),
              f"{ws['min']}..{ws['max']} (first {ws['first']}, {ws['short']} short)")
    if "peak_memory_bytes" in s:
        t.add_row("peak memory per micro-batch", "", f"{s['peak_memory_bytes'] / 2**20:.1f} MiB")
    con.print(t)
    for label, text, style in replay_context_lines(report):
        con.print(Text.assemble((f"{label}: ", style or "dim"), text))
    line = cross_check_line(s.get("cross_check"))
    if line:
        con.print(line, highlight=False, markup=False)
    sw = report.extra.get("sweep")
    if sw:
        st = Table(title=f"sweep over {sw['key']}", header_style="bold")
        # Short headers that fit 80 columns (a dotted key was cut to '…'); units in the caption.
        st.caption = (f"updates: optimizer updates; progress: scheduler's, in {s['scheduler_unit']};"
                      " floor: train step where the LR reaches min_lr; max tokens: most real "
                      "tokens in one micro-batch")
        st.caption_justify = "left"
        cols = ["value", "updates", "per step", "progress", "ratio", "floor", "max tokens",
                "findings"]
        for c in cols:
            st.add_column(c, justify="left" if c == "findings" else "right")
        for r in sw["rows"]:
            lo, hi = r["updates_per_step_min"], r["updates_per_step_max"]
            st.add_row(str(r[sw["key"]]), _rnum(r["actual_updates"]),
                       _rnum(lo) if lo == hi else f"{_rnum(lo)}..{_rnum(hi)}",
                       _rnum(r["scheduler_progress_end"]), f"{r['progress_ratio']:.3g}x",
                       _rnum(r["floor_step"]), _rnum(r["max_rank_tokens"]),
                       ", ".join(r.get("findings", [])) or "none")
        con.print(st)
    if verbose and s.get("config_keys_used"):
        keys = Table(title="config keys read", title_justify="left", show_edge=False)
        keys.add_column("key", overflow="fold")
        keys.add_column("value", overflow="fold")
        for k, v in s["config_keys_used"].items():
            keys.add_row(k, str(v))
        con.print(keys)
    render_findings(report, con)
    for label, p in (("trace", trace), ("plot", plot)):
        if p is not None:
            con.print(f"[dim]{label} written to {p}[/dim]")


def replay_context_lines(report) -> list[tuple[str, str, str | None]]:
    """What the replay ran on and what it did not check, as (label, text, style): the
    engine and why, a cycled batch log, the memory-knob check (or why it was skipped).
    Said in the text too, not only in --json and the HTML page."""
    s = report.extra.get("summary") or {}
    lines: list[tuple[str, str, str | None]] = []
    src = s.get("config_source") or {}
    if src.get("launch_script"):
        lines.append(("config", f"the {src['entry_point']} command at line {src['line']} of the "
                      f"launch script, {src.get('overrides', 0)} overrides on "
                      f"{src.get('base_config', 'its defaults')}", None))
    unresolved = src.get("unresolved") or {}
    if unresolved:
        lines.append(("not set by the script (not read by the replay)", "; ".join(
            f"{k} <- {', '.join(v)}" for k, v in unresolved.items()), None))
    for key, v in (src.get("values") or {}).items():  # a number no config key held
        lines.append((f"{key} {v['from']}", f"{v['value']:,}: {v['why']}" + (
            f"; give the real one with {v['set']}" if v["from"] == "assumed" else ""),
            "yellow" if v["from"] == "assumed" else None))
    for note in src.get("script_notes", []):
        lines.append(("launch script", str(note), None))
    for miss in src.get("defaults_not_followed", []):
        lines.append(("defaults not followed", f"{miss} (the keys it sets are not seen)",
                      "yellow"))
    if s.get("lengths"):
        lines.append(("sample lengths", str(s["lengths"]), None))
    if s.get("engine_reason"):
        lines.append(("engine", str(s["engine_reason"]), None))
    if s.get("cycled"):
        lines.append(("batch log", f"{s['cycled']}: every later step repeats logged lengths, "
                      "so per-step variation is the log's, not the run's", "yellow"))
    from lrdoctor.rules.lrd216_scheduler_before_optimizer import is_step_order_warning

    for w in s.get("torch_warnings") or []:
        if not is_step_order_warning(w.get("message", "")):  # that one is LRD216
            lines.append(("torch warned in the replayed loop",
                          f"{w.get('category')}: {w.get('message')} ({w.get('count')}x)",
                          "yellow"))
    knob = s.get("memory_knob")
    if isinstance(knob, dict):
        rows = knob.get("rows") or []
        moved = "progress depends on it" if knob.get("differs") else "progress unchanged"
        vals = ", ".join(str(r.get("value")) for r in rows if isinstance(r, dict))
        lines.append(("memory-knob check", f"{knob.get('key')} = {vals} "
                      f"({knob.get('source')}): {moved}", None))
    elif not report.extra.get("sweep"):
        lines.append(("memory-knob check", "not run (only token-capped batching has a "
                      "knob to double, and --no-knob-check skips it)", None))
    return lines


def cross_check_line(c: dict | None) -> str | None:
    """One line: what the real torch loop ran of this replay and whether it agrees."""
    if not c:
        return None
    if not c.get("ran"):
        return f"real execution: not run: {c.get('why', 'nothing to run')}"
    where = "; ".join(f"{g['why']} ({_steps(g['steps'])})" for g in c["segments"])
    head = (f"real execution: torch ran {c['micro_batches']:,} of {c['of']:,} micro-batches "
            f"on {c['device']} [{where}]")
    if c["agree"]:
        line = f"{head}: agrees with the fast trace"
    else:
        line = f"{head}: DISAGREES with the fast trace: {'; '.join(c['mismatches'])}"
    for n in c.get("not_covered", []):
        line += f"; not covered: {n}"
    return line


def _steps(pair: list[int]) -> str:
    return f"step {pair[0]}" if pair[0] == pair[1] else f"steps {pair[0]}-{pair[1]}"
