"""Issue 12's harness, reproducible: hostile and fuzzed inputs through the real CLI, and
SIGKILLs during ``fix``. Prints the counts the issue's "Done when" asks for.

    python benchmarks/fuzz_hostile.py --inputs 10000 --kills 100 [--workers 2] [--seed 0]

Part 1 (fuzz): the hostile corpus of ``tests/helpers/hostile.py`` plus ``--inputs`` mutations of
real files (the sample checkpoints' pickles, their JSON sidecars, the example replay
configs, byte- and value-level) run through ``inspect --json`` / ``replay --json`` /
``fix --dry-run`` / ``check`` in worker processes that call the console entry point
(``lrdoctor.cli.main``) once per input: each run's exit code, stderr, wall time and the
worker's peak RSS are recorded; an audit hook records every module imported under
deepspeed/transformers/megatron/accelerate during a run. Counted: tracebacks, crashes
caught by the last line of defence ("unexpected ..."), runs over 10 s, runs over 1 GB
RSS, exit-2 runs whose stderr is not exactly one line naming the input, framework imports,
code executions (a marker file the payloads try to create).

Issue 23 adds: the new payloads (an allow-listed callable over a structure built by
references, one code-execution primitive per entry of the list) in the bare, HF and
Megatron layouts through inspect, ``--json``, fix (a real ``--out``), report and check;
the crash-site reproducers; random reference programs; every integer key of the example
configs at 2**31, 2**63, negative, NaN, inf; saved counters at extremes. Each fix
output is read by name for code-execution globals; each run's CPU seconds are recorded
beside its wall time (the machine is shared). ``--keep`` then ``--rerun WORK`` runs the
bad cases of a finished run again with the current code.

Issue 31 adds: the gadget records torch never writes (``hostile.gadget_payloads``), and
an ``hf-copied`` layout (the payload in ``rng_state.pth``, a file ``fix`` only copies)
for every payload of the layouts above.

Part 2 (kills): ``fix`` of the torch-microstep sample (one-file output + manifest) and the
ROLL sample (a folder), killed with SIGKILL at random moments (some with ``--force`` over
an existing output); after each kill: the input unchanged, no partial output (the output
is absent or verifies), no orphan manifest; then a re-run must succeed and leave no
temporary copy. Not a unit test: minutes of CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT / "sample_checkpoints"
FRAMEWORKS = ("deepspeed", "transformers", "megatron", "accelerate")
SLOW_S, BIG_MB = 10.0, 1024


# ---------------------------------------------------------------- inputs

def _mutate(data: bytes, rng: random.Random) -> bytes:
    b = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if not b:
            break
        pos = rng.randrange(len(b))
        kind = rng.random()
        if kind < 0.4:
            b[pos] ^= rng.randint(1, 255)
        elif kind < 0.6:
            b[pos:pos] = rng.randbytes(rng.randint(1, 16))
        elif kind < 0.8:
            del b[pos:pos + rng.randint(1, 64)]
        elif kind < 0.9:
            del b[pos:]
        else:  # duplicate a slice (repeats opcodes, memo refs)
            n = rng.randint(1, 256)
            b[pos:pos] = b[pos:pos + n] * rng.randint(2, 50)
    return bytes(b)


def _rezip(zipped: bytes, data_pkl: bytes) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(zipped)) as src, zipfile.ZipFile(out, "w") as dst:
        for info in src.infolist():
            dst.writestr(info.filename, data_pkl if info.filename.endswith("/data.pkl")
                         else src.read(info))
    return out.getvalue()


def _data_pkl(zipped: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(zipped)) as zf:
        return zf.read(next(n for n in zf.namelist() if n.endswith("/data.pkl")))


_YAML_VALUES = ["0", "-1", "1e400", ".nan", ".inf", "999999999999999999999999", "[1, 2]",
                "{a: 1}", "x", "null", "&a [*a]", "!!binary AAAA", "10000000000", "2.5"]


def _mutate_yaml(text: str, rng: random.Random) -> str:
    lines = text.splitlines()
    for _ in range(rng.randint(1, 3)):
        i = rng.randrange(len(lines))
        line = lines[i]
        if ":" in line and rng.random() < 0.7:
            key = line.split(":", 1)[0]
            lines[i] = f"{key}: {rng.choice(_YAML_VALUES)}"
        elif rng.random() < 0.5:
            lines.insert(i, "x: " + "[" * rng.randint(50, 5000))
        else:
            lines[i] = _mutate(line.encode(), rng).decode("utf-8", "replace")
    return "\n".join(lines) + "\n"


def _mutate_json(text: str, rng: random.Random) -> str:
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    choice = rng.random()
    if choice < 0.5 and isinstance(doc, dict):
        key = rng.choice(list(doc))
        doc[key] = rng.choice(["x", None, 10**30, -5, [1, [2, [3]]], {"a": {}}, 1e308, 0])
        out = json.dumps(doc)
    else:
        out = _mutate(text.encode(), rng).decode("utf-8", "replace")
    if rng.random() < 0.1:
        out = out.replace("{", "[" * rng.randint(100, 3000) + "{", 1)
    return out


def build_cases(work: Path, n: int, seed: int) -> list[dict]:
    """[{argv, input, kind}]: hostile corpus + n fuzzed inputs (files written under work)."""
    sys.path.insert(0, str(ROOT))
    from tests.helpers import hostile  # the test helper builds the corpus

    rng = random.Random(seed)
    cases: list[dict] = []
    marker = work / "pwned"
    real = (SAMPLES / "torch-microstep" / "checkpoint_60.pt").read_bytes()
    for path in sorted(hostile.corpus(work / "corpus", marker, real).values()):
        for argv in (["inspect", str(path), "--json"], ["fix", str(path), "--dry-run"],
                     ["inspect", str(path), "--format", "torchsave"]):
            cases.append({"argv": argv, "input": str(path), "kind": "corpus"})

    # issue 23: the new payloads in the bare, HF and Megatron layouts, through every
    # command (fix and report write real outputs, checked for code-execution globals)
    lay = work / "layouts"
    # fix and report write beside the inputs, never inside the folder that holds them: the
    # write guard refuses an output inside a folder of checkpoints (issue 29), and a
    # refusal there would be counted as one that does not name the input
    outs = work / "outputs"
    new = {**hostile.laughs_payloads(), **hostile.code_exec_payloads(marker),
           **hostile.gadget_payloads()}  # issue 31: gadget records torch never writes
    for name, blob in sorted(new.items()):
        for layout in (*hostile.LAYOUTS, "hf-copied"):  # issue 31: a file fix only copies
            target, bad = hostile.in_layout(layout, lay, name, blob)
            out = outs / f"{layout}-{name}"
            out.mkdir(parents=True)
            for argv in (["inspect", str(target)], ["inspect", str(target), "--json"],
                         ["fix", str(target), "--out", str(out / "fixed"), "--policy",
                          "rescale", "--k", "2"],
                         ["report", str(target), "--out", str(out / "page")],
                         ["check", "--inspect", str(target)]):
                cases.append({"argv": argv, "input": str(bad), "kind": f"layout-{layout}",
                              "out": str(out)})
    for _name, (argv, inp) in sorted(hostile.crash_reproducers(work / "crash").items()):
        cases.append({"argv": argv, "input": str(inp), "kind": "crash-site"})
    hf_epoch = hostile.hf_last_epoch(work / "hf-epoch")
    cases.append({"argv": ["inspect", str(hf_epoch), "--json"], "input": str(hf_epoch),
                  "kind": "crash-site"})

    # fuzz bases: one-file checkpoints (torch zips) and sidecars/configs of the samples
    pickles = [p for p in SAMPLES.rglob("*") if p.is_file() and p.suffix in (".pt", ".pth", ".bin")]
    pickles = [p for p in pickles if zipfile.is_zipfile(p)]
    jsons = [p for p in SAMPLES.rglob("*.json")]
    yamls = sorted((ROOT / "examples").glob("*.yaml")) + sorted(SAMPLES.rglob("*.yaml"))
    fz = work / "fuzz"
    fz.mkdir(parents=True, exist_ok=True)
    sizing = _sizing_keys(yamls)
    hf_base = work / "hf-base"
    shutil.copytree(SAMPLES / "hf-healthy", hf_base)
    for ck in hf_base.iterdir():
        (ck / "training_args.bin").unlink()
    for i in range(n):
        r = rng.random()
        if r < 0.12:  # shared references under allow-listed callables, bare or in a folder
            blob = hostile.reference_program(hostile.random_steps(rng))
            if rng.random() < 0.5:
                p = fz / f"{i}.pt"
                p.write_bytes(hostile.torch_zip(blob))
                target, bad = p, p
            else:
                target, bad = hostile.in_layout(rng.choice(hostile.LAYOUTS[1:]), fz, str(i),
                                                blob)
            out = outs / f"fuzz-{i}"
            out.mkdir(parents=True)
            cmd = rng.choice([["inspect", str(target), "--json"],
                              ["fix", str(target), "--out", str(out / "fixed"), "--policy",
                               "rescale", "--k", "2"]])
            # the line names the hostile file, or the checkpoint folder it is judged in
            cases.append({"argv": cmd, "input": str(bad), "also": str(target), "kind": "refs",
                          "out": str(out)})
            continue
        if r < 0.17:  # a sizing key of a framework config at an extreme
            base, key = rng.choice(sizing)
            p = fz / f"{i}.yaml"
            p.write_text(_set_key(base, key, rng.choice(EXTREMES)))
            cases.append({"argv": ["replay", "--config", str(p), "--json", "--fast"],
                          "input": str(p), "kind": "config-extreme"})
            continue
        if r < 0.22:  # a saved counter at an extreme (HF Trainer, schedule fitted to the log)
            run = fz / f"hf-{i}"
            shutil.copytree(hf_base, run)
            _set_counter(run, rng)
            cases.append({"argv": rng.choice([["inspect", str(run), "--json"],
                                              ["inspect", str(run)]]),
                          "input": str(run), "kind": "counter-extreme"})
            continue
        r = rng.random()
        if r < 0.65:  # a pickle inside its zip, run as a one-file checkpoint
            base = rng.choice(pickles)
            blob = base.read_bytes()
            mutated = _rezip(blob, _mutate(_data_pkl(blob), rng)) if rng.random() < 0.85 \
                else _mutate(blob, rng)
            p = fz / f"{i}.pt"
            p.write_bytes(mutated)
            out = outs / f"fuzz-{i}"
            out.mkdir(parents=True)
            cmd = rng.choice([["inspect", str(p), "--json"], ["inspect", str(p)],
                              ["fix", str(p), "--dry-run", "--json"],
                              ["fix", str(p), "--out", str(out / "fixed.pt"), "--policy",
                               "rescale", "--k", "2"]])
            cases.append({"argv": cmd, "input": str(p), "kind": "pickle", "out": str(out)})
        elif r < 0.96:  # a JSON sidecar inside a copy of its checkpoint folder
            base = rng.choice(jsons)
            folder = fz / f"{i}"
            shutil.copytree(base.parent, folder)
            (folder / base.name).write_text(_mutate_json(base.read_text(), rng))
            cases.append({"argv": ["inspect", str(folder), "--json"], "input": str(folder),
                          "kind": "json"})
        else:  # a replay config
            base = rng.choice(yamls)
            p = fz / f"{i}.yaml"
            p.write_text(_mutate_yaml(base.read_text(), rng).replace(
                "batchlogs/", f"{base.parent}/batchlogs/"))  # relative to the copied config
            cmd = ["replay", "--config", str(p), "--json", "--fast"] \
                if rng.random() < 0.5 else ["inspect", str(p)]
            cases.append({"argv": cmd, "input": str(p), "kind": "yaml"})
    return cases


EXTREMES = [2**31, 2**31 - 1, 2**63, 2**63 - 1, -1, -(2**31), ".nan", ".inf", "1e400", 0]


def _int_keys(doc, prefix=()) -> list[tuple]:
    if isinstance(doc, dict):
        return [k for key, v in doc.items() for k in _int_keys(v, (*prefix, key))]
    if isinstance(doc, list):
        return [k for i, v in enumerate(doc) for k in _int_keys(v, (*prefix, i))]
    return [prefix] if type(doc) is int else []


def _sizing_keys(yamls: list[Path]) -> list[tuple[Path, tuple]]:
    """Every integer key of every example config: each can size something."""
    import yaml

    out = []
    for p in yamls:
        try:
            out += [(p, k) for k in _int_keys(yaml.safe_load(p.read_text()))]
        except yaml.YAMLError:
            continue
    return out


def _set_key(base: Path, key: tuple, value) -> str:
    import yaml

    doc = yaml.safe_load(base.read_text())
    d = doc
    for k in key[:-1]:
        d = d[k]
    d[key[-1]] = "@@V@@"
    out = yaml.safe_dump(doc, sort_keys=False)
    data_dir = base.parent  # batch-log paths in a config are relative to it
    return out.replace("'@@V@@'", str(value)).replace("batchlogs/", f"{data_dir}/batchlogs/")


def _set_counter(run: Path, rng: random.Random) -> None:
    """One saved counter of an HF checkpoint at an extreme (scheduler.pt via torch, which
    this script's own sample files are safe to load with; trainer_state.json as text)."""
    ck = run / "checkpoint-20"
    if rng.random() < 0.6:
        import torch

        f = ck / "scheduler.pt"
        sd = torch.load(f, weights_only=False)
        v = rng.choice([2**31, 2**31 - 1, 2**63 - 1, -1, float("nan"), float("inf"), 10**30])
        sd[rng.choice(["last_epoch", "_step_count"])] = v
        torch.save(sd, f)
    else:
        f = ck / "trainer_state.json"
        doc = json.loads(f.read_text())
        v = rng.choice([2**31, 2**63 - 1, -1, 10**30, 1.5])
        key = rng.choice(["global_step", "max_steps", "logging_steps", "save_steps"])
        doc[key] = v
        if doc.get("log_history") and rng.random() < 0.5:
            doc["log_history"][-1]["step"] = v
        f.write_text(json.dumps(doc))


# ---------------------------------------------------------------- worker

def worker(cases_file: str, out_file: str) -> None:
    """Run each case through lrdoctor.cli.main in this process; one JSON line per case."""
    from lrdoctor import cli

    def alarm(*_):
        raise TimeoutError("case over 60 s")

    signal.signal(signal.SIGALRM, alarm)
    cases = json.loads(Path(cases_file).read_text())
    with open(out_file, "w") as out:
        for case in cases:
            before_mods = {m for m in sys.modules if m.split(".")[0] in FRAMEWORKS}
            err, std = io.StringIO(), io.StringIO()
            sys.argv = ["lrdoctor", *case["argv"]]
            t0 = time.perf_counter()
            ru0 = resource.getrusage(resource.RUSAGE_SELF)
            code: object = 0
            signal.alarm(60)
            try:
                with contextlib.redirect_stderr(err), contextlib.redirect_stdout(std):
                    cli.main()
            except SystemExit as exc:
                code = exc.code
            except TimeoutError:
                code = "timeout"
            except BaseException as exc:  # noqa: BLE001 - what main() let through
                code = "escaped"
                err.write(f"Traceback (escaped {type(exc).__name__}: {exc})\n")
            finally:
                signal.alarm(0)
            wall = time.perf_counter() - t0
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
            cpu = ru1.ru_utime + ru1.ru_stime - ru0.ru_utime - ru0.ru_stime
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            held = _code_in_outputs(case.get("out"))
            imported = sorted({m for m in sys.modules if m.split(".")[0] in FRAMEWORKS}
                              - before_mods)
            out.write(json.dumps({**case, "code": code if isinstance(code, (int, str)) else
                                  str(code), "stderr": err.getvalue()[-2000:], "wall": wall, "cpu": cpu,
                                  "rss_mb": rss, "imported": imported,
                                  "fix_output_code": held}) + "\n")
            out.flush()


def _code_in_outputs(out: str | None) -> list[str]:
    """Code-execution globals in what a fix of this case wrote (every pickle under ``out``)."""
    if not out or not os.path.exists(out):
        return []
    from lrdoctor.read.bytes import unsafe_globals

    found: set[str] = set()
    for f in ([Path(out)] if os.path.isfile(out) else Path(out).rglob("*")):
        if f.is_file():
            found.update(unsafe_globals.dangerous_in_file(str(f)))
    return sorted(found)


def run_fuzz(cases: list[dict], work: Path, workers: int, batch: int) -> list[dict]:
    """Batches of cases in fresh worker processes (so one case's peak RSS is its batch's)."""
    results: list[dict] = []
    batches = [cases[i:i + batch] for i in range(0, len(cases), batch)]
    running: list[tuple[subprocess.Popen, Path]] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}

    def reap(block: bool) -> None:
        for proc, outf in list(running):
            if block or proc.poll() is not None:
                proc.wait()
                running.remove((proc, outf))
                results.extend(json.loads(line) for line in outf.read_text().splitlines())
                part = summarize_fuzz(results, work / "pwned")
                print("  so far: " + json.dumps({k: v for k, v in part.items()
                                                 if k not in ("by_kind", "exit_codes")}),
                      file=sys.stderr, flush=True)

    for k, b in enumerate(batches):
        cf, of = work / f"cases-{k}.json", work / f"results-{k}.jsonl"
        cf.write_text(json.dumps(b))
        while len(running) >= workers:
            reap(False)
            time.sleep(0.2)
        running.append((subprocess.Popen([sys.executable, __file__, "--worker", str(cf), str(of)],
                                         env=env), of))
        print(f"  batch {k + 1}/{len(batches)}", file=sys.stderr, flush=True)
    while running:
        reap(True)
    return results


