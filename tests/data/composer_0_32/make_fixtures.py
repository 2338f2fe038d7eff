"""Generate the Composer fixtures of tests/evidence/test_counter_named_horizon.py with
Composer's own Trainer (mosaicml 0.32.1, not in lrdoctor's test extra, so the files are
checked in): a torch CosineAnnealingLR with T_max = 5 epochs x 11 batches, given to
``Trainer(max_duration="5ep", device_train_microbatch_size=2)``.

- ``per_epoch/``: without ``step_schedulers_every_batch`` Composer steps a PyTorch
  scheduler once per EPOCH (the bug: last_epoch 5 == timestamp.epoch, T_max 55 ==
  timestamp.batch).
- ``per_batch/``: ``step_schedulers_every_batch=True``, the twin (last_epoch 55).

Only the final checkpoint ``ep5-ba55-rank0.pt`` of each run is kept (about 22 KB).

    python tests/data/composer_0_32/make_fixtures.py     # with composer 0.32.1 installed

Composer imports torchvision at module level; on a CPU-only torch (whose torchvision
wheel cannot load) an inert stand-in module is installed first: nothing here uses it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import shutil
import sys
import tempfile
import types
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _inert_torchvision() -> None:
    if importlib.util.find_spec("torchvision") is not None:
        try:
            import torchvision  # noqa: F401
            return
        except Exception:  # noqa: BLE001 - a CUDA-only wheel on a CPU torch
            pass

    class _Inert(types.ModuleType):
        def __getattr__(self, name: str) -> object:
            if name.startswith("__"):
                raise AttributeError(name)
            return type(name, (), {})

    class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        """Every ``torchvision.*`` import: an inert package."""

        def find_spec(self, fullname, path=None, target=None):  # type: ignore[no-untyped-def]
            if fullname.split(".")[0] != "torchvision":
                return None
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

        def create_module(self, spec):  # type: ignore[no-untyped-def]
            mod = _Inert(spec.name)
            mod.__path__ = []  # type: ignore[attr-defined]
            mod.__version__ = "0.0.0+inert"  # type: ignore[attr-defined]
            return mod

        def exec_module(self, module):  # type: ignore[no-untyped-def]
            return None

    sys.meta_path.insert(0, _Finder())


def fit(out: Path, every_batch: bool) -> None:
    import torch
    from composer import Trainer
    from composer.models import ComposerModel

    class Tiny(ComposerModel):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.net = torch.nn.Linear(8, 1)

        def forward(self, batch):  # type: ignore[no-untyped-def]
            return self.net(batch[0])

        def loss(self, outputs, batch, *args, **kwargs):  # type: ignore[no-untyped-def]
            return torch.nn.functional.mse_loss(outputs, batch[1])

    g = torch.Generator().manual_seed(0)
    data = torch.utils.data.TensorDataset(torch.randn(88, 8, generator=g),
                                          torch.randn(88, 1, generator=g))
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=False)  # 11 batches
    model = Tiny()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=5 * len(loader), eta_min=1e-5)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Trainer(model=model, train_dataloader=loader, max_duration="5ep",
                          optimizers=opt, schedulers=sched, device="cpu",
                          device_train_microbatch_size=2, save_folder=tmp, save_interval="5ep",
                          save_overwrite=True, run_name="tiny", progress_bar=False,
                          log_to_console=False, loggers=[], seed=0,
                          step_schedulers_every_batch=every_batch)
        trainer.fit()
        trainer.close()
        out.mkdir(parents=True, exist_ok=True)
        shutil.copy(Path(tmp) / "ep5-ba55-rank0.pt", out / "ep5-ba55-rank0.pt")


def main() -> None:
    _inert_torchvision()
    fit(HERE / "per_epoch", every_batch=False)
    fit(HERE / "per_batch", every_batch=True)


if __name__ == "__main__":
    main()
