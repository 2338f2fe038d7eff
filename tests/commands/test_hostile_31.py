"""Issue 31 through the command line: bounded time on a deflated storage, bounded memory in
``fix``, and no payload from a file ``fix`` only copies in a published copy.

The HF layout is the sample run written by transformers' Trainer (``hf-healthy``); the
hostile files are built here, small on disk: a 64 GiB deflated storage is 67 MB, a 1 GiB
deflated data.pkl is 1 MB (``tests.helpers.hostile.deflated_zeros``)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers import hostile
from tests.helpers.paths import REPO

HF = REPO / "sample_checkpoints" / "hf-healthy"


def _run(argv: list[str], cwd: Path, env: dict[str, str] | None = None
         ) -> tuple[subprocess.CompletedProcess, float, int]:
    """(the finished command, its wall seconds, its own peak RSS in bytes: os.wait4)."""
    import tempfile

    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.monotonic()
        p = subprocess.Popen([sys.executable, "-m", "lrdoctor", *argv], cwd=cwd, text=True,
                             stdout=out, stderr=err,
                             env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
        _, status, usage = os.wait4(p.pid, 0)
        wall = time.monotonic() - t0
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        done = subprocess.CompletedProcess(p.args, p.returncode, out.read(), err.read())
    return done, wall, usage.ru_maxrss * 1024  # Linux: KiB


def _commands(target: Path, out: Path) -> dict[str, list[str]]:
    return {
        "inspect": ["inspect", str(target)],
        "inspect --json": ["inspect", str(target), "--json"],
        "fix": ["fix", str(target), "--out", str(out / "fixed"), "--policy", "rescale",
                "--k", "2"],
        "report": ["report", str(target), "--out", str(out / "page")],
        "check": ["check", "--inspect", str(target)],
    }


@pytest.fixture(scope="module")
def seek_bomb(tmp_path_factory) -> bytes:
    """The sample's scheduler.pt (a LambdaLR state written by the Trainer), its
    ``last_epoch`` a 0-d tensor at the end of 64 GiB of deflated zeros."""
    import torch

    sd = torch.load(HF / "checkpoint-20" / "scheduler.pt", weights_only=True)
    return hostile.seek_bomb(sd, "last_epoch")


@pytest.mark.parametrize("layout", ["bare", "hf"])
def test_a_deflate_seek_bomb_answers_at_once_in_every_command(tmp_path, seek_bomb, layout):
    """Issue 31.1: inflating 64 GiB to read one value took 3 min of CPU per command; the
    read is refused before anything is inflated, naming the limit."""
    if layout == "bare":
        target = bad = tmp_path / "sched.pt"
        bad.write_bytes(seek_bomb)
    else:
        shutil.copytree(HF, tmp_path / "run")
        target, bad = tmp_path / "run" / "checkpoint-20", \
            tmp_path / "run" / "checkpoint-20" / "scheduler.pt"
        bad.write_bytes(seek_bomb)
    out = tmp_path / "out"
    out.mkdir()
    for name, argv in _commands(target, out).items():
        p, wall, _ = _run(argv, tmp_path)
        assert wall < 10, (name, wall)
        assert p.returncode == 2, (name, p.returncode, p.stderr[-400:])
        line = p.stderr.strip().splitlines()
        assert len(line) == 1 and str(bad) in line[0] and "LRDOCTOR_MAX_DEFLATED_BYTES" in \
            line[0], (name, p.stderr)
    assert not (out / "fixed").exists()


def test_a_deflated_storage_within_the_budget_is_read(tmp_path, monkeypatch):
    """The budget is a limit like the others: a small deflated storage is read (its value
    is the zero it holds), and the same file is refused under a lower limit."""
    import torch

    from lrdoctor.core.errors import LimitExceeded
    from lrdoctor.read.bytes import safeload

    sd = torch.load(HF / "checkpoint-20" / "scheduler.pt", weights_only=True)
    f = tmp_path / "sched.pt"
    f.write_bytes(hostile.seek_bomb(sd, "last_epoch", mib=2))
    ref = safeload.load(f)["last_epoch"]
    assert ref.storage_offset == (2 << 20) // 8 - 1
    monkeypatch.setenv("LRDOCTOR_MAX_DEFLATED_BYTES", str(1 << 20))
    with pytest.raises(LimitExceeded, match="LRDOCTOR_MAX_DEFLATED_BYTES=1048576"):
        safeload.read_values(ref)


def test_fix_of_a_folder_with_a_1gib_data_pkl_stays_small(tmp_path):
    """Issue 31.2: a file only ``fix`` reads (copied into the output) whose data.pkl inflates
    to 1,023 MiB drove fix to 2.35 GB RSS and exit 0. Every pickle of the output is read by
    the safe reader, whose data.pkl cap is checked on the declared size: refused at once."""
    run = tmp_path / "run"
    shutil.copytree(HF, run)
    bad = run / "checkpoint-20" / "rng_state.pth"
    bad.write_bytes(hostile.pickle_bomb(1023))
    out = tmp_path / "fixed"
    p, _, rss = _run(["fix", str(run / "checkpoint-20"), "--out", str(out), "--policy",
                      "rescale", "--k", "2"], tmp_path)
    assert p.returncode == 2 and str(bad) in p.stderr, p.stderr[-400:]
    assert "LRDOCTOR_MAX_PICKLE_BYTES" in p.stderr and not out.exists()
    if rss:
        assert rss < 1.5e9, rss


@pytest.mark.parametrize("payload", sorted(hostile.gadget_payloads()))
def test_no_payload_of_a_copied_file_reaches_a_published_copy(tmp_path, payload):
    """Issue 31.3: in a file ``fix`` copies but does not rewrite (the Trainer's
    rng_state.pth), each payload made ``fix`` publish a copy that runs it under
    torch.load(weights_only=False). inspect and fix refuse it alike, naming the file."""
    run = tmp_path / "run"
    shutil.copytree(HF, run)
    bad = run / "checkpoint-20" / "rng_state.pth"
    bad.write_bytes(hostile.torch_zip(hostile.gadget_payloads()[payload]))
    out = tmp_path / "fixed"
    for argv in (["inspect", str(run / "checkpoint-20")],
                 ["fix", str(run / "checkpoint-20"), "--out", str(out), "--policy", "rescale",
                  "--k", "2"]):
        p, _, _ = _run(argv, tmp_path)
        lines = p.stderr.strip().splitlines()
        assert p.returncode == 2 and len(lines) == 1, (argv[0], p.returncode, p.stderr[-400:])
        assert str(bad) in lines[0] and "refused" in lines[0], lines
    assert not out.exists()


def test_fix_reads_every_file_of_its_output_with_the_safe_reader(tmp_path):
    """The last check before publishing is the reader's verdict, not a list of names: a
    copied pickle holding an unknown class is published (an opaque value); one holding a
    gadget record is not, whichever file it sits in (even one no reader opened)."""
    from lrdoctor.core.errors import UnsafePickle
    from lrdoctor.repair.writer import _refuse_code_in

    src, tmp = tmp_path / "src", tmp_path / "tmp"
    for d in (src, tmp):
        d.mkdir()
    (tmp / "ref.pt").write_bytes(hostile.torch_zip(hostile.newobj_of("myproject.cfg", "Cfg")))
    (tmp / "notes.txt").write_bytes(hostile.gadget_payloads()["reconstructor_allowed_class"])
    _refuse_code_in(src, tmp, ["ref.pt"], single=False)  # an unknown class: inert
    with pytest.raises(UnsafePickle) as info:
        _refuse_code_in(src, tmp, ["ref.pt", "notes.txt"], single=False)
    assert str(info.value).startswith(f"{src / 'notes.txt'}: refused to write a repaired copy")


def test_a_gadget_record_is_not_advised_as_a_global_to_allow():
    """--allow-unsafe-global names a global to read as inert; a gadget record has none to
    name, so LRD303's advice for it is not that escape."""
    from lrdoctor.core.errors import UnsafePickle
    from lrdoctor.read.bytes import safeload
    from lrdoctor.rules.lrd303_check_input_unusable import advice

    with pytest.raises(UnsafePickle) as info:
        safeload.load_bytes(hostile.torch_zip(hostile.gadget_payloads()["storage_id_parent"]),
                            "f.pt")
    assert "--allow-unsafe-global" not in advice(info.value)
    assert "weights_only=False" in advice(info.value)


