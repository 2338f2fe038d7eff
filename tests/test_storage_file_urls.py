"""``fix`` with ``file://`` URLs: a file:// URL is a local path (storage.as_path), so
``fix`` must read and write it in place, never take it for a store.

Bug found by mypy (strict on lrdoctor.read.bytes.storage): ``Staging`` asked
``is_url`` ("is it spelled scheme://", true for file://) where it meant "is it on a
store", then called the store-only ``.fs``/``._key`` on the local Path it got, so
``lrdoctor fix file:///run --dry-run`` ended in "unexpected AttributeError".
The checkpoint is a real torch loop (torch's AdamW + LinearLR, torch.save), a
layout the URL handling was not written for (it was written for Megatron on S3).
"""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from lrdoctor.cli import app
from lrdoctor.read.bytes.storage import Staging
from tests.helpers.factories import torch_loop

runner = CliRunner()


def test_staging_keeps_file_urls_local(tmp_path):
    src = tmp_path / "run"
    src.mkdir()
    with Staging(f"file://{src}", f"file://{tmp_path / 'out'}") as stage:
        assert stage.local_input() == src  # no download, no AttributeError
        assert stage.local_output(force=False) == tmp_path / "out"
        assert stage.remote_out is False
    with Staging(f"file://{src}", "s3://bucket/key") as stage:
        assert stage.remote_out is True


def test_fix_file_url_in_and_out(tmp_path):
    ckpt = tmp_path / "run" / "ckpt.pt"
    ckpt.parent.mkdir()
    torch_loop(ckpt, scheduler="linear", updates=12, ga=4, step_per_micro=True)
    before = ckpt.read_bytes()
    dry = runner.invoke(app, ["fix", f"file://{ckpt.parent}", "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "AttributeError" not in dry.output
    out = tmp_path / "fixed"
    res = runner.invoke(app, ["fix", f"file://{ckpt.parent}", "--out", f"file://{out}",
                              "--policy", "rescale", "--k", "4", "--json"])
    assert res.exit_code == 0, res.output
    assert ckpt.read_bytes() == before  # the input is never modified
    assert (out / "ckpt.pt").is_file() and (out / "lrdoctor-fix.json").is_file()
    manifest = json.loads((out / "lrdoctor-fix.json").read_text())
    assert "lrdoctor-fix-" not in json.dumps(manifest)  # no staging folder: written in place
    assert Path(out).is_dir()
