"""Compiling a model's distinct kernels: from the kernel cache where it has them, the rest in parallel.

The compiler hands ``compile_kernels`` one ``KernelJob`` per distinct kernel (identical groups already
share one) and a function making one kernel's bytes (lowering plus the backend's ``compile_kernel``).
Each job is looked up in the ``KernelCache`` by its key; the misses are compiled, in ``jobs`` worker
processes when there are enough of them, and written back to the cache.

Why processes and not threads: most of a kernel's compile is Python (schedule, lowering, the simplifier,
the LLVM code generator), which holds the GIL; only LLVM's O3 and code generation release it (about a
third of the time on ResNet-18). Workers are forked, so they inherit the graph, schedules and plugins
and receive only a job's index; they send back bytes. A fork while other threads of this process run
could copy a lock one of them holds, so the automatic choice (``jobs=None``) forks only from a process
with a single Python thread; an explicit ``jobs`` is honoured. A worker that fails for any reason
(even a kernel whose compile raises an ``nnvm.Error``) makes the parent compile that job itself, so the
user sees the same error, with its context, that a serial compile gives.
"""

from __future__ import annotations

import concurrent.futures
import gc
import multiprocessing
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from nnvm.kernel_cache import KernelCache

MIN_PARALLEL_MISSES = 4  # fewer kernels to compile: forking costs more than it saves


@dataclass
class KernelJob:
    """One distinct kernel: its name (derived from ``key``), its cache key, and what the compiler needs
    to lower it (``payload``: opaque here)."""

    name: str
    key: str
    payload: object = None


@dataclass
class KernelCounts:
    """How the distinct kernels of one compile were obtained (for ``mod.stats()``)."""

    compiled: int = 0
    cached: int = 0
    jobs: int = 1
    cache_dir: str | None = None

    def to_dict(self) -> dict:
        return {"compiled": self.compiled, "cached": self.cached, "jobs": self.jobs,
                "cache_dir": self.cache_dir}


def default_jobs() -> int:
    """Worker processes when the caller does not say: the CPUs this process may use, but 1 when other
    Python threads run (see the module docstring) or where ``fork`` does not exist."""
    if threading.active_count() > 1 or "fork" not in multiprocessing.get_all_start_methods():
        return 1
    return max(1, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)


def compile_kernels(jobs: list, make: Callable[[KernelJob], bytes], cache: KernelCache | None,
                    n_jobs: int | None = None, validate: Callable[[bytes], bool] | None = None,
                    read_cache: bool = True) -> tuple[list, KernelCounts]:
    """``(bytes per job, counts)``: each job's kernel from ``cache`` (when ``read_cache``, and the entry
    passes ``validate``), else made by ``make`` (in parallel when ``n_jobs`` > 1) and written to the
    cache. ``n_jobs`` None: ``default_jobs()``."""
    counts = KernelCounts(cache_dir=str(cache.directory) if cache is not None else None)
    results: list = [None] * len(jobs)
    if cache is not None and read_cache:
        for i, job in enumerate(jobs):
            data = cache.get(job.key)
            if data is not None and (validate is None or validate(data)):
                results[i] = data
    misses = [i for i, r in enumerate(results) if r is None]
    counts.cached = len(jobs) - len(misses)
    n_jobs = default_jobs() if n_jobs is None else max(1, int(n_jobs))
    n_jobs = min(n_jobs, len(misses)) if len(misses) >= MIN_PARALLEL_MISSES else 1
    counts.jobs = n_jobs
    if n_jobs > 1:
        made = _in_workers([jobs[i] for i in misses], make, n_jobs)
    else:
        made = [None] * len(misses)
    for i, data in zip(misses, made):
        if data is None:  # serial, or a worker failed: here, so any error is raised as it would be
            data = make(jobs[i])
        results[i] = data
        if cache is not None:
            cache.put(jobs[i].key, data)
    counts.compiled = len(misses)
    if cache is not None and misses:
        cache.evict()
    return results, counts


# What forked workers run: set in the parent just before the pool forks, read by the children.
_WORK: tuple = ()


def _run_job(index: int) -> bytes | None:
    jobs, make = _WORK
    try:
        return make(jobs[index])
    except BaseException:  # the parent compiles it again and raises the error itself
        return None


def _worker_gc() -> None:
    """A worker's garbage collector set for lowering: what it inherited is frozen (never scanned, so
    never copied by a scan's writes), and it collects after 200,000 allocations rather than 700. Lowering
    allocates millions of small acyclic nodes, which the default thresholds scanned over and over (5% of
    a compile)."""
    gc.freeze()
    gc.set_threshold(200_000, 50, 50)


def _in_workers(jobs: list, make: Callable[[KernelJob], bytes], n_jobs: int) -> list:
    """Each job's bytes made in ``n_jobs`` forked processes (None where a worker failed)."""
    global _WORK
    _WORK = (jobs, make)
    try:
        context = multiprocessing.get_context("fork")
        pool = concurrent.futures.ProcessPoolExecutor(n_jobs, mp_context=context, initializer=_worker_gc)
        with pool:
            return list(pool.map(_run_job, range(len(jobs)), chunksize=1))
    except (OSError, concurrent.futures.process.BrokenProcessPool):
        return [None] * len(jobs)
    finally:
        _WORK = ()
