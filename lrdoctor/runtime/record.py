"""Record the batch log that ``lrdoctor replay`` reads, from the loop that trains.

One row per sample: ``step`` (the train step the sample belongs to), ``tokens``
and, as the loop knows them, ``prompt_id``, ``docs`` and ``rank``. JSONL and CSV
are written as the run goes, one step at a time in whole lines, so a run that
dies leaves a log of its complete steps (never a torn line or a partial step).
Parquet needs the whole table, so it is written at :meth:`BatchLogRecorder.close`
(temp sibling + rename).

Nothing here imports torch; tensors are read through ``tolist()``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lrdoctor.core.state import BATCH_LOG_COLUMNS as COLUMNS
from lrdoctor.core.state import BATCH_LOG_MIN, batch_log_format


def _format_of(path: Path) -> str:
    return batch_log_format(path.name) or "jsonl"


def _as_list(values: Any, name: str) -> list:
    if hasattr(values, "tolist"):
        values = values.tolist()
    if isinstance(values, (int, str)) and not isinstance(values, bool):
        return [values]
    try:
        return list(values)
    except TypeError:
        raise ValueError(f"{name}: expected a list of per-sample values, got "
                         f"{type(values).__name__}") from None


def _int(v: Any, name: str, minimum: int) -> int:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
        raise ValueError(f"{name}: {v!r} is not an integer")
    if v < minimum:
        raise ValueError(f"{name}: {v!r}; it must be >= {minimum}")
    return int(v)


class BatchLogRecorder:
    """Append per-sample rows of a batch log; usable by hand or as a context manager.

    >>> with BatchLogRecorder("run/batches.jsonl") as rec:
    ...     for step, batch in enumerate(loader):
    ...         rec.log(step, tokens=batch["attention_mask"].sum(-1))

    ``path`` may hold ``{rank}`` (one file per rank). ``rank`` is written on every
    row when given. ``append`` continues an existing JSONL/CSV log (a resumed run);
    without it an existing log is never truncated: it is renamed to ``NAME.1.EXT``
    (the first free number, :attr:`rotated`) when the first rows are written, and
    left untouched when none are.
    ``fsync``: also fsync each written step (slower; survives a power cut).
    """

    def __init__(self, path: str | os.PathLike, *, rank: int | None = None,
                 format: str | None = None, append: bool = False, fsync: bool = False):
        text = os.fspath(path)
        if "{rank}" in text:
            text = text.replace("{rank}", str(rank if rank is not None else 0))
        self.path = Path(text)
        self.format = format or _format_of(self.path)
        if self.format not in ("jsonl", "csv", "parquet"):
            raise ValueError(f"format {self.format!r}: allowed: jsonl, csv, parquet")
        self.rank = rank
        self.fsync = fsync
        self.rows = 0  # rows logged (written or pending)
        self.steps = 0  # distinct steps written so far
        self._columns: tuple[str, ...] | None = None
        self._pending: list[tuple] = []
        self._pending_step: int | None = None
        self._table: list[tuple] = []  # parquet only
        self._fd: int | None = None
        self.closed = False
        self.append = append
        self.rotated: Path | None = None  # where an earlier log was moved (not append)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.format == "parquet":
            if append:
                raise ValueError("append is for JSONL/CSV logs; Parquet is written at close")
            return
        if append:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)
            self._trim_torn_tail()
            if self.format == "csv" and os.fstat(self._fd).st_size:
                with open(self.path, encoding="utf-8") as fh:
                    self._columns = tuple(fh.readline().strip().split(","))
        # Otherwise an existing log is moved aside (never truncated) only when the first
        # step's rows are written (see _open), so a run that fails before logging anything
        # leaves it exactly as it was. A new log is created at once (empty).
        elif not self.path.exists():
            os.close(os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o666))

    # -- public ---------------------------------------------------------------
    def log(self, step: int, tokens: Any, prompt_ids: Any = None, docs: Any = None,
            rank: int | None = None) -> None:
        """Add one row per sample of ``step`` (``tokens``: per-sample token counts)."""
        if self.closed:
            raise ValueError(f"{self.path}: the recorder is closed")
        step = _int(step, "step", BATCH_LOG_MIN["step"])
        toks = [_int(t, "tokens", BATCH_LOG_MIN["tokens"]) for t in _as_list(tokens, "tokens")]
        n = len(toks)
        cols: dict[str, list] = {"step": [step] * n, "tokens": toks}
        if prompt_ids is not None:
            ids = _as_list(prompt_ids, "prompt_ids")
            for v in ids:
                if isinstance(v, bool) or not isinstance(v, (int, str)):
                    raise ValueError(f"prompt_ids: {v!r} is not a string or an integer")
            cols["prompt_id"] = ids
        if docs is not None:
            cols["docs"] = [_int(d, "docs", BATCH_LOG_MIN["docs"]) for d in _as_list(docs, "docs")]
        rank = self.rank if rank is None else rank
        if rank is not None:
            cols["rank"] = [_int(rank, "rank", BATCH_LOG_MIN["rank"])] * n
        for name, vals in cols.items():
            if len(vals) != n:
                raise ValueError(f"{name}: {len(vals)} values for {n} samples")
        names = tuple(c for c in COLUMNS if c in cols)
        if self._columns is None:
            self._columns = names
        elif names != self._columns:
            raise ValueError(f"columns {', '.join(names)} differ from the log's "
                             f"{', '.join(self._columns)}: every row needs the same fields")
        if self._pending_step is not None and step != self._pending_step:
            self.flush()
        self._pending_step = step
        self._pending.extend(zip(*(cols[c] for c in names), strict=True))
        self.rows += n

    def flush(self) -> None:
        """Write the pending step (it happens by itself when the step changes)."""
        if not self._pending:
            return
        rows, self._pending, self._pending_step = self._pending, [], None
        self.steps += 1
        if self.format == "parquet":
            self._table.extend(rows)
            return
        self._open()
        self._write(self._encode(rows))

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.flush()
            if self.format == "parquet":
                self._write_parquet()
        finally:
            self.closed = True
            if self._fd is not None:
                os.fsync(self._fd)
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> BatchLogRecorder:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- writing --------------------------------------------------------------
    def _encode(self, rows: list[tuple]) -> bytes:
        assert self._columns is not None
        if self.format == "jsonl":
            import json

            # Every value is an int except prompt_id (validated in log()): format ints
            # directly, JSON-escape only the strings.
            keys = [f'"{c}":' for c in self._columns]
            enc = [json.dumps if c == "prompt_id" else str for c in self._columns]
            return "".join("{" + ",".join(k + f(v) for k, f, v in zip(keys, enc, r, strict=True))
                           + "}\n" for r in rows).encode()
        import csv
        import io

        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        if os.fstat(self._handle).st_size == 0:
            w.writerow(self._columns)
        w.writerows(rows)
        return buf.getvalue().encode()

    def _open(self) -> None:
        """Open the log for the first rows (not ``append``): an existing non-empty log is
        renamed to the first free ``NAME.N.EXT`` beside it (rotated), then a new file made."""
        if self._fd is not None:
            return
        self._rotate()
        self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o666)

    def _rotate(self) -> None:
        try:
            if self.path.stat().st_size == 0:
                return
        except FileNotFoundError:
            return
        n = 1
        while True:
            dest = self.path.with_name(f"{self.path.stem}.{n}{self.path.suffix}")
            if not dest.exists():
                break
            n += 1
        os.rename(self.path, dest)
        self.rotated = dest

    @property
    def _handle(self) -> int:
        """The open log's descriptor (opened before any row is written)."""
        if self._fd is None:
            raise RuntimeError(f"{self.path}: the batch log is not open")
        return self._fd

    def _write(self, data: bytes) -> None:
        # One write of whole lines per step; loop only on a short write.
        view = memoryview(data)
        while view:
            view = view[os.write(self._handle, view):]
        if self.fsync:
            os.fsync(self._handle)

    def _trim_torn_tail(self) -> None:
        """A log left by a killed writer of another tool may end mid-line: drop that line."""
        size = os.fstat(self._handle).st_size
        if not size:
            return
        with open(self.path, "rb+") as fh:
            fh.seek(max(0, size - 65536))
            tail = fh.read()
            if tail.endswith(b"\n"):
                return
            cut = tail.rfind(b"\n")
            fh.truncate(size - len(tail) + cut + 1 if cut >= 0 else
                        (0 if size <= 65536 else size))

    def _write_parquet(self) -> None:
        if self._columns is None:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        data: dict[str, Any] = {}
        for i, name in enumerate(self._columns):
            vals = [r[i] for r in self._table]
            if name == "prompt_id" and len({type(v) for v in vals}) > 1:
                vals = [str(v) for v in vals]
            data[name] = vals
        table = pa.table({k: pa.array(v, type=None if k == "prompt_id" else pa.int64())
                          for k, v in data.items()})
        from lrdoctor.atomic import replacing

        self._rotate()  # an earlier log is kept beside the new one, not replaced
        with replacing(self.path, suffix=".tmp") as tmp:
            pq.write_table(table, tmp)