def summarize_fuzz(results: list[dict], marker: Path) -> dict:
    def names_input(r: dict) -> bool:
        lines = r["stderr"].strip().splitlines()
        if len(lines) != 1:
            return False
        return any(inp and inp in lines[0] for inp in (r["input"], r.get("also")))

    exit2 = [r for r in results if r["code"] == 2]
    return {
        "runs": len(results),
        "inputs": len({r["input"] for r in results}),
        "by_kind": {k: sum(1 for r in results if r["kind"] == k)
                    for k in sorted({r["kind"] for r in results})},
        "exit_codes": {str(c): sum(1 for r in results if r["code"] == c)
                       for c in sorted({r["code"] for r in results}, key=str)},
        "code_executions": int(marker.exists()),
        "tracebacks": sum(1 for r in results if "Traceback" in r["stderr"]),
        "crashes_caught_as_unexpected": sum(1 for r in results if "please report it" in r["stderr"]),
        "runs_over_10s": sum(1 for r in results if r["wall"] > SLOW_S or r["code"] == "timeout"),
        "max_wall_s": round(max((r["wall"] for r in results), default=0), 2),
        # the machine is shared: CPU seconds of the run itself, independent of the load
        "runs_over_10s_cpu": sum(1 for r in results if r.get("cpu", 0) > SLOW_S),
        "max_cpu_s": round(max((r.get("cpu", 0) for r in results), default=0), 2),
        "runs_over_1GB_rss": sum(1 for r in results if r["rss_mb"] > BIG_MB),
        "max_rss_mb": round(max((r["rss_mb"] for r in results), default=0)),
        "exit2_runs": len(exit2),
        "exit2_not_one_line_naming_the_input": sum(1 for r in exit2 if not names_input(r)),
        "framework_imports_during_a_run": sum(1 for r in results if r["imported"]),
        "fix_outputs_holding_a_code_execution_global": sum(
            1 for r in results if r.get("fix_output_code")),
    }


