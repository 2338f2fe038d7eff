"""Batch logs (one row per sample) and synthetic length distributions.

A batch log tells the replay what the loop actually saw: per sample its train
``step`` and ``tokens``, and as available ``prompt_id``, ``docs`` and ``rank``.
JSONL, CSV and Parquet are read by extension (or sniffed). Reading goes
through pyarrow for speed; when anything is wrong the file is re-walked row by
row so the user gets one line naming the first bad row, never a traceback.
"""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from lrdoctor.core.errors import Corrupt, NotFound, UnusableInput
from lrdoctor.core.state import BATCH_LOG_MIN, BATCH_LOG_REQUIRED, batch_log_format

REQUIRED = BATCH_LOG_REQUIRED
# Names the frameworks' own logs use for the same thing.
ALIASES = {
    "step": ("step", "train_step", "global_step", "pipeline_step", "rollout_step"),
    "tokens": ("tokens", "num_tokens", "length", "seq_len", "seqlen", "sequence_length"),
    "prompt_id": ("prompt_id", "uid", "prompt", "group_id", "traj_group_id"),
    "docs": ("docs", "num_docs", "documents", "n_docs"),
    "rank": ("rank", "dp_rank"),
}
INT_COLS = tuple(BATCH_LOG_MIN)
MIN_VALUE = BATCH_LOG_MIN


def _log_format(path: Path) -> str:
    by_name = batch_log_format(path.name)
    if by_name is not None:
        return by_name
    with open(path, "rb") as fh:
        head = fh.read(4096)
    if head[:4] == b"PAR1":
        return "parquet"
    if head.lstrip()[:1] == b"{":
        return "jsonl"
    return "csv"


def _resolve_columns(names: list[str], path: str) -> dict[str, str]:
    """Map our column names to the file's (first alias present wins)."""
    lower = {n.lower(): n for n in names}
    out: dict[str, str] = {}
    for col, aliases in ALIASES.items():
        for a in aliases:
            if a in lower:
                out[col] = lower[a]
                break
    for col in REQUIRED:
        if col not in out:
            raise UnusableInput(
                f"no '{col}' column (found: {', '.join(names) or 'none'}); a batch log needs "
                f"one row per sample with step and tokens",
                path,
            )
    return out


def _check_value(col: str, value: Any, row: int, path: str) -> Any:
    if col == "prompt_id":
        if (
            value is None
            or isinstance(value, (dict, list))
            or (isinstance(value, float) and math.isnan(value))
        ):
            raise UnusableInput(
                f"row {row}: prompt_id is {value!r}; expected a string or integer", path
            )
        return value
    if isinstance(value, bool) or value is None:
        raise UnusableInput(f"row {row}: {col} is {value!r}; expected an integer", path)
    if isinstance(value, str):
        try:
            value = float(value.strip())
        except ValueError:
            raise UnusableInput(
                f"row {row}: {col} is {value!r}; expected an integer", path
            ) from None
    if isinstance(value, float):
        if not math.isfinite(value) or value != int(value):
            raise UnusableInput(f"row {row}: {col} is {value!r}; expected an integer", path)
        value = int(value)
    if not isinstance(value, int):
        raise UnusableInput(f"row {row}: {col} is {value!r}; expected an integer", path)
    if value < MIN_VALUE[col]:
        raise UnusableInput(f"row {row}: {col} is {value}; it must be >= {MIN_VALUE[col]}", path)
    return value


def _rows_jsonl(path: Path):
    """Yield (row_number, dict) with row = line number; raise on bad JSON."""
    import gzip

    from lrdoctor.read.bytes import limits

    opener = gzip.open if path.suffix == ".gz" else open
    max_line, max_rows = limits.get("jsonl_line_bytes"), limits.get("replay_samples")
    with opener(path, "rt", encoding="utf-8", errors="replace") as fh:
        lineno = 0
        while line := fh.readline(max_line + 1):
            lineno += 1
            if len(line) > max_line:
                raise limits.over("jsonl_line_bytes", str(path), f"row {lineno} is too long")
            if lineno > max_rows:
                raise limits.over("replay_samples", str(path), "the batch log has too many rows")
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
            except RecursionError:
                raise limits.over("depth", str(path), f"row {lineno} nests too deeply") from None
            except ValueError as exc:  # JSONDecodeError, 4300+-digit integers
                msg = getattr(exc, "msg", None) or (str(exc).splitlines() or ["invalid"])[0][:120]
                raise UnusableInput(
                    f"row {lineno}: not valid JSON ({msg})", str(path)
                ) from None
            if not isinstance(obj, dict):
                raise UnusableInput(
                    f"row {lineno}: expected a JSON object, got {type(obj).__name__}", str(path)
                )
            yield lineno, obj


