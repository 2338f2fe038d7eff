"""A corpus of hostile and malformed files, built from raw pickle opcodes (test helper).

Each builder returns bytes; :func:`corpus` writes every payload in the layouts a
reader meets (a plain pickle, the ``data.pkl`` of a torch zip) and returns
``{name: path}``. The payload kinds are the issue's harness categories: billion
laughs, dict/list amplification, hash bombs, deep nesting, huge integers,
REDUCE of code-running globals, GLOBALs under deepspeed/transformers, BUILD
poisoning of shared stand-ins, zip bombs and bogus declared sizes, truncation.
Also used by ``benchmarks/fuzz_hostile.py``.
"""

from __future__ import annotations

import io
import struct
import zipfile
from collections.abc import Callable
from pathlib import Path

PROTO = b"\x80\x02"
STOP = b"."


def _str(s: str) -> bytes:
    data = s.encode()
    return b"X" + struct.pack("<I", len(data)) + data


def _put(i: int) -> bytes:
    return b"r" + struct.pack("<I", i)


def _get(i: int) -> bytes:
    return b"j" + struct.pack("<I", i)


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def billion_laughs(levels: int = 30, fan: int = 10) -> bytes:
    """lol_i = [lol_{i-1}] * fan: a few KB that a naive walk expands to fan**levels values."""
    out = PROTO + _str("lol" * 30) + _put(0)
    for i in range(1, levels + 1):
        out += b"](" + _get(i - 1) * fan + b"e" + _put(i)
    return out + b"\x85" + STOP  # the last one inside a tuple


def nested_dict_laughs(levels: int = 40) -> bytes:
    """Billion laughs through dict values, as a checkpoint's 'optimizer' entry."""
    out = PROTO + b"}" + _put(0)
    for i in range(1, levels + 1):
        out += b"}(" + _str("a") + _get(i - 1) + _str("b") + _get(i - 1) + b"u" + _put(i)
    return out + b"}" + _str("optimizer") + _get(levels) + b"s" + STOP


def list_amplification(size: int = 200_000, copies: int = 100_000) -> bytes:
    """list(L) of one memoized big list, again and again: copies x size elements."""
    out = PROTO + b"](" + b"N" * size + b"e" + _put(0)
    out += (_global("builtins", "list") + _get(0) + b"\x85R0") * copies
    return out + b"N" + STOP


def dict_amplification(size: int = 100_000, copies: int = 50_000) -> bytes:
    """OrderedDict(D) of one memoized big dict, again and again."""
    out = PROTO + b"}("
    for i in range(size):
        out += b"J" + struct.pack("<i", i) + b"N"
    out += b"u" + _put(0)
    out += (_global("collections", "OrderedDict") + _get(0) + b"\x85R0") * copies
    return out + b"N" + STOP


def hash_bomb(levels: int = 60) -> bytes:
    """A dict key built as t_i = (t_{i-1}, t_{i-1}): hashing it visits 2**levels tuples."""
    out = PROTO + _str("x") + b"\x85" + _put(0)
    for i in range(1, levels + 1):
        out += _get(i - 1) + _get(i - 1) + b"\x86" + _put(i)
    return out + b"}" + _get(levels) + b"Ns" + STOP


def int_collisions(n: int = 60_000) -> bytes:
    """Dict keys k * (2**61 - 1): every one hashes to 0 (a quadratic insert flood)."""
    p = (1 << 61) - 1
    out = PROTO + b"}("
    for k in range(1, n + 1):
        v = (k * p).to_bytes(12, "little", signed=True)
        out += b"\x8a\x0c" + v + b"N"
    return out + b"u" + STOP


def deep_marks(depth: int = 200_000) -> bytes:
    return PROTO + b"(" * depth + b"l" * depth + STOP


def deep_tuples(depth: int = 1_000_000) -> bytes:
    """((((None,),),),): nesting without a single MARK."""
    return PROTO + b"N" + b"\x85" * depth + STOP


