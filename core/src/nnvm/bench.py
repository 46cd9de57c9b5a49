"""``nnvm bench``: time a compiled model, optionally against onnxruntime, and profile its kernels.

Both runtimes get the same seeded input and the same number of threads; their timed runs alternate
(one of ours, one of theirs) so a noisy neighbour or a clock change hurts both alike. The latency is
the median of ``repeat`` runs after a warm-up. onnxruntime is optional and imported only when asked for.
"""

from __future__ import annotations

import os
import platform
import statistics
import time

import numpy as np

import nnvm
from nnvm.autotune.measure import relative_error  # noqa: F401  (nnvm.bench's API too)
from nnvm.errors import Error, InputError
from nnvm.gpu.library import DeviceModule
from nnvm.lowering import group_flops
from nnvm.target import parse_target

TOLERANCE = 1e-4  # largest |ours - reference| relative to the largest |reference|
WARMUP = 3


def cpu_name() -> str:
    """The CPU's model name as /proc/cpuinfo gives it (what benchmark reports print), else what
    ``platform`` knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def seeded_inputs(mod, seed: int = 0) -> dict:
    """One standard-normal array per model input (integers: zeros), the same for a given seed."""
    rng = np.random.default_rng(seed)
    feeds = {}
    for name, shape, dtype, _ in mod._inputs:
        if dtype.kind == "f":
            feeds[name] = rng.standard_normal(shape).astype(dtype)
        else:
            feeds[name] = np.zeros(shape, dtype=dtype)
    return feeds


def onnxruntime_session(model, threads: int | None, spinning: bool = False):
    """An onnxruntime CPU session with ``threads`` intra-op threads.

    Spinning is off by default: onnxruntime's idle workers otherwise keep spinning after ``run``
    returns, on the very cores the next (alternated) nnvm run needs, which doubled our times on two
    cores. Alternated, onnxruntime itself is no slower without it; ``bench/models.py`` also times its
    default settings alone.
    """
    try:
        import onnxruntime as ort
    except ImportError:
        raise Error("--compare onnxruntime needs the onnxruntime package (pip install onnxruntime)") from None
    if not (isinstance(model, str | os.PathLike) and os.fspath(model).endswith(".onnx")):
        raise Error(f"{model}: --compare onnxruntime needs an .onnx model file")
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.add_session_config_entry("session.intra_op.allow_spinning", "1" if spinning else "0")
    try:
        session = ort.InferenceSession(os.fspath(model), opts, providers=["CPUExecutionProvider"])
    except Exception as exc:  # onnxruntime raises its own exception types for a model it cannot load
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Error(f"{model}: onnxruntime cannot load it ({first})") from None
    return session, ort.__version__


def alternate_times(fns: list, repeat: int, warmup: int = WARMUP) -> list[list[float]]:
    """Milliseconds of each of ``repeat`` runs of each callable, timed in alternation after ``warmup``
    untimed rounds."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            times[k].append(1e3 * (time.perf_counter() - start))
    return times


def alternate_ms(fns: list, repeat: int, warmup: int = WARMUP) -> list[float]:
    """Median milliseconds of each callable, timed in alternation after ``warmup`` untimed rounds."""
    return [statistics.median(t) for t in alternate_times(fns, repeat, warmup)]


def blocks_times(fns: list, repeat: int, rounds: int, pause: float = 0.2,
                 warmup: int = WARMUP) -> list[list[list[float]]]:
    """Each callable timed in blocks of its own (``warmup`` untimed runs, then ``repeat`` timed ones), the
    blocks alternated ``rounds`` times, so a drift in the machine's speed hits every callable alike while
    none shares the cores or the cache with another during its block; ``pause`` lets the previous
    block's idle threads (a spinning onnxruntime pool) go to sleep first. Per callable, per block, the
    milliseconds of each run."""
    per_block: list[list[list[float]]] = [[] for _ in fns]
    for _ in range(rounds):
        for k, fn in enumerate(fns):
            time.sleep(pause)
            per_block[k].append(alternate_times([fn], repeat, warmup)[0])
    return per_block


