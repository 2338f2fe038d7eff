"""Every value a reader fills carries a FieldRef (the file as the reader opened it, the key
path as a tuple, and for a torch.distributed.checkpoint folder the item that holds it), and
following the ref through the file gives the value the reader reported: the same refs a
repair writes through, so nothing re-finds a field by its own tests.

Checked on checkpoints written by each framework's own classes: megatron-core
(Megatron-LM's layout), HF Trainer (torch scheduler + optimizer files), accelerate's
``save_state`` (a SequentialLR whose horizon is its last child's field), ROLL
(megatron-core scheduler in scheduler.pt), DeepSpeed's engine (``save_checkpoint``: its
own WarmupDecayLR with ds_config in the model states, and a client torch scheduler under
ZeRO-2 with the optimizer in the partition file), Lightning's Trainer with ModelCheckpoint,
torchtitan's and NeMo-RL's layouts (written with torch.distributed.checkpoint as those
frameworks save) and a plain torch loop read by content, as a torch.save file and as a DCP
folder (the content reader was not written for any of these layouts in particular).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from lrdoctor.core.fieldref import FieldRef
from lrdoctor.inspect_api import read_state
from lrdoctor.read.bytes import dcp, safeload, safetext
from lrdoctor.read.layouts._common import number
from lrdoctor.read.layouts._refs import counters, refs
from lrdoctor.read.scan.shapes import follow
from tests.helpers.factories import run_deepspeed
from tests.helpers.paths import REPO

SAMPLES = sorted(p for p in (REPO / "sample_checkpoints").iterdir() if p.is_dir())


def _load(ref: FieldRef) -> Any:
    """The object the ref's file holds (for a DCP ref, its one item), read as lrdoctor reads."""
    f = Path(ref.file)
    if ref.item:
        assert f.name == dcp.METADATA, ref
        ds = dcp.load(f.parent, select=lambda fqn: fqn == ref.item)
        return ds.flat[ref.item]
    suffix = f.suffix.lower()
    if suffix == ".json":
        return safetext.json_loads(f.read_text(), str(f))
    if suffix in (".yaml", ".yml"):
        return safetext.read_yaml(f)
    if suffix == ".toml":
        return safetext.toml_loads(f.read_text(), str(f))
    return safeload.load(f, unknown_as_opaque=True)  # as the content read keeps them: inert


def _follow(ref: FieldRef) -> Any:
    return number(follow(_load(ref), ref.key))


def _missing(st) -> list[str]:
    return [what for what, ref in refs(st) if ref is None]


def _check(st) -> int:
    """Every ref the state carries leads to the value reported; the number followed."""
    seen = 0
    for role, c in counters(st):
        if c.ref is not None:
            assert c.ref.file in st.files, (role, c.name, c.ref)
            assert _follow(c.ref) + c.ref_offset == pytest.approx(c.value), (role, c.name, c.ref)
            seen += 1
    assert len(st.optimizer_lr_refs) == len(st.optimizer_lrs)
    for ref, lr in zip(st.optimizer_lr_refs, st.optimizer_lrs, strict=True):
        assert ref.file in st.files, ref
        assert (ref.key or (ref.item,))[-1].endswith("lr") and _follow(ref) == pytest.approx(lr)
        seen += 1
    if st.schedule is not None and "horizon" in st.schedule.refs:
        assert st.schedule.refs["horizon"].file in st.files, st.schedule.refs
        assert isinstance(_follow(st.schedule.refs["horizon"]), (int, float))
        seen += 1
    for p in st.lr_log:  # logged LRs (a CSV's and an event file's: tests/evidence/...logged_lr)
        if p.ref.file.endswith(".json"):
            assert p.ref.file in st.files and _follow(p.ref) == p.lr, p.ref
            seen += 1
    return seen


def test_megatron_refs(megatron_run_dir):
    st = read_state(megatron_run_dir.root)
    assert st.scheduler_progress.ref.key[-1] == "num_steps"
    assert st.schedule.refs["horizon"].key[-1] == "lr_decay_steps"
    assert st.planned_end.ref.key == ("args", "train_iters")
    assert not _missing(st)
    assert _check(st) >= 6


