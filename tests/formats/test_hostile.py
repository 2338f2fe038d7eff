"""Hostile and malformed input (issue 12): the corpus of ``tests/helpers/hostile.py`` through the
readers and the command line. Every file is refused with one line naming it, within the
resource limits, nothing runs, nothing is imported, and no file changes how another is read."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lrdoctor.core.errors import LimitExceeded, UnusableInput
from lrdoctor.read.bytes import limits, safeload, safetext
from tests.helpers import hostile
from tests.helpers.paths import REPO

ROOT = REPO


@pytest.fixture
def deadline():
    """A hang is a failure, not a stuck suite (not a timing: generous on a loaded machine)."""
    def boom(*_):
        raise TimeoutError("took over 60 s")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="module")
def real_ckpt() -> bytes:
    import torch

    buf = io.BytesIO()
    torch.save({"optimizer": {"state": {0: {"step": torch.tensor(7.0)}},
                              "param_groups": [{"lr": 0.1, "params": [0]}]}}, buf)
    return buf.getvalue()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, real_ckpt) -> tuple[dict[str, Path], Path]:
    root = tmp_path_factory.mktemp("hostile")
    marker = root / "pwned"
    return hostile.corpus(root / "files", marker, real_ckpt), marker


PAYLOADS = sorted([*hostile.code_payloads(Path("/x")), *hostile.poison_payloads(),
                   *hostile.resource_payloads()])
# frame_bomb is harmless (frames are ignored, it unpickles to None); the rest must be refused
REFUSED = [n for n in PAYLOADS if n != "frame_bomb"]


@pytest.mark.parametrize("layout", ["pkl", "pt"])
@pytest.mark.parametrize("name", REFUSED)
def test_every_hostile_pickle_is_refused_in_one_line(corpus, name, layout, deadline):
    files, marker = corpus
    path = files[f"{name}.{layout}"]
    before = path.read_bytes()
    with pytest.raises(UnusableInput) as info:
        safeload.load(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}: ") and "\n" not in msg
    assert not marker.exists()
    assert path.read_bytes() == before


@pytest.mark.parametrize("name", ["deflate_bomb.pt", "lying_sizes.pt", "truncated_1.pt",
                                  "truncated_50.pt", "truncated_99.pt"])
def test_zip_bombs_lies_and_truncations(corpus, name, deadline):
    files, _ = corpus
    with pytest.raises(UnusableInput, match=f"^{files[name]}: "):
        safeload.load(files[name])


def test_limits_name_their_override(corpus, deadline):
    files, _ = corpus
    with pytest.raises(LimitExceeded, match="LRDOCTOR_MAX_NODES=10000000"):
        safeload.load(files["billion_laughs.pt"])
    with pytest.raises(LimitExceeded, match="LRDOCTOR_MAX_DEPTH=100"):
        safeload.load(files["deep_tuples.pkl"])
    with pytest.raises(LimitExceeded, match="LRDOCTOR_MAX_ITEMS"):
        safeload.load(files["list_amplification.pkl"])
    with pytest.raises(LimitExceeded, match="LRDOCTOR_MAX_PICKLE_INT_BYTES"):
        safeload.load(files["huge_long4.pkl"])


def test_a_raised_limit_lets_a_trusted_file_through(tmp_path, monkeypatch):
    p = tmp_path / "deep.pkl"
    p.write_bytes(hostile.deep_tuples(150))
    with pytest.raises(LimitExceeded):
        safeload.load(p)
    monkeypatch.setenv("LRDOCTOR_MAX_DEPTH", "200")
    got = safeload.load(p)
    depth = 0
    while isinstance(got, tuple):
        got, depth = got[0], depth + 1
    assert depth == 150


def test_zip_member_count_is_checked_before_the_directory_is_parsed(tmp_path, monkeypatch,
                                                                     real_ckpt):
    p = tmp_path / "c.pt"
    p.write_bytes(real_ckpt)
    assert safeload.load(p)["optimizer"]["param_groups"][0]["lr"] == 0.1
    monkeypatch.setenv("LRDOCTOR_MAX_ZIP_MEMBERS", "2")
    with pytest.raises(LimitExceeded, match="lists [0-9]+ members"):
        safeload.load(p)


def test_bad_limit_value_is_one_line(monkeypatch):
    monkeypatch.setenv("LRDOCTOR_MAX_DEPTH", "lots")
    with pytest.raises(UnusableInput, match="LRDOCTOR_MAX_DEPTH='lots': not a positive integer"):
        limits.get("depth")


def test_a_poisoned_file_does_not_change_how_another_is_read(corpus, tmp_path, real_ckpt):
    """BUILD on a shared stand-in (a storage type, a rebuild function, a class) is refused,
    so the good file reads the same before and after every poisoned one."""
    files, _ = corpus
    good = tmp_path / "good.pt"
    good.write_bytes(real_ckpt)

    def step() -> list:
        return safeload.read_values(safeload.load(good)["optimizer"]["state"][0]["step"])

    before = step()
    assert before == [7.0]
    for name in hostile.poison_payloads():
        for layout in ("pkl", "pt"):
            with pytest.raises(UnusableInput, match="BUILD on a"):
                safeload.load(files[f"{name}.{layout}"])
    assert step() == before
    allowed = safeload._allowed()
    assert allowed["torch.FloatStorage"].dtype == "float32"
    assert allowed["torch._utils._rebuild_tensor_v2"].__defaults__ is None


def test_hostile_files_on_the_command_line(corpus, tmp_path):
    """Exit 2, exactly one stderr line naming the file, no traceback, for inspect --json."""
    files, marker = corpus
    for name in ("billion_laughs.pt", "reduce_os_system.pt", "hash_bomb.pkl",
                 "poison_storage_dtype.pt", "truncated_50.pt", "global_deepspeed_op.pt"):
        p = subprocess.run([sys.executable, "-m", "lrdoctor", "inspect", str(files[name]),
                            "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
        assert p.returncode == 2, (name, p.stderr)
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and str(files[name]) in lines[0], (name, p.stderr)
        assert "Traceback" not in p.stderr + p.stdout
    assert not marker.exists()


_AUDIT = """
import json, sys
seen = []
sys.addaudithook(lambda e, a: seen.append(str(a[0])) if e == "import" else None)
from lrdoctor.core.errors import UnusableInput
from lrdoctor.repair.writer import load_pickle, write_pickle
result = {}
try:
    obj = load_pickle(sys.argv[1])
    result["loaded"] = repr(obj)[:200]
    write_pickle(obj, __import__("pathlib").Path(sys.argv[2]))