def _rows_csv(path: Path):
    import gzip

    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8", errors="replace", newline="") as fh:
        head = fh.read(4096)
        fh.seek(0)
        first = head.splitlines()[0] if head else ""
        delim = "\t" if "\t" in first else ","
        reader = csv.reader(fh, delimiter=delim)
        try:
            header = next(reader)
        except StopIteration:
            return
        header = [h.strip() for h in header]
        for rowno, rec in enumerate(reader, 1):
            if not rec or all(not x.strip() for x in rec):
                continue
            if len(rec) != len(header):
                raise UnusableInput(
                    f"row {rowno} (line {rowno + 1}): {len(rec)} fields, the header has {len(header)}",
                    str(path),
                )
            yield (
                rowno,
                {
                    h: (v.strip() if v.strip() != "" else None)
                    for h, v in zip(header, rec, strict=False)
                },
            )


def _rows_parquet(table):
    yield from enumerate(table.to_pylist(), 1)


def _slow_validate(rows, path: str) -> dict[str, list]:
    """Row-by-row read that stops at the first bad row with its number."""
    cols: dict[str, list] = {}
    mapping: dict[str, str] | None = None
    for row, rec in rows:
        if mapping is None:
            mapping = _resolve_columns(list(rec), path)
            cols = {c: [] for c in mapping}
        for col, src in mapping.items():
            if src not in rec:
                raise UnusableInput(f"row {row}: no '{src}' field", path)
            cols[col].append(_check_value(col, rec[src], row, path))
    if mapping is None:
        raise UnusableInput("the batch log has no rows", path)
    return cols


def _finish(cols: dict[str, Any]) -> dict[str, np.ndarray]:
    data: dict[str, np.ndarray] = {}
    for col in ("step", "tokens", "prompt_id", "docs", "rank"):
        if col not in cols:
            continue
        v = cols[col]
        if col in INT_COLS:
            data[col] = np.asarray(v, dtype=np.int64)
        else:
            arr = np.asarray(v)
            if arr.dtype.kind == "f":
                arr = arr.astype(np.int64)
            data[col] = arr
    return data


def _fast_columns(table, path: str) -> dict[str, np.ndarray] | None:
    """Vectorised conversion of a pyarrow table; None when any value needs a closer look."""
    import pyarrow as pa

    mapping = _resolve_columns(table.column_names, path)
    out: dict[str, np.ndarray] = {}
    for col, src in mapping.items():
        arr = table.column(src)
        if arr.null_count:
            return None
        t = arr.type
        if col in INT_COLS:
            if pa.types.is_integer(t):
                v = _arrow_numpy(arr, integer=True).astype(np.int64)
            else:
                return None
            if len(v) and v.min() < MIN_VALUE[col]:
                return None
            out[col] = v
        else:
            if not (pa.types.is_integer(t) or pa.types.is_string(t) or pa.types.is_large_string(t)):
                return None
            out[col] = _arrow_numpy(arr, integer=pa.types.is_integer(t))
    return out


def _arrow_numpy(arr: Any, integer: bool) -> np.ndarray:
    """A null-free integer or text column of a pyarrow table as a numpy array.

    Why not ``ChunkedArray.to_numpy``: pyarrow imports pandas there, which costs
    more than reading a whole batch log. Integers are read from the Arrow value
    buffer (a copy, so the result is writable); text becomes an object array, as
    ``to_numpy(zero_copy_only=False)`` gives it.
    """
    parts: list[np.ndarray] = []
    for chunk in arr.chunks:
        if integer:
            dt = np.dtype(str(chunk.type))
            parts.append(np.frombuffer(chunk.buffers()[1], dtype=dt, count=len(chunk),
                                       offset=chunk.offset * dt.itemsize).copy())
        else:
            parts.append(np.array(chunk.to_pylist(), dtype=object))
    if not parts:
        return np.zeros(0, dtype=np.int64 if integer else object)
    return np.concatenate(parts) if len(parts) > 1 else parts[0]


def read_batch_log(path: str | Path):
    """Read a batch log into a DataFrame: step, tokens (+ prompt_id, docs, rank)."""
    import pandas as pd

    return pd.DataFrame(read_batch_columns(path))


