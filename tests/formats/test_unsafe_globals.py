"""Issue 23, items 1 and 2: bounded work for every allow-listed callable, and code-execution
primitives as a verdict (lrdoctor/unsafe_globals.py is the one list; a test per entry)."""

from __future__ import annotations

import pickle
import struct

import pytest

from lrdoctor.core.errors import LimitExceeded, UnsafePickle, UnusableInput
from lrdoctor.read.bytes import limits, safeload, unsafe_globals
from lrdoctor.read.bytes.unsafe_globals import CodeExecutionGlobal
from tests.helpers import hostile

# ------------------------------------------------------------------ item 1: bounded calls


@pytest.mark.parametrize("name", sorted(hostile.laughs_payloads()))
@pytest.mark.parametrize("layout", ["pkl", "pt"])
def test_a_call_on_arguments_built_by_references_is_refused_before_it_runs(name, layout):
    blob = hostile.laughs_payloads()[name]
    data = blob if layout == "pkl" else hostile.torch_zip(blob)
    with pytest.raises(LimitExceeded) as info:
        safeload.load_bytes(data, f"x/{name}.{layout}")
    msg = str(info.value)
    assert msg.startswith(f"x/{name}.{layout}: ") and "\n" not in msg
    assert limits.LIMITS["nodes"].env in msg and "through repeated references" in msg


def test_the_call_budget_is_the_nodes_limit_and_its_override_lets_a_small_one_through(
        monkeypatch):
    """str of a 10**3-value shared list is fine by default, refused under a lower limit:
    the bound is the expansion (the same budget as the finished data's walk)."""
    blob = hostile.call_on_laughs("builtins", "str", levels=3, fan=10)
    assert safeload.load_bytes(blob, "small.pkl").count("lol") == 1000
    monkeypatch.setenv(limits.LIMITS["nodes"].env, "500")
    with pytest.raises(LimitExceeded, match="builtins.str on arguments that expand to more "
                                            "than 500 values"):
        safeload.load_bytes(blob, "small.pkl")


def test_the_fix_re_reader_bounds_calls_too(tmp_path):
    """fix's torch-free re-reader never calls a global, yet it walks the arguments the same
    way: what the safe reader refuses, it refuses by itself."""
    from lrdoctor.repair import torchzip

    p = tmp_path / "laughs.pt"
    p.write_bytes(hostile.torch_zip(hostile.call_on_laughs("builtins", "str")))
    with pytest.raises(LimitExceeded, match="repeated references"):
        torchzip.load(p)


def test_a_real_checkpoint_costs_no_more_items_than_before(tmp_path, monkeypatch):
    """The walk charges only containers nested inside an argument: a tensor rebuild's
    size and stride tuples hold ints, so a 2,000-tensor state dict reads under a tight
    item budget."""
    import torch

    sd = {f"w{i}": torch.zeros(2, 3) for i in range(2000)}
    p = tmp_path / "m.pt"
    torch.save(sd, p)
    monkeypatch.setenv(limits.LIMITS["items"].env, "40000")
    assert len(safeload.load(p)) == 2000


# ------------------------------------------------------------------ item 2: the one list

#: each entry of DANGEROUS as a global a pickle could name
_ENTRIES = sorted(unsafe_globals.DANGEROUS)


def _as_global(entry: str) -> tuple[str, str]:
    return (entry, "x") if "." not in entry else tuple(entry.rsplit(".", 1))  # type: ignore[return-value]


@pytest.mark.parametrize("entry", _ENTRIES)
@pytest.mark.parametrize("opaque", [False, True])
def test_every_listed_global_is_refused_naming_file_global_and_why(entry, opaque):
    module, name = _as_global(entry)
    blob = hostile.reduce_call(module, name, "touch /nonexistent/pwned")
    key = f"{module}.{name}"
    if key in safeload._allowed():  # a data constructor of the allow-list (builtins.set...)
        pytest.skip("allow-listed data constructor")
    with pytest.raises(CodeExecutionGlobal) as info:
        safeload.load_bytes(blob, "ckpt/rng_state.pth", unknown_as_opaque=opaque)
    msg = str(info.value)
    shown = key.replace("__builtin__.", "builtins.")  # py2 names are read as py3's
    assert msg.startswith("ckpt/rng_state.pth: refused: ") and f"'{shown}'" in msg
    assert f"it {unsafe_globals.danger(shown)}" in msg and "\n" not in msg
    assert isinstance(info.value, UnsafePickle)


@pytest.mark.parametrize("module,name", hostile.CODE_EXEC_GLOBALS)
def test_the_issues_list_is_covered(module, name):
    assert unsafe_globals.danger(f"{module}.{name}") is not None
    with pytest.raises(CodeExecutionGlobal):
        safeload.load_bytes(hostile.reduce_call(module, name, "x"), "f.pkl",
                            unknown_as_opaque=True)


