"""Issue 23 through every command: billion laughs under an allow-listed callable and a
code-execution primitive, in the bare, HF (Trainer folder) and Megatron (rank file)
layouts, through inspect, inspect --json, fix, report and check. Each ends at once in
exit 2 with one stderr line naming the hostile file, and nothing is written.

The HF and Megatron layouts are the sample runs written by transformers' Trainer and
megatron-core's own checkpointing; neither reader was written with these payloads in mind."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import hostile
from tests.helpers.paths import REPO

PAYLOADS = {
    "str_laughs": (hostile.call_on_laughs("builtins", "str"), "LRDOCTOR_MAX_NODES"),
    "load_from_bytes": (hostile.reduce_call("torch.storage", "_load_from_bytes", "x"),
                        "'torch.storage._load_from_bytes', a code-execution primitive"),
}


def _commands(target: Path, out: Path) -> dict[str, list[str]]:
    return {
        "inspect": ["inspect", str(target)],
        "inspect --json": ["inspect", str(target), "--json"],
        "fix": ["fix", str(target), "--out", str(out / "fixed"), "--policy", "nominal"],
        "report": ["report", str(target), "--out", str(out / "page")],
        "check": ["check", "--inspect", str(target)],
    }


def _run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "lrdoctor", *argv], cwd=cwd,
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(REPO)})


@pytest.mark.parametrize("layout", hostile.LAYOUTS)
@pytest.mark.parametrize("payload", sorted(PAYLOADS))
def test_hostile_payload_through_every_command(tmp_path, layout, payload):
    blob, says = PAYLOADS[payload]
    target, bad = hostile.in_layout(layout, tmp_path / "in", payload, blob)
    out = tmp_path / "out"
    out.mkdir()
    for name, argv in _commands(target, out).items():
        p = _run(argv, tmp_path)
        assert p.returncode == 2, (name, p.returncode, p.stderr[-500:])
        lines = p.stderr.strip().splitlines()
        assert len(lines) == 1 and str(bad) in lines[0] and says in lines[0], (name, p.stderr)
        assert "Traceback" not in p.stderr + p.stdout
    assert not (out / "fixed").exists()  # fix wrote nothing


def test_fix_output_never_holds_a_code_execution_global_unless_allowed(tmp_path):
    """With --allow-unsafe-global the user takes the file as it is: the global is read
    as an inert value, the repaired copy keeps it, and the manifest says so."""
    import json

    from lrdoctor.read.bytes import unsafe_globals

    run = tmp_path / "run"
    import shutil

    shutil.copytree(REPO / "sample_checkpoints" / "hf-healthy", run)
    rng = run / "checkpoint-20" / "rng_state.pth"
    rng.write_bytes(hostile.torch_zip(hostile.reduce_call("torch.storage", "_load_from_bytes",
                                                          "x")))
    out = tmp_path / "fixed"
    refused = _run(["fix", str(run / "checkpoint-20"), "--out", str(out), "--policy",
                    "extend-horizon"], tmp_path)
    assert refused.returncode == 2 and str(rng) in refused.stderr and not out.exists()
    ok = _run(["fix", str(run / "checkpoint-20"), "--out", str(out), "--policy",
               "rescale", "--k", "2", "--allow-unsafe-global", "torch.storage._load_from_bytes"],
              tmp_path)
    assert ok.returncode in (0, 1), ok.stderr
    manifest = json.loads((out / "lrdoctor-fix.json").read_text())
    assert manifest["allowed_unsafe_globals"] == ["torch.storage._load_from_bytes"]
    os.environ.pop(unsafe_globals.ALLOW_ENV, None)
    assert unsafe_globals.dangerous_in_file(str(out / "rng_state.pth")) \
        == ["torch.storage._load_from_bytes"]


def test_the_writer_refuses_an_output_holding_one(tmp_path):
    """The last guard is in the writer itself: a pickle it would publish is read by name."""
    from lrdoctor.core.errors import UnusableInput
    from lrdoctor.repair.writer import write_output

    src = tmp_path / "ckpt"
    src.mkdir()
    (src / "state.pkl").write_bytes(hostile.reduce_call("os", "system", "x"))
    with pytest.raises(UnusableInput) as info:
        write_output(src, tmp_path / "out", ["state.pkl"], [], {"command": "fix"})
    assert str(info.value).startswith(f"{src / 'state.pkl'}: refused to write")
    assert "'os.system'" in str(info.value)
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if "lrdoctor-tmp" in p.name]
