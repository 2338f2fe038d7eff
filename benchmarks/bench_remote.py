"""Remote checkpoints: what ``inspect s3://...`` fetches, and ``check`` over a fleet.

Against a real S3-compatible server on 127.0.0.1 (moto in server mode, in its own
process, counting every request and response byte it serves), configured the way
users configure a store (AWS_ENDPOINT_URL and keys in the environment):

1. one >= 1 GiB torch checkpoint (a real AdamW + scheduler state of a ~90M-parameter
   model, saved with torch.save): ``lrdoctor inspect s3://...`` (a fresh process, as
   a user runs it) side by side with downloading the file and ``torch.load``-ing it;
   bytes fetched, requests, wall time. Goal: bytes fetched < 1% of the file.
2. ``lrdoctor check --inspect 's3://bench/fleet/*/checkpoints'`` over N remote runs
   (a real Megatron-LM run each) with ``--jobs 1`` and ``--jobs 8``.

Prints the figures; asserts only that inspect fetched < 1% (the design goal).
Wall times on a shared machine vary: compare within one run.

    .venv/bin/python benchmarks/bench_remote.py [--gib 1.0] [--runs 200]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.helpers.s3server import COUNTS_PATH, client_env  # noqa: E402

BUCKET = "bench"


def start_server() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "helpers" / "s3server.py")],
                            stdout=subprocess.PIPE, text=True)
    port = int(proc.stdout.readline())
    endpoint = f"http://127.0.0.1:{port}"
    for _ in range(100):  # bounded wait for the socket
        try:
            counts(endpoint)
            break
        except OSError:
            time.sleep(0.1)
    return proc, endpoint


def counts(endpoint: str, reset: bool = False) -> dict:
    req = urllib.request.Request(endpoint + COUNTS_PATH, method="DELETE" if reset else "GET")
    with urllib.request.urlopen(req, timeout=10) as r:  # noqa: S310 - 127.0.0.1 only
        return json.loads(r.read())


def big_checkpoint(path: Path, gib: float) -> None:
    """A real AdamW + CosineAnnealingLR state: params, exp_avg, exp_avg_sq ~ 3x the model."""
    import torch

    width = 4096
    layers = max(1, math.ceil(gib * 2**30 / 4 / 3 / (width * width + width)))
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(width, width) for _ in range(layers)])
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=1000)
    model(torch.ones(1, width)).sum().backward()
    opt.step()
    sched.step()
    torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(),
                "scheduler": sched.state_dict(), "step": 1}, path)


def run(cmd: list[str], env: dict) -> tuple[float, subprocess.CompletedProcess]:
    t = time.perf_counter()
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=1800)
    return time.perf_counter() - t, res


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0, help="checkpoint size (default 1 GiB)")
    ap.add_argument("--runs", type=int, default=200, help="fleet size for check")
    args = ap.parse_args()

    proc, endpoint = start_server()
    env = {**os.environ, **client_env(endpoint),
           "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    os.environ.update(client_env(endpoint))
    from lrdoctor.read.bytes import storage

    fs = storage.filesystem("s3")
    fs.mkdir(BUCKET)
    exe = [sys.executable, "-m", "lrdoctor"]
    tmp = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    try:
        # ------------------------------------------------------------ 1. one big checkpoint
        local = tmp / "big.pt"
        big_checkpoint(local, args.gib)
        size = local.stat().st_size
        url = f"s3://{BUCKET}/big/big.pt"
        # One PUT with a long timeout: on a busy machine moto takes minutes to take 1 GiB,
        # and a client retry after a timeout races moto's own write of the first attempt.
        import s3fs

        up = s3fs.S3FileSystem(skip_instance_cache=True,
                               client_kwargs={"endpoint_url": endpoint},
                               config_kwargs={"read_timeout": 1800, "connect_timeout": 60,
                                              "retries": {"max_attempts": 1}})
        up.put_file(str(local), url, chunksize=2**31, max_concurrency=1)
        print(f"checkpoint: {size / 2**30:.2f} GiB ({size:,} bytes), torch.save of AdamW + "
              f"CosineAnnealingLR, at {url}")
        rows = []

        counts(endpoint, reset=True)
        wall, res = run([*exe, "inspect", url, "--json", "--fail-on", "never"], env)
        assert res.returncode == 0, res.stderr
        c = counts(endpoint)
        doc = json.loads(res.stdout)
        rows.append(("lrdoctor inspect s3://... (CLI process)", c["bytes_out"], c["requests"],
                     wall))
        inspect_bytes = c["bytes_out"]

        wall_l, res_l = run([*exe, "inspect", str(local), "--json", "--fail-on", "never"], env)
        assert res_l.returncode == 0, res_l.stderr
        same = json.loads(res_l.stdout.replace(str(local), url)) == doc

        dl = tmp / "downloaded.pt"
        counts(endpoint, reset=True)
        code = ("import sys, time, torch\n"
                "from lrdoctor.read.bytes import storage\n"
                "t = time.perf_counter()\n"
                # one streamed GET (s3fs's concurrent parts open a full GET first and
                # drop it: the server would count that body as served)
                "storage.filesystem('s3').get(sys.argv[1], sys.argv[2], max_concurrency=1)\n"
                "t1 = time.perf_counter()\n"
                "torch.load(sys.argv[2], weights_only=True)\n"
                "print(t1 - t, time.perf_counter() - t1)\n")
        wall_d, res_d = run([sys.executable, "-c", code, url, str(dl)], env)
        assert res_d.returncode == 0, res_d.stderr
        c = counts(endpoint)
        t_get, t_load = (float(x) for x in res_d.stdout.split())
        rows.append(("download + torch.load (process)", c["bytes_out"], c["requests"], wall_d))
        dl.unlink()

        print(f"\n{'':42} {'bytes fetched':>15} {'% of file':>9} {'requests':>9} {'wall s':>8}")
        for name, b, n, w in rows:
            print(f"{name:42} {b:>15,} {100 * b / size:>8.3f}% {n:>9} {w:>8.2f}")
        print(f"{'  of which download / torch.load':42} {'':>15} {'':>9} {'':>9} "
              f"{t_get:>4.1f}/{t_load:.1f}")
        print(f"{'lrdoctor inspect, local file (reference)':42} {'-':>15} {'-':>9} {'-':>9} "
              f"{wall_l:>8.2f}")
        print(f"inspect --json identical remote vs local (paths aside): {same}")
        print(f"fetched / file = {100 * inspect_bytes / size:.3f}% (goal < 1%); "
              f"download fetched {rows[1][1] / max(1, inspect_bytes):,.0f}x more bytes")
        local.unlink()
        fs.rm(url)

        # ------------------------------------------------------------ 2. a fleet of runs
        from tests.helpers.factories import megatron_run

        run_dir = megatron_run(tmp / "meg" / "checkpoints")
        fleet = f"s3://{BUCKET}/fleet"
        for i in range(args.runs):
            fs.put(str(run_dir.root), f"{BUCKET}/fleet/run-{i:03d}/checkpoints", recursive=True)
        pattern = f"{fleet}/*/checkpoints"
        print(f"\nfleet: {args.runs} Megatron-LM runs ({len(run_dir.saves)} checkpoints each) "
              f"under {fleet}/")
        docs = {}
        for jobs in (1, 8):
            counts(endpoint, reset=True)
            wall, res = run([*exe, "check", "--inspect", pattern, "--jobs", str(jobs),
                             "--json", "--fail-on", "never"], env)
            c = counts(endpoint)
            assert res.returncode == 0, res.stderr[-2000:]
            docs[jobs] = json.loads(res.stdout)
            print(f"check --jobs {jobs}: {wall:7.2f} s wall, {len(docs[jobs])} results, "
                  f"{c['requests']:,} requests, {c['bytes_out']:,} bytes")
        print(f"same results with --jobs 1 and --jobs 8: {docs[1] == docs[8]}")
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        assert inspect_bytes < size / 100, "inspect fetched more than 1% of the checkpoint"
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        proc.terminate()
        proc.wait(timeout=30)


if __name__ == "__main__":
    main()