except UnusableInput as exc:
    result["refused"] = str(exc)
result["imported"] = sorted({m for m in seen if m.split(".")[0] in
                             ("deepspeed", "transformers", "megatron", "accelerate")})
print(json.dumps(result))
"""


def _fix_load(path: Path, out: Path) -> dict:
    p = subprocess.run([sys.executable, "-c", _AUDIT, str(path), str(out)], capture_output=True,
                       text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_fix_never_imports_a_module_the_file_names(tmp_path):
    """The writer's loader refuses a class under deepspeed/transformers without importing
    it (it used to import whatever torch's error message named)."""
    import torch

    for module, name in [("deepspeed.ops.adam.cpu_adam", "DeepSpeedCPUAdam"),
                         ("transformers.trainer", "Trainer"),
                         ("megatron.core.transformer.enums", "NotAnEnum")]:
        evil = tmp_path / f"{name}.pt"
        evil.write_bytes(hostile.torch_zip(hostile.newobj_of(module, name)))
        got = _fix_load(evil, tmp_path / "o.pt")
        assert "refused" in got and f"{module}.{name}" in got["refused"], got
        assert got["imported"] == [], got
    # an allow-listed class: a stand-in by name, written back under the same name
    from lrdoctor.repair import standins

    cls = standins.classes()["deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler"]
    scaler = cls.__new__(cls)
    scaler.__dict__.update({"cur_scale": 65536.0, "cur_iter": 12})
    enum = standins.classes()["megatron.core.transformer.enums.AttnBackend"](5)
    src = tmp_path / "zero.pt"
    torch.save({"loss_scaler": scaler, "backend": enum, "w": torch.ones(2)}, src,
               pickle_module=standins.PICKLE_MODULE)
    got = _fix_load(src, tmp_path / "back.pt")
    assert "loaded" in got and got["imported"] == [], got
    back = safeload.load(tmp_path / "back.pt")
    assert back["loss_scaler"].cls == "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler"
    assert back["loss_scaler"].state == {"cur_scale": 65536.0, "cur_iter": 12}
    assert back["backend"] == 5  # an enum as its value, under its own name


def test_standins_are_immutable_values():
    from lrdoctor.repair import standins

    enum = standins.classes()["megatron.core.enums.ModelType"](1)
    with pytest.raises(AttributeError):
        enum.value = 2
    assert enum == standins.classes()["megatron.core.enums.ModelType"](1)


# ---------------------------------------------------------------- text formats

@pytest.mark.parametrize("text,what", [
    ("a: " + "[" * 5000 + "]" * 5000, "nests too deeply"),
    ("a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 10) + "]\n"
        for i in range(9)), "repeated references"),
    ("a0: &a0 {k0: 1, k1: 2}\n" + "".join(
        f"a{i}: &a{i} {{<<: [*a{i - 1}, *a{i - 1}], x{i}: 1}}\n" for i in range(1, 40)),
     "merge keys"),
    ("{" + ", ".join(f"{k * ((1 << 61) - 1)}: 1" for k in range(1, 50)) + "}", "huge integer"),
])
def test_hostile_yaml_run_config(tmp_path, text, what, deadline):
    from lrdoctor.replay.config import load_config

    p = tmp_path / "run.yaml"
    p.write_text(text)
    with pytest.raises(UnusableInput, match=what) as info:
        load_config(p)
    assert str(info.value).startswith(f"{p}: ")