def read_batch_columns(path: str | Path) -> dict[str, np.ndarray]:
    """:func:`read_batch_log`'s columns as numpy arrays, without importing pandas."""
    p = Path(path)
    sp = str(path)
    if p.is_dir():
        raise UnusableInput("is a directory, expected a batch log file (.jsonl, .csv or "
                            ".parquet)", sp)
    if not p.is_file():
        raise NotFound("no such batch log file", sp)
    fmt = _log_format(p)
    try:
        if fmt == "parquet":
            import pyarrow.parquet as pq

            try:
                # An open file, not the path: pyarrow names a path it was given in its
                # message, and the line already starts with it ("X: X: ..." otherwise).
                with open(p, "rb") as fh:
                    table = pq.read_table(fh)
            except Exception as exc:  # pyarrow raises several types for a broken file
                why = (str(exc).splitlines() or [type(exc).__name__])[0]
                if why.startswith("Could not open Parquet input source"):
                    why = why.split(": ", 1)[-1]  # names the stream, not the file
                raise Corrupt(f"not a readable Parquet file ({why})", sp) from None
            if table.num_rows == 0:
                raise UnusableInput("the batch log has no rows", sp)
            fast = _fast_columns(table, sp)
            return _finish(fast if fast is not None
                           else _slow_validate(_rows_parquet(table), sp))
        table = None
        try:
            if fmt == "jsonl":
                import pyarrow.json as pj

                table = pj.read_json(p)
            else:
                import pyarrow.csv as pc

                delim = "\t" if p.suffix.lower() == ".tsv" else ","
                table = pc.read_csv(p, parse_options=pc.ParseOptions(delimiter=delim))
        except Exception:
            table = None  # re-walk row by row to name the bad row
        cols: dict[str, Any] | None = None
        if table is not None and table.num_rows:
            cols = _fast_columns(table, sp)
        if cols is None:
            rows = _rows_jsonl(p) if fmt == "jsonl" else _rows_csv(p)
            cols = _slow_validate(rows, sp)
        return _finish(cols)
    except UnicodeDecodeError:
        raise UnusableInput("not a text batch log (bad encoding)", sp) from None


def write_batch_log(df, path: str | Path) -> None:
    """Write a batch log atomically (format from the extension)."""
    from lrdoctor.atomic import replacing

    p = Path(path)
    fmt = _log_format(p) if p.suffix else "jsonl"
    with replacing(p, suffix=".tmp") as tmp:
        if fmt == "parquet":
            df.to_parquet(tmp, index=False)
        elif fmt == "csv":
            df.to_csv(tmp, index=False)
        else:
            df.to_json(tmp, orient="records", lines=True)


# --------------------------------------------------------------------------- synthetic

_NUM = r"[-+]?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?"


def _params(spec: str, text: str) -> tuple[list[float], dict[str, float]]:
    pos: list[float] = []
    kw: dict[str, float] = {}
    for part in filter(None, re.split(r"[:,]", text)):
        part = part.strip()
        if "=" in part:
            k, v = part.split("=", 1)
            if not re.fullmatch(_NUM, v.strip()):
                raise UnusableInput(f"--synthetic {spec!r}: {k}={v!r} is not a number")
            kw[k.strip()] = float(v)
        elif re.fullmatch(_NUM, part):
            pos.append(float(part))
        else:
            raise UnusableInput(f"--synthetic {spec!r}: {part!r} is not a number")
    return pos, kw


def _lengths(spec: str, kind: str, pos, kw, n: int, rng) -> np.ndarray:
    lo = kw.get("min", 1)
    hi = kw.get("max", None)
    if kind == "fixed":
        v = pos[0] if pos else kw.get("value", kw.get("len"))
        if v is None:
            raise UnusableInput(f"--synthetic {spec!r}: fixed needs a length, e.g. fixed:4096")
        if v < 1:
            raise UnusableInput(f"--synthetic {spec!r}: a length must be >= 1 token")
        out = np.full(n, v)
    elif kind == "uniform":
        a = pos[0] if len(pos) > 0 else kw.get("min")
        b = pos[1] if len(pos) > 1 else kw.get("max")
        if a is None or b is None or b < a or a < 1:
            raise UnusableInput(f"--synthetic {spec!r}: uniform needs LO:HI with 1 <= LO <= HI")
        out = rng.integers(int(a), int(b) + 1, size=n)
        lo, hi = a, b
    elif kind == "lognormal":
        mean = kw.get("mean", pos[0] if pos else None)
        sigma = kw.get("sigma", pos[1] if len(pos) > 1 else 0.5)
        if mean is None or mean <= 0 or sigma < 0:
            raise UnusableInput(
                f"--synthetic {spec!r}: lognormal needs mean=M (>0) and sigma=S (>=0)"
            )
        # mean is the arithmetic mean in tokens, not mu.
        mu = math.log(mean) - sigma * sigma / 2
        out = rng.lognormal(mu, sigma, size=n)
    elif kind == "normal":
        mean = kw.get("mean", pos[0] if pos else None)
        std = kw.get("std", kw.get("sigma", pos[1] if len(pos) > 1 else None))
        if mean is None or std is None or std < 0:
            raise UnusableInput(f"--synthetic {spec!r}: normal needs mean=M and std=S")
        out = rng.normal(mean, std, size=n)
    elif kind == "bimodal":
        short = kw.get("short", pos[0] if pos else None)
        long = kw.get("long", pos[1] if len(pos) > 1 else None)
        frac = kw.get("p", kw.get("frac", 0.5))
        if short is None or long is None or not 0 <= frac <= 1:
            raise UnusableInput(
                f"--synthetic {spec!r}: bimodal needs short=A,long=B[,p=fraction long]"
            )
        out = np.where(rng.random(n) < frac, long, short).astype(float)
        out = out * rng.uniform(0.9, 1.1, size=n)
    else:
        raise UnusableInput(
            f"--synthetic {spec!r}: unknown distribution {kind!r} "
            "(fixed, uniform, lognormal, normal, bimodal)"
        )
    out = np.rint(out)
    out = np.maximum(out, max(1, lo))
    if hi is not None:
        out = np.minimum(out, hi)
    return out.astype(np.int64)


