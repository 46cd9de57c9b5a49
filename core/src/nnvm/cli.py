"""The ``nnvm`` command: plugins, compile, run, bench, tune, runtime build (see API.md), and the
subcommands plugins add through ``nnvm_register_commands`` (``nnvm conformance`` comes from the
conformance suite).

A user's mistake (bad file, unknown operator, wrong input) is printed as one sentence on stderr with
exit status 1. Anything else is a bug in nnvm: it prints the traceback and asks for a report (exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from numpy.lib import format as npy

import nnvm
from nnvm.autotune import Measurer, extract_tasks, tune
from nnvm.autotune.driver import signature_of
from nnvm.bench import bench, format_result
from nnvm.cpu.switches import check_options
from nnvm.errors import CalibrationInputError, Error, InputError, reason, with_context
from nnvm.generate import Decoder, greedy, peer_step
from nnvm.kernel_cache import default_kernel_cache
from nnvm.options import Options, activated, active
from nnvm.plugins import commands
from nnvm.runtime import staged_file
from nnvm.runtime.crt import install_runtime


def _named(items, flag: str, example: str, parse) -> dict:
    """``NAME=VALUE`` items of the repeatable option ``flag`` as ``{NAME: parse(VALUE)}``; an item without a
    name, or whose value ``parse`` refuses (ValueError), is one sentence showing ``example``."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        try:
            if not sep or not name:
                raise ValueError
            out[name] = parse(value)
        except ValueError:
            raise Error(f"{flag} {item!r} should look like {example}") from None
    return out


def _shape(value: str) -> tuple:
    return tuple(int(d) for d in value.lower().split("x"))


def _bound(value: str) -> tuple:
    lo, colon, hi = value.partition(":")
    if not colon:
        raise ValueError
    return int(lo), int(hi)


def _parse_shapes(items) -> dict | None:
    return _named(items, "--shape", "NAME=1x3x224x224 (integers separated by 'x')", _shape) or None


def _parse_bounds(items) -> dict | None:
    """``--bound NAME=LO:HI`` items as ``bounds=`` (a symbolic dim's range, what an export plans for)."""
    return _named(items, "--bound", "NAME=LO:HI (integers: count=1:512)", _bound) or None


def _parse_inputs(items) -> dict:
    paths = _named(items, "--input", "NAME=FILE.npy", lambda path: path)
    return {name: read_npy(path, f"--input {name}") for name, path in paths.items()}


def read_npy(path: str, what: str):
    """The array in the ``.npy`` file ``path``, its header checked before any data is read: a plain
    (non-object) dtype and a shape whose bytes the file really holds, so a hostile header can neither
    run code (no pickles) nor make numpy allocate what the file does not contain."""
    def bad(why: str) -> Error:
        return Error(f"{what}: {path} is not a usable .npy file ({why})")

    try:
        with open(path, "rb") as f:
            try:
                version = npy.read_magic(f)
                if version not in ((1, 0), (2, 0), (3, 0)):
                    raise ValueError(f"unknown format version {version[0]}.{version[1]}")
                read_header = npy.read_array_header_1_0 if version == (1, 0) else npy.read_array_header_2_0
                shape, fortran, dtype = read_header(f, max_header_size=10000)
            except (ValueError, SyntaxError, EOFError, TypeError, KeyError) as exc:
                first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise bad(f"bad header: {first}") from None
            if dtype.hasobject:
                raise bad("it holds Python objects; only numeric arrays are read")
            if any(d < 0 for d in shape):
                raise bad(f"negative dimension in its shape {list(shape)}")
            count = 1
            for d in shape:
                count *= d
            need = count * dtype.itemsize
            have = os.fstat(f.fileno()).st_size - f.tell()
            if need != have:
                raise bad(f"the header promises {need} bytes of {dtype}{list(shape)} data, "
                          f"the file has {have}")
            data = np.fromfile(f, dtype=dtype, count=count)
    except Error:
        raise
    except FileNotFoundError:
        raise Error(f"{what}: {path}: no such file") from None
    except IsADirectoryError:
        raise Error(f"{what}: {path} is a folder, not a .npy file") from None
    except OSError as exc:
        raise Error(f"{what}: {path} cannot be read ({exc.strerror or exc})") from None
    except Exception as exc:  # anything else numpy raises on these bytes is the file's fault too
        raise bad(reason(exc)) from None
    return data.reshape(shape[::-1]).transpose() if fortran else data.reshape(shape)


