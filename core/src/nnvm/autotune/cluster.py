"""Tuning on a Ray cluster (``nnvm tune --cluster``): builds on any node, measurements where the device is.

A device is a Ray custom resource that a node declares when it joins (``nnvm cluster join``, which
runs ``ray start --resources``): ``nnvm:llvm:znver5`` for a Zen 5 CPU, ``nnvm:aarch64`` for an Arm
board (or an x86 node that measures Arm code under qemu: its records say ``emulated``). A node
declares one unit, and a measurement asks for that unit and one CPU, so on a node joined with one CPU
a measurement never shares the device with another measurement or with a build.

``ClusterMeasurer`` is a measurer like ``nnvm.autotune.Measurer`` (``tune(..., measurer=...)``): the
driver keeps the search and the cost model and alone writes the log; each batch goes out as Ray tasks,
a build task per config (``num_cpus=1``, any node) and a measure task that depends on it (the device's
resource), and the results come back in completion order (``ray.wait``). Inside both tasks a worker
process keeps a ``Measurer`` child, so a crashing candidate kills only that child and a hung one is
timed out on the worker. What Ray gives is used as is: a worker process or node lost mid-task is
retried on another node with the resource (``max_retries``); a task still lost after that is logged as
an error, so every trial is accounted for.

A node whose repeats spread more than ``noise_limit`` (median round over the fastest) in most of its
measurements is reported once, and from then on its results are logged as errors naming it, so its
times are never mixed with a quiet node's.

This module imports ``ray`` (``pip install 'nnvm[cluster]'``); nothing imports it unless a cluster is
asked for.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import sys
import time

import ray
import ray.exceptions
from ray._private import ray_constants  # the uv hook's switch: see _workers_run_their_own_nnvm

from nnvm import environment
from nnvm.autotune.driver import signature_of
from nnvm.autotune.measure import Measurer, Result
from nnvm.errors import Error
from nnvm.options import Options, activated, active
from nnvm.target import parse_target

RESOURCE_PREFIX = "nnvm:"
NOISE_LIMIT = 0.2  # (median round - fastest) / fastest above which a measurement is noisy


def device_resource(target: str) -> str:
    """The Ray resource of the device ``target``'s kernels are measured on: ``nnvm:<kind>``, then for the
    host's own kind (``llvm``) its CPU (``nnvm:llvm:znver5``, from ``-mcpu`` or the host), for a target
    naming an architecture that one (``cuda -arch=sm_90``: ``nnvm:cuda:sm_90``)."""
    parsed = parse_target(target)
    parsed.backend.check_target(parsed)
    resource = RESOURCE_PREFIX + parsed.kind
    resolve = getattr(parsed.backend, "resolve", None)
    if parsed.kind == "llvm" and resolve is not None:
        resource += ":" + resolve(parsed).cpu
    elif parsed.options.get("arch"):
        resource += ":" + str(parsed.options["arch"])
    return resource


def check_reachable(address: str, timeout: float = 5.0) -> None:
    """A one-sentence ``Error`` when nothing answers at ``HOST:PORT`` (also ``ray://HOST:PORT``): Ray itself
    waits minutes for a head that is not there."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not host or not port.isdigit():
        raise Error(f"the cluster address {address!r} should be auto, ray://HOST:PORT or HOST:PORT")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise Error(f"nothing answers at {address} (is the Ray head running? ray start --head): "
                    f"{exc.strerror or exc}") from None


def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` (``auto``, ``ray://HOST:PORT`` or ``HOST:PORT``) as a driver;
    an unreachable cluster is a one-sentence ``Error``."""
    if ray.is_initialized():
        return
    if address != "auto":
        check_reachable(address)
    _workers_run_their_own_nnvm()
    # the driver's thread count is the measured kernels' (the one variable that says how they run)
    env = {"NNVM_NUM_THREADS": environment.num_threads()} if environment.num_threads() else {}
    try:
        ray.init(address=address, runtime_env={"env_vars": env} if env else None, logging_level="ERROR",
                 log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise Error(f"cannot reach the Ray cluster at {address}: {first}") from None


def _workers_run_their_own_nnvm() -> None:
    """A driver started by ``uv run`` (``make test``, a project's scripts) makes Ray start every worker
    through ``uv run`` in a copy of the driver's working directory (its uv runtime-env hook): each worker
    then builds an environment of its own, without nnvm or even Ray, and never starts. A farm node runs the
    nnvm installed on it, so the hook is off for this driver and the processes it starts."""
    os.environ["RAY_ENABLE_UV_RUN_RUNTIME_ENV"] = "0"
    ray_constants.RAY_ENABLE_UV_RUN_RUNTIME_ENV = False


# -- what runs on the workers ----------------------------------------------------------------------------

_MEASURERS: dict = {}  # measurer options -> this worker process's Measurer (its child lives across tasks)


def _measurer(options: tuple) -> Measurer:
    if options not in _MEASURERS:
        for old in _MEASURERS.values():
            old.close()
        _MEASURERS.clear()
        _MEASURERS[options] = Measurer(*options)
    return _MEASURERS[options]


def _node() -> str:
    return f"{socket.gethostname()}/{ray.get_runtime_context().get_node_id()[:8]}"


def _build_remote(task, config: dict, options: tuple, switches: tuple):
    start = time.time()
    with activated(Options(cpu_switches=dict(switches))):  # the driver's CPU switches
        built = _measurer(options).build(task, [config])[0]
    return built, {"kind": "build", "node": _node(), "start": start, "end": time.time()}


def _measure_remote(task, built_and_event, options: tuple, switches: tuple):
    built, build_event = built_and_event
    start = time.time()
    if isinstance(built, Result):  # the build failed: that is the config's result
        result = built
    else:
        with activated(Options(cpu_switches=dict(switches))):
            result = _measurer(options).run(task, [built])[0]
    result.node = _node()
    result.signature = signature_of(task.target)
    return result, [build_event, {"kind": "measure", "node": result.node, "start": start, "end": time.time()}]


def _signature_remote(target: str):
    return signature_of(target), _node()


# -- the driver side -----------------------------------------------------------------------------------------

class ClusterMeasurer:
    """Measures configs on a Ray cluster (see the module docstring). ``address``: ``auto``,
    ``ray://HOST:PORT`` or ``HOST:PORT``; ``retries``: how often a task lost with its worker or node is
    run again; ``timeout``, ``repeat``, ``min_repeat_ms``, ``check``: as ``Measurer``'s, applied on the
    workers. ``timeline`` collects one event per build and measurement (kind, node, start, end)."""

    def __init__(self, address: str = "auto", retries: int = 3, timeout: float = 20.0, repeat: int = 10,
                 min_repeat_ms: float = 5.0, check: bool = True, noise_limit: float = NOISE_LIMIT,
                 stream=None):
        self._owns_connection = not ray.is_initialized()  # else the caller's connection, left open
        connect(address)
        self.address = address
        self.retries = retries
        self.options = (timeout, repeat, min_repeat_ms, check)
        self.switches = tuple(sorted(dict((active() or Options()).cpu_switches).items()))
        self.noise_limit = noise_limit
        self.stream = stream or sys.stderr
        self.timeline: list = []
        self.noisy: set = set()  # nodes reported as measuring inconsistently
        self._spreads: dict = {}  # node -> [spread, ...]
        self._signatures: dict = {}
        self._build = ray.remote(num_cpus=1, max_retries=retries)(_build_remote)
        self._measure = ray.remote(num_cpus=1, max_retries=retries)(_measure_remote)
        self._sign = ray.remote(num_cpus=0, max_retries=retries)(_signature_remote)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        """Leave the cluster, if this measurer joined it (the cluster itself keeps running)."""
        if self._owns_connection and ray.is_initialized():
            ray.shutdown()

    def devices(self, target: str) -> int:
        """How many devices of ``target`` the cluster has now; none is a one-sentence ``Error``."""
        resource = device_resource(target)
        count = int(ray.cluster_resources().get(resource, 0))
        if count < 1:
            kind = parse_target(target).kind
            raise Error(f"no node of the Ray cluster at {self.address} has the device resource {resource}; "
                        f"start one with: nnvm cluster join --address HEAD:PORT --target {kind}")
        return count

    def signature(self, target: str):
        """The CPU signature a device node of ``target`` writes into its records (``emulated`` for a node
        that runs the code under qemu), so the driver resumes from that node kind's records."""
        if target not in self._signatures:
            resource = device_resource(target)
            self.devices(target)
            ref = self._sign.options(resources={resource: 1}).remote(target)
            self._signatures[target] = ray.get(ref)[0]
        return self._signatures[target]

    def measure(self, task, configs: list) -> list[Result]:
        """Build and time each config of ``task`` on the cluster; results in the order of ``configs``."""
        resource = device_resource(task.target)
        self.devices(task.target)
        task_ref = ray.put(task)
        builds = [self._build.remote(task_ref, c, self.options, self.switches) for c in configs]
        measure = self._measure.options(resources={resource: 1})
        pending = {measure.remote(task_ref, b, self.options, self.switches): k
                   for k, b in enumerate(builds)}
        results: list = [None] * len(configs)
        while pending:  # completion order: a slow config does not hold up the others' bookkeeping
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                k = pending.pop(ref)
                results[k] = self._collect(ref)
        return results

    def _collect(self, ref) -> Result:
        try:
            result, events = ray.get(ref)
        except ray.exceptions.RayTaskError as exc:  # an nnvm bug in the task itself: say it, go on
            return Result(None, f"the cluster task failed: {_first_line(exc.cause or exc)}")
        except ray.exceptions.RayError as exc:  # worker or node lost more often than ``retries`` allows
            return Result(None, f"lost on the cluster after {self.retries} retries: {_first_line(exc)}")
        self.timeline += events
        if result.spread is not None and result.node is not None:
            self._note_spread(result.node, result.spread)
        if result.node in self.noisy and result.error is None:
            return Result(None, f"noisy device: node {result.node} measures inconsistently (repeats spread "
                                f"{100 * result.spread:.0f}%)", result.spread, result.emulated,
                          result.signature, result.node)
        return result

    def _note_spread(self, node: str, spread: float) -> None:
        seen = self._spreads.setdefault(node, [])
        seen.append(spread)
        noisy = sum(1 for s in seen if s > self.noise_limit)
        if node not in self.noisy and noisy >= 3 and 2 * noisy > len(seen):
            self.noisy.add(node)
            self.stream.write(f"nnvm: node {node} measures inconsistently ({noisy} of {len(seen)} configs' "
                              f"repeats spread over {100 * self.noise_limit:.0f}%); its results are logged "
                              f"as errors from now on\n")
            self.stream.flush()


def _first_line(exc: BaseException) -> str:
    text = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    return text[0] if text else type(exc).__name__


def join_command(address: str, target: str, num_cpus: int = 1) -> list[str]:
    """The ``ray start`` command that joins this machine to the cluster at ``address`` as a node with
    ``target``'s device (and ``num_cpus`` CPUs: 1 keeps builds off a device while it measures)."""
    resource = device_resource(target)
    return ["ray", "start", "--address", address, "--num-cpus", str(num_cpus),
            "--resources", json.dumps({resource: 1})]


def describe_device(target: str) -> str:
    """One line on what a node joined for ``target`` measures: the resource, and whether under qemu."""
    parsed = parse_target(target)
    emulated = not parsed.backend.host_can_run(parsed)
    how = (f" under an emulator on this {platform.machine()} host (records say emulated: good for testing "
           f"the path, never for shipping a log)" if emulated else "")
    return f"device {device_resource(target)}{how}"
