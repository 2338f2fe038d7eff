"""An OmegaConf ListConfig kept as an inert record is walked without a crash.

Bug found by typing ``shapes.opaque_fields`` honestly (mypy strict on
lrdoctor.read.scan.shapes): it was declared ``dict | None`` but gives an OmegaConf
container's plain content, a list for a ``ListConfig``; ``classify`` then called
``.items()`` on it (AttributeError) for any checkpoint holding one where unknown classes
are kept opaque (Lightning/NeMo hyper-parameters). The checkpoint is written by torch.save
with omegaconf's own ListConfig and DictConfig, a config library the walk was written for
only through DictConfig (SkyRL's).
"""

from __future__ import annotations

import pytest

from lrdoctor.read.bytes import safeload
from lrdoctor.read.scan.shapes import CONFIG, classify, follow

omegaconf = pytest.importorskip("omegaconf")
torch = pytest.importorskip("torch")


def test_list_config_in_hyper_parameters(tmp_path):
    OmegaConf = omegaconf.OmegaConf
    path = tmp_path / "epoch=0-step=5.ckpt"
    torch.save({"global_step": 5,
                "hyper_parameters": {"milestones": OmegaConf.create([10, 20]),
                                     "optim": OmegaConf.create({"lr": 0.001, "warmup": 3})}},
               path)
    obj = safeload.load(path, unknown_as_opaque=True)
    found = classify(obj, str(path))  # AttributeError before the fix
    configs = {f.key: f.value for f in found if f.kind == CONFIG}
    assert configs["hyper_parameters.optim"] == {"lr": 0.001, "warmup": 3}
    assert "hyper_parameters.milestones" not in configs  # a list is no record of fields
    assert follow(obj, ("hyper_parameters", "milestones", 1)) == 20
