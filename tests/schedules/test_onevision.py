"""OneVision-Encoder's ``PolynomialLRWarmup`` (training/lr_scheduler.py at
EvolvingLMMs-Lab/OneVision-Encoder c2cd3e0, unchanged by PR 82 b02db5b), stepped as a real
torch ``_LRScheduler`` and compared with lrdoctor.schedules.onevision at every step.

The class is not importable (the repository is not a package), so its ``get_lr`` is
transcribed below, line for line in arithmetic, as the issue allows; torch's scheduler
machinery around it is the real one.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from lrdoctor.core.state import ScheduleSpec, Unit
from lrdoctor.schedules import lr_at, lr_many, problems

torch = pytest.importorskip("torch")


class PolynomialLRWarmup(torch.optim.lr_scheduler._LRScheduler):
    """Transcribed from training/lr_scheduler.py (c2cd3e0): the recursive get_lr."""

    def __init__(self, optimizer, warmup_iters, total_iters=5, power=1.0, last_epoch=-1):
        super().__init__(optimizer, last_epoch=last_epoch)
        self.total_iters = total_iters
        self.power = power
        self.warmup_iters = warmup_iters

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch > self.total_iters:
            return [group["lr"] for group in self.optimizer.param_groups]
        if self.last_epoch <= self.warmup_iters:
            return [base_lr * self.last_epoch / self.warmup_iters for base_lr in self.base_lrs]
        l, w, t = self.last_epoch, self.warmup_iters, self.total_iters  # noqa: E741 (as written)
        decay_factor = ((1.0 - (l - w) / (t - w)) / (1.0 - (l - 1 - w) / (t - w))) ** self.power
        return [(1 / 2 * group["lr"]) * (1 + decay_factor) for group in self.optimizer.param_groups]


def _real(base: float, w: int, t: int, power: float, steps: int) -> list[float]:
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=base)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sched = PolynomialLRWarmup(opt, w, t, power)
        out = [opt.param_groups[0]["lr"]]
        for _ in range(steps):
            opt.step()
            sched.step()
            out.append(opt.param_groups[0]["lr"])
    return out


def _spec(base: float, w: int, t: int, power: float) -> ScheduleSpec:
    return ScheduleSpec(family="onevision", kind="polynomial_lr_warmup", max_lr=base,
                        unit=Unit.UPDATES, warmup=w, horizon=t, params={"power": power})


@pytest.mark.parametrize(("base", "w", "t", "power"), [
    (5e-5, 2, 2000, 2), (5e-5, 8, 8000, 2), (1e-3, 0, 300, 2), (1e-3, 30, 300, 1.0),
    (3e-4, 5, 50, 0.5)])
def test_every_step_equals_the_class(base, w, t, power):
    real = _real(base, w, t, power, t + 20)  # past total_iters too: the LR stays
    spec = _spec(base, w, t, power)
    assert not problems(spec)
    mine = [lr_at(spec, float(i)) for i in range(t + 21)]
    assert mine == real  # the same float rounding: bit for bit
    assert lr_many(spec, np.arange(t + 21, dtype=float)).tolist() == real


def test_the_recursion_is_not_the_closed_form_polynomial():
    # OneVision's shipped stage 2 after PR 82: 2,000,000 updates, warmup 2000, power 2.
    spec = _spec(5e-5, 2000, 2_000_000, 2)
    mid = lr_at(spec, 1_000_000)
    closed = 5e-5 * (1 - (1_000_000 - 2000) / (2_000_000 - 2000)) ** 2
    assert mid > 1.9 * closed  # about linear, not quadratic
    assert lr_at(spec, 2_000_000) == lr_at(spec, 3_000_000) > 0