def test_hf_refs(hf_run_dir):
    st = read_state(hf_run_dir.root)
    ck = Path(st.path)
    assert st.scheduler_progress.ref == FieldRef(str(ck / "scheduler.pt"), ("last_epoch",))
    assert st.planned_end.ref == FieldRef(str(ck / "trainer_state.json"), ("max_steps",))
    # num_training_steps = max_steps: the horizon is that field.
    assert st.schedule.refs["horizon"] == st.planned_end.ref
    assert st.counter("optimizer.step").ref.key[:2] == ("state", 0)
    assert not _missing(st)
    assert _check(st) >= 5


def test_roll_refs(roll_run_dir):
    st = read_state(roll_run_dir.root)
    assert st.scheduler_progress.ref.key == ("num_steps",)
    assert _check(st) >= 2


def test_content_read_refs():
    """A torch loop's single checkpoint file: refs name the file and the nested keys."""
    st = read_state(REPO / "sample_checkpoints" / "torch-microstep")
    assert st.scheduler_progress.ref.key == ("scheduler", "last_epoch")
    assert st.schedule.refs["horizon"].key == ("scheduler", "T_max")
    assert st.optimizer_lr_refs[0].key == ("optimizer", "param_groups", 0, "lr")
    assert not _missing(st)
    assert _check(st) >= 5


@pytest.mark.parametrize("layout", ["skyrl", "composer"])
def test_content_claimed_layout_refs(layout, tmp_path):
    """Layouts recognised on the content read (SkyRL's trainer_state.pt, Composer's
    timestamp): the counters their normalisation adds name their fields too."""
    from tests.formats.test_formats_layouts import composer_ckpt, skyrl_run

    path = (skyrl_run(tmp_path / "s", step=5, updates_per_step=4) if layout == "skyrl"
            else composer_ckpt(tmp_path / "c", batches=50, k=1))
    st = read_state(path)
    assert st.format == layout
    added = st.counter("skyrl.global_step" if layout == "skyrl" else "composer.timestamp.batch")
    assert added.ref is not None and added.ref.key[-1] in ("global_step", "batch")
    assert not _missing(st)
    assert _check(st) >= 3


# ---------------------------------------------------------------- DCP: the item of each field

def _dcp_loop(root: Path) -> Path:
    """A torch loop's state saved with torch.distributed.checkpoint: every leaf is an item."""
    from tests.formats.test_formats_dcp import _loop_state, _save

    model, opt, sched = _loop_state()
    ckpt = root / "ckpt"
    _save({"model": model.state_dict(), "optimizer": opt.state_dict(),
           "lr_scheduler": sched.state_dict(), "train_state": {"step": 6, "epoch": 1}}, ckpt)
    return ckpt


def test_dcp_content_read_refs_name_the_item(tmp_path):
    """The content reader (written for torch.save dicts) on a DCP folder: each ref is
    ``.metadata`` + the item's fqn, and following it through the item gives the value."""
    ckpt = _dcp_loop(tmp_path)
    st = read_state(ckpt)
    meta = str(ckpt / dcp.METADATA)
    assert st.scheduler_progress.ref == FieldRef(meta, (), "lr_scheduler.last_epoch")
    assert st.schedule.refs["horizon"] == FieldRef(meta, (), "lr_scheduler.total_iters")
    assert st.optimizer_lr_refs == [FieldRef(meta, (), "optimizer.param_groups.0.lr")]
    step = st.counter("optimizer.step").ref
    assert step.file == meta and step.item.startswith("optimizer.state.") and step.key == ()
    assert st.counter("loop.step").ref == FieldRef(meta, (), "train_state.step")
    assert not _missing(st)
    assert _check(st) >= 6


def test_dcp_item_holding_a_list():
    """An item whose value is itself a container (torch saves a list of numbers as one
    bytes item): the ref's key walks inside the item."""
    from lrdoctor.read.bytes.dcp import DcpState

    ds = DcpState(path=Path("/x"), flat={}, tree={},
                  paths={"lr_scheduler.base_lrs": ("lr_scheduler", "base_lrs"),
                         "optimizer.param_groups.0.lr": ("optimizer", "param_groups", 0, "lr")})
    assert ds.ref(("lr_scheduler", "base_lrs", 0)) == FieldRef("/x/.metadata", (0,),
                                                               "lr_scheduler.base_lrs")
    assert ds.ref(("optimizer", "param_groups", 0, "lr")).item == "optimizer.param_groups.0.lr"
    assert ds.ref(("model", "weight")) is None


