"""Measuring configs in a child process, so a candidate that crashes, hangs or corrupts memory cannot
stop tuning.

The parent starts ``python -m nnvm.autotune.measure`` with two pipes of its own (stdout and stderr
stay free for whatever a kernel or LLVM prints; stderr goes to a file whose tail explains a crash) and
sends it pickled requests. The child rebuilds the task's template once, makes seeded random inputs,
and computes reference outputs with the core's generic schedule; then, per config: build (lower the
template's schedule, compile with the target's backend), one warm-up run checked against the
reference, and ``repeat`` timed rounds of ``number`` runs each (``number`` chosen so a round lasts
about ``min_repeat_ms``); the fastest round gives the seconds per run (on a shared machine the
fastest round is the one least disturbed by other work, so it ranks configs most reliably). A reply
later than ``timeout`` seconds, or a child that dies, is an error for that config: the child is
killed and a fresh one started for the next config.

Building and timing are two steps with bytes between them (``Built``: the backend's
``compile_kernel`` output), so a cluster (``cluster.py``) can build on any node and time on the node
that has the device; ``measure`` runs both steps in one child, so local and cluster records agree. A
kernel this process cannot call (an Arm kernel on x86) is timed by its library under the emulator
(``KernelLibrary.time_kernel``), and its result says ``emulated``: good for testing the path, never for
shipping a log.
"""

from __future__ import annotations

import ctypes
import math
import os
import pickle
import select
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import numpy as np

from nnvm.autotune.task import register_plugins
from nnvm.generic_schedule import generic_schedule
from nnvm.options import Options, activated, active
from nnvm.runtime.kernel import kernel_from_address, pointer_array
from nnvm.target import parse_target
from nnvm.te.lower import lower_schedule
from nnvm.te.tensor import PlaceholderOp

WRONG_RESULT_TOLERANCE = 1e-3  # max |candidate - reference| / max |reference|
KERNEL_NAME = "nnvm_tune_candidate"


@dataclass
class Result:
    """The outcome of one config: seconds per run, or an error sentence. ``spread``: how far the median
    round is above the fastest, relative (a quiet device stays well under 0.2); ``emulated``: timed
    under an emulator."""

    seconds: float | None
    error: str | None = None
    spread: float | None = None
    emulated: bool = False
    signature: object = None  # the measuring machine's CPUSignature when it is not the driver's (a cluster)
    node: str | None = None  # the cluster node that measured it


@dataclass
class Built:
    """One config built for measuring elsewhere: the backend's compiled kernel (``Backend.
    compile_kernel``), or None for a backend that compiles whole libraries only (the measuring side
    then builds the config itself)."""

    config: dict
    kernel: bytes | None
    seconds: float  # spent building


# -- framing: 8-byte length, then a pickle ---------------------------------------------------------

def _send(fd: int, obj) -> None:
    data = pickle.dumps(obj)
    view = memoryview(struct.pack("<Q", len(data)) + data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: float | None) -> bytes:
    chunks = []
    while n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise TimeoutError
        chunk = os.read(fd, n)
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _recv(fd: int, timeout: float | None = None):
    deadline = None if timeout is None else time.monotonic() + timeout
    (size,) = struct.unpack("<Q", _read_exact(fd, 8, deadline))
    return pickle.loads(_read_exact(fd, size, deadline))


# -- the parent side --------------------------------------------------------------------------------

