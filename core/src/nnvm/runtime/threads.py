"""The default team size of parallel kernels: one thread per physical core.

Compiled kernels read ``NNVM_NUM_THREADS`` once, at their first parallel loop (the LLVM backends'
``nnvm_llvm_num_threads``, computed by their thread pool, ``nnvm_pool.c``), and fall back to
``OMP_NUM_THREADS``, then to the logical CPUs the process may use: two threads per core with SMT, and
sibling hyper-threads only fight over one core's vector units.
Counting physical cores is easy here and awkward in generated code, so the Python runtime sets the
variable before it hands out the first kernel (``kernel_from_address``), for modules compiled in this
process and ones ``nnvm.load`` reads alike. ``NNVM_NUM_THREADS`` or ``OMP_NUM_THREADS`` set by the
user win.
"""

from __future__ import annotations

import glob
import os
import threading
from concurrent.futures import ThreadPoolExecutor

from nnvm import environment
from nnvm.errors import Error

ENV = environment.NUM_THREADS  # set here for the thread pool, which reads it (nnvm.environment says why)


def physical_cores() -> int:
    """Distinct (package, core) pairs among the CPUs this process may run on; the CPU count if the
    topology cannot be read (not Linux, no sysfs)."""
    try:
        allowed = os.sched_getaffinity(0)
    except (AttributeError, OSError):
        allowed = None
    cores = set()
    for path in glob.glob("/sys/devices/system/cpu/cpu[0-9]*/topology/core_id"):
        cpu_dir = os.path.dirname(os.path.dirname(path))
        cpu = int(os.path.basename(cpu_dir)[3:])
        if allowed is not None and cpu not in allowed:
            continue
        try:
            with open(path) as f:
                core = f.read().strip()
            with open(os.path.join(cpu_dir, "topology", "physical_package_id")) as f:
                package = f.read().strip()
        except OSError:
            continue
        cores.add((package, core))
    if cores:
        return len(cores)
    return len(allowed) if allowed else (os.cpu_count() or 1)


def set_default_threads() -> None:
    """Set ``NNVM_NUM_THREADS`` to the physical core count unless the user chose a team size; refuse a
    ``NNVM_POOL_AFFINITY`` other than 0 or 1, which the thread pool would read as on without a word."""
    affinity = environment.pool_affinity()
    if affinity not in ("", "0", "1"):
        raise Error(f"NNVM_POOL_AFFINITY={affinity!r}: must be 0 (one shared counter) or 1 (unset: each "
                    "thread its own run of a loop's chunks first)")
    if not environment.num_threads() and not os.environ.get("OMP_NUM_THREADS"):
        os.environ[ENV] = str(physical_cores())


def team_size() -> int:
    """The number of threads one parallel kernel runs on (what ``set_default_threads`` chose, or the
    user's ``NNVM_NUM_THREADS``/``OMP_NUM_THREADS``)."""
    for value in (environment.num_threads(), os.environ.get("OMP_NUM_THREADS", "")):
        try:
            return max(1, int(value.split(",")[0]))
        except ValueError:
            continue
    return physical_cores()


_RUNNER: ThreadPoolExecutor | None = None
_SLOTS: threading.BoundedSemaphore | None = None  # one per runner thread: runs whose kernels may go on now
_QUEUED = 0  # runs submitted to the runner and not started yet
_RUNNER_LOCK = threading.Lock()
_ON_RUNNER = threading.local()  # ``active`` is True on the runner's own threads


def _forget_runner_in_child() -> None:
    """A forked child has none of the parent's threads: it starts its own runner, with a fresh lock (the
    parent's may have been held by another thread at the fork)."""
    global _RUNNER, _SLOTS, _QUEUED, _RUNNER_LOCK
    _RUNNER, _SLOTS, _QUEUED, _RUNNER_LOCK = None, None, 0, threading.Lock()


os.register_at_fork(after_in_child=_forget_runner_in_child)


def on_kernel_runner() -> bool:
    """True on a kernel-runner thread, where a run must go on inline (waiting for a runner there could
    wait for itself)."""
    return getattr(_ON_RUNNER, "active", False)


def _mark_runner_thread() -> None:
    _ON_RUNNER.active = True


def kernel_runner() -> ThreadPoolExecutor:
    """The threads that run compiled kernels for every module of this process: as many as there are
    teams of ``team_size()`` threads in the physical cores, at least one.

    A run's kernels go to one of these threads rather than running on the caller's (``run_kernels``
    says when the main thread may run them itself). A library's thread pool runs one parallel loop at a
    time with the whole team, and a loop started meanwhile runs on its caller's thread alone; more runs
    at once than the cores hold teams only fight over the cores (with libgomp, one team per calling
    thread, 4 threads x 20 runs of MobileNetV2 took twice as long as the 80 runs one after another).
    With ``NNVM_NUM_THREADS=1`` every core runs a model of its own. A forked child makes its own.
    """
    global _RUNNER, _SLOTS
    with _RUNNER_LOCK:
        if _RUNNER is None:
            workers = max(1, physical_cores() // team_size())
            _SLOTS = threading.BoundedSemaphore(workers)
            _RUNNER = ThreadPoolExecutor(workers, "nnvm-kernels", _mark_runner_thread)
        return _RUNNER


def run_kernels(fn, *args):
    """``fn(*args)``, a run's kernels, where they may run: inline on a runner thread; inline on the
    main thread when a slot is free and no run waits for one (a single-threaded program, the common case,
    so pays no hand-over: about 70 us a run, measured, which is most of a small model's time); otherwise
    on the runner, in turn. The slots keep the teams at work at once to what the cores hold, the main
    thread's team counted."""
    global _QUEUED
    if on_kernel_runner():
        return fn(*args)
    runner = kernel_runner()
    slots = _SLOTS
    if threading.current_thread() is threading.main_thread():
        with _RUNNER_LOCK:
            inline = _QUEUED == 0 and slots.acquire(blocking=False)
        if inline:
            try:
                return fn(*args)
            finally:
                slots.release()

    def in_turn():
        global _QUEUED
        with _RUNNER_LOCK:
            _QUEUED -= 1
        with slots:
            return fn(*args)

    with _RUNNER_LOCK:
        _QUEUED += 1
    return runner.submit(in_turn).result()