def _torchtitan(root: Path) -> Path:
    from tests.formats.test_formats_dcp_layouts import torchtitan_run

    ckpt = torchtitan_run(root, steps_done=10, sched_per_step=1)
    # The job config torchtitan runs from (--job.config_file), kept beside the dump folder.
    (root / "llama3_debug.toml").write_text(textwrap.dedent("""
        [optimizer]
        lr = 0.001
        [lr_scheduler]
        warmup_steps = 2
        [training]
        steps = 100
    """))
    return ckpt


def test_torchtitan_refs(tmp_path):
    ckpt = _torchtitan(tmp_path / "run")
    st = read_state(tmp_path / "run")
    assert st.format == "torchtitan"
    meta = str(ckpt / dcp.METADATA)
    assert st.scheduler_progress.ref == FieldRef(meta, (), "lr_scheduler.last_epoch")
    assert st.trainer_progress.ref == FieldRef(meta, (), "train_state.step")
    assert st.counter("optimizer.step").ref.item.startswith("optimizer.state.")
    assert st.optimizer_lr_refs[0].item.startswith("optimizer.param_groups.")
    # The schedule rebuilt from the job config: its horizon and budget are the TOML's field.
    toml = str(tmp_path / "run" / "llama3_debug.toml")
    assert st.schedule.refs["horizon"] == FieldRef(toml, ("training", "steps"))
    assert st.planned_end.ref == FieldRef(toml, ("training", "steps"))
    assert not _missing(st)
    assert _check(st) >= 6


def test_nemo_rl_refs(tmp_path):
    from tests.formats.test_formats_dcp_layouts import nemo_rl_run

    ckpt = nemo_rl_run(tmp_path / "results", grpo_steps=4, sched_per_step=1)
    st = read_state(tmp_path / "results")
    assert st.format == "nemo_rl"
    meta = str(ckpt / "policy" / "optimizer" / dcp.METADATA)
    assert st.scheduler_progress.ref == FieldRef(meta, (), "optim.sched.last_epoch")
    # SequentialLR's horizon: the milestone plus its last child's total_iters.
    assert st.schedule.refs["horizon"] == FieldRef(meta, (), "optim.sched._schedulers.1.total_iters")
    assert st.trainer_progress.ref == FieldRef(str(ckpt / "training_info.json"), ("total_steps",))
    assert not _missing(st)
    assert _check(st) >= 8


# ---------------------------------------------------------------- DeepSpeed's engine

DS_GEN = textwrap.dedent("""
    import sys, torch, deepspeed
    from pathlib import Path
    out = Path(sys.argv[1])
    torch.manual_seed(0)

    def run(name, cfg, steps, client=False):
        m = torch.nn.Linear(4, 2)
        kw = {}
        if client:
            opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
            kw = dict(optimizer=opt, lr_scheduler=torch.optim.lr_scheduler.CosineAnnealingLR(
                opt, T_max=40))
        eng, _, _, _ = deepspeed.initialize(model=m, model_parameters=m.parameters(),
                                            config=cfg, **kw)
        for _ in range(steps * cfg.get("gradient_accumulation_steps", 1)):
            eng.backward(eng(torch.randn(2, 4)).pow(2).mean())
            eng.step()
        eng.save_checkpoint(str(out / name))

    run("decay", {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 2,
                  "gradient_accumulation_steps": 2,
                  "optimizer": {"type": "AdamW", "params": {"lr": 1e-3, "torch_adam": True}},
                  "scheduler": {"type": "WarmupDecayLR", "params": {
                      "warmup_min_lr": 0, "warmup_max_lr": 1e-3, "warmup_num_steps": 3,
                      "total_num_steps": 20}}}, steps=5)
    run("client", {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
                   "zero_optimization": {"stage": 2}, "zero_allow_untested_optimizer": True},
        steps=4, client=True)
""")


