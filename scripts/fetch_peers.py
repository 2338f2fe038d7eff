"""Unpack the peers' wheels the randomized packer comparisons load from a folder.

tests/replay/test_replay_peers.py compares lrdoctor's packers with the released
frameworks' own functions. verl 0.9.1 and OpenRLHF install here without their
dependencies (the Makefile does that); two more come from unpacked wheels, because
only some of their module files are loaded and nothing is installed:
- verl 0.9.0, the last release with the ``ceil(total / max_token_len)`` rule;
- SkyRL 0.4.0, whose wheel is for Python 3.12 only (its packer, and the dispatch
  and worker modules of its step layout, on torch; tests/helpers/peers.py);
- AReaL 1.0.4, whose dependencies (sglang, numba, ...) are not needed for its
  ``ffd_allocate`` (tests/replay/test_replay_slime_areal.py).
A download that fails leaves those tests skipped, with the reason in the summary.

Usage: python scripts/fetch_peers.py DIR   (then LRDOCTOR_PEER_VERL_OLD=DIR/verl-0.9.0
LRDOCTOR_PEER_SKYRL=DIR/skyrl-0.4.0 LRDOCTOR_PEER_AREAL=DIR/areal-1.0.4 pytest -m peers)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PEERS = {  # folder name -> pip download arguments
    "verl-0.9.0": ["verl==0.9.0"],
    "skyrl-0.4.0": ["skyrl==0.4.0", "--python-version", "3.12", "--only-binary=:all:"],
    "areal-1.0.4": ["areal==1.0.4"],  # its utils/seqpack.py (ffd_allocate) only
}


def fetch(name: str, args: list[str], root: Path) -> str:
    dest = root / name
    if dest.is_dir():
        return f"{name}: already unpacked"
    with tempfile.TemporaryDirectory() as tmp:
        r = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                            "-d", tmp, *args], capture_output=True, text=True, timeout=600)
        wheels = sorted(Path(tmp).glob("*.whl"))
        if r.returncode != 0 or not wheels:
            lines = (r.stderr or r.stdout).strip().splitlines()
            return f"{name}: not downloaded ({lines[-1] if lines else 'no wheel'})"
        part = root / f".{name}.partial"
        with zipfile.ZipFile(wheels[0]) as zf:
            zf.extractall(part)
        part.rename(dest)
    return f"{name}: unpacked in {dest}"


def main() -> int:
    root = Path(sys.argv[1])
    root.mkdir(parents=True, exist_ok=True)
    for name, args in PEERS.items():
        print(f"fetch_peers: {fetch(name, args, root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