def cmd_plugins(args) -> int:
    info = nnvm.plugins()
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    plugins: dict = {}
    for kind, rows in info.items():
        for row in rows:
            key = (row["plugin"], row["distribution"], row["version"])
            plugins.setdefault(key, {}).setdefault(kind, []).append(row["name"])
    for (plugin, dist, version), kinds in sorted(plugins.items()):
        print(f"{plugin}  ({dist} {version})")
        for kind, names in sorted(kinds.items()):
            shown = ", ".join(names[:12]) + (f", ... ({len(names)} in all)" if len(names) > 12 else "")
            print(f"  {kind}: {shown}")
    if not info["frontend"]:
        print("no frontend installed (pip install nnvm-frontend-onnx)")
    if not info["backend"]:
        print("no backend installed (pip install nnvm-backend-llvm-x86)")
    return 0


def cmd_compile(args) -> int:
    start = time.perf_counter()
    cache = False if args.no_cache else default_kernel_cache()
    mod = nnvm.compile(args.model, target=args.target, shapes=_parse_shapes(args.shape),
                       bounds=_parse_bounds(args.bound), opt_level=args.opt_level, dump_ir=args.dump_ir,
                       kernel_cache=cache or False, jobs=args.jobs)
    out = args.output or os.path.splitext(os.path.basename(args.model))[0] + ".so"
    exported = time.perf_counter()
    mod.export(out)
    stats = mod.stats()
    stats["output"] = out
    stats["export_seconds"] = time.perf_counter() - exported
    stats["seconds"] = time.perf_counter() - start
    if args.json:
        print(json.dumps(stats if args.stats else {"output": out, "seconds": stats["seconds"]}, indent=2))
    else:
        print(f"compiled {args.model} for {args.target} -> {out} in {stats['seconds']:.2f} s")
        if args.stats:
            for key in ("nodes_before", "nodes_after", "kernels", "distinct_kernels", "weight_bytes",
                        "activation_bytes_planned", "activation_bytes_naive", "activation_bytes_lower_bound"):
                print(f"  {key}: {stats[key]}")
            for phase, sec in stats["compile_seconds"].items():
                if isinstance(sec, float):
                    print(f"  compile {phase}: {sec:.3f} s")
            print(f"  export: {stats['export_seconds']:.3f} s")
            print(f"  {kernel_cache_line(stats)}")
            for line in tuning_lines(stats):
                print(f"  {line}")
    return 0


def kernel_cache_line(stats: dict) -> str:
    """``kernels: 12 compiled, 40 from cache, 9 deduplicated (2 jobs; cache DIR)``."""
    info = stats.get("kernel_cache") or {}
    where = f"cache {info['cache_dir']}" if info.get("cache_dir") else "no cache"
    return (f"kernels: {info.get('compiled', 0)} compiled, {info.get('cached', 0)} from cache, "
            f"{info.get('deduplicated', 0)} deduplicated ({info.get('jobs', 1)} jobs; {where})")


def tuning_lines(stats: dict) -> list[str]:
    """What ``--stats`` says about tuning: the target's CPU signature, each log consulted with how its
    machines matched and how many kernels it served, and which log served each kernel."""
    info = stats.get("tuning") or {}
    lines = [f"tuned_kernels: {stats.get('tuned_kernels', 0)} of {stats.get('distinct_kernels', '?')}"]
    if info.get("signature"):
        lines.append(f"cpu signature: {info['signature']}")
    for entry in info.get("logs", []):
        origin = "shipped" if entry["shipped"] else "given"
        lines.append(f"tuning log {entry['path']} ({origin}): {entry['kernels']} kernel(s)")
        lines += [f"  {m}" for m in entry["matches"]]
    lines += [f"kernel {name}: {why}" for name, why in info.get("kernels", {}).items()]
    return lines


