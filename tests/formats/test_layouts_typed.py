"""Bugs the strict type check (mypy) found in the layout readers: one test each.

Checkpoint values are untrusted: a key or value of a type the reader did not expect must
never become a field a repair writes through, nor a traceback.
"""

from __future__ import annotations

import pytest

from lrdoctor.core.fieldref import FieldRef
from lrdoctor.core.state import Unit
from lrdoctor.read.layouts._torchstate import torch_scheduler

torch = pytest.importorskip("torch")


def _step_lr_state() -> dict:
    """torch's own StepLR state_dict: a class with no horizon field."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=0.1)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=5)
    opt.step()
    sched.step()
    return sched.state_dict()


def test_no_horizon_ref_from_a_none_key() -> None:
    """StepLR has no horizon field (``HORIZON_FIELD.get`` is None): a state that holds a
    ``None`` key (an unpickled dict can) must not give a horizon ref ``(None,)``."""
    sd = _step_lr_state()
    spec, progress, _ = torch_scheduler(sd, unit=Unit.UPDATES, source="s.pt", ref=FieldRef("s.pt"))
    assert spec is not None and spec.kind == "StepLR" and "horizon" not in spec.refs
    sd[None] = 1
    spec, progress, _ = torch_scheduler(sd, unit=Unit.UPDATES, source="s.pt", ref=FieldRef("s.pt"))
    assert spec is not None and spec.kind == "StepLR"
    assert "horizon" not in spec.refs
    assert progress is not None and progress.value == 1


def test_skyrl_config_whose_trainer_is_not_a_mapping(tmp_path) -> None:
    """SkyRL's ``trainer_state.pt`` (skyrl_train/trainer.py save_checkpoints, its OmegaConf
    config) whose ``trainer`` value is not a mapping: the reader narrows it (it called
    ``.get`` on it: exit 2) and says the per-step update budget is unknown."""
    from omegaconf import OmegaConf

    from lrdoctor.inspect_api import read_state
    from tests.formats.test_formats_layouts import train

    model, opt, sched = train(3, 2, True)
    ck = tmp_path / "ckpts" / "global_step_3"
    pol = ck / "policy"
    pol.mkdir(parents=True)
    torch.save(opt.state_dict(), pol / "optim_world_size_1_rank_0.pt")
    torch.save({"lr_scheduler": sched.state_dict(), "world_size": 1, "client_state": {}},
               pol / "extra_state_world_size_1_rank_0.pt")
    cfg = OmegaConf.create({"trainer": "fsdp2", "generator": {"n_samples_per_prompt": 4}})
    torch.save({"global_step": 3, "config": cfg}, ck / "trainer_state.pt")
    st = read_state(tmp_path / "ckpts")
    assert st.format == "skyrl" and st.trainer_progress is not None
    assert st.trainer_progress.value == 3 and st.scheduler_progress.value == 6
    assert "nominal_updates_per_step" not in st.extras
    assert any("per-step update budget is unknown" in n for n in st.notes)


def test_verl_claim_and_read_agree_on_the_step_folder(tmp_path) -> None:
    """verl's Megatron path (megatron_checkpoint_manager.py: megatron-core's scheduler under
    ``lr_scheduler`` in ``actor/dist_ckpt/common.pt``) with the ``global_step_N`` folder
    below ``dist_ckpt/`` instead of above ``actor/``: the claim found the step folder from
    the file, the read looked above the role folder, found none and failed on ``None.name``.
    Both now judge the same placement."""
    from lrdoctor.inspect_api import read_state
    from tests.formats.test_formats_layouts import verl_megatron_run

    made = verl_megatron_run(tmp_path / "made", step=30, per_step=1)
    run = tmp_path / "run"
    target = run / "actor" / "dist_ckpt" / "global_step_30"
    target.parent.mkdir(parents=True)
    (made / "global_step_30" / "actor" / "dist_ckpt").rename(target)
    st = read_state(run)
    assert st.format == "verl" and st.extras["role"] == "actor"
    assert st.extras["global_step"] == 30 and st.nominal_progress.value == 30
