"""Issue 28, part 2: an unknown class in any pickle is an opaque value with a note, its
fields read as data; a code-execution global only referenced is inert.

Each file here is written by the framework's own code: a fine-tuning framework's
``TrainingArguments`` subclass saved by transformers' ``Trainer``; a DCP ``.metadata``
written by torch's own ``torch.distributed.checkpoint.save`` whose ``_StorageInfo``
records are another framework's class (as a framework that vendors DCP's filesystem
writer pickles them); a Lightning Fabric ``fabric.save`` of a state holding a plain
``DataLoader``. The frameworks' modules exist only while the files are written: lrdoctor
never imports them."""

from __future__ import annotations

import dataclasses
import os
import pickle
import shutil
import sys
import textwrap
import warnings
from pathlib import Path

import pytest

from lrdoctor.read.bytes import dcp, safeload
from tests.helpers.paths import REPO

HF = REPO / "sample_checkpoints" / "hf-healthy"


def _framework(root: Path, package: str, files: dict[str, str]) -> None:
    """A framework package under ``root`` (put on sys.path by the caller) with ``files``."""
    pkg = root / package
    for rel, text in files.items():
        f = pkg / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(textwrap.dedent(text))
        for parent in f.relative_to(root).parents:
            if str(parent) != ".":
                (root / parent / "__init__.py").touch()


@pytest.fixture
def on_path(tmp_path, monkeypatch):
    """A folder on sys.path for a framework written in the test; its modules are dropped
    from sys.modules afterwards (so nothing lrdoctor reads could find them)."""
    root = tmp_path / "site"
    root.mkdir()
    monkeypatch.syspath_prepend(str(root))
    before = set(sys.modules)
    yield root
    for name in set(sys.modules) - before:
        if name.startswith("lrd_"):
            del sys.modules[name]


def test_a_training_arguments_subclass_saved_by_the_trainer_gives_its_schedule(tmp_path,
                                                                                on_path):
    """The Trainer torch.saves its args as training_args.bin; a framework's subclass was
    refused ('not on the allow-list'), so its warmup and horizon were lost. Now its fields
    are data: the schedule comes from it, and the note names the class and the fields."""
    import torch
    from transformers import Trainer

    _framework(on_path, "lrd_finetune", {"hparams/args.py": """
        from dataclasses import dataclass, field
        from transformers import TrainingArguments

        @dataclass
        class FinetuneArguments(TrainingArguments):
            lora_rank: int = field(default=8)
    """})
    from lrd_finetune.hparams.args import FinetuneArguments

    run = tmp_path / "run"
    shutil.copytree(HF, run)
    ckpt = run / "checkpoint-20"
    old = torch.load(ckpt / "training_args.bin", weights_only=False)  # the sample's own
    args = FinetuneArguments(
        output_dir=str(tmp_path / "trainer"), use_cpu=True, report_to=[],
        **{k: getattr(old, k) for k in ("learning_rate", "lr_scheduler_type", "warmup_steps",
                                        "max_steps", "per_device_train_batch_size",
                                        "gradient_accumulation_steps")})
    trainer = Trainer(model=torch.nn.Linear(2, 1), args=args)
    trainer.save_model(str(tmp_path / "trainer"))  # writes training_args.bin: torch.save(args)
    shutil.copy(tmp_path / "trainer" / "training_args.bin", ckpt / "training_args.bin")

    from lrdoctor.inspect_api import read_state

    st = read_state(ckpt)
    assert st.schedule is not None and st.schedule.source == "training_args.bin"
    assert st.schedule.warmup == old.warmup_steps and st.schedule.kind == "cosine"
    note = next(n for n in st.notes if "lrd_finetune.hparams.args.FinetuneArguments" in n)
    assert "fields still read as data" in note and "warmup_steps" in note \
        and "max_steps" in note and "lora_rank" not in note  # held, not read
    assert not any("training_args.bin not used" in n for n in st.notes)


