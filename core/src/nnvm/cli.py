"""The ``nnvm`` command: plugins, compile, run, bench (see API.md).

A user's mistake (bad file, unknown operator, wrong input) is printed as one sentence on stderr with
exit status 1. Anything else is a bug in nnvm: it prints the traceback and asks for a report (exit 2).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

from nnvm.errors import Error


def _parse_shapes(items) -> dict | None:
    if not items:
        return None
    shapes = {}
    for item in items:
        name, sep, dims = item.partition("=")
        if not sep or not name:
            raise Error(f"--shape {item!r} should look like NAME=1x3x224x224")
        try:
            shapes[name] = tuple(int(d) for d in dims.lower().split("x"))
        except ValueError:
            raise Error(f"--shape {item!r}: dimensions must be integers separated by 'x'") from None
    return shapes


def _parse_inputs(items) -> dict:
    import numpy as np

    inputs = {}
    for item in items or []:
        name, sep, path = item.partition("=")
        if not sep or not name:
            raise Error(f"--input {item!r} should look like NAME=FILE.npy")
        try:
            inputs[name] = np.load(path, allow_pickle=False)
        except FileNotFoundError:
            raise Error(f"--input {name}: {path}: no such file") from None
        except (ValueError, OSError) as exc:
            raise Error(f"--input {name}: {path} is not a .npy file ({exc})") from None
    return inputs


def cmd_plugins(args) -> int:
    import nnvm

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
    import nnvm

    start = time.perf_counter()
    mod = nnvm.compile(args.model, target=args.target, shapes=_parse_shapes(args.shape),
                       opt_level=args.opt_level, dump_ir=args.dump_ir)
    out = args.output or os.path.splitext(os.path.basename(args.model))[0] + ".so"
    mod.export(out)
    stats = mod.stats()
    stats["output"] = out
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
    return 0


def cmd_run(args) -> int:
    import numpy as np

    import nnvm

    path = args.model
    if path.endswith(".so"):
        mod = nnvm.load(path)
    else:
        mod = nnvm.compile(path, target=args.target or "llvm", shapes=_parse_shapes(args.shape))
    inputs = _parse_inputs(args.input)
    outs = mod.run(**inputs)
    names = [d["name"] for d in mod.plan["outputs"]]
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
    from nnvm.bench import bench, format_result

    result = bench(args.model, target=args.target, compare=args.compare, repeat=args.repeat,
                   threads=args.threads, shapes=_parse_shapes(args.shape), do_profile=args.profile)
    print(json.dumps(result, indent=2) if args.json else format_result(result))
    return 0 if result.get("match", True) else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="nnvm", description="The nnvm deep learning compiler.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("plugins", help="list installed plugins")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_plugins)

    p = sub.add_parser("compile", help="compile a model into one deployable file")
    p.add_argument("model")
    p.add_argument("--target", required=True)
    p.add_argument("-o", "--output")
    p.add_argument("--shape", action="append", help="NAME=1x3x224x224 (repeatable)")
    p.add_argument("--opt-level", type=int, default=3)
    p.add_argument("--dump-ir", metavar="DIR")
    p.add_argument("--stats", action="store_true")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_compile)

    p = sub.add_parser("run", help="run a model or a compiled artifact on .npy inputs")
    p.add_argument("model")
    p.add_argument("--target")
    p.add_argument("--input", action="append", help="NAME=FILE.npy (repeatable)")
    p.add_argument("--output", help="write outputs to this .npz")
    p.add_argument("--shape", action="append")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("bench", help="time a model, optionally against onnxruntime")
    p.add_argument("model")
    p.add_argument("--target", default="llvm")
    p.add_argument("--compare", choices=["onnxruntime"])
    p.add_argument("--repeat", type=int, default=20, help="timed runs (median reported; default 20)")
    p.add_argument("--threads", type=int, help="threads for nnvm (NNVM_NUM_THREADS) and onnxruntime")
    p.add_argument("--shape", action="append")
    p.add_argument("--json", action="store_true")
    p.add_argument("--profile", action="store_true", help="time each fused group's kernel")
    p.set_defaults(func=cmd_bench)
    return parser


def main(argv=None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.func(args)
    except Error as exc:
        print(f"nnvm: error: {exc}", file=sys.stderr)
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