def blocks_ms(fns: list, repeat: int, rounds: int, pause: float = 0.2, warmup: int = WARMUP) -> list[float]:
    """``blocks_times`` reduced to one number per callable: the median of its blocks' medians."""
    return [statistics.median(statistics.median(b) for b in blocks)
            for blocks in blocks_times(fns, repeat, rounds, pause, warmup)]


def profile(mod, feeds: dict, repeat: int, clock=time.perf_counter) -> list[dict]:
    """Median time of every kernel call, slowest first, as dicts (group, kernel, ms, share, gflops).

    Kernels are called directly, in plan order, on the module's own arena after the inputs are copied
    in as ``Module.run`` does, so each one sees the same data as in a real run. ``clock``:
    ``time.process_time`` for CPU time (every thread's), a loaded host's view of a kernel's work.
    """
    values = mod._bind((), feeds)
    for (_, _, _, view), value in zip(mod._inputs, values):
        view[...] = value
    times: list[list[float]] = [[] for _ in mod._calls]
    for rnd in range(repeat + 1):
        for k, (fn, arg, _keep, kernel) in enumerate(mod._calls):
            start = clock()
            rc = fn(arg)
            elapsed = clock() - start
            if rc != 0:
                raise Error(f"kernel {kernel} failed with status {rc}")
            if rnd:  # the first round warms caches and the thread pool
                times[k].append(elapsed)
    rows = []
    for k, call in enumerate(mod.plan["calls"]):
        ms = 1e3 * statistics.median(times[k])
        flops = group_flops(mod.graph, call["group"])
        rows.append({"group": list(call["group"]), "kernel": call["kernel"], "ms": ms,
                     "gflops": flops / (ms * 1e6) if flops and ms > 0 else None})
    total = sum(r["ms"] for r in rows) or 1.0
    for r in rows:
        r["share"] = r["ms"] / total
    rows.sort(key=lambda r: -r["ms"])
    return rows


def device_times(mod, feeds: dict, repeat: int) -> dict:
    """Median milliseconds of ``repeat`` runs as the device itself measures them, where the module runs on
    a GPU library that can time its own work (CUDA events around the run on its stream, ``record`` /
    ``elapsed_ms``): ``device_ms`` (the run on the device, copies included) and ``kernels_ms`` (the
    launches alone). Empty where there is no such device (the CPU, a GPU backend's CPU runner);
    ``device_error`` where the device's timing failed."""
    device = getattr(mod, "_device", None)
    if not isinstance(device, DeviceModule):
        return {}
    values = mod._bind((), feeds)
    runs = []
    try:
        for _ in range(repeat):
            timings: dict = {}
            device.run(values, timings=timings)
            if not timings:
                return {}
            runs.append(timings)
    except Error as exc:  # the wall times stand; say why the device's own are missing
        return {"device_error": str(exc)}
    return {key: statistics.median(r[key] for r in runs) for key in runs[0]}