class Measurer:
    """Measures configs of tasks in one child process at a time (restarted after a crash or time-out).

    ``timeout``: seconds allowed for one config (build + runs); ``setup_timeout``: for starting the
    child and preparing a task (template, inputs, reference outputs). ``check``: compare every
    candidate's outputs with the reference and record a mismatch as an error. Many short rounds
    (``repeat`` of about ``min_repeat_ms`` each) rather than a few long ones: when other programs
    share the cores, a parallel kernel whose thread is preempted waits a whole time slice at its
    barrier, and only short rounds leave some undisturbed ones for the minimum to find.
    """

    def __init__(self, timeout: float = 20.0, repeat: int = 10, min_repeat_ms: float = 5.0,
                 check: bool = True, setup_timeout: float = 300.0):
        self.timeout = timeout
        self.repeat = repeat
        self.min_repeat_ms = min_repeat_ms
        self.check = check
        self.setup_timeout = setup_timeout
        self._proc = None
        self._task = None
        self._stderr = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _start(self) -> None:
        parent_r, child_w = os.pipe()
        child_r, parent_w = os.pipe()
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "nnvm.autotune.measure", str(child_r), str(child_w)],
            pass_fds=(child_r, child_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=self._stderr)
        os.close(child_r)
        os.close(child_w)
        self._r, self._w = parent_r, parent_w
        self._task = None

    def close(self) -> None:
        """Stop the child (it is also stopped when the parent exits: its request pipe closes)."""
        if self._proc is None:
            return
        try:
            _send(self._w, ("exit",))
        except OSError:
            pass
        for fd in (self._r, self._w):
            os.close(fd)
        try:
            self._proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        self._stderr.close()
        self._proc = None

    def _kill(self) -> None:
        self._proc.kill()
        self._proc.wait()
        for fd in (self._r, self._w):
            os.close(fd)
        self._stderr.close()
        self._proc = None

    def _death_note(self) -> str:
        """Why the child died: its exit signal or status, and the last line it wrote to stderr."""
        rc = self._proc.wait()
        how = f"signal {-rc}" if rc < 0 else f"status {rc}"
        self._stderr.seek(0)
        tail = [ln for ln in self._stderr.read().decode(errors="replace").splitlines() if ln.strip()]
        return f"the measuring process died ({how})" + (f": {tail[-1].strip()}" if tail else "")

    def _request(self, message, timeout: float):
        """The child's reply, or an ``("error", sentence)`` after a time-out or the child's death."""
        if self._proc is None:
            self._start()
        try:
            _send(self._w, message)
            return _recv(self._r, timeout)
        except TimeoutError:
            self._kill()
            return ("error", f"timed out after {timeout:g} s")
        except (EOFError, OSError):
            note = self._death_note()
            self._kill()
            return ("error", note)

    def _each(self, task, items: list, check: bool, message, reply_to) -> list:
        """One request per item (after the task's setup, when the child lacks it), replies in order."""
        results = []
        # the child compiles under the CPU switches of the options active here
        switches = dict((active() or Options()).cpu_switches)
        for item in items:
            if self._proc is None or self._task != (task, check, switches):
                reply = self._request(("setup", task, check, switches), self.setup_timeout)
                if reply[0] != "ok":  # the same for every config: do not pay the setup again
                    failed = Result(None, f"task setup failed: {reply[1]}")
                    results += [failed] * (len(items) - len(results))
                    break
                self._task = (task, check, switches)
            reply = self._request(message(item), self.timeout)
            results.append(reply_to(reply[1]) if reply[0] == "ok" else Result(None, reply[1]))
        return results

    def measure(self, task, configs: list) -> list[Result]:
        """Build and time each config of ``task`` (an ``nnvm.autotune.Task``), in order."""
        return self._each(task, configs, self.check,
                          lambda c: ("measure", c, self.repeat, self.min_repeat_ms), _timed)

    def build(self, task, configs: list) -> list:
        """Build each config: a ``Built`` each, or a ``Result`` with the error."""
        return self._each(task, configs, False, lambda c: ("build", c), lambda b: b)

    def run(self, task, built: list) -> list[Result]:
        """Time each ``Built`` of ``task`` (checked against the reference when ``check``), in order."""
        return self._each(task, built, self.check,
                          lambda b: ("run", b, self.repeat, self.min_repeat_ms), _timed)


def _timed(reply: tuple) -> Result:
    seconds, spread, emulated = reply
    return Result(seconds, None, spread, emulated)


# -- the child side -----------------------------------------------------------------------------------