# ---------------------------------------------------------------- kills

def _tree_hash(p: Path) -> str:
    h = hashlib.sha256()
    files = [p] if p.is_file() else sorted(x for x in p.rglob("*") if x.is_file())
    for f in files:
        h.update(str(f.relative_to(p.parent)).encode())
        h.update(f.read_bytes())
    return h.hexdigest()


def _leftovers(out: Path) -> list[str]:
    return sorted(x.name for x in out.parent.iterdir()
                  if x.name.startswith(f".{out.name}.lrdoctor-tmp"))


def _complete(out: Path, manifest: Path) -> bool:
    """The output is whole: its manifest exists and every changed file has its sha256."""
    try:
        doc = json.loads(manifest.read_text())
    except (OSError, ValueError):
        return False
    for entry in doc.get("changed_files", []):
        f = out if out.is_file() else out / entry["file"]
        if not f.is_file() or hashlib.sha256(f.read_bytes()).hexdigest() != entry["sha256"]:
            return False
    return True


def _kill_at(argv: list[str], env: dict, rng: random.Random, out: Path) -> bool:
    """Start ``fix`` and SIGKILL it: at a random moment, or (half the time) at a random
    moment after its temporary copy appears (the write and rename phase). True if it was
    still running when killed."""
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    if rng.random() < 0.5:
        time.sleep(rng.uniform(0.2, 8.0))
    else:
        t0 = time.time()
        while proc.poll() is None and not _leftovers(out) and time.time() - t0 < 120:
            time.sleep(0.005)
        time.sleep(rng.choice([0.0, 0.001, 0.005, 0.02, 0.05, 0.1, 0.3]))
    alive = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    return alive