def test_inert_names_and_data_classes_are_not_verdicts():
    assert unsafe_globals.danger("_io.BytesIO") is None
    assert unsafe_globals.danger("myproject.config.Config") is None
    assert unsafe_globals.danger("torch.storage.UntypedStorage") is None
    assert unsafe_globals.danger("osmium.x") is None  # a prefix is a whole module name
    # issue 28: an unknown class is an opaque value by default; refused only in the strict
    # mode, and then not as code execution
    got = safeload.load_bytes(hostile.newobj_of("myproject.config", "Config"), "f.pkl")
    assert isinstance(got, safeload.Opaque) and got.cls == "myproject.config.Config"
    with pytest.raises(UnsafePickle) as info:
        safeload.load_bytes(hostile.newobj_of("myproject.config", "Config"), "f.pkl",
                            unknown_as_opaque=False)
    assert not isinstance(info.value, CodeExecutionGlobal)


def test_the_escape_reads_the_named_global_as_an_inert_value(monkeypatch):
    blob = hostile.reduce_call("torch.storage", "_load_from_bytes", "abc")
    monkeypatch.setenv(unsafe_globals.ALLOW_ENV, "torch.storage._load_from_bytes")
    obj = safeload.load_bytes(blob, "f.pkl")
    assert isinstance(obj, safeload.Opaque) and obj.cls == "torch.storage._load_from_bytes"
    assert obj.args == ("abc",)  # kept as data, never called
    with pytest.raises(CodeExecutionGlobal):  # only the name given
        safeload.load_bytes(hostile.reduce_call("os", "system", "x"), "f.pkl")


def _stack_global(module: str, name: str) -> bytes:
    def s(x: str) -> bytes:
        return b"\x8c" + struct.pack("<B", len(x)) + x.encode() + b"\x94"
    return b"\x80\x04" + s(module) + s(name) + b"\x93\x94" + b"N\x85R."


def test_globals_in_a_pickle_are_read_by_name_whatever_the_opcode():
    assert list(unsafe_globals.globals_in_pickle(hostile.reduce_call("os", "system", "x"))) \
        == ["os.system"]
    assert list(unsafe_globals.globals_in_pickle(_stack_global("pickle", "loads"))) \
        == ["pickle.loads"]
    # names pulled back from the memo
    memo = (b"\x80\x04\x8c\x02os\x94\x8c\x06system\x94\x93\x94h\x00h\x01\x93.")
    assert list(unsafe_globals.globals_in_pickle(memo)) == ["os.system", "os.system"]
    assert unsafe_globals.dangerous_in_pickle(pickle.dumps({"a": [1, 2]})) == []
    # a stream that breaks after the global still names it (an unpickler ran it already)
    assert unsafe_globals.dangerous_in_pickle(hostile.reduce_call("os", "system", "x")[:-3]) \
        == ["os.system"]


def test_dangerous_in_file_reads_zips_and_legacy_files(tmp_path):
    import torch

    z = tmp_path / "z.pt"
    z.write_bytes(hostile.torch_zip(hostile.reduce_call("builtins", "exec", "x")))
    assert unsafe_globals.dangerous_in_file(str(z)) == ["builtins.exec"]
    legacy = tmp_path / "legacy.pt"
    torch.save({"x": torch.zeros(2)}, legacy, _use_new_zipfile_serialization=False)
    assert unsafe_globals.dangerous_in_file(str(legacy)) == []
    raw = tmp_path / "model.safetensors"
    raw.write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    assert unsafe_globals.dangerous_in_file(str(raw)) == []


def test_a_code_execution_global_in_a_side_file_refuses_the_folder(tmp_path):
    """HF layout: the Trainer's reader reads scheduler.pt, trainer_state.json and friends; a
    hostile rng_state.pth beside them is still a verdict (it runs on resume)."""
    import shutil

    from lrdoctor.inspect_api import read_state
    from tests.helpers.paths import REPO

    run = tmp_path / "run"
    shutil.copytree(REPO / "sample_checkpoints" / "hf-healthy", run)
    f = run / "checkpoint-20" / "rng_state.pth"
    f.write_bytes(hostile.torch_zip(hostile.reduce_call("torch.storage", "_load_from_bytes",
                                                        "x")))
    with pytest.raises(CodeExecutionGlobal) as info:
        read_state(run / "checkpoint-20")
    assert str(info.value).startswith(f"{f}: refused")


def test_unusable_is_the_base():
    assert issubclass(CodeExecutionGlobal, UnusableInput)


@pytest.mark.parametrize("entry", ["os", "builtins.eval", "torch.storage._load_from_bytes"])
def test_danger_matches_the_longest_prefix(entry):
    module, name = _as_global(entry)
    assert unsafe_globals.danger(f"{module}.{name}") == unsafe_globals.DANGEROUS[entry]


def test_docs_list_every_refused_global_and_the_new_limits():
    from tests.helpers.paths import REPO

    text = (REPO / "docs" / "security.md").read_text()
    for entry, why in unsafe_globals.DANGEROUS.items():
        assert f"| `{entry}` | {why} |" in text, entry
    for name in ("replay_ranks", "nodes", "items"):
        assert limits.LIMITS[name].env in text