def cmd_run(args) -> int:
    path = args.model
    if path.endswith(".so") or staged_file.is_staged(path):
        mod = nnvm.load(path)
    else:
        mod = nnvm.compile(path, target=args.target or "llvm", shapes=_parse_shapes(args.shape),
                           bounds=_parse_bounds(args.bound))
    inputs = _parse_inputs(args.input)
    try:
        outs = mod.run(**inputs)
    except InputError as exc:  # the inputs against what the model declares: name the model too
        if path in str(exc):
            raise
        raise with_context(exc, path) from None
    staged = getattr(mod, "output_names", None)  # a staged module (nnvm.staged) has no single plan
    names = staged if staged is not None else [d["name"] for d in mod.plan["outputs"]]
    if args.output:
        np.savez(args.output, **dict(zip(names, outs)))
        print(f"wrote {len(outs)} output(s) to {args.output}")
    else:
        for name, arr in zip(names, outs):
            flat = arr.reshape(-1)
            head = ", ".join(f"{x:.6g}" for x in flat[:8])
            print(f"{name}: {arr.dtype}{list(arr.shape)} [{head}{', ...' if flat.size > 8 else ''}]")
    return 0


def cmd_bench(args) -> int:
    if args.untuned and args.tuning_log:
        raise Error("--untuned and --tuning-log contradict each other; give one of them")
    result = bench(args.model, target=args.target, compare=args.compare, repeat=args.repeat,
                   threads=args.threads, shapes=_parse_shapes(args.shape), do_profile=args.profile,
                   tuning_log=False if args.untuned else args.tuning_log)
    print(json.dumps(result, indent=2) if args.json else format_result(result))
    return 0 if result.get("match", True) else 1


def cmd_generate(args) -> int:
    if args.threads is not None:
        if args.threads < 1:
            raise Error(f"--threads must be at least 1, got {args.threads}")
        os.environ["NNVM_NUM_THREADS"] = str(args.threads)
    if args.new_tokens < 1 or args.prompt_len < 1:
        raise Error("--prompt-len and --new-tokens must be at least 1")
    if args.prompt_ids:
        try:
            ids = np.array([[int(t) for t in args.prompt_ids.split(",")]], dtype=np.int64)
        except ValueError:
            raise Error(f"--prompt-ids {args.prompt_ids!r}: write token ids separated by commas "
                        "(1,2,3)") from None
    else:
        ids = np.random.default_rng(args.seed).integers(0, args.vocab, (1, args.prompt_len), dtype=np.int64)
    peers = [p.strip() for p in (args.compare or "").split(",") if p.strip()]
    for peer in peers:
        if peer not in ("onnxruntime", "openvino"):
            raise Error(f"--compare {peer!r}: the peers are onnxruntime and openvino")
    t0 = time.perf_counter()
    decoder = Decoder(args.model, target=args.target)
    compile_s = time.perf_counter() - t0
    greedy(decoder.step, decoder.spec, ids, 2)  # warm: the first runs fault in the weights
    result = decoder.generate(ids, args.new_tokens)
    rows = [("nnvm", result)]
    for peer in peers:
        step, spec, version = peer_step(peer, args.model, args.threads)
        greedy(step, spec, ids, 2)
        rows.append((version, greedy(step, spec, ids, args.new_tokens)))
    tokens = result["tokens"][0].tolist()
    print(f"{args.model}: prompt {ids.shape[1]} tokens, {args.new_tokens} new (greedy), compiled in "
          f"{compile_s:.1f} s ({decoder.module.stats()['symbolic']['mode']})")
    print(f"tokens: {' '.join(map(str, tokens))}")
    for name, r in rows:
        same = "" if r is result else (", same tokens" if np.array_equal(r["tokens"], result["tokens"])
                                       else ", DIFFERENT tokens")
        print(f"{name:<28} prefill {r['prefill_ms']:8.2f} ms   {r['tokens_per_s']:8.2f} tokens/s{same}")
    print(f"memory plans built while decoding: {result['plans']} ({result['plan_ms']:.2f} ms in all)")
    return 0 if all(np.array_equal(r["tokens"], result["tokens"]) for _, r in rows) else 1