def run_kills(work: Path, n: int, seed: int, group: int = 1) -> dict:
    """``n`` rounds: ``group`` killed ``fix`` runs to one output, then one that completes."""
    rng = random.Random(seed)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    targets = [
        (SAMPLES / "torch-microstep" / "checkpoint_60.pt", ["--policy", "rescale", "--k", "4"],
         "fixed.pt"),
        (SAMPLES / "roll-overshoot", [], "fixed-roll"),
    ]
    # one finished output per target, copied in where a killed --force run replaces one
    done: dict[int, tuple[Path, Path]] = {}
    for t, (src, extra, name) in enumerate(targets):
        ref = work / f"ref-{t}"
        ref.mkdir(parents=True)
        out = ref / name
        subprocess.run([sys.executable, "-m", "lrdoctor", "fix", str(src), "--out", str(out),
                        *extra], env=env, capture_output=True, timeout=600, check=True)
        done[t] = (out, out / "lrdoctor-fix.json" if src.is_dir()
                   else out.with_name(out.name + ".lrdoctor-fix.json"))
    stats = {"kills": 0, "killed_while_running": 0, "input_changed": 0, "partial_outputs": 0,
             "orphan_manifests": 0, "reruns": 0, "rerun_failures": 0,
             "temp_copies_left_by_kills": 0, "temp_copies_after_rerun": 0,
             "rerun_said_it_cleaned": 0}
    for i in range(n):
        t = i % len(targets)
        src, extra, name = targets[t]
        d = work / f"kill-{i}"
        d.mkdir(parents=True)
        inp = d / src.name
        (shutil.copytree if src.is_dir() else shutil.copy2)(src, inp)
        before = _tree_hash(inp)
        out = d / name
        manifest = out / "lrdoctor-fix.json" if src.is_dir() else \
            out.with_name(out.name + ".lrdoctor-fix.json")
        argv = [sys.executable, "-m", "lrdoctor", "fix", str(inp), "--out", str(out), *extra]
        if rng.random() < 0.4:  # an existing output the killed run would replace
            ref_out, ref_manifest = done[t]
            (shutil.copytree if ref_out.is_dir() else shutil.copy2)(ref_out, out)
            if not src.is_dir():
                shutil.copy2(ref_manifest, manifest)
            argv.append("--force")
        stats["killed_while_running"] += _kill_at(argv, env, rng, out)
        stats["kills"] += 1
        if _tree_hash(inp) != before:
            stats["input_changed"] += 1
        if out.exists() and not _complete(out, manifest):
            stats["partial_outputs"] += 1
        if not src.is_dir() and manifest.exists() and not out.exists():
            stats["orphan_manifests"] += 1
        stats["temp_copies_left_by_kills"] += len(_leftovers(out))
        # the next runs to this output are killed too, then one runs to the end
        for _ in range(group - 1):
            stats["killed_while_running"] += _kill_at([*argv, "--force"] if argv[-1] !=
                                                      "--force" else argv, env, rng, out)
            stats["kills"] += 1
            if _tree_hash(inp) != before:
                stats["input_changed"] += 1
            if out.exists() and not _complete(out, manifest):
                stats["partial_outputs"] += 1
            if not src.is_dir() and manifest.exists() and not out.exists():
                stats["orphan_manifests"] += 1
            stats["temp_copies_left_by_kills"] += len(_leftovers(out))
        rerun_argv = argv if argv[-1] == "--force" else [*argv, "--force"]
        rerun = subprocess.run(rerun_argv, env=env, capture_output=True, text=True, timeout=600)
        stats["reruns"] += 1
        if rerun.returncode not in (0, 1) or not _complete(out, manifest):
            stats["rerun_failures"] += 1
            print(f"  rerun {i}: rc {rerun.returncode}: {rerun.stderr.strip()[:200]}",
                  file=sys.stderr)
        if "removed what an interrupted earlier fix left" in rerun.stderr:
            stats["rerun_said_it_cleaned"] += 1
        stats["temp_copies_after_rerun"] += len(_leftovers(out))
        if not src.is_dir() and manifest.exists() != out.exists():
            stats["orphan_manifests"] += 1
        if _tree_hash(inp) != before:
            stats["input_changed"] += 1
        shutil.rmtree(d, ignore_errors=True)
        if (i + 1) % 2 == 0:
            print(f"  round {i + 1}/{n}: {json.dumps(stats)}", file=sys.stderr, flush=True)
    return stats


