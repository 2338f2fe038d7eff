"""LambdaLR's library lambdas recognised from LR points (issue 27): transformers'
``get_*_schedule_with_warmup`` helpers run by torch's own LambdaLR, judged against
:mod:`lrdoctor.schedules.recognise` over whole runs, and a hand-written loop that saves
one beside its config, inspected end to end."""

from __future__ import annotations

import pytest

from lrdoctor.core.findings import Severity
from lrdoctor.core.state import Unit
from lrdoctor.inspect_api import inspect_path
from lrdoctor.schedules import lr_at
from lrdoctor.schedules.recognise import from_lr_points

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.frameworks

HELPERS = {
    "linear": transformers.get_linear_schedule_with_warmup,
    "cosine": transformers.get_cosine_schedule_with_warmup,
    "constant_with_warmup": lambda o, w, t: transformers.get_constant_schedule_with_warmup(o, w),
    "polynomial": transformers.get_polynomial_decay_schedule_with_warmup,
}


def _run(kind: str, warm: int = 10, total: int = 100, steps: int = 130):
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))], lr=3e-4)
    sched = HELPERS[kind](opt, warm, total)
    seen = []
    for k in range(steps + 1):
        seen.append((k, opt.param_groups[0]["lr"]))
        opt.step()
        sched.step()
    return seen


@pytest.mark.parametrize("kind", sorted(HELPERS))
def test_each_helper_is_recognised_past_its_warmup_and_never_another(kind):
    """At every position past the warmup where the helpers differ, the saved LR names its
    own helper only; inside the warmup (all helpers ramp alike) nothing is recognised."""
    seen = _run(kind)
    named = 0
    for k, lr in seen:
        spec = from_lr_points([(k, lr)], 3e-4, 10, 100, Unit.UPDATES)
        if k <= 10:
            assert spec is None, k
        elif spec is not None:
            assert spec.kind == kind and spec.horizon == 100, (k, spec.kind)
            assert lr_at(spec, k) == pytest.approx(lr, rel=1e-9)
            named += 1
    assert named >= 100  # all but a handful of coinciding positions
    # a wrong horizon is no fit
    k, lr = seen[60]
    assert from_lr_points([(k, lr)], 3e-4, 10, 400, Unit.UPDATES) is None or kind == (
        "constant_with_warmup")


def _loop(path, per_micro: bool) -> None:
    """A hand-written loop (accumulation 4) with transformers' cosine helper stepped per
    update (healthy) or per micro-batch (the bug), its config saved beside the state."""
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = transformers.get_cosine_schedule_with_warmup(opt, 10, 100)
    for i in range(30 * 4):
        if (i + 1) % 4 == 0:
            model(torch.randn(2, 4)).sum().backward()
            opt.step()
            opt.zero_grad()
            if not per_micro:
                sched.step()
        if per_micro:
            sched.step()
    path.mkdir(parents=True)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "lr_scheduler": sched.state_dict(), "global_step": 30,
                "config": {"max_steps": 100, "warmup_steps": 10}}, path / "ckpt.pt")


def test_recognised_cosine_helper_healthy_loop_is_silent(tmp_path):
    _loop(tmp_path / "ok", per_micro=False)
    (r,) = inspect_path(tmp_path / "ok")
    assert not [f for f in r.findings if f.severity >= Severity.INFO], r.findings
    s = r.state["schedule"]
    assert (s["family"], s["kind"], s["horizon"], s["warmup"]) == ("hf", "cosine", 100, 10)
    assert any("recognised from the saved LR" in n and "config.max_steps" in n
               for n in r.state["notes"])


def test_recognised_cosine_helper_stepped_per_micro_batch(tmp_path):
    """The scheduler at 120 = 4 x optimizer step 30: the saved LR is the cosine at 120,
    past its horizon 100 and climbing again, which only the recognised model can say."""
    _loop(tmp_path / "bad", per_micro=True)
    (r,) = inspect_path(tmp_path / "bad")
    codes = {f.code for f in r.findings if f.severity is Severity.ERROR}
    assert "LRD103" in codes and "LRD101" in codes, r.findings
    assert r.state["schedule"]["kind"] == "cosine"