def deep_lists_memo(depth: int = 100_000) -> bytes:
    """l_i appended into l_{i-1} through the memo, no MARK: a chain of depth ``depth``."""
    out = PROTO + b"]" + _put(0)
    for i in range(1, depth + 1):
        out += _get(i - 1) + b"]" + _put(i) + b"a0"
    return out + _get(0) + STOP


def huge_long4(nbytes: int = 10 << 20) -> bytes:
    return PROTO + b"\x8b" + struct.pack("<i", nbytes) + b"\x7f" * nbytes + STOP


def huge_long_text(digits: int = 1_000_000) -> bytes:
    return PROTO + b"L" + b"9" * digits + b"L\n" + STOP


def huge_int_call() -> bytes:
    return PROTO + _global("builtins", "int") + _str("9" * 4000) + b"\x85R" + STOP


def bytearray_bomb() -> bytes:
    """Protocol 5 BYTEARRAY8 declaring 2**40 bytes."""
    return b"\x80\x05" + b"\x96" + struct.pack("<Q", 1 << 40) + STOP


def frame_bomb() -> bytes:
    return b"\x80\x04" + b"\x95" + struct.pack("<Q", 1 << 40) + b"N" + STOP


def reduce_call(module: str, name: str, arg: str) -> bytes:
    return PROTO + _global(module, name) + _str(arg) + b"\x85R" + STOP


def newobj_of(module: str, name: str) -> bytes:
    return PROTO + _global(module, name) + b")\x81" + STOP


def build_on_global(module: str, name: str, key: str, value: bytes) -> bytes:
    """GLOBAL then BUILD with {key: value}: would set an attribute of a shared object."""
    return PROTO + _global(module, name) + b"}" + _str(key) + value + b"sb" + STOP


def build_slots_on_global(module: str, name: str, key: str, value: bytes) -> bytes:
    """BUILD with (None, {key: value}): the slot-state path, setattr on the global."""
    return (PROTO + _global(module, name) + b"N}" + _str(key) + value + b"s\x86b" + STOP)


def code_payloads(marker: Path) -> dict[str, bytes]:
    cmd = f"touch {marker}"
    return {
        "reduce_os_system": reduce_call("os", "system", cmd),
        "reduce_posix_system": reduce_call("posix", "system", cmd),
        "reduce_eval": reduce_call("builtins", "eval", f"__import__('os').system({cmd!r})"),
        "reduce_exec": reduce_call("builtins", "exec", f"import os; os.system({cmd!r})"),
        "reduce_getattr": PROTO + _global("builtins", "getattr") + _global("builtins", "set")
        + _str("__init__") + b"\x86R" + STOP,
        "reduce_import_module": reduce_call("importlib", "import_module", "os"),
        "reduce_subprocess": reduce_call("subprocess", "getoutput", cmd),
        "global_deepspeed_op": newobj_of("deepspeed.ops.adam.cpu_adam", "DeepSpeedCPUAdam"),
        "global_deepspeed_builder": reduce_call("deepspeed.ops.op_builder", "CPUAdamBuilder", "x"),
        "global_transformers": newobj_of("transformers.trainer", "Trainer"),
        "global_megatron_fn": reduce_call("megatron.core.utils", "is_torch_min_version", "1"),
    }


def _laughs_list(levels: int, fan: int) -> bytes:
    """Pushes lol_levels (memo slot ``levels``), lol_i = [lol_{i-1}] * fan: fan**levels leaves."""
    out = _str("lol") + _put(0)
    for i in range(1, levels + 1):
        out += b"](" + _get(i - 1) * fan + b"e" + _put(i)
    return out


def call_on_laughs(module: str, name: str, levels: int = 10, fan: int = 10) -> bytes:
    """An allow-listed callable applied to a 10**10-element list built by references (issue
    23: ``builtins.str`` of it ran for hours, though every copy charged was 10 long)."""
    return PROTO + _laughs_list(levels, fan) + _global(module, name) + _get(levels) \
        + b"\x85R" + STOP