# ------------------------------------------------------------------ batches

def _rows(x: Any) -> int:
    return int(x.shape[0])


def tokens_per_sample(batch: Any) -> list[int] | None:
    """Per-sample token counts from a batch, or None when the batch does not say.

    ``attention_mask`` rows summed; else padding-free packing (``position_ids``
    restarting at 0 in a single row) split at the restarts; else ``input_ids``
    rows at their full length. A tuple/list batch: its first 2-D integer tensor.
    """
    if isinstance(batch, Mapping):
        am = batch.get("attention_mask")
        if am is not None and hasattr(am, "sum") and getattr(am, "ndim", 0) == 2:
            return [int(v) for v in am.sum(-1).tolist()]
        pos = batch.get("position_ids")
        if pos is not None and getattr(pos, "ndim", 0) == 2 and _rows(pos) == 1:
            p = pos[0].tolist()
            starts = [i for i, v in enumerate(p) if v == 0] or [0]
            return [b - a for a, b in zip(starts, [*starts[1:], len(p)], strict=True)]
        ids = batch.get("input_ids")
        if ids is not None and getattr(ids, "ndim", 0) == 2:
            return [int(ids.shape[1])] * _rows(ids)
        return None
    if isinstance(batch, (tuple, list)):
        for item in batch:
            got = tokens_per_sample(item) if isinstance(item, Mapping) else _int_rows(item)
            if got is not None:
                return got
        return None
    return _int_rows(batch)


def _int_rows(x: Any) -> list[int] | None:
    dtype = str(getattr(x, "dtype", ""))
    if getattr(x, "ndim", 0) == 2 and "int" in dtype:
        return [int(x.shape[1])] * _rows(x)
    return None