def calibration_files(folder: str) -> list[dict]:
    """The calibration samples in ``folder``: ``{input name: .npy path}`` per sample. Either every
    ``*.npy`` directly in it is one sample of a one-input model (``""`` stands for that input), or each
    subfolder is one sample holding ``INPUT.npy`` per model input; sorted by name."""
    if not os.path.exists(folder):
        raise Error(f"--calibration {folder}: no such folder")
    if not os.path.isdir(folder):
        raise Error(f"--calibration {folder} is a file; give a folder of .npy files")
    entries = sorted(os.listdir(folder))
    files = [e for e in entries if e.endswith(".npy") and os.path.isfile(os.path.join(folder, e))]
    if files:
        return [{"": os.path.join(folder, f)} for f in files]
    samples = []
    for sub in (os.path.join(folder, e) for e in entries):
        if os.path.isdir(sub):
            inner = sorted(f for f in os.listdir(sub) if f.endswith(".npy"))
            if inner:
                samples.append({f[:-4]: os.path.join(sub, f) for f in inner})
    if not samples:
        raise Error(f"--calibration {folder}: no .npy files in it (one per sample, or one subfolder per "
                    f"sample with INPUT.npy per model input)")
    return samples


def cmd_quantize(args) -> int:
    compiled = not args.output.lower().endswith(".onnx")  # -o a module: the quantized model compiled
    if not compiled and args.target != "llvm":  # said before the calibration runs
        raise Error(f"--target {args.target}: -o {args.output} writes the QDQ ONNX model, which is not "
                    "compiled; give -o a module's name (model.so) to compile it for a target")
    samples = calibration_files(args.calibration)
    arrays = []
    for sample in samples:
        loaded = {name: read_npy(path, "--calibration") for name, path in sample.items()}
        arrays.append(loaded[""] if "" in loaded else loaded)
    start = time.perf_counter()
    try:
        model = nnvm.quantize(args.model, arrays, per_channel=args.per_channel, method=args.method,
                              percentile=args.percentile)
    except CalibrationInputError as exc:  # name the file, not the sample's index
        files = samples[exc.sample]
        path = files.get(exc.input) or files.get("")
        if path is None:  # a subfolder without the input's file
            folder = os.path.dirname(next(iter(files.values())))
            raise Error(f"{args.model}: calibration folder {folder} has no {exc.input}.npy") from None
        raise Error(f"{args.model}: calibration file {path}: {exc.reason}") from None
    weights = "per channel" if args.per_channel else "per tensor"
    what = f"{len(arrays)} calibration inputs, {args.method}, int8 weights {weights}, uint8 activations"
    if compiled:  # as `nnvm compile -o` writes it
        nnvm.compile(model, target=args.target).export(args.output)
        print(f"quantized {args.model} ({what}) and compiled it for {args.target} -> {args.output} in "
              f"{time.perf_counter() - start:.1f} s")
        return 0
    try:
        with open(args.output, "wb") as f:
            f.write(model.SerializeToString())
    except OSError as exc:
        raise Error(f"-o {args.output}: cannot be written ({exc.strerror or exc})") from None
    print(f"quantized {args.model} -> {args.output} ({what}) in {time.perf_counter() - start:.1f} s")
    return 0


def cmd_tune(args) -> int:
    if args.threads is not None:
        if args.threads < 1:
            raise Error(f"--threads must be at least 1, got {args.threads}")
        os.environ["NNVM_NUM_THREADS"] = str(args.threads)  # inherited by the measuring process
    batch_size = 8
    if args.cluster:  # before the model is read: a cluster without the device fails at once
        measurer = cluster_module().ClusterMeasurer(args.cluster, timeout=args.timeout)
        devices = measurer.devices(args.target)
        batch_size = 8 * devices  # every device busy, builds ahead of measurements
    else:
        measurer = Measurer(timeout=args.timeout)
    with measurer:
        tasks = extract_tasks(args.model, target=args.target, shapes=_parse_shapes(args.shape))
        if not tasks:
            print(f"nothing to tune: no installed backend offers a schedule template for {args.model} "
                  f"on {args.target}")
            return 0
        total = sum(t.weight for t in tasks)
        sig = (measurer.signature if args.cluster else signature_of)(tasks[0].target)
        machine = f"; cluster {args.cluster}, {devices} device(s)" if args.cluster else ""
        machine += f"; records signed {sig.describe()}" if sig is not None else ""
        print(f"{len(tasks)} task(s) ({total} fused groups) from {args.model}; up to {args.trials} trials "
              f"each, tuner {args.tuner}; log {args.log}{machine}", flush=True)
        summaries = tune(tasks, args.trials, args.log, tuner=args.tuner, measurer=measurer,
                         progress=not args.quiet, batch_size=batch_size)
    if args.json:
        print(json.dumps([{"task": s.label, "template": s.template, "weight": s.weight, "trials": s.trials,
                           "measured": s.measured, "errors": s.errors, "best_ms": 1e3 * s.best_seconds
                           if s.best_seconds else None, "best_gflops": s.best_gflops,
                           "fallback_ms": 1e3 * s.fallback_seconds if s.fallback_seconds else None,
                           "best_config": s.best_config} for s in summaries], indent=2))
    return 0


