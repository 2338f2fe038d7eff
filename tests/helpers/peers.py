"""Load the peers' real packing functions for the randomized comparisons.

verl and OpenRLHF publish their balancing code as plain modules inside packages
whose ``__init__`` pulls in Ray, tensordict, vLLM or DeepSpeed. The comparison
needs only the pure functions, so this loads the installed module *file* (from
``pip install --no-deps verl==0.9.1 openrlhf==0.11.2``) without running the
package ``__init__``; verl's three framework imports (``DataProto``, the
tensordict helpers, the device name) are given inert stand-ins, since the
functions compared never reach them. Nothing is copied into this project.

``LRDOCTOR_PEER_VERL_OLD`` may name an unpacked older verl wheel (< 0.9.1) to
compare the ``verl_ceildiv`` flavor too. SkyRL needs Python 3.12 to install, but
its packer module is plain Python: ``LRDOCTOR_PEER_SKYRL`` may name an unpacked
skyrl wheel (``pip download skyrl==0.4.0 --no-deps --python-version 3.12
--only-binary=:all:`` then unzip), or an installed skyrl is used. The same wheel
gives the whole SkyRL step layout (:func:`skyrl_step`): its dispatch and worker
modules import Ray and torch.distributed at the top, so they are loaded file by file
with inert stand-ins for what the step never reaches.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import threading
import types
from pathlib import Path

PEERS_INSTALL = "pip install --no-deps verl==0.9.1 openrlhf==0.11.2 rlinf==0.3.0"


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def _load_file(path: Path, modname: str, stubs: dict[str, types.ModuleType] | None = None):
    saved = {k: sys.modules.get(k) for k in (stubs or {})}
    sys.modules.update(stubs or {})
    try:
        spec = importlib.util.spec_from_file_location(modname, path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v


def _verl_stubs() -> dict[str, types.ModuleType]:
    root = types.ModuleType("verl")
    root.__path__ = []
    protocol = types.ModuleType("verl.protocol")
    protocol.DataProto = object
    utils = types.ModuleType("verl.utils")
    utils.__path__ = []
    tu = types.ModuleType("verl.utils.tensordict_utils")
    # rearrange_micro_batches slices the batch with this; the comparison wants the indices.
    tu.index_select_tensor_dict = lambda batch, idx: list(idx)
    utils.tensordict_utils = tu
    device = types.ModuleType("verl.utils.device")
    device.get_device_name = lambda: "cpu"
    return {"verl": root, "verl.protocol": protocol, "verl.utils": utils,
            "verl.utils.tensordict_utils": tu, "verl.utils.device": device}


def verl_balancing(root: Path | None = None):
    """verl's ``seqlen_balancing`` module (installed, or from an unpacked wheel at ``root``)."""
    base = root / "verl" if root else _package_dir("verl")
    if base is None or not (base / "utils" / "seqlen_balancing.py").exists():
        return None
    try:
        import torch  # noqa: F401  (verl's module needs it)
    except ImportError:
        return None
    tag = "old" if root else "installed"
    return _load_file(base / "utils" / "seqlen_balancing.py", f"_peer_verl_{tag}_seqlen",
                      _verl_stubs())


def verl_version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("verl")
    except PackageNotFoundError:
        return None


def verl_old_balancing():
    path = os.environ.get("LRDOCTOR_PEER_VERL_OLD")
    return verl_balancing(Path(path)) if path else None


def skyrl_bin_packing():
    """SkyRL's ``skyrl/train/dataset/bin_packing.py`` (stdlib only), or None."""
    path = os.environ.get("LRDOCTOR_PEER_SKYRL")
    base = Path(path) / "skyrl" if path else _package_dir("skyrl")
    if base is None or not (base / "train" / "dataset" / "bin_packing.py").exists():
        return None
    return _load_file(base / "train" / "dataset" / "bin_packing.py", "_peer_skyrl_bin_packing")


class _Inert:
    """Stands for an import a compared function never reaches (a logger, a type hint)."""

    def __getitem__(self, args):  # jaxtyping's Float[torch.Tensor, "b s"] -> torch.Tensor
        return args[0] if isinstance(args, tuple) else args

    def __getattr__(self, name):
        return lambda *a, **k: None