@pytest.fixture(scope="module")
def deepspeed_saved(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("ds-refs")
    run_deepspeed(out, DS_GEN, str(out))
    return out


@pytest.mark.frameworks
def test_deepspeed_own_scheduler_refs(deepspeed_saved):
    """WarmupDecayLR: progress is last_batch_iteration + 1 (the ref names the field and the
    offset), the horizon and budget are ds_config's total_num_steps inside the model states."""
    st = read_state(deepspeed_saved / "decay")
    main = str(Path(st.path) / "mp_rank_00_model_states.pt")
    assert st.scheduler_progress.ref == FieldRef(main, ("lr_scheduler", "last_batch_iteration"))
    assert st.scheduler_progress.ref_offset == 1 and st.scheduler_progress.value == 5
    horizon = FieldRef(main, ("ds_config", "scheduler", "params", "total_num_steps"))
    assert st.schedule.refs["horizon"] == horizon == st.planned_end.ref
    assert st.counter("deepspeed.global_steps").ref == FieldRef(main, ("global_steps",))
    assert st.trainer_progress.ref == FieldRef(main, ("global_steps",))
    assert st.optimizer_lr_refs[0].file == main and st.optimizer_lr_refs[0].key[0] == "optimizer"
    assert not _missing(st)
    assert _check(st) >= 8


@pytest.mark.frameworks
def test_deepspeed_client_scheduler_under_zero_refs(deepspeed_saved):
    """A client torch scheduler (ZeRO-2): the scheduler's fields in the model states, the
    optimizer's LRs and step in the ZeRO partition file."""
    st = read_state(deepspeed_saved / "client")
    main = str(Path(st.path) / "mp_rank_00_model_states.pt")
    assert st.scheduler_progress.ref == FieldRef(main, ("lr_scheduler", "last_epoch"))
    assert st.schedule.refs["horizon"] == FieldRef(main, ("lr_scheduler", "T_max"))
    assert st.optimizer_lr_refs and all("optim_states" in Path(r.file).name
                                        for r in st.optimizer_lr_refs)
    assert not _missing(st)
    assert _check(st) >= 6


# ---------------------------------------------------------------- Lightning's Trainer

PL_GEN = textwrap.dedent("""
    import sys, warnings, torch, pytorch_lightning as pl
    from pathlib import Path
    from pytorch_lightning.callbacks import ModelCheckpoint
    from torch.utils.data import DataLoader, TensorDataset
    warnings.filterwarnings("ignore")
    out = Path(sys.argv[1])
    torch.manual_seed(0)

    class M(pl.LightningModule):
        def __init__(self, max_steps=40):
            super().__init__()
            self.save_hyperparameters()
            self.l = torch.nn.Linear(4, 1)

        def training_step(self, batch, i):
            return self.l(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            o = torch.optim.AdamW(self.parameters(), lr=1e-3)
            s = torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=self.hparams.max_steps)
            return {"optimizer": o, "lr_scheduler": {"scheduler": s, "interval": "step"}}

    dl = DataLoader(TensorDataset(torch.randn(20, 4)), batch_size=2)  # 10 batches/epoch
    ck = ModelCheckpoint(dirpath=out / "checkpoints", every_n_train_steps=4, save_top_k=-1,
                         filename="{epoch}-{step}")
    t = pl.Trainer(logger=False, callbacks=[ck], enable_progress_bar=False,
                   enable_model_summary=False, accelerator="cpu", max_steps=12,
                   accumulate_grad_batches=2)
    t.fit(M(), dl)
""")


@pytest.fixture(scope="module")
def lightning_saved(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pl-refs")
    (out / "gen.py").write_text(PL_GEN)
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", PL_DISABLE_FORK="1")
    r = subprocess.run([sys.executable, str(out / "gen.py"), str(out)], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return out


@pytest.mark.frameworks
def test_lightning_refs(lightning_saved):
    st = read_state(lightning_saved)
    ck = st.path
    assert Path(ck).name.endswith("step=12.ckpt")
    assert st.scheduler_progress.ref == FieldRef(ck, ("lr_schedulers", 0, "last_epoch"))
    assert st.schedule.refs["horizon"] == FieldRef(ck, ("lr_schedulers", 0, "T_max"))
    assert st.planned_end.ref == FieldRef(ck, ("hyper_parameters", "max_steps"))
    assert st.counter("lightning.batches").ref == FieldRef(
        ck, ("loops", "fit_loop", "epoch_loop.batch_progress", "total", "completed"))
    assert st.counter("trainer.global_step").ref == FieldRef(ck, ("global_step",))
    assert st.counter("trainer.global_step").value == 12
    assert st.optimizer_lr_refs == [FieldRef(ck, ("optimizer_states", 0, "param_groups", 0,
                                                  "lr"))]
    assert not _missing(st)
    assert _check(st) >= 10


# ---------------------------------------------------------------- accelerate's save_state

@pytest.fixture(scope="module")
def accelerate_saved(tmp_path_factory) -> Path:
    """``Accelerator.save_state`` folders written by the real Accelerator (the generator of
    tests/formats/test_formats_accelerate.py): a cosine and a SequentialLR run."""
    from tests.formats.test_formats_accelerate import GEN

    out = tmp_path_factory.mktemp("acc-refs")
    (out / "gen.py").write_text(GEN)
    subprocess.run([sys.executable, str(out / "gen.py"), str(out), "cosine,sequential"],
                   check=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""),
                   capture_output=True, timeout=300)
    return out


@pytest.mark.frameworks
def test_accelerate_refs(accelerate_saved):
    st = read_state(accelerate_saved / "sequential")
    ck = Path(st.path)
    assert st.scheduler_progress.ref == FieldRef(str(ck / "scheduler.bin"), ("last_epoch",))
    # SequentialLR([LinearLR, CosineAnnealingLR(T_max=17)], milestones=[3]): the cosine's T_max.
    assert st.schedule.refs["horizon"] == FieldRef(str(ck / "scheduler.bin"),
                                                   ("_schedulers", 1, "T_max"))
    assert st.counter("accelerate.step").ref == FieldRef(str(ck / "random_states_0.pkl"),
                                                         ("step",))
    assert st.counter("optimizer.step").ref.file == str(ck / "optimizer.bin")
    assert not _missing(st)
    assert _check(st) >= 5


# ---------------------------------------------------------------- the rule, everywhere

@pytest.mark.parametrize("sample", SAMPLES, ids=[p.name for p in SAMPLES])
def test_no_sample_value_without_a_ref(sample):
    """Every counter, horizon and LR any reader reports on the shipped samples names its
    field, and the field gives the value: a reader that drops a ref fails here."""
    st = read_state(sample)
    assert not _missing(st), (st.format, _missing(st))
    assert _check(st) >= 3


@pytest.mark.frameworks
def test_no_fixture_value_without_a_ref(tmp_path, hf_run_dir, megatron_run_dir, roll_run_dir,
                                        deepspeed_saved, lightning_saved, accelerate_saved):
    """The same rule over every framework fixture written here, each read at every
    checkpoint it kept (not just the newest)."""
    from tests.formats.test_formats_dcp_layouts import nemo_rl_run

    paths = [*hf_run_dir.root.glob("checkpoint-*"), megatron_run_dir.root,
             roll_run_dir.root, deepspeed_saved / "decay", deepspeed_saved / "client",
             *sorted((lightning_saved / "checkpoints").glob("*.ckpt")),
             accelerate_saved / "cosine", accelerate_saved / "sequential",
             _dcp_loop(tmp_path / "loop"), _torchtitan(tmp_path / "titan"),
             nemo_rl_run(tmp_path / "nemo", grpo_steps=3, sched_per_step=1)]
    gaps = {}
    for p in paths:
        st = read_state(p)
        if _missing(st):
            gaps[f"{st.format} {p.name}"] = _missing(st)
        _check(st)
    assert not gaps
    assert len(paths) >= 13


def test_refs_lists_a_gap():
    """The rule's own check can fail: a counter without a ref is listed by name."""
    from lrdoctor.core.state import Counter, RunState, Unit

    st = RunState(format="x", path="p", counters=[Counter("c", 1, Unit.UPDATES)],
                  optimizer_lrs=[1e-3])
    assert _missing(st) == ["counter c", "optimizer LR [0]"]