def cluster_module():
    """``nnvm.autotune.cluster``, imported only when a cluster is asked for: it needs Ray."""
    try:
        import nnvm.autotune.cluster as cluster
    except ModuleNotFoundError as exc:
        if exc.name != "ray" and not str(exc.name).startswith("ray."):
            raise
        raise Error("tuning on a cluster needs Ray: pip install 'nnvm[cluster]'") from None
    return cluster


def cmd_cluster_join(args) -> int:
    cluster = cluster_module()
    if args.num_cpus < 1:
        raise Error(f"--num-cpus must be at least 1, got {args.num_cpus}")
    cluster.check_reachable(args.address)
    command = cluster.join_command(args.address, args.target, args.num_cpus)
    ray_exe = os.path.join(os.path.dirname(sys.executable), "ray")
    command[0] = ray_exe if os.path.exists(ray_exe) else "ray"
    print(f"joining {args.address} with {cluster.describe_device(args.target)}", flush=True)
    proc = subprocess.run(command, capture_output=True, text=True)
    if proc.returncode != 0:
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        raise Error(f"ray start could not join the cluster at {args.address}: "
                    f"{lines[-1] if lines else f'exit status {proc.returncode}'}")
    print(f"joined; this node measures {args.target} kernels for nnvm tune --cluster (leave with: ray stop)")
    return 0


@dataclass(frozen=True)
class Command:
    """A subcommand a plugin adds through ``nnvm_register_commands``: ``add_arguments(parser)`` declares
    its options, ``run(args)`` runs it and returns the exit status."""

    name: str
    help: str
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


# Subcommands that plugin distributions add, so a user who lacks one is told what to install (a hint,
# not an import: the core knows these commands only by name).
KNOWN_PLUGIN_COMMANDS = {"conformance": "nnvm-conformance"}


def _add_plugin_commands(sub) -> None:
    """The plugins' subcommands, after the core's; a name already taken is an error naming both."""
    for name, (owner, cmd) in sorted(commands().items()):
        if name in sub.choices:
            raise Error(f"plugin {owner} registers the command {name!r}, which nnvm itself already has")
        p = sub.add_parser(name, help=cmd.help)
        cmd.add_arguments(p)
        p.set_defaults(func=cmd.run)