def _skyrl_step_stubs() -> dict[str, types.ModuleType]:
    """Inert stand-ins for what SkyRL's dispatch and worker modules import but the
    step layout never reaches: Ray (``ray.put`` only hands a chunk to the object
    store, so the stand-in returns the chunk itself), the distributed strategy (Ray,
    transformers, loguru; only a type hint in worker_utils), and jaxtyping / loguru
    when they are not installed (type hints and a module-level logger)."""
    ray = types.ModuleType("ray")
    ray.put = lambda obj: obj
    ray.get = lambda refs: refs
    ray.ObjectRef = object
    actor = types.ModuleType("ray.actor")
    actor.ActorHandle = object
    ray.actor = actor
    strategy = types.ModuleType("skyrl.backends.skyrl_train.distributed.strategy")
    strategy.DistributedStrategy = object
    stubs = {"ray": ray, "ray.actor": actor, strategy.__name__: strategy}
    for name, attrs in (("jaxtyping", ("Bool", "Float", "Integer", "Int")),
                        ("loguru", ("logger",))):
        if importlib.util.find_spec(name) is None:
            mod = types.ModuleType(name)
            for a in attrs:
                setattr(mod, a, _Inert())
            stubs[name] = mod
    return stubs


def skyrl_step():
    """SkyRL's whole step layout, from the real module files, or None.

    Returns a namespace with ``compute_prompt_mini_batch_boundaries`` (the
    trainer's mini-batch slices), ``MeshDispatch`` (``stage_chunks``: pad each
    mini-batch to a multiple of dp, chunk it over the ranks), ``TrainingInputBatch``
    and ``pad_training_input_batch``, and the ``worker_utils`` module (its
    ``TokenBasedBatchIterator`` packs a rank's chunk and syncs the count over dp
    through ``worker_utils.dist``). The packages' ``__init__`` files (which pull in
    the Tinker backends and the dataset loader) are not run: each ``skyrl``
    package is an empty module whose ``__path__`` is the wheel's folder, so every
    module imported is the wheel's own file. Needs torch.
    """
    path = os.environ.get("LRDOCTOR_PEER_SKYRL")
    base = Path(path) / "skyrl" if path else _package_dir("skyrl")
    files = ("backends/skyrl_train/distributed/dispatch.py",
             "backends/skyrl_train/workers/worker_utils.py",
             "train/dataset/preprocess.py")
    if base is None or not all((base / f).exists() for f in files):
        return None
    try:
        import torch  # noqa: F401  (SkyRL's batches are torch tensors)
    except ImportError:
        return None
    stubs = _skyrl_step_stubs()
    for pkg in ("", "backends", "backends/skyrl_train", "backends/skyrl_train/distributed",
                "backends/skyrl_train/distributed/megatron", "backends/skyrl_train/utils",
                "backends/skyrl_train/workers", "train", "train/dataset"):
        name = ".".join(["skyrl", *pkg.split("/")]) if pkg else "skyrl"
        mod = types.ModuleType(name)
        mod.__path__ = [str(base / pkg)]
        stubs[name] = mod
    before = {k: v for k, v in sys.modules.items() if k.split(".")[0] in ("skyrl", *stubs)}
    sys.modules.update(stubs)
    try:
        dispatch = importlib.import_module("skyrl.backends.skyrl_train.distributed.dispatch")
        worker_utils = importlib.import_module("skyrl.backends.skyrl_train.workers.worker_utils")
        preprocess = importlib.import_module("skyrl.train.dataset.preprocess")
        tb = importlib.import_module("skyrl.backends.skyrl_train.training_batch")
    finally:  # the loaded modules keep their globals; sys.modules is left as it was
        for k in [k for k in sys.modules if k.split(".")[0] in ("skyrl", *stubs)]:
            del sys.modules[k]
        sys.modules.update(before)
    return types.SimpleNamespace(
        compute_prompt_mini_batch_boundaries=preprocess.compute_prompt_mini_batch_boundaries,
        MeshDispatch=dispatch.MeshDispatch, TrainingInputBatch=tb.TrainingInputBatch,
        pad_training_input_batch=tb.pad_training_input_batch, worker_utils=worker_utils)


def nemo_rl_packing():
    """NeMo-RL's ``nemo_rl/data/packing/algorithms.py`` (stdlib only), or None.

    The ``nemo-rl`` name on PyPI is a placeholder; ``LRDOCTOR_PEER_NEMO_RL`` names a
    source checkout (the directory holding ``nemo_rl/``), or an installed one is used.
    """
    path = os.environ.get("LRDOCTOR_PEER_NEMO_RL")
    base = Path(path) / "nemo_rl" if path else _package_dir("nemo_rl")
    if base is None or not (base / "data" / "packing" / "algorithms.py").exists():
        return None
    return _load_file(base / "data" / "packing" / "algorithms.py", "_peer_nemo_rl_packing")


def openrlhf_balancing():
    base = _package_dir("openrlhf")
    if base is None or not (base / "utils" / "seqlen_balancing.py").exists():
        return None
    return _load_file(base / "utils" / "seqlen_balancing.py", "_peer_openrlhf_seqlen")