class _Exploit:
    def __reduce__(self):
        return (os.system, ("echo pwned",))


def test_a_dcp_folder_is_vetted_through_its_metadata(tmp_path):
    """torch's DCP writer puts each bytes item (a torch.save) back to back in a .distcp
    file: the file is vetted through .metadata (every item read by the safe reader), never
    as one zip (its last item would pass for the whole file)."""
    import warnings

    import torch.distributed.checkpoint as tdcp

    from lrdoctor.read.bytes.unsafe_globals import CodeExecutionGlobal
    from lrdoctor.read.bytes.vet import vet

    for name, state in (("ok", {"lr_scheduler": {"last_epoch": 3}}),
                        ("evil", {"lr_scheduler": {"last_epoch": 3}, "evil": _Exploit()})):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
            tdcp.save(state, checkpoint_id=str(tmp_path / name))
        assert all(vet(f) is None for f in (tmp_path / name).glob("*.distcp"))
    assert vet(tmp_path / "ok" / ".metadata") is None
    with pytest.raises(CodeExecutionGlobal, match="system"):
        vet(tmp_path / "evil" / ".metadata")


def test_inspect_names_a_side_pickle_it_could_not_check(tmp_path):
    """A side file the safe reader cannot read (over a limit) is not a verdict for inspect,
    but never silent: a note names it and why (fix refuses to copy it, above)."""
    from lrdoctor.inspect_api import read_state

    run = tmp_path / "run"
    shutil.copytree(HF, run)
    bad = run / "checkpoint-20" / "rng_state.pth"
    bad.write_bytes(hostile.pickle_bomb(200))
    st = read_state(run / "checkpoint-20")
    note = next(n for n in st.notes if n.startswith(f"{bad}: not checked"))
    assert "LRDOCTOR_MAX_PICKLE_BYTES" in note