def synthetic(dist: str, steps: int, samples_per_step: int, seed: int = 0):
    """:func:`synthetic_columns` as a DataFrame."""
    import pandas as pd

    return pd.DataFrame(synthetic_columns(dist, steps, samples_per_step, seed))


def synthetic_columns(dist: str, steps: int, samples_per_step: int,
                      seed: int = 0) -> dict[str, np.ndarray]:
    """Synthetic batch log from a spec such as ``lognormal:mean=2048,sigma=0.6,max=16384``.

    Extra parts joined with ``;`` add columns: ``turns:1:5`` (prompt ids with 1-5
    sequences each, as step-wise trajectories give), ``group:8`` (8 per prompt),
    ``docs:1:8`` (documents per sample), ``ranks`` (rank = position % dp is not
    set; rows are dealt by the strategy).
    """
    if steps < 1 or samples_per_step < 1:
        raise UnusableInput(
            f"--synthetic needs steps >= 1 and samples per step >= 1 (got {steps}, {samples_per_step})"
        )
    from lrdoctor.read.bytes import limits

    if steps * samples_per_step > limits.get("replay_samples"):
        raise limits.over("replay_samples", "--synthetic",
                          f"{steps:,} steps x {samples_per_step:,} samples per step")
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**128:
        raise UnusableInput(f"--synthetic seed {seed!r}: expected a whole number >= 0 "
                            "(data.seed in a run config)")
    rng = np.random.default_rng(seed)
    parts = [p.strip() for p in str(dist).split(";") if p.strip()]
    if not parts:
        raise UnusableInput("--synthetic: empty distribution spec")
    n = int(steps) * int(samples_per_step)
    data: dict[str, np.ndarray] = {
        "step": np.repeat(np.arange(steps, dtype=np.int64), samples_per_step)
    }
    length_done = False
    for part in parts:
        kind, _, rest = part.partition(":")
        kind = kind.strip().lower()
        pos, kw = _params(part, rest)
        if kind in ("turns", "group"):
            if kind == "group":
                a = b = int(pos[0]) if pos else 0
            else:
                a, b = (int(pos[0]), int(pos[1])) if len(pos) >= 2 else (0, -1)
            if a < 1 or b < a:
                raise UnusableInput(f"--synthetic {part!r}: needs {kind}:A:B with 1 <= A <= B")
            # Sequences per prompt; a prompt never crosses a step (the last one is cut).
            # Vectorised over steps: mark where each prompt starts, cumsum for local ids.
            per = rng.integers(a, b + 1, size=(steps, samples_per_step))
            cum = np.cumsum(per, axis=1)
            mark = np.zeros((steps, samples_per_step), dtype=np.int64)
            r_idx, c_idx = np.nonzero(cum < samples_per_step)
            mark[r_idx, cum[r_idx, c_idx]] = 1
            local = np.cumsum(mark, axis=1)
            n_prompts = local[:, -1] + 1
            offsets = np.concatenate(([0], np.cumsum(n_prompts)[:-1]))
            pid = (local + offsets[:, None]).ravel()
            data["prompt_id"] = pid
        elif kind == "docs":
            a = int(pos[0]) if pos else 1
            b = int(pos[1]) if len(pos) > 1 else a
            if a < 0 or b < a:
                raise UnusableInput(f"--synthetic {part!r}: needs docs:A:B with 0 <= A <= B")
            data["docs"] = rng.integers(a, b + 1, size=n)
        else:
            if length_done:
                raise UnusableInput(f"--synthetic {dist!r}: two length distributions")
            data["tokens"] = _lengths(part, kind, pos, kw, n, rng)
            length_done = True
    if not length_done:
        raise UnusableInput(f"--synthetic {dist!r}: no length distribution (e.g. uniform:512:8192)")
    order = ("step", "tokens", "prompt_id", "docs")
    return {k: data[k] for k in order if k in data}