def cmd_runtime_build(args) -> int:
    sizes = install_runtime(args.target, args.output)
    if args.json:
        print(json.dumps({"target": args.target, "output": args.output, "bytes": sizes}, indent=2))
        return 0
    print(f"C runtime for {args.target} in {args.output}:")
    for name, size in sizes.items():
        print(f"  {name}: {size} bytes ({size / 1024:.1f} KiB)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nnvm", description="The nnvm deep learning compiler.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plugins", help="list installed plugins")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plugins)

    p = sub.add_parser("compile", help="compile a model into one deployable file")
    p.add_argument("model")
    p.add_argument("--target", required=True)
    _add_cpu_switch(p)
    p.add_argument("-o", "--output")
    p.add_argument("--shape", action="append", help="NAME=1x3x224x224 (repeatable)")
    p.add_argument("--bound", action="append", help="NAME=LO:HI, a symbolic dim's range (repeatable)")
    p.add_argument("--opt-level", type=int, default=3)
    p.add_argument("--dump-ir", metavar="DIR")
    p.add_argument("--stats", action="store_true", help="phases, kernels compiled / from cache / shared")
    p.add_argument("--json", action="store_true")
    p.add_argument("--jobs", type=int, help="worker processes compiling kernels (default: the CPUs)")
    p.add_argument("--no-cache", action="store_true",
                   help="neither read nor write the kernel cache ($NNVM_KERNEL_CACHE_DIR, "
                        "$NNVM_CACHE_DIR/kernels or ~/.cache/nnvm/kernels)")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", help="run a model or a compiled artifact on .npy inputs")
    p.add_argument("model")
    p.add_argument("--target")
    _add_cpu_switch(p)
    p.add_argument("--input", action="append", help="NAME=FILE.npy (repeatable)")
    p.add_argument("--output", help="write outputs to this .npz")
    p.add_argument("--shape", action="append")
    p.add_argument("--bound", action="append", help="NAME=LO:HI, a symbolic dim's range (repeatable)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("bench", help="time a model, optionally against onnxruntime")
    p.add_argument("model")
    p.add_argument("--target", default="llvm")
    _add_cpu_switch(p)
    p.add_argument("--compare", choices=["onnxruntime"])
    p.add_argument("--repeat", type=int, default=20, help="timed runs (median reported; default 20)")
    p.add_argument("--threads", type=int, help="threads for nnvm (NNVM_NUM_THREADS) and onnxruntime")
    p.add_argument("--shape", action="append")
    p.add_argument("--json", action="store_true")
    p.add_argument("--profile", action="store_true", help="time each fused group's kernel")
    p.add_argument("--tuning-log", action="append", metavar="LOG",
                   help="apply the best configs of this tuning log (repeatable; before the shipped logs)")
    p.add_argument("--untuned", action="store_true",
                   help="use every template's fallback config: no tuning log, not even the shipped ones")
    p.set_defaults(func=cmd_bench)

    p = sub.add_parser("generate", help="greedy decoding of a decoder exported with its KV cache")
    p.add_argument("model", help="a with-past decoder export (.onnx: past_key_values.* in, present.* out)")
    p.add_argument("--target", default="llvm")
    _add_cpu_switch(p)
    p.add_argument("--prompt-len", type=int, default=32, help="random prompt tokens (default 32)")
    p.add_argument("--prompt-ids", help="the prompt's token ids, comma-separated (instead of random ones)")
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--seed", type=int, default=0, help="seed of the random prompt")
    p.add_argument("--vocab", type=int, default=1000, help="random prompt tokens are below this")
    p.add_argument("--threads", type=int, help="threads for nnvm (NNVM_NUM_THREADS) and the peers")
    p.add_argument("--compare", help="also decode with onnxruntime,openvino (comma-separated)")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("quantize", help="quantize an ONNX float model after calibration; writes QDQ ONNX, "
                                        "or compiles it (-o model.so)")
    p.add_argument("model", help="an ONNX float model")
    p.add_argument("--calibration", required=True, metavar="DIR",
                   help="calibration inputs: one .npy per sample (one-input models), or one subfolder per "
                        "sample holding INPUT_NAME.npy for each input")
    p.add_argument("-o", "--output", required=True,
                   help="the QDQ ONNX model to write (NAME.onnx), or the module compiled from it (any other "
                        "name, as `nnvm compile -o` writes: model.so, model.webgpu ...)")
    p.add_argument("--target", default="llvm", help="with a module for -o: the target it is compiled for")
    p.add_argument("--per-channel", action=argparse.BooleanOptionalAction, default=True,
                   help="int8 weights with one scale per output channel (default), or per tensor")
    p.add_argument("--method", default="minmax",
                   help="how activation ranges are found: minmax (default), percentile, entropy")
    p.add_argument("--percentile", type=float, default=99.99, help="for --method percentile (default 99.99)")
    p.set_defaults(func=cmd_quantize)

    p = sub.add_parser("tune", help="search schedule configs for a model's kernels; append them to a log")
    p.add_argument("model")
    p.add_argument("--target", default="llvm")
    _add_cpu_switch(p)
    p.add_argument("--trials", type=int, required=True, help="configs to measure per task (at most)")
    p.add_argument("--log", required=True, help="JSON-lines log to append to (and resume from)")
    p.add_argument("--tuner", choices=["xgb", "random", "grid"], default="xgb",
                   help="xgb: cost-model guided (default); random; grid")
    p.add_argument("--timeout", type=float, default=20.0, help="seconds allowed per config (default 20)")
    p.add_argument("--threads", type=int, help="threads of the measured kernels (NNVM_NUM_THREADS)")
    p.add_argument("--shape", action="append")
    p.add_argument("--quiet", action="store_true", help="no progress line and no per-task lines")
    p.add_argument("--json", action="store_true", help="print the per-task results as JSON at the end")
    p.add_argument("--cluster", metavar="auto|ray://HOST:PORT",
                   help="build and measure on a Ray cluster (pip install 'nnvm[cluster]'; docs/tuning.md)")
    p.set_defaults(func=cmd_tune)

    p = sub.add_parser("cluster", help="tuning farms: join this machine to a Ray cluster as a device node")
    cluster_sub = p.add_subparsers(dest="cluster_command", required=True)
    p = cluster_sub.add_parser("join", help="start a Ray node declaring the device resource of a target")
    p.add_argument("--address", required=True, metavar="HOST:PORT", help="the Ray head's address")
    p.add_argument("--target", required=True, help="the target this node measures (llvm, aarch64 ...)")
    p.add_argument("--num-cpus", type=int, default=1,
                   help="CPUs the node offers (default 1: builds never share the device with a measurement)")
    p.set_defaults(func=cmd_cluster_join)

    p = sub.add_parser("runtime", help="the C deploy runtime (nnvm_runtime.h) for running exported modules")
    runtime_sub = p.add_subparsers(dest="runtime_command", required=True)
    p = runtime_sub.add_parser("build", help="write nnvm_runtime.h, libnnvm_runtime.a/.so and nnvm-run for a "
                               "CPU target (cross-compiled for Arm) and print their sizes")
    p.add_argument("--target", required=True, help="llvm, aarch64 or armv7")
    p.add_argument("-o", "--output", required=True, metavar="DIR")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_runtime_build)

    _add_plugin_commands(sub)
    parser.commands = set(sub.choices)  # for main's hint about commands that come with plugins
    return parser