# --- round four (s31b): every file fix places in its output is vetted, whatever it is


def _fix(run: Path, out: Path, env: dict[str, str] | None = None
         ) -> subprocess.CompletedProcess:
    p, _, _ = _run(["fix", str(run), "--out", str(out), "--policy", "rescale", "--k", "2"],
                   run.parent, env)
    return p


def _refused(p: subprocess.CompletedProcess, bad: Path, *words: str) -> None:
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, (p.returncode, p.stderr[-600:])
    assert str(bad) in lines[0] and all(w in lines[0] for w in words), lines


def test_a_text_protocol_pickle_in_a_copied_file_is_refused(tmp_path):
    """A protocol-0 pickle is plain text (``cposix\\nsystem\\n...``): it starts with neither
    ``\\x80`` nor ``PK``, so the check passed it and fix published it, while
    torch.load(weights_only=False) of the copy (the legacy path: pickle.load from byte 0)
    runs it. HF Trainer layout, the payload in rng_state.pth (a file fix only copies)."""
    import pickle

    run = tmp_path / "run"
    shutil.copytree(HF, run)
    bad = run / "checkpoint-20" / "rng_state.pth"
    bad.write_bytes(pickle.dumps(_Exploit(), protocol=0))
    assert bad.read_bytes()[:1] not in (b"\x80", b"P")
    out = tmp_path / "fixed"
    _refused(_fix(run / "checkpoint-20", out), bad, "refused", "system")
    assert not out.exists()


def _other_zip(members: dict[str, tuple[bytes, int]]) -> bytes:
    import io
    import zipfile

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for name, (body, method) in members.items():
            zf.writestr(name, body, compress_type=method)
    return buf.getvalue()


def test_a_zip_that_is_no_torch_zip_is_read_member_by_member(tmp_path):
    """A zip beside the checkpoint (not torch.save's: no <top>/data.pkl) was scanned for
    dangerous names in its ``*.pkl`` members only: a gadget record (no dangerous name) in a
    member named ``state.bin`` reached the published copy. Each member that is a pickle is
    now read by the safe reader; a plain text member is left alone."""
    import zipfile

    run = tmp_path / "run"
    shutil.copytree(HF, run)
    bad = run / "checkpoint-20" / "extras.zip"
    gadget = hostile.gadget_payloads()["reconstructor_allowed_class"]
    bad.write_bytes(_other_zip({"notes.txt": (b"config: a\nlr: 0.1\n", zipfile.ZIP_STORED),
                                "state/obj.bin": (gadget, zipfile.ZIP_DEFLATED)}))
    out = tmp_path / "fixed"
    _refused(_fix(run / "checkpoint-20", out), bad, "refused")
    assert not out.exists()
    bad.write_bytes(_other_zip({"notes.txt": (b"config: a\nlr: 0.1\n", zipfile.ZIP_STORED)}))
    p = _fix(run / "checkpoint-20", out)
    assert p.returncode in (0, 1) and (out / "extras.zip").exists(), p.stderr[-400:]


def test_a_zip_member_past_the_inflation_budget_is_refused_not_published(tmp_path):
    """A deflated pickle member of another zip that inflates past ``deflated_bytes`` cannot
    be vetted without inflating it: refused with the limit and its variable (it was
    published, its name not ending in .pkl). The limit is lowered to keep the file small."""
    import pickle
    import zipfile

    run = tmp_path / "run"
    shutil.copytree(HF, run)
    bad = run / "checkpoint-20" / "extras.zip"
    blob = pickle.dumps({"cache": b"\1" * (2 << 20)}, protocol=2)
    bad.write_bytes(_other_zip({"cache.bin": (blob, zipfile.ZIP_DEFLATED)}))
    out = tmp_path / "fixed"
    _refused(_fix(run / "checkpoint-20", out, {"LRDOCTOR_MAX_DEFLATED_BYTES": str(1 << 20)}),
             bad, "LRDOCTOR_MAX_DEFLATED_BYTES=1048576", "refused to write a repaired copy")
    assert not out.exists()