def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class _Worker:
    def __init__(self):
        self.state = None
        self.options = Options()

    def setup(self, task, check: bool, switches: dict) -> None:
        options = Options(cpu_switches=switches)
        if dict(options.cpu_switches) != dict(self.options.cpu_switches):
            self.state = None  # built under other switches: set up afresh
        self.options = options
        st = self.state
        if st is not None and st["task"] == task:  # builds and measurements take turns on a cluster node
            if check and not st["checked"]:
                st["reference"], st["checked"] = self._reference(), True
            return
        register_plugins(task.extra_plugins)
        template, args = task.instantiate()
        rng = np.random.default_rng(0)
        arrays, outputs = [], []
        for k, t in enumerate(args):
            shape = tuple(int(getattr(s, "value", s)) for s in t.shape)
            if isinstance(t.op, PlaceholderOp):
                dtype = np.dtype(t.dtype)
                arrays.append(rng.standard_normal(shape).astype(dtype) if dtype.kind == "f"
                              else np.zeros(shape, dtype))
            else:
                arrays.append(np.zeros(shape, t.dtype))
                outputs.append(k)
        target = parse_target(task.target)
        self.state = {"task": task, "template": template, "args": args, "arrays": arrays, "outputs": outputs,
                      "target": target, "reference": None, "checked": check}
        if check:
            self.state["reference"] = self._reference()

    def _reference(self):
        """Outputs of the generic schedule (else the fallback config) on the inputs, or None."""
        st = self.state
        outs = [st["args"][k] for k in st["outputs"]]
        for make in (lambda: generic_schedule(outs, st["target"]), lambda: st["template"].apply(None)):
            try:
                fn = self._build(make())
                arrays = self._fresh_arrays()
                self._call(fn, arrays)
                return [arrays[k].copy() for k in st["outputs"]]
            except Exception:  # noqa: BLE001 - no reference: candidates go unchecked
                continue
        return None

    def _fresh_arrays(self):
        st = self.state
        return [np.zeros_like(a) if k in st["outputs"] else a for k, a in enumerate(st["arrays"])]

    def _build(self, schedule):
        st = self.state
        func = lower_schedule(schedule, st["args"], KERNEL_NAME)
        library = st["target"].backend.build([func], st["target"])
        return library, kernel_from_address(library.address(KERNEL_NAME))

    @staticmethod
    def _call(fn, arrays) -> None:
        ptrs = pointer_array(arrays)
        rc = fn[1](ctypes.cast(ptrs, ctypes.c_void_p))
        if rc != 0:
            raise RuntimeError(f"the kernel returned status {rc}")

    def build(self, config: dict) -> Built:
        """Lower the config's schedule and compile it into the backend's kernel bytes."""
        st = self.state
        start = time.perf_counter()
        func = lower_schedule(st["template"].apply(config), st["args"], KERNEL_NAME)
        backend, target = st["target"].backend, st["target"]
        kernel = backend.compile_kernel(func, target) if backend.kernel_identity(target) is not None else None
        return Built(dict(config), kernel, time.perf_counter() - start)

    def run(self, built: Built, repeat: int, min_repeat_ms: float) -> tuple:
        """``(seconds, spread, emulated)`` of a built config: linked, checked once, timed."""
        st = self.state
        backend, target = st["target"].backend, st["target"]
        if built.kernel is None:
            library = backend.build([lower_schedule(st["template"].apply(built.config), st["args"],
                                                    KERNEL_NAME)], target)
        else:
            library = backend.link_kernels([built.kernel], target)
        arrays = self._fresh_arrays()
        if not library.runs_in_process():  # another CPU's code: its library times it under the emulator
            rounds = library.time_kernel(KERNEL_NAME, arrays, max(1, repeat), min_repeat_ms)
            return min(rounds), _spread(rounds), True
        fn = (library, kernel_from_address(library.address(KERNEL_NAME)))
        start = time.perf_counter()
        self._call(fn, arrays)
        first = time.perf_counter() - start
        if st["reference"] is not None:
            err = relative_error([arrays[k] for k in st["outputs"]], st["reference"])
            if not math.isfinite(err) or err > WRONG_RESULT_TOLERANCE:
                raise RuntimeError(f"wrong result: max relative error {err:.2e} against the generic schedule")
        number = max(1, min(10000, math.ceil(min_repeat_ms / 1e3 / max(first, 1e-7))))
        ptrs = pointer_array(arrays)
        arg = ctypes.cast(ptrs, ctypes.c_void_p)
        kernel = fn[1]
        rounds = []
        for _ in range(max(1, repeat)):
            start = time.perf_counter()
            for _ in range(number):
                kernel(arg)
            rounds.append((time.perf_counter() - start) / number)
        return min(rounds), _spread(rounds), False  # the round least disturbed by other work

    def measure(self, config: dict, repeat: int, min_repeat_ms: float) -> tuple:
        return self.run(self.build(config), repeat, min_repeat_ms)


def _spread(rounds: list) -> float:
    """(median - fastest) / fastest: near 0 on a quiet device."""
    fastest = min(rounds)
    return float(np.median(rounds)) / fastest - 1.0 if fastest > 0 else 0.0


def _worker_main(read_fd: int, write_fd: int) -> None:
    worker = _Worker()
    while True:
        try:
            message = _recv(read_fd)
        except EOFError:
            return
        kind = message[0]
        if kind == "exit":
            return
        try:
            if kind == "setup":
                with activated(Options(cpu_switches=message[3])):
                    worker.setup(*message[1:])
                _send(write_fd, ("ok", None))
            elif kind in ("measure", "build", "run"):
                with activated(worker.options):
                    _send(write_fd, ("ok", getattr(worker, kind)(*message[1:])))
            else:
                _send(write_fd, ("error", f"unknown request {kind!r}"))
        except Exception as exc:  # noqa: BLE001 - a failing candidate is a result, not a crash
            _send(write_fd, ("error", _first_line(exc)))


def relative_error(got: list, want: list) -> float:
    """max |got - want| / max |want| over all outputs; inf when shapes differ."""
    worst = 0.0
    for g, w in zip(got, want):
        w = np.asarray(w)
        if g.shape != w.shape:
            return math.inf
        scale = max(float(np.abs(w).max()) if w.size else 0.0, 1e-30)
        worst = max(worst, float(np.abs(g.astype(np.float64) - w).max()) / scale if w.size else 0.0)
    return worst


if __name__ == "__main__":
    # Through the imported module, not ``__main__``: the ``Built`` it pickles back must unpickle as
    # ``nnvm.autotune.measure.Built`` in the parent.
    from nnvm.autotune import measure

    measure._worker_main(int(sys.argv[1]), int(sys.argv[2]))