def _bad(r: dict) -> bool:
    one = r["stderr"].strip().splitlines()
    return ("Traceback" in r["stderr"] or "please report" in r["stderr"]
            or r["wall"] > SLOW_S or r["code"] == "timeout" or r["rss_mb"] > BIG_MB
            or bool(r.get("fix_output_code")) or bool(r["imported"])
            or (r["code"] == 2 and (len(one) != 1 or not any(
                inp and inp in one[0] for inp in (r["input"], r.get("also"))))))


def rerun_bad(work: Path, workers: int) -> dict:
    """The bad runs of a kept work folder (``--keep``), run again with the code as it is now:
    what a fix since the run changed, on the very inputs that showed it."""
    results = [json.loads(line) for f in sorted(work.glob("results-*.jsonl"))
               for line in f.read_text().splitlines() if line.strip()]
    bad = [{k: r[k] for k in ("argv", "input", "kind", "also", "out") if k in r}
           for r in results if _bad(r)]
    for c in bad:  # a fix run may have written its output the first time
        if c.get("out") and os.path.isdir(c["out"]):
            shutil.rmtree(c["out"])
            os.makedirs(c["out"])
    again = work / "rerun"
    again.mkdir(exist_ok=True)
    out = run_fuzz(bad, again, workers, 250) if bad else []
    return {"first_run": summarize_fuzz(results, work / "pwned"), "bad_runs": len(bad),
            "rerun": summarize_fuzz(out, work / "pwned"),
            "still_bad": [{"argv": r["argv"], "stderr": r["stderr"].strip()[-200:],
                           "wall": round(r["wall"], 2), "cpu": round(r.get("cpu", 0), 2)}
                          for r in out if _bad(r)][:20]}


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--inputs", type=int, default=10_000)
    ap.add_argument("--kills", type=int, default=100)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--batch", type=int, default=250)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kill-group", type=int, default=1,
                    help="killed runs per output before the one that completes")
    ap.add_argument("--keep", action="store_true", help="keep the work folder")
    ap.add_argument("--rerun", type=Path, default=None,
                    help="a kept work folder: run its bad cases again with this code")
    args = ap.parse_args()
    if args.rerun is not None:
        print(json.dumps(rerun_bad(args.rerun, args.workers), indent=2))
        return
    work = Path(tempfile.mkdtemp(prefix="lrdoctor-fuzz-"))
    t0 = time.time()
    report: dict = {}
    if args.inputs:
        cases = build_cases(work, args.inputs, args.seed)
        print(f"fuzz: {len(cases)} runs", file=sys.stderr)
        results = run_fuzz(cases, work, args.workers, args.batch)
        report["fuzz"] = summarize_fuzz(results, work / "pwned")
        bad = [r for r in results if "Traceback" in r["stderr"] or "please report" in r["stderr"]
               or r["wall"] > SLOW_S or r["imported"]]
        report["fuzz"]["examples_of_bad_runs"] = [
            {"argv": r["argv"], "code": r["code"], "wall": round(r["wall"], 2),
             "stderr": r["stderr"].strip()[-300:], "imported": r["imported"][:5]}
            for r in bad[:8]]
        report["fuzz"]["exit2_lines_not_naming_the_input"] = [
            r["stderr"].strip()[:200] for r in results if r["code"] == 2
            and (len(r["stderr"].strip().splitlines()) != 1 or not any(
                inp and inp in r["stderr"] for inp in (r["input"], r.get("also"))))][:8]
    if args.kills:
        report["kills"] = run_kills(work, args.kills, args.seed, args.kill_group)
    report["wall_s"] = round(time.time() - t0)
    print(json.dumps(report, indent=2))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