def bench(model, target: str = "llvm", compare: str | None = None, repeat: int = 20,
          threads: int | None = None, shapes: dict | None = None, do_profile: bool = False,
          tuning_log=None) -> dict:
    """Compile ``model`` and time it (and onnxruntime when ``compare="onnxruntime"``); a result dict.
    ``tuning_log`` is passed to ``nnvm.compile`` (None: the shipped logs; False: fallback configs only)."""
    if repeat < 1:
        raise Error(f"--repeat must be at least 1, got {repeat}")
    if threads is not None:
        if threads < 1:
            raise Error(f"--threads must be at least 1, got {threads}")
        # Read by the generated code at its first parallel call: set before the module first runs.
        os.environ["NNVM_NUM_THREADS"] = str(threads)
    if compare not in (None, "onnxruntime"):
        raise Error(f"--compare {compare!r}: only onnxruntime is supported")
    parsed = parse_target(target)
    if not parsed.backend.host_can_run(parsed):
        raise Error(f"target {parsed}: this host runs its code only under an emulator, whose times say "
                    f"nothing about the device; export the module and time it there")
    session = None
    if compare:
        session, ort_version = onnxruntime_session(model, threads)

    start = time.perf_counter()
    mod = nnvm.compile(model, target=target, shapes=shapes, tuning_log=tuning_log)
    if getattr(mod, "dims", None):  # a symbolic module (nnvm.dynamic): the benchmark needs one shape
        raise InputError(f"{model}: the model has symbolic dims ({', '.join(mod.dims)}); benchmark it at one "
                         "shape with --shape NAME=1x128 for each input")
    result: dict = {"model": os.fspath(model) if isinstance(model, str | os.PathLike) else repr(model),
                    "target": str(mod.target), "threads": threads, "repeat": repeat,
                    "compile_seconds": time.perf_counter() - start,
                    # a device module (GPU) keeps its launches on the device: no host kernel calls to count
                    "kernels": len(mod._calls) if mod._calls is not None else None,
                    "distinct_kernels": mod.stats().get("distinct_kernels"),
                    "tuned_kernels": mod.stats().get("tuned_kernels", 0)}
    feeds = seeded_inputs(mod)
    ours = mod.run(**feeds)
    fns = [lambda: mod.run(**feeds)]
    if session is not None:
        names = [i.name for i in session.get_inputs()]
        ort_feeds = {n: feeds[n] for n in names if n in feeds}
        want = session.run(None, ort_feeds)
        error = relative_error(ours, want)
        result.update(compare="onnxruntime", compare_version=ort_version, max_rel_err=error,
                      match=bool(error < TOLERANCE))
        fns.append(lambda: session.run(None, ort_feeds))
    times = alternate_ms(fns, repeat)
    result["nnvm_ms"] = times[0]
    result.update(device_times(mod, feeds, repeat))
    if session is not None:
        result["onnxruntime_ms"] = times[1]
        result["ratio"] = times[0] / times[1]
    if do_profile:
        result["profile"] = profile(mod, feeds, repeat)
    return result


def format_result(r: dict) -> str:
    """The human-readable report ``nnvm bench`` prints."""
    threads = r["threads"] if r["threads"] else "default"
    lines = [f"model        {r['model']}",
             f"target       {r['target']}, {'GPU' if r['kernels'] is None else r['kernels']} kernels "
             f"({r.get('tuned_kernels', 0)} distinct ones "
             f"tuned), compiled in {r['compile_seconds']:.2f} s",
             f"nnvm         {r['nnvm_ms']:.3f} ms (median of {r['repeat']}, threads {threads})"]
    if "device_error" in r:
        lines.append(f"device       not timed: {r['device_error']}")
    if "device_ms" in r:
        lines.append(f"device       {r['device_ms']:.3f} ms measured by the device, copies included "
                     f"(kernels alone {r['kernels_ms']:.3f} ms; wall {r['nnvm_ms']:.3f} ms)")
    if "onnxruntime_ms" in r:
        verdict = "match" if r["match"] else "MISMATCH"
        lines += [f"onnxruntime  {r['onnxruntime_ms']:.3f} ms (onnxruntime {r['compare_version']})",
                  f"ratio        nnvm / onnxruntime = {r['ratio']:.2f}",
                  f"outputs      {verdict}: max rel err {r['max_rel_err']:.2e} (limit {TOLERANCE:.0e})"]
    if "profile" in r:
        lines.append("profile      (per kernel call, slowest first)")
        lines.append(f"  {'ms':>9} {'share':>6} {'GFLOP/s':>8}  group")
        for row in r["profile"]:
            gf = f"{row['gflops']:.1f}" if row["gflops"] else "-"
            group = ", ".join(row["group"])
            if len(group) > 70:
                group = group[:67] + "..."
            lines.append(f"  {row['ms']:9.3f} {100 * row['share']:5.1f}% {gf:>8}  {group}")
    return "\n".join(lines)