def newobj_on_laughs(module: str = "builtins", name: str = "str") -> bytes:
    """``str.__new__(str, lol)`` through NEWOBJ: the same cost by another opcode."""
    return PROTO + _laughs_list(10, 10) + _global(module, name) + _get(10) + b"\x85\x81" + STOP


def text_laughs(levels: int = 8) -> bytes:
    """A 64 KiB string referenced 10**levels times: str() of it would print 64 KiB x 10**8."""
    out = PROTO + _str("x" * (64 << 10)) + _put(0)
    for i in range(1, levels + 1):
        out += b"](" + _get(i - 1) * 10 + b"e" + _put(i)
    return out + _global("builtins", "str") + _get(levels) + b"\x85R" + STOP


def rebuild_on_laughs() -> bytes:
    """A tensor rebuild whose size argument is the laughs list."""
    return (PROTO + _laughs_list(10, 10) + _global("torch._utils", "_rebuild_tensor_v2")
            + b"(N" + b"K\x00" + _get(10) + b")" + b"\x89" + _global("collections", "OrderedDict")
            + b")R" + b"tR" + STOP)


def key_by_references(levels: int = 40) -> bytes:
    """A set key made by ``builtins.tuple`` of a tuple built by references: hashing it
    would visit 2**levels tuples."""
    out = PROTO + _str("x") + b"\x85" + _put(0)
    for i in range(1, levels + 1):
        out += _get(i - 1) + _get(i - 1) + b"\x86" + _put(i)
    return (out + _global("builtins", "set") + b"]" + _global("builtins", "tuple") + _get(levels)
            + b"\x85R" + b"a\x85R" + STOP)


def laughs_payloads() -> dict[str, bytes]:
    """Issue 23: bounded work for every allow-listed callable (the arguments' expansion)."""
    return {
        "str_laughs": call_on_laughs("builtins", "str"),
        "newobj_str_laughs": newobj_on_laughs(),
        "text_laughs": text_laughs(),
        "tuple_laughs": call_on_laughs("builtins", "tuple"),
        "list_laughs": call_on_laughs("builtins", "list"),
        "set_laughs": call_on_laughs("builtins", "set"),
        "dict_laughs": call_on_laughs("builtins", "dict"),
        "bytes_laughs": call_on_laughs("builtins", "bytes"),
        "int_laughs": call_on_laughs("builtins", "int"),
        "float_laughs": call_on_laughs("builtins", "float"),
        "ordereddict_laughs": call_on_laughs("collections", "OrderedDict"),
        "rebuild_laughs": rebuild_on_laughs(),
        "key_by_references": key_by_references(),
    }


#: One payload per entry of the issue's list of code-execution primitives: (module, name).
CODE_EXEC_GLOBALS = [
    ("torch.storage", "_load_from_bytes"), ("torch", "load"), ("pickle", "loads"),
    ("marshal", "loads"), ("builtins", "eval"), ("builtins", "exec"), ("builtins", "compile"),
    ("builtins", "getattr"), ("importlib", "import_module"), ("os", "system"),
    ("posix", "system"), ("subprocess", "Popen"), ("runpy", "run_path"), ("code", "interact"),
    ("pty", "spawn"), ("webbrowser", "open"), ("builtins", "__import__"),
]


def code_exec_payloads(marker: Path) -> dict[str, bytes]:
    """REDUCE of each code-execution primitive with a command that would create ``marker``."""
    return {f"exec_{m.replace('.', '_')}_{n}": reduce_call(m, n, f"touch {marker}")
            for m, n in CODE_EXEC_GLOBALS}


def poison_payloads() -> dict[str, bytes]:
    """BUILDs that, if obeyed, change how every later file is read."""
    return {
        "poison_storage_dtype": build_on_global("torch", "FloatStorage", "dtype", _str("int64")),
        "poison_rebuild_defaults": build_slots_on_global(
            "torch._utils", "_rebuild_tensor_v2", "__defaults__", b"N\x85"),
        "poison_namespace_class": build_slots_on_global("argparse", "Namespace", "lr", b"K\x07"),
        "poison_record_name": build_slots_on_global(
            "transformers.training_args", "TrainingArguments", "_lrd_name", _str("x")),
        "poison_dtype_string": build_on_global("torch", "float32", "x", b"N"),
    }