def test_a_dcp_metadata_with_another_frameworks_storage_info_is_read(tmp_path, on_path):
    """torch's DCP writer saves a scheduler; the .metadata is then pickled again with the
    _StorageInfo records of a framework that ships its own copy of DCP's filesystem
    writer: refused before ('asks for <framework>...._StorageInfo'), so every checkpoint
    of that framework was. Now its fields (relative_path, offset, length) locate each item."""
    import torch
    import torch.distributed.checkpoint as tdcp

    model = torch.nn.Linear(4, 3)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=20)
    for _ in range(5):
        opt.step()
        sched.step()
    ck = tmp_path / "ckpt"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        tdcp.save({"lr_scheduler": sched.state_dict(), "model": model.state_dict()},
                  checkpoint_id=str(ck))

    _framework(on_path, "lrd_otherfw", {"distributed/checkpoint/filesystem.py": """
        from dataclasses import dataclass

        @dataclass
        class _StorageInfo:
            relative_path: str
            offset: int
            length: int
            transform_descriptors: list | None = None
    """})
    from lrd_otherfw.distributed.checkpoint.filesystem import _StorageInfo

    with open(ck / ".metadata", "rb") as f:
        md = pickle.load(f)  # torch's own file, written just above
    md.storage_data = {k: _StorageInfo(**dataclasses.asdict(v))
                       for k, v in md.storage_data.items()}
    with open(ck / ".metadata", "wb") as f:
        pickle.dump(md, f)
    assert b"lrd_otherfw.distributed.checkpoint.filesystem" in (ck / ".metadata").read_bytes()

    st = dcp.load(ck)
    assert st.tree["lr_scheduler"]["last_epoch"] == 5 and not st.skipped

    from lrdoctor.read.scan.reading import load_file

    loaded = load_file(ck / ".metadata")
    assert loaded.obj is not None
    note = next(n for n in loaded.notes
                if "lrd_otherfw.distributed.checkpoint.filesystem._StorageInfo" in n)
    assert all(f in note for f in ("relative_path", "offset", "length"))  # held as data


def test_a_fabric_state_holding_a_dataloader_is_read(tmp_path):
    """Lightning Fabric saves a state holding a plain DataLoader: its collate function is a
    global under torch.utils that the pickle only references (refused before as 'a
    code-execution primitive': the torch.utils prefix of the one list was too broad).
    Read now, the reference named in a note; a collate function that is a code-execution
    primitive is still refused."""
    import torch
    from lightning_fabric import Fabric

    fabric = Fabric(accelerator="cpu", devices=1)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=3e-3, total_steps=30)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.zeros(8, 4)),
                                         batch_size=2, shuffle=True)
    model, opt = fabric.setup(model, opt)
    for _ in range(3):
        opt.step()
        sched.step()
    path = tmp_path / "step-000003.ckpt"
    fabric.save(path, {"model": model, "optimizer": opt, "scheduler": sched,
                       "train_loader": loader, "iter_num": 3, "step_count": 3})

    got = safeload.load(path)
    assert got["scheduler"]["last_epoch"] == 3
    dl = got["train_loader"]
    assert dl.cls == "torch.utils.data.dataloader.DataLoader" and dl.state["batch_size"] == 2
    notes = safeload.opaque_notes(got, str(path))
    assert any("torch.utils.data._utils.collate.default_collate kept as names" in n
               and "only referenced" in n for n in notes), notes
    assert any("torch.utils.data.dataloader.DataLoader (fields still read as data: batch_size;"
               in n for n in notes), notes

    from lrdoctor.inspect_api import read_state

    st = read_state(path)  # the whole reader: the OneCycle state is read
    assert st.scheduler_progress is not None

    # A reference is not inert in itself: a loader keeps it and calls it later (iterating
    # this loader would run a command per batch). Only the list decides what is a
    # code-execution primitive; the DataLoader's own helpers are not.
    from lrdoctor.read.bytes.unsafe_globals import CodeExecutionGlobal

    evil = tmp_path / "evil.ckpt"
    torch.save({"train_loader": torch.utils.data.DataLoader(["true"], batch_size=None,
                                                            collate_fn=os.system)}, evil)
    with pytest.raises(CodeExecutionGlobal, match="system"):
        safeload.load(evil)
