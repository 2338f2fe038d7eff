"""LRD204 `short-first-window`: The first accumulation window is short (off-by-one)

## Explanation
`global_step % k != 0` with `global_step` from 0 closes the first window after one
micro-batch and shifts every later window.

## Example
k=4: window sizes 1, 4, 4, ...

## Fix
Use `(global_step + 1) % k == 0` as the optimizer-step condition.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lrdoctor.core.findings import Evidence, Finding, Rule, Severity

if TYPE_CHECKING:
    from lrdoctor.rules.replay_context import ReplayContext

RULE = Rule.from_module(__name__, Severity.ERROR)
#: What it rests on (replay_context.with_provenance): the first window's size is the accumulation rule's (k from the config), whatever the lengths.
LENGTHS = "none"


class ShortFirstWindow(Evidence):
    window_sizes_head: list[int]
    k: int
    rule: str

    def headline(self) -> str | None:
        """The first window's real size, from the replayed window sizes (never assumed
        k - 1: an off-by-one with ``global_step % k`` closes a window of 1, not k - 1)."""
        if not self.window_sizes_head:
            return None
        return f"first window {self.window_sizes_head[0]} of {self.k} micro-batches"


def check(c: ReplayContext) -> list[Finding]:
    """The first accumulation window is short, so every later window is shifted."""
    from lrdoctor.rules.replay_context import has_boundaries

    t, ws = c.t, c.s["window_sizes"]
    ruled = ~has_boundaries(c.rep)
    if not (len(t["lr"]) and ruled[0] and ws["first"] is not None and ws["nominal"] > 1
            and ws["first"] < ws["nominal"] and ws["max"] >= ws["nominal"]):
        return []
    sizes = t["window_size"][t["is_update"]][:4].tolist()
    return [RULE.finding(
        f"The first optimizer update uses {ws['first']} micro-batch(es) instead of "
        f"{ws['nominal']} (window sizes {', '.join(map(str, sizes))}, ...), and every "
        "later window is shifted.",
        ShortFirstWindow(window_sizes_head=sizes, k=ws["nominal"], rule=c.cfg.accumulation.rule),
        location="accumulation.rule")]