def resource_payloads() -> dict[str, bytes]:
    return {
        "billion_laughs": billion_laughs(),
        "nested_dict_laughs": nested_dict_laughs(),
        "list_amplification": list_amplification(),
        "dict_amplification": dict_amplification(),
        "hash_bomb": hash_bomb(),
        "int_collisions": int_collisions(),
        "deep_marks": deep_marks(),
        "deep_tuples": deep_tuples(),
        "deep_lists_memo": deep_lists_memo(),
        "huge_long4": huge_long4(),
        "huge_long_text": huge_long_text(),
        "huge_int_call": huge_int_call(),
        "bytearray_bomb": bytearray_bomb(),
        "frame_bomb": frame_bomb(),
    }


# ------------------------------------------------------------------ layouts

def torch_zip(data_pkl: bytes, *, storages: dict[str, bytes] | None = None,
              compress: int = zipfile.ZIP_STORED, top: str = "archive") -> bytes:
    """A torch-zip-shaped archive around ``data_pkl``."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compress) as zf:
        zf.writestr(f"{top}/data.pkl", data_pkl)
        zf.writestr(f"{top}/byteorder", "little")
        for key, raw in (storages or {}).items():
            zf.writestr(f"{top}/data/{key}", raw)
        zf.writestr(f"{top}/version", "3\n")
    return buf.getvalue()


def deflate_bomb(size: int = 160 << 20) -> bytes:
    """data.pkl of ``size`` zero bytes, deflated to a few hundred KB."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        with zf.open("archive/data.pkl", "w", force_zip64=True) as m:
            chunk = b"\0" * (1 << 20)
            for _ in range(size >> 20):
                m.write(chunk)
    return buf.getvalue()


def lying_sizes(real: bytes, declared: int = 1 << 40) -> bytes:
    """A real torch zip whose central directory declares data.pkl ``declared`` bytes long."""
    data = bytearray(real)
    pos = 0
    while (pos := data.find(b"PK\x01\x02", pos)) >= 0:
        name_len = struct.unpack_from("<H", data, pos + 28)[0]
        name = bytes(data[pos + 46:pos + 46 + name_len])
        if name.endswith(b"data.pkl"):
            struct.pack_into("<I", data, pos + 24, min(declared, 0xFFFFFFFE))
        pos += 4
    return bytes(data)