class FakeDist:
    """``torch.distributed`` for ranks run as threads: all_reduce meets at a barrier.

    verl's ``rearrange_micro_batches`` syncs the micro-batch count (MAX), the
    constraints and the fit test (MIN) over the dp group; running each rank in a
    thread against this stand-in reproduces those collectives on one CPU.
    """

    def __init__(self, world: int):
        import torch.distributed as real

        self.ReduceOp = real.ReduceOp
        self.world = world
        self.barrier = threading.Barrier(world)
        self.local = threading.local()
        self.slots: list = [None] * world

    def is_initialized(self) -> bool:
        return True

    def all_reduce(self, tensor, op=None, group=None):
        import torch

        r = self.local.rank
        self.slots[r] = tensor.clone()
        self.barrier.wait()
        stacked = torch.stack(self.slots)
        out = stacked.min(0).values if op == self.ReduceOp.MIN else stacked.max(0).values
        self.barrier.wait()
        tensor.copy_(out)

    def run(self, fn, args_per_rank):
        """Run ``fn(*args)`` for every rank in its own thread; results (or errors) in rank order."""
        results: list = [None] * self.world

        def body(rank, args):
            self.local.rank = rank
            try:
                results[rank] = fn(*args)
            except Exception as exc:  # one rank failing: the others see it too
                results[rank] = exc
                self.barrier.abort()

        threads = [threading.Thread(target=body, args=(k, a)) for k, a in enumerate(args_per_rank)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return results


def openrlhf_balance_experiences():
    """OpenRLHF's ``balance_experiences`` (``trainer/ppo_utils/experience.py``), or None.

    The module imports torch and ``openrlhf.utils.utils`` (zero_pad_sequences) at the
    top; the balancing itself only sorts items by ``total_length`` and deals them, so
    ``split_experience_batch``/``make_experience_batch`` are replaced by pass-throughs
    (items in, the rank's list of items out)."""
    base = _package_dir("openrlhf")
    path = base / "trainer" / "ppo_utils" / "experience.py" if base else None
    if path is None or not path.exists():
        return None
    try:
        import torch  # noqa: F401
    except ImportError:
        return None
    utils = types.ModuleType("openrlhf.utils.utils")
    utils.zero_pad_sequences = lambda *a, **k: None
    mod = _load_file(path, "_peer_openrlhf_experience", {"openrlhf.utils.utils": utils})
    mod.split_experience_batch = lambda item: [item]
    mod.make_experience_batch = lambda items, packing_samples=False: items
    return mod.balance_experiences


def areal_seqpack():
    """AReaL 1.0.4's ``areal/utils/seqpack.py`` (``ffd_allocate``), or None: from
    ``LRDOCTOR_PEER_AREAL`` (an unpacked wheel, scripts/fetch_peers.py) or an installed
    areal. Its imports a numba JIT (left commented out on ``_ffd_allocate``) and AReaL's
    logger get inert stand-ins; the compared function uses neither."""
    path = os.environ.get("LRDOCTOR_PEER_AREAL")
    base = Path(path) / "areal" if path else _package_dir("areal")
    if base is None or not (base / "utils" / "seqpack.py").exists():
        return None
    numba = types.ModuleType("numba")
    numba.njit = lambda *a, **k: (a[0] if a and callable(a[0]) else (lambda f: f))
    pkg = types.ModuleType("areal")
    pkg.__path__ = []
    utils = types.ModuleType("areal.utils")
    utils.__path__ = []
    logging = types.ModuleType("areal.utils.logging")
    logging.getLogger = lambda *a, **k: _Inert()
    utils.logging = logging
    stubs = {"numba": numba, "areal": pkg, "areal.utils": utils, "areal.utils.logging": logging}
    return _load_file(base / "utils" / "seqpack.py", "_peer_areal_seqpack", stubs)


def slime_dp_schedule():
    """slime's ``slime/utils/dp_schedule.py`` (``build_dp_schedule``) from the checkout
    ``LRDOCTOR_PEER_SLIME`` names (slime is not on the package index), or None. Its
    ``seqlen_balancing`` is loaded from the same checkout; ``flops_utils`` (used only
    with ``--balance-data``/``balance_by_flops``, not compared) is an inert stand-in."""
    path = os.environ.get("LRDOCTOR_PEER_SLIME")
    base = Path(path) / "slime" / "utils" if path else None
    if base is None or not (base / "dp_schedule.py").exists():
        return None
    pkg = types.ModuleType("slime")
    pkg.__path__ = []
    utils = types.ModuleType("slime.utils")
    utils.__path__ = []
    flops = types.ModuleType("slime.utils.flops_utils")
    flops.calculate_fwd_flops = lambda *a, **k: 0
    stubs = {"slime": pkg, "slime.utils": utils, "slime.utils.flops_utils": flops}
    seqlen = _load_file(base / "seqlen_balancing.py", "slime.utils.seqlen_balancing", stubs)
    stubs["slime.utils.seqlen_balancing"] = seqlen
    return _load_file(base / "dp_schedule.py", "_peer_slime_dp_schedule", stubs)
