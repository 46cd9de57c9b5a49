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


@dataclass
class Result:
    """The outcome of one config: seconds per run, or an error sentence."""

    seconds: float | None
    error: str | None = None


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

    def measure(self, task, configs: list) -> list[Result]:
        """Measure each config of ``task`` (an ``nnvm.autotune.Task``), in order."""
        results = []
        for config in configs:
            if self._proc is None or self._task is not task:
                # the child compiles under the CPU switches of the options active here
                switches = dict((active() or Options()).cpu_switches)
                reply = self._request(("setup", task, self.check, switches), self.setup_timeout)
                if reply[0] != "ok":  # the same for every config: do not pay the setup again
                    failed = Result(None, f"task setup failed: {reply[1]}")
                    results += [failed] * (len(configs) - len(results))
                    break
                self._task = task
            reply = self._request(("measure", config, self.repeat, self.min_repeat_ms), self.timeout)
            results.append(Result(reply[1], None) if reply[0] == "ok" else Result(None, reply[1]))
        return results


# -- the child side -----------------------------------------------------------------------------------

def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


class _Worker:
    def __init__(self):
        self.state = None
        self.options = Options()

    def setup(self, task, check: bool, switches: dict) -> None:
        self.options = Options(cpu_switches=switches)
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
        self.state = {"template": template, "args": args, "arrays": arrays, "outputs": outputs,
                      "target": target, "reference": None}
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
        func = lower_schedule(schedule, st["args"], "nnvm_tune_candidate")
        library = st["target"].backend.build([func], st["target"])
        return library, kernel_from_address(library.address("nnvm_tune_candidate"))

    @staticmethod
    def _call(fn, arrays) -> None:
        ptrs = pointer_array(arrays)
        rc = fn[1](ctypes.cast(ptrs, ctypes.c_void_p))
        if rc != 0:
            raise RuntimeError(f"the kernel returned status {rc}")

    def measure(self, config: dict, repeat: int, min_repeat_ms: float) -> float:
        st = self.state
        fn = self._build(st["template"].apply(config))
        arrays = self._fresh_arrays()
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
        return min(rounds)  # the round least disturbed by whatever else the machine runs


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
            elif kind == "measure":
                with activated(worker.options):
                    _send(write_fd, ("ok", worker.measure(*message[1:])))
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
    _worker_main(int(sys.argv[1]), int(sys.argv[2]))