def _add_cpu_switch(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cpu-switch", action="append", default=[], metavar="NAME=VALUE",
                   help="set one of the CPU layer's A/B switches (layout=0, winograd=1, ...; repeatable)")


def _cpu_switches(words: list) -> Options:
    """The options every compile of this command runs under: the active ones (``main`` called inside an
    ``activated`` block), with the ``--cpu-switch`` words set."""
    switches = {}
    for word in words:
        name, eq, value = word.partition("=")
        if not eq or not name:
            raise Error(f"--cpu-switch {word!r}: write NAME=VALUE (layout=0)")
        switches[name.strip()] = value.strip()
    options = (active() or Options()).with_switches(**switches)
    check_options(options)
    return options


def one_line(text: str) -> str:
    """``text`` with its control characters escaped (``\\n``, ``\\x07``): an error is one line even when
    it quotes a node name from a damaged file."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def main(argv=None) -> int:
    try:
        parser = build_parser()
        words = sys.argv[1:] if argv is None else list(argv)
        if words and words[0] in KNOWN_PLUGIN_COMMANDS and words[0] not in parser.commands:
            raise Error(f"nnvm {words[0]} needs the plugin that provides it: pip install "
                        f"{KNOWN_PLUGIN_COMMANDS[words[0]]}")
    except Error as exc:
        print(f"nnvm: error: {one_line(str(exc))}", file=sys.stderr)
        return 1
    args = parser.parse_args(argv)
    try:
        with activated(_cpu_switches(getattr(args, "cpu_switch", []))):
            return args.func(args)
    except Error as exc:
        print(f"nnvm: error: {one_line(str(exc))}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("nnvm: interrupted", file=sys.stderr)
        return 130
    except Exception:  # a bug in nnvm, not the user's mistake: show everything
        traceback.print_exc()
        print("nnvm: internal error; please report it with the traceback above", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