def test_deep_flow_yaml_is_refused_before_the_scanner_slows_down(tmp_path, deadline):
    """PyYAML's scanner is quadratic in open brackets; 20,000 of them are refused up front."""
    from lrdoctor.replay.config import load_config

    p = tmp_path / "run.yaml"
    p.write_text("train: {steps: 10}\nx: " + "[" * 20000 + "]" * 20000 + "\n")
    with pytest.raises(LimitExceeded, match="nests too deeply"):
        load_config(p)
    p.write_text("train: {steps: 10}\nscheduler: {failed_updates: [" + "1, " * 500
                 + "2]}\n" + "# [{" * 200 + "\n")  # many brackets, not deep
    assert load_config(p).train.steps == 10


def test_yaml_config_size_is_capped(tmp_path, monkeypatch, deadline):
    from lrdoctor.replay.config import load_config

    p = tmp_path / "run.yaml"
    p.write_text("train: {steps: 10}\n" + "# pad\n" * 1000)
    monkeypatch.setenv("LRDOCTOR_MAX_CONFIG_BYTES", "1000")
    with pytest.raises(LimitExceeded, match=f"^{p}: .*LRDOCTOR_MAX_CONFIG_BYTES=1000"):
        load_config(p)


def test_hostile_json_sidecars(tmp_path, monkeypatch, deadline):
    from lrdoctor.read.layouts._common import read_json

    deep = tmp_path / "trainer_state.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(LimitExceeded, match="nests too deeply"):
        read_json(deep)
    many = tmp_path / "many.json"
    many.write_text('{"a": [' + ", ".join(["{}"] * 5000) + "]}")
    monkeypatch.setenv("LRDOCTOR_MAX_ITEMS", "1000")
    with pytest.raises(LimitExceeded, match="too many arrays/objects"):
        read_json(many)
    monkeypatch.delenv("LRDOCTOR_MAX_ITEMS")
    big_int = tmp_path / "int.json"
    big_int.write_text('{"global_step": ' + "9" * 5000 + "}")
    with pytest.raises(UnusableInput, match="not valid JSON"):
        read_json(big_int)


def test_hostile_toml_check_config(tmp_path, deadline):
    from lrdoctor.ci import config as ci_config

    p = tmp_path / "lrdoctor.toml"
    p.write_text("x = " + "[" * 3000 + "]" * 3000 + "\n")
    with pytest.raises(UnusableInput, match=f"^{p}: .*nests too deeply"):
        ci_config.load(p)


def test_replay_sizes_are_bounded(tmp_path, deadline):
    from lrdoctor.replay import batchlog
    from lrdoctor.replay.config import load_config

    p = tmp_path / "run.yaml"
    p.write_text("train: {steps: 1000000000000, samples_per_step: 8}\n")
    with pytest.raises(UnusableInput, match="LRDOCTOR_MAX_REPLAY_STEPS"):
        load_config(p)
    p.write_text("train: {steps: 5000000, samples_per_step: 1000}\n")
    with pytest.raises(UnusableInput, match="LRDOCTOR_MAX_REPLAY_SAMPLES"):
        load_config(p)
    with pytest.raises(UnusableInput, match="LRDOCTOR_MAX_REPLAY_SAMPLES"):
        batchlog.synthetic("fixed:128", 10**9, 10**6)


def test_jsonl_batch_log_deep_row_and_long_line(tmp_path, monkeypatch):
    from lrdoctor.replay.batchlog import _rows_jsonl

    p = tmp_path / "b.jsonl"
    p.write_text('{"step": 0, "length": 5}\n' + "[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(UnusableInput, match="row 2 nests too deeply"):
        list(_rows_jsonl(p))
    monkeypatch.setenv("LRDOCTOR_MAX_JSONL_LINE_BYTES", "64")
    p.write_text('{"step": 0, "length": 5, "pad": "' + "x" * 100 + '"}\n')
    with pytest.raises(LimitExceeded, match="row 1 is too long"):
        list(_rows_jsonl(p))


def test_safetext_refuses_binary_as_one_line(tmp_path):
    p = tmp_path / "x.json"
    p.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(UnusableInput, match="not a UTF-8 text file"):
        safetext.read_json(p)


def test_a_global_name_with_control_characters_is_one_printable_line(tmp_path):
    """A mutated GLOBAL can carry \\r or a form feed: the refusal stays one line."""
    p = tmp_path / "g.pkl"
    p.write_bytes(hostile.PROTO + b"ccollections\nOrdered\x0cDi\rct\n)R" + hostile.STOP)
    with pytest.raises(UnusableInput) as info:
        safeload.load(p)
    msg = str(info.value)
    assert len(msg.splitlines()) == 1 and msg.isprintable() and "Ordered\\x0cDi\\rct" in msg