def truncations(real: bytes) -> dict[str, bytes]:
    n = len(real)
    return {f"truncated_{frac}": real[: max(1, n * frac // 100)] for frac in (1, 10, 50, 90, 99)}


def corpus(root: Path, marker: Path, real_ckpt: bytes | None = None,
           kinds: Callable[[str], bool] = lambda name: True) -> dict[str, Path]:
    """Every payload, as a plain pickle and as the data.pkl of a torch zip: {name: path}."""
    root.mkdir(parents=True, exist_ok=True)
    payloads = {**code_payloads(marker), **poison_payloads(), **resource_payloads(),
                **laughs_payloads(), **code_exec_payloads(marker)}
    out: dict[str, Path] = {}
    for name, blob in payloads.items():
        if not kinds(name):
            continue
        for layout, data in (("pkl", blob), ("pt", torch_zip(blob))):
            p = root / f"{name}.{layout}"
            p.write_bytes(data)
            out[p.name] = p
    extra = {"deflate_bomb.pt": deflate_bomb()}
    if real_ckpt is not None:
        extra["lying_sizes.pt"] = lying_sizes(real_ckpt)
        extra.update({f"{k}.pt": v for k, v in truncations(real_ckpt).items()})
    for name, data in extra.items():
        if kinds(name):
            p = root / name
            p.write_bytes(data)
            out[name] = p
    return out


# ------------------------------------------------------------------ checkpoint layouts

def in_layout(layout: str, root: Path, name: str, data_pkl: bytes) -> tuple[Path, Path]:
    """``data_pkl`` as a torch zip placed where a reader meets it: (the path to give a command,
    the hostile file). ``bare``: one .pt file; ``hf``: a Trainer checkpoint folder's
    ``scheduler.pt`` (the sample ``hf-healthy`` run); ``hf-copied``: the same run's
    ``rng_state.pth`` (a file ``fix`` copies, issue 31); ``megatron``: a rank file
    ``model_optim_rng.pt`` of the sample ``megatron-healthy`` run."""
    import shutil

    from tests.helpers.paths import REPO

    blob = torch_zip(data_pkl)
    samples = REPO / "sample_checkpoints"
    if layout == "bare":
        root.mkdir(parents=True, exist_ok=True)
        f = root / f"{name}.pt"
        f.write_bytes(blob)
        return f, f
    if layout == "hf":
        run = root / f"hf-{name}"
        shutil.copytree(samples / "hf-healthy", run)
        f = run / "checkpoint-20" / "scheduler.pt"
        f.write_bytes(blob)
        return run / "checkpoint-20", f
    if layout == "hf-copied":  # issue 31: a file fix copies into its output, never rewrites
        run = root / f"hfc-{name}"
        shutil.copytree(samples / "hf-healthy", run)
        f = run / "checkpoint-20" / "rng_state.pth"
        f.write_bytes(blob)
        return run / "checkpoint-20", f
    if layout == "megatron":
        run = root / f"megatron-{name}"
        shutil.copytree(samples / "megatron-healthy", run)
        f = run / "iter_0000400" / "mp_rank_00" / "model_optim_rng.pt"
        f.write_bytes(blob)
        return run, f
    raise ValueError(layout)


LAYOUTS = ("bare", "hf", "megatron")


# ------------------------------------------------------------------ issue 23 crash sites

def bad_crc(real: bytes) -> bytes:
    """A real torch zip whose largest tensor record fails its CRC-32 (one byte flipped)."""
    data = bytearray(real)
    with zipfile.ZipFile(io.BytesIO(real)) as zf:
        info = max((i for i in zf.infolist() if "/data/" in i.filename),
                   key=lambda i: i.file_size)
    n, e = struct.unpack_from("<HH", data, info.header_offset + 26)
    data[info.header_offset + 30 + n + e + info.file_size // 2] ^= 0xFF
    return bytes(data)


def _yaml_edit(src: Path, edits: dict[str, object]) -> str:
    import yaml

    doc = yaml.safe_load(src.read_text())
    for dotted, value in edits.items():
        d = doc
        *head, last = dotted.split(".")
        for k in head:
            d = d[int(k)] if isinstance(d, list) else d[k]
        if isinstance(d, list):
            d[int(last)] = value
        else:
            d[last] = value
    return yaml.safe_dump(doc)


def crash_reproducers(root: Path) -> dict[str, tuple[list[str], Path]]:
    """The inputs behind issue 23's crash sites, each as (argv after ``lrdoctor``, the input
    the one stderr line must name). Written from the samples and examples of this repo."""

    from tests.helpers.paths import REPO

    root.mkdir(parents=True, exist_ok=True)
    samples, examples = REPO / "sample_checkpoints", REPO / "examples"
    out: dict[str, tuple[list[str], Path]] = {}
    crc = root / "bad_crc.pt"  # repair/torchzip.py _copy: BadZipFile
    crc.write_bytes(bad_crc((samples / "torch-microstep" / "checkpoint_60.pt").read_bytes()))
    out["bad_crc_fix"] = (["fix", str(crc), "--out", str(root / "bad_crc-fixed.pt"),
                           "--policy", "rescale", "--k", "4"], crc)
    nemo = examples / "nemo-rl-grpo-math.yaml"  # nemo_rl.py _torch_schedule: TypeError
    for name, edit in {"nemo_milestones_int": {"policy.scheduler.2.milestones": 50},
                       "nemo_kwargs_int": {"policy.scheduler.0.kwargs": 7},
                       # interpolate.py ${mul:...} of .inf: OverflowError (found by the harness)
                       "nemo_inf_product": {"policy.max_total_sequence_length": float("inf")},
                       # torch_builtin._advance int(inf): OverflowError (found by the harness)
                       "nemo_inf_total_iters": {"policy.scheduler.0.kwargs.total_iters":
                                                float("inf")},
                       # world % model_par with a context-parallel size of 0: ZeroDivision
                       "nemo_cp_zero": {"policy.dtensor_cfg.context_parallel_size": 0},
                       }.items():
        p = root / f"{name}.yaml"
        p.write_text(_yaml_edit(nemo, edit))
        out[name] = (["replay", "--config", str(p), "--fast"], p)
    for name, (src, edit) in {  # found by the fuzz harness: numbers past what any run uses
            "verl_max_tokens_2_63": ("verl-dynamic-bsz.yaml",  # kk_plan int64: OverflowError
                                     {"batching.max_tokens_per_microbatch": 2**63}),
            "rlinf_increment_inf": ("rlinf-elastic.yaml",  # hf.factor: math domain error
                                    {"scheduler.increment": float("inf")}),
            "roll_ga_zero": ("roll-sokoban-dynamic.yaml",  # horizon // (mbs * ga): ZeroDivision
                             {"actor_train.training_args.gradient_accumulation_steps": 0}),
    }.items():
        p = root / f"{name}.yaml"
        p.write_text(_yaml_edit(examples / src, edit).replace(
            "batchlogs/", f"{examples}/batchlogs/"))
        out[name] = (["replay", "--config", str(p), "--fast"], p)
    seed = root / "synthetic_negative_seed.yaml"  # batchlog.py synthetic: ValueError
    seed.write_text(_yaml_edit(examples / "onevision-offbyone.yaml", {"data.seed": -5}))
    out["synthetic_negative_seed"] = (["replay", "--config", str(seed), "--fast"], seed)
    for v in (2**31, 2**63 - 1):  # balanced_first_fit._stage_chunks: MemoryError
        p = root / f"skyrl_gpus_{v}.yaml"
        p.write_text(_yaml_edit(examples / "skyrl-trainer.yaml",
                                {"trainer.placement.policy_num_gpus_per_node": v}))
        out[f"skyrl_gpus_{v}"] = (["replay", "--config", str(p), "--fast"], p)
    return out


def hf_last_epoch(root: Path, value: int = 2**31 - 1) -> Path:
    """An HF Trainer run (the sample) without training_args.bin whose scheduler.pt says
    ``last_epoch = value``: the LambdaLR fit once tried ``value`` warmups (9.9 GB)."""
    import shutil

    import torch

    from tests.helpers.paths import REPO

    run = root / "hf-last-epoch"
    shutil.copytree(REPO / "sample_checkpoints" / "hf-healthy", run)
    for ck in run.iterdir():
        (ck / "training_args.bin").unlink()
    f = run / "checkpoint-20" / "scheduler.pt"
    sd = torch.load(f, weights_only=False)  # the sample, made by this repo
    sd["last_epoch"] = value
    torch.save(sd, f)
    return run


# ------------------------------------------------------------------ reference programs

#: allow-listed callables a reference program may apply (module, name)
CALLS = [("builtins", "str"), ("builtins", "tuple"), ("builtins", "list"), ("builtins", "set"),
         ("builtins", "frozenset"), ("builtins", "dict"), ("builtins", "bytes"),
         ("builtins", "int"), ("builtins", "float"), ("collections", "OrderedDict"),
         ("builtins", "bool")]


def reference_program(steps: list) -> bytes:
    """A pickle that builds shared sub-structures through the memo and applies allow-listed
    callables to them (the shape of billion laughs, generalised)."""
    out = PROTO + _str("x") + _put(0)
    n = 1
    for kind, arg in steps:
        if kind == "call":
            (ci, slot) = arg
            mod, name = CALLS[ci]
            out += _global(mod, name) + _get(slot % n) + b"\x85R"
        elif kind == "list":
            out += b"](" + b"".join(_get(i % n) for i in arg) + b"e"
        elif kind == "tuple":
            out += b"(" + b"".join(_get(i % n) for i in arg) + b"t"
        else:  # dict: string keys, shared values
            out += b"}(" + b"".join(_str(f"k{j}") + _get(i % n)
                                    for j, i in enumerate(arg)) + b"u"
        out += _put(n)
        n += 1
    return out + _get(n - 1) + STOP


def random_steps(rng, n: int | None = None) -> list:
    """A random reference program (``reference_program``'s steps): the fuzz harness's
    form of the test suite's hypothesis strategy."""
    steps: list = []
    for _ in range(n or rng.randint(1, 30)):
        r = rng.random()
        if r < 0.4:
            steps.append(("list", [rng.randrange(1 << 16) for _ in range(rng.randint(1, 12))]))
        elif r < 0.55:
            steps.append(("tuple", [rng.randrange(1 << 16) for _ in range(rng.randint(1, 6))]))
        elif r < 0.7:
            steps.append(("dict", [rng.randrange(1 << 16) for _ in range(rng.randint(1, 6))]))
        else:
            steps.append(("call", (rng.randrange(len(CALLS)), rng.randrange(1 << 16))))
    return steps


# ------------------------------------------------------------------ issue 31

def deflated_zeros(mib: int) -> bytes:
    """A raw deflate stream of ``mib`` MiB of zeros, ~1 KiB per MiB, made in milliseconds:
    one MiB compressed with a full flush (which resets the window) repeats byte for byte."""
    import zlib

    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    z = b"\0" * (1 << 20)
    first = c.compress(z) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(z) + c.flush(zlib.Z_FULL_FLUSH)
    return first + block * (mib - 1) + c.flush()


def raw_zip(entries: list[tuple[str, bytes, int, int]]) -> bytes:
    """A zip written by hand from ``(name, body, method, inflated size)``: ``body`` is stored
    as given (already deflated for method 8), with zip64 sizes where they need them. The
    CRC-32 of a deflated body is left 0: a reader that inflates it all reports Bad CRC-32
    at the end, as the issue's bomb did."""
    import zlib

    out, central = bytearray(), bytearray()
    for name, body, method, size in entries:
        fname = name.encode()
        crc = zlib.crc32(body) if method == zipfile.ZIP_STORED else 0
        big = size >= 0xFFFFFFFF or len(body) >= 0xFFFFFFFF
        extra = struct.pack("<HHQQ", 1, 16, size, len(body)) if big else b""
        sizes = (0xFFFFFFFF, 0xFFFFFFFF) if big else (len(body), size)
        offset = len(out)
        out += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45, 0, method, 0, 0x21, crc, *sizes,
                           len(fname), len(extra)) + fname + extra + body
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 45, 45, 0, method, 0, 0x21,
                               crc, *sizes, len(fname), len(extra), 0, 0, 0, 0, offset) \
            + fname + extra
    cd_offset = len(out)
    out += central + struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(entries), len(entries),
                                 len(central), cd_offset, 0)
    return bytes(out)


def seek_bomb(state: dict, key: str, mib: int = 64 << 10) -> bytes:
    """A torch zip of ``state`` whose ``state[key]`` is a 0-d int64 tensor at the very end
    of a deflated storage of ``mib`` MiB of zeros (64 GiB by default: 67 MB on disk). Its
    data.pkl is written as ``torch.save`` writes it (torch's own storage classes and
    rebuild, a persistent id per storage); reading that one value inflates everything
    before it."""
    import pickle
    from collections import OrderedDict

    import torch

    numel = (mib << 20) // 8

    class Storage:
        pass

    class Tensor:
        def __reduce__(self):
            return (torch._utils._rebuild_tensor_v2,
                    (storage, numel - 1, (), (), False, OrderedDict()))

    storage = Storage()

    class Pickler(pickle.Pickler):
        def persistent_id(self, obj):
            if obj is storage:
                return ("storage", torch.LongStorage, "0", "cpu", numel)
            return None

    buf = io.BytesIO()
    Pickler(buf, protocol=2).dump({**state, key: Tensor()})
    return raw_zip([("archive/data.pkl", buf.getvalue(), zipfile.ZIP_STORED, len(buf.getvalue())),
                    ("archive/byteorder", b"little", zipfile.ZIP_STORED, 6),
                    ("archive/data/0", deflated_zeros(mib), zipfile.ZIP_DEFLATED, mib << 20),
                    ("archive/version", b"3\n", zipfile.ZIP_STORED, 2)])


def pickle_bomb(mib: int = 1023) -> bytes:
    """A torch-zip-shaped file whose data.pkl inflates to ``mib`` MiB (about 1 MB on disk)."""
    return raw_zip([("archive/data.pkl", deflated_zeros(mib), zipfile.ZIP_DEFLATED, mib << 20),
                    ("archive/version", b"3\n", zipfile.ZIP_STORED, 2)])


def _storage_tensor(key: str) -> bytes:
    """A tensor record on the persistent id ``('storage', torch.FloatStorage, key, 'cpu', 1)``."""
    return (_global("torch._utils", "_rebuild_tensor_v2") + b"("
            + b"(" + _str("storage") + _global("torch", "FloatStorage") + _str(key)
            + _str("cpu") + b"K\x01tQ" + b"K\x00" + b"K\x01\x85" + b"K\x01\x85" + b"\x89"
            + _global("collections", "OrderedDict") + b")R" + b"tR")


def gadget_payloads() -> dict[str, bytes]:
    """Issue 31: the payloads that reached a published ``fix`` copy from a file it only
    copied. Each is a call torch.load(weights_only=False) makes that torch never writes."""
    return {
        "get_layout_call": reduce_call("torch.serialization", "_get_layout", "touch /tmp/x"),
        "storage_id_parent": PROTO + _storage_tensor("../../../../etc/passwd") + STOP,
        "storage_id_absolute": PROTO + _storage_tensor("/etc/hostname") + STOP,
        "rebuild_from_type_v2": PROTO + _global("torch._tensor", "_rebuild_from_type_v2")
        + b"(" + _global("builtins", "str") + _global("torch", "Tensor") + _str("x")
        + b"\x85Nt" + b"R" + STOP,
        "reconstructor_allowed_class": PROTO + _global("copyreg", "_reconstructor")
        + b"(" + _global("argparse", "Namespace") + _global("builtins", "set") + _str("x")
        + b"tR" + STOP,
    }


def deflated_then_zeros(head: bytes, mib: int) -> bytes:
    """A raw deflate stream of ``head`` followed by ``mib`` MiB of zeros (a pickle with a
    long tail after its STOP), made in milliseconds as :func:`deflated_zeros` is."""
    import zlib

    c = zlib.compressobj(9, zlib.DEFLATED, -15)
    z = b"\0" * (1 << 20)
    start = c.compress(head) + c.flush(zlib.Z_FULL_FLUSH)
    first = c.compress(z) + c.flush(zlib.Z_FULL_FLUSH)
    block = c.compress(z) + c.flush(zlib.Z_FULL_FLUSH)
    return start + first + block * (mib - 1) + c.flush()


def with_deflated_pickle(torch_zip_bytes: bytes, tail_mib: int) -> bytes:
    """The torch zip ``torch_zip_bytes`` with its data.pkl deflated and followed by
    ``tail_mib`` MiB of zeros (inflated size under the data.pkl cap, ~1 KiB per MiB)."""
    entries = []
    with zipfile.ZipFile(io.BytesIO(torch_zip_bytes)) as zf:
        for info in zf.infolist():
            body = zf.read(info)
            if info.filename.endswith("/data.pkl"):
                entries.append((info.filename, deflated_then_zeros(body, tail_mib),
                                zipfile.ZIP_DEFLATED, len(body) + (tail_mib << 20)))
            else:
                entries.append((info.filename, body, zipfile.ZIP_STORED, len(body)))
    return raw_zip(entries)
