"""A one-line error names its file once (issue 23's gap: "X.pt: X.pt: ...").

:class:`~lrdoctor.core.errors.UnusableInput` keeps the path and the message apart; a
caller that also wrote the file's name into the message (a repair's refusal naming the
file inside the checkpoint, pyarrow's or the OS's own text quoting the path) printed it
twice. Every command runs on the same bad inputs, named relative to the working folder
as a user types them. Inputs: torch's own ``torch.save`` output cut short, and whole with a
``--k`` that gives a fractional ``last_epoch`` (the repair's refusal), an empty file, a folder of junk, a pickle asking
for ``os.system``, a Parquet batch log that is not one, a missing settings file."""

from __future__ import annotations

import re

import pytest

from tests.commands.test_cli_convention import lrd
from tests.helpers.paths import REPO

ONEVISION = REPO / "examples/onevision-offbyone.yaml"


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    torch = pytest.importorskip("torch")
    d = tmp_path_factory.mktemp("bad") / "in"  # outputs go to ../out, not into a checkpoint
    d.mkdir()
    good = torch.load(REPO / "sample_checkpoints/torch-microstep/checkpoint_60.pt",
                      weights_only=True)
    torch.save(good, d / "good.pt")
    raw = (d / "good.pt").read_bytes()
    (d / "cut.pt").write_bytes(raw[: len(raw) // 2])
    (d / "empty.pt").write_bytes(b"")
    (d / "hostile.pt").write_bytes(b"cos\nsystem\n(S'echo pwned'\ntR.")
    (d / "junk").mkdir()
    (d / "junk" / "notes.txt").write_text("hello")
    (d / "bad.parquet").write_bytes(b"PAR1 not really parquet")
    return d


BAD = ("cut.pt", "empty.pt", "hostile.pt", "junk")


def _cases():
    for name in BAD:
        yield name, ["inspect", name]
        yield name, ["fix", name, "--out", f"../out/{name}"]
        yield name, ["check", "--inspect", name]
        yield name, ["report", name, "--out", f"../out/page-{name}"]
        yield name, ["replay", "-c", name]
    # a repair's refusal raised with the file inside the input (here the input itself)
    yield "good.pt", ["fix", "good.pt", "--out", "../out/fixed.pt", "--policy", "rescale",
                      "--k", "7"]
    yield "bad.parquet", ["replay", "-c", str(ONEVISION), "--batch-log", "bad.parquet"]
    yield "nope.toml", ["inspect", "good.pt", "-c", "nope.toml"]


@pytest.mark.parametrize(("name", "args"), list(_cases()),
                         ids=lambda v: v if isinstance(v, str) else " ".join(v))
def test_the_error_line_names_the_file_once(work, name, args):
    p = lrd(*args, cwd=work)
    assert p.returncode == 2, (p.returncode, p.stderr)
    lines = [ln for ln in p.stderr.splitlines() if ln.startswith("lrdoctor: error: ")]
    assert lines, p.stderr
    for line in lines:
        assert len(re.findall(rf"(?<![\w.-]){re.escape(name)}(?![\w-])", line)) == 1, line


def test_inside_and_reason_keep_the_name_out_of_the_message(tmp_path):
    from lrdoctor.core.errors import Corrupt, reason
    from lrdoctor.core.repair import Refusal

    f = tmp_path / "X.pt"
    f.write_bytes(b"")
    # A repair names the file inside the checkpoint; the input was that file itself.
    e = Refusal("2 optimizers", "X.pt").inside(str(f))
    assert str(e) == f"{f}: 2 optimizers" and isinstance(e, Refusal)
    # A folder input: the inner name joins it; a path already under it stays as it is.
    assert str(Corrupt("cut", "scheduler.pt").inside(str(tmp_path))) == \
        f"{tmp_path}/scheduler.pt: cut"
    assert Refusal("m", f"{tmp_path}/a.pt").inside(str(tmp_path)).path == f"{tmp_path}/a.pt"
    assert "X.pt" not in reason(FileNotFoundError(2, "No such file or directory", "X.pt"))
