"""One claim path for every layout (lrdoctor.read.layouts.claim), on inputs the registry
was not written for.

The layouts recognised by content are claimed on the view of each checkpoint the generic
content read classified, through the same ``claim`` as the layouts recognised by their
files. These tests give that path inputs no layout module describes:

- Composer's *sharded* checkpoint: ``composer/utils/checkpoint.py`` saves
  ``{"state": state.state_dict(), "rng": ...}`` through ``torch.distributed.checkpoint``
  (``dist_cp.save``) into ``ep{E}-ba{B}/`` when FSDP's ``state_dict_type`` is
  ``"sharded"``. The composer layout (``lrdoctor/read/layouts/composer.py``) was written
  for the monolithic ``ep{E}-ba{B}-rank{R}.pt`` torch.save file; here the DCP layout claims
  the folder by its files, the content read re-nests the items and the composer layout
  claims the checkpoint by its keys. Written with torch's own DCP writer.
- A hand-written torch loop that names its folders ``global_step_N`` as verl does: verl's
  hint matches, its claim (by what the files hold) does not, and the checkpoint stays
  framework-blind: a hint is never a claim.
"""

from __future__ import annotations

import random
import warnings
from pathlib import Path

from lrdoctor.core.facts import Storage
from lrdoctor.core.findings import Severity
from lrdoctor.diagnose import diagnose
from lrdoctor.inspect_api import read_state
from lrdoctor.read import layouts
from lrdoctor.read.scan import grouping, reading
from lrdoctor.read.scan.view import ScanView
from tests.helpers.factories import _tiny_model, _train_step, composer_state


def _loud(st) -> list[str]:
    return [f.code for f in diagnose(st) if f.severity >= Severity.WARNING]


def composer_sharded(root: Path, *, batches: int, k: int) -> Path:
    """Composer's sharded save: State.state_dict() (optimizers, schedulers by class name,
    timestamp) through torch.distributed.checkpoint into ``ep1-ba{batches}/``; the
    LambdaLR (what ComposerSchedulers compile to) stepped ``k`` times per batch."""
    import torch
    import torch.distributed.checkpoint as tdcp

    state = composer_state(batches=batches, k=k)
    with warnings.catch_warnings():  # single-process save: torch warns it is not distributed
        warnings.simplefilter("ignore")
        tdcp.save({"state": state, "rng": [{"python": random.getstate(),
                                            "torch": torch.get_rng_state()}]},
                  checkpoint_id=str(root / f"ep1-ba{batches}"))
    return root


def test_composer_sharded_checkpoint_is_claimed_by_composer_through_dcp(tmp_path):
    """Composer (sharded, DCP): the input's claimant is the DCP container (by its files),
    the checkpoint's is composer (by its keys), through the same claim."""
    run = composer_sharded(tmp_path / "ok", batches=50, k=1)
    assert layouts.claimed_as(run) == "dcp"
    ckpt = next(c for c in grouping.run_checkpoints(run / "ep1-ba50")
                if any(f.name == ".metadata" for f in c.files))
    entry = layouts.claim(ScanView.of(reading.scan(ckpt)))
    assert entry is not None and entry.name == "composer"

    st = read_state(run)
    assert st.format == "composer" and st.facts.storage is Storage.DCP
    assert st.nominal_progress.name == "composer.timestamp.batch"
    assert st.nominal_progress.value == 50 and st.scheduler_progress.value == 50
    assert _loud(st) == []
    bad = read_state(composer_sharded(tmp_path / "bad", batches=50, k=2))
    f = [x for x in diagnose(bad) if x.code == "LRD103"]
    assert bad.format == "composer" and f and f[0].evidence["k"] == 2


def test_verl_named_folders_of_a_plain_loop_stay_framework_blind(tmp_path):
    """A hand-written loop (torch.optim + StepLR, torch.save) saving ``global_step_N/``:
    verl's hint matches the names, its claim needs verl's ``extra_state`` files and
    ``lr_scheduler`` key, so the generic content read reads it framework-blind."""
    import torch

    model = _tiny_model(3)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=10)
    for s in range(12):
        _train_step(model, opt, s)
        sched.step()
    d = tmp_path / "run" / "global_step_12"
    d.mkdir(parents=True)
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "step": 12}, d / "state.pt")
    sc = reading.scan(grouping.run_checkpoints(tmp_path / "run")[-1])
    view = ScanView.of(sc)
    assert any(e.name == "verl" and e.hint.matches(view.names) for e in layouts.LAYOUTS)
    assert layouts.claim(view) is None
    st = read_state(tmp_path / "run")
    assert st.format == "torch" and st.scheduler_progress.value == 12
    assert st.counter("loop.step").value == 12
