"""What the evidence and diagnosis tests ask of a report: its one finding of a code, and
"silent at warning level" (the healthy twin of every bug fixture)."""

from __future__ import annotations

from lrdoctor.core.findings import Finding, Severity
from lrdoctor.core.report import Report


def the(report: Report, code: str) -> Finding:
    """The report's one finding of ``code`` (fails when there is none or several)."""
    (f,) = [f for f in report.findings if f.code == code]
    return f


def silent(report: Report) -> None:
    """No finding at warning or above (the healthy twin)."""
    bad = [(f.code, f.message) for f in report.findings if f.severity >= Severity.WARNING]
    assert not bad, (report.target, bad)


def tiny_adamw(lr: float = 1e-3):  # -> (torch.nn.Linear, torch.optim.AdamW)
    """A seeded 4->1 linear model and its AdamW: the smallest real optimizer state."""
    import torch

    torch.manual_seed(0)
    m = torch.nn.Linear(4, 1)
    return m, torch.optim.AdamW(m.parameters(), lr=lr)


def train(model, opt, n: int = 1) -> None:
    """``n`` real optimizer updates of ``model`` on random data."""
    import torch

    for _ in range(n):
        model(torch.randn(2, 4)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