def test_a_dcp_item_over_the_item_limit_is_refused_in_a_copy(tmp_path, monkeypatch):
    """A DCP bytes item over ``dcp_item_bytes`` was left unread by the check of fix's
    output (as a reading leaves it), so its content was never vetted: the verdict now
    refuses it, naming the limit and its variable (written with torch's DCP writer)."""
    import warnings

    import torch.distributed.checkpoint as tdcp

    from lrdoctor.core.errors import LimitExceeded
    from lrdoctor.read.bytes.vet import vet

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "assuming the intent is to save in a single process"
        tdcp.save({"lr_scheduler": {"last_epoch": 3}, "blob": list(range(50_000))},
                  checkpoint_id=str(tmp_path / "c"))
    assert vet(tmp_path / "c" / ".metadata") is None
    monkeypatch.setenv("LRDOCTOR_MAX_DCP_ITEM_BYTES", str(64 << 10))
    why = vet(tmp_path / "c" / ".metadata")
    assert why is not None and "LRDOCTOR_MAX_DCP_ITEM_BYTES=65536" in why and "'blob'" in why
    with pytest.raises(LimitExceeded):
        from lrdoctor.read.bytes import dcp
        dcp.load(tmp_path / "c", every=True)
    assert "blob" in dcp.load(tmp_path / "c").skipped  # a reading still leaves it, named


def test_a_deflated_data_pkl_costs_what_its_pickle_costs(tmp_path):
    """Issue 31 part 2, one file: a data.pkl deflated up to the 128 MiB cap was inflated
    whole (held in memory) to read a 204-byte scheduler state. It is streamed into the
    unpickler now: inflating stops at the pickle's STOP, so inspect of the bomb peaks
    where inspect of the plain file does (the LambdaLR state the HF Trainer saved, with
    120 MiB of zeros after it). fix, which holds data.pkl to rewrite it, refuses one
    deflated past ``deflated_bytes``."""
    plain, bomb = tmp_path / "plain" / "scheduler.pt", tmp_path / "bomb" / "scheduler.pt"
    for f in (plain, bomb):
        f.parent.mkdir()
    plain.write_bytes((HF / "checkpoint-20" / "scheduler.pt").read_bytes())
    bomb.write_bytes(hostile.with_deflated_pickle(plain.read_bytes(), 120))
    assert bomb.stat().st_size < 1 << 20
    a, _, rss_plain = _run(["inspect", str(plain), "--json"], tmp_path)
    b, _, rss_bomb = _run(["inspect", str(bomb), "--json"], tmp_path,
                          {"LRDOCTOR_MAX_DEFLATED_BYTES": str(1 << 20)})
    assert a.returncode == b.returncode != 2, b.stderr[-400:]
    assert a.stdout.replace(str(plain.parent), "D") == b.stdout.replace(str(bomb.parent), "D")
    if rss_plain and rss_bomb:
        assert rss_bomb - rss_plain < 48 << 20, (rss_plain, rss_bomb)
    p, _, _ = _run(["fix", str(bomb), "--out", str(tmp_path / "fixed.pt"), "--policy",
                    "rescale", "--k", "2"], tmp_path)
    _refused(p, bomb, "LRDOCTOR_MAX_DEFLATED_BYTES")


def test_a_tar_is_read_member_by_member(tmp_path):
    """torch.load(weights_only=False) tries a tar before a pickle (the pre-1.0 format:
    its ``pickle`` member is unpickled), and a tar's header is no pickle opcode stream: a
    payload in a tar member reached the published copy. Each member that is a pickle is
    read by the safe reader; a tar of text is copied."""
    import io
    import pickle
    import tarfile

    def tar(members: dict[str, bytes]) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:") as t:
            for name, body in members.items():
                info = tarfile.TarInfo(name)
                info.size = len(body)
                t.addfile(info, io.BytesIO(body))
        return buf.getvalue()

    run = tmp_path / "run"
    shutil.copytree(HF, run)
    bad = run / "checkpoint-20" / "legacy.tar"
    bad.write_bytes(tar({"sys_info": b"{}", "pickle": pickle.dumps(_Exploit(), protocol=2)}))
    out = tmp_path / "fixed"
    _refused(_fix(run / "checkpoint-20", out), bad, "refused", "system")
    assert not out.exists()
    bad.write_bytes(tar({"notes.txt": b"config: a\nlr: 0.1\n"}))
    p = _fix(run / "checkpoint-20", out)
    assert p.returncode in (0, 1) and (out / "legacy.tar").exists(), p.stderr[-400:]
