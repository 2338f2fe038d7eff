"""Running independent pieces of work side by side, on engines that exist.

Three shapes, all returning results in input order so output never depends on
which worker finished first:

- :func:`threads` for I/O (rank files, the checkpoints of a run, remote reads):
  a bounded :class:`~concurrent.futures.ThreadPoolExecutor`;
- :func:`run_map` for CPU work (a fleet of runs for ``check``, a ``replay
  --sweep``): a local process pool (``executor="process"``, the default) or
  Ray (``executor="ray"``, the ``lrdoctor[ray]`` extra). No scheduler of our
  own: the engine queues, we only ask for the results in order.

``jobs=1`` runs inline (no pool, no pickling), which is also what the tests
compare the pools against.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from lrdoctor.core.errors import UnusableInput

T = TypeVar("T")
R = TypeVar("R")

EXECUTORS = ("process", "ray")
# Concurrent reads per run: enough to hide a store's latency, few enough to be
# polite to it and to a laptop's file handles.
MAX_IO_THREADS = 16


def io_workers(n_items: int) -> int:
    return max(1, min(MAX_IO_THREADS, n_items))


def threads(fn: Callable[[T], R], items: Sequence[T], workers: int | None = None) -> list[R]:
    """``[fn(x) for x in items]`` on a bounded thread pool (I/O-bound work).

    The first exception (in input order) is raised, as the loop would.
    """
    items = list(items)
    n = io_workers(len(items)) if workers is None else max(1, min(workers, len(items)))
    if n <= 1 or len(items) <= 1:
        return [fn(x) for x in items]
    from concurrent.futures import ThreadPoolExecutor
    from contextvars import copy_context

    # Each item runs in a copy of the caller's context (what a reader records for the
    # evidence collector, lrdoctor.read.bytes.seen, reaches the caller's list).
    ctxs = [copy_context() for _ in items]
    with ThreadPoolExecutor(max_workers=n, thread_name_prefix="lrdoctor-io") as pool:
        return list(pool.map(lambda c, x: c.run(fn, x), ctxs, items))


def check_executor(executor: str) -> str:
    if executor not in EXECUTORS:
        raise UnusableInput(f"--executor {executor!r}: allowed: {', '.join(EXECUTORS)}")
    if executor == "ray":
        import importlib.util

        if importlib.util.find_spec("ray") is None:
            from lrdoctor.extras import MissingExtra

            raise MissingExtra("ray", "--executor ray")
    return executor


def run_map(fn: Callable[[T], R], items: Iterable[T], *, jobs: int = 1,
            executor: str = "process", progress: Callable[[int, int], None] | None = None,
            preload: Sequence[str] = ()) -> list[R]:
    """``[fn(x) for x in items]`` on ``jobs`` workers of ``executor``, in input order.

    ``fn`` and the items must pickle (a module-level function, plain data).
    ``progress(done, total)`` is called as results arrive. ``preload``: modules
    the process pool's server imports once, so workers start with them loaded.
    """
    items = list(items)
    total = len(items)
    check_executor(executor)
    if jobs < 1:
        raise UnusableInput(f"--jobs {jobs}: give 1 or more")
    if executor == "ray":
        return _ray_map(fn, items, jobs, progress)
    if jobs == 1 or total <= 1:
        out = []
        for i, x in enumerate(items):
            out.append(fn(x))
            if progress:
                progress(i + 1, total)
        return out
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    # forkserver, not fork: the parent may hold threads (an fsspec event loop, torch's
    # pools). The server imports fn's module once; workers fork from it ready to go.
    method = "forkserver" if sys.platform.startswith("linux") else None
    ctx = multiprocessing.get_context(method)
    if method == "forkserver":
        ctx.set_forkserver_preload([getattr(fn, "__module__", "lrdoctor"), *preload])
    results: list[Any] = [None] * total
    # Workers see the environment as it is now (credentials, AWS_ENDPOINT_URL), not as
    # it was when the fork server started.
    with ProcessPoolExecutor(max_workers=min(jobs, total), mp_context=ctx,
                             initializer=_set_environ, initargs=(dict(os.environ),)) as pool:
        futures = {pool.submit(fn, x): i for i, x in enumerate(items)}
        for done, fut in enumerate(as_completed(futures), 1):
            results[futures[fut]] = fut.result()
            if progress:
                progress(done, total)
    return results


def _set_environ(env: dict[str, str]) -> None:
    os.environ.clear()
    os.environ.update(env)


def _ray_map(fn: Callable[[T], R], items: list[T], jobs: int,
             progress: Callable[[int, int], None] | None) -> list[R]:
    import ray

    if not ray.is_initialized():
        # A local Ray unless RAY_ADDRESS names a cluster (Ray's own convention).
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False,
                                  "configure_logging": False}
        if not os.environ.get("RAY_ADDRESS"):
            kwargs["num_cpus"] = jobs
        ray.init(**kwargs)
    task = ray.remote(num_cpus=1)(fn)
    refs = [task.remote(x) for x in items]
    index = {r: i for i, r in enumerate(refs)}
    results: list[Any] = [None] * len(items)
    pending, done = list(refs), 0
    while pending:  # bounded: each round removes at least one finished task
        ready, pending = ray.wait(pending, num_returns=1)
        for r in ready:
            results[index[r]] = ray.get(r)
            done += 1
            if progress:
                progress(done, len(items))
    return results

