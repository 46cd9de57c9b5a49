"""The nine gluon model-zoo nets: nnvm against MXNet 1.9.1 itself, on the very same exported files.

    uv run python bench/mxnet_zoo.py [--models resnet18_v1,...] [--threads 2] [--repeat 20] [--rounds 2]
                                     [--markdown bench/RESULTS.md]

The seeds' benchmarks were against MXNet, so this is that baseline: each net as ``export`` wrote it
(``-symbol.json`` + ``.params``, random weights and BatchNorm statistics, from
``nnvm_testing.frontend_mxnet.zoo_models``), compiled by nnvm from the files alone, and run by MXNet
1.9.1 (oneDNN) in its own venv, both with the same number of threads. MXNet runs in another process, so
the two cannot alternate run by run: they alternate in blocks (``--rounds`` of each, the median of
``--repeat`` runs per block after a warm-up, the best block per side), which keeps the host's drift from
minute to minute out of the ratio. ``--markdown`` replaces this script's section of ``bench/RESULTS.md``
(inside the part ``bench/models.py`` keeps).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import time

import numpy as np

import nnvm
from nnvm.bench import alternate_ms, cpu_name
from nnvm_testing import frontend_mxnet as testing

BEGIN = "<!-- BEGIN bench/mxnet_zoo.py -->"
END = "<!-- END bench/mxnet_zoo.py -->"

# Runs in the MXNet venv: argv = symbol, params, input.npy, repeat; prints one JSON line.
MXNET_RUN = r"""
import json, statistics, sys, time
import mxnet as mx
import numpy as np
symbol, params, data, repeat = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
net = mx.gluon.SymbolBlock.imports(symbol, ["data"], params, ctx=mx.cpu())
net.hybridize(static_alloc=True, static_shape=True)
x = mx.nd.array(np.load(data))
for _ in range(3):
    net(x).wait_to_read()
times = []
for _ in range(repeat):
    start = time.perf_counter()
    net(x).wait_to_read()
    times.append(time.perf_counter() - start)
print(json.dumps({"ms": 1e3 * statistics.median(times), "version": mx.__version__}))
"""


def time_nnvm(mod, x, repeat: int) -> float:
    return alternate_ms([lambda: mod.run(x)], repeat, warmup=3)[0]


def time_mxnet(python: str, model, repeat: int, threads: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    proc = subprocess.run([python, "-c", MXNET_RUN, str(model.symbol), str(model.params), str(model.input),
                           str(repeat)], capture_output=True, text=True, env=env, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"MXNet failed on {model.symbol}: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def bench(name: str, python: str, args) -> dict:
    model = testing.zoo_models([name])[name]
    x, want = np.load(model.input), np.load(model.output)
    start = time.perf_counter()
    mod = nnvm.compile(str(model.symbol), target="llvm", shapes={"data": x.shape})
    compile_s = time.perf_counter() - start
    (got,) = mod.run(x)
    err = float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())
    ours, theirs, version = [], [], ""
    for _ in range(args.rounds):
        ours.append(time_nnvm(mod, x, args.repeat))
        mx_result = time_mxnet(python, model, args.repeat, args.threads)
        theirs.append(mx_result["ms"])
        version = mx_result["version"]
    row = {"model": name, "input": list(x.shape), "compile_s": compile_s, "nnvm_ms": min(ours),
           "mxnet_ms": min(theirs), "max_rel_err": err, "mxnet_version": version}
    row["ratio"] = row["nnvm_ms"] / row["mxnet_ms"]
    return row


def table(rows: list[dict], args, load: tuple) -> str:
    lines = [
        f"Written by `bench/mxnet_zoo.py` on {time.strftime('%Y-%m-%d')}. CPU: {cpu_name()}; {args.threads} "
        f"threads for both; blocks of {args.repeat} runs (median) alternated {args.rounds} times, best block "
        f"per side; batch 1, float32; the same exported files for both (MXNet 1.9.1 with oneDNN, "
        f"`SymbolBlock.imports`, hybridized with static allocation); nnvm as `nnvm.compile` builds it "
        f"by default. "
        f"Load average (1 min) at the start and the end: {load[0]:.1f}, {load[1]:.1f}.",
        "",
        "| net | input | nnvm (ms) | MXNet (ms) | nnvm / MXNet | max rel. error | nnvm compile (s) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        shape = "x".join(map(str, r["input"]))
        lines.append(f"| {r['model']} | {shape} | {r['nnvm_ms']:.1f} | {r['mxnet_ms']:.1f} | "
                     f"{r['ratio']:.2f} | {r['max_rel_err']:.1e} | {r['compile_s']:.0f} |")
    geo = math.exp(sum(math.log(r["ratio"]) for r in rows) / len(rows))
    lines += ["", f"Geometric mean of nnvm / MXNet over {len(rows)} nets: **{geo:.2f}**."]
    return "\n".join(lines)




def write_section(path: str, body: str) -> None:
    """Replace this script's section of RESULTS.md, or append it (after ``bench/models.py``'s marker,
    so that script keeps it)."""
    with open(path) as f:
        text = f.read()
    section = f"{BEGIN}\n## The gluon model zoo against MXNet 1.9.1 (bench/mxnet_zoo.py)\n\n{body}\n{END}"
    if BEGIN in text and END in text:
        text = text[:text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    with open(path, "w") as f:
        f.write(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(testing.ZOO), help="comma-separated zoo names")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--markdown", metavar="PATH", help="write the table into PATH's section")
    args = parser.parse_args()
    os.environ["NNVM_NUM_THREADS"] = str(args.threads)
    python = str(testing.mxnet_python())
    names = [n for n in args.models.split(",") if n]
    testing.zoo_models(names)  # export what is missing first, in one MXNet process
    load_start = os.getloadavg()[0]
    rows = []
    for name in names:
        row = bench(name, python, args)
        print(f"{name}: nnvm {row['nnvm_ms']:.1f} ms, MXNet {row['mxnet_ms']:.1f} ms, "
              f"ratio {row['ratio']:.2f}, max rel err {row['max_rel_err']:.1e}, "
              f"compile {row['compile_s']:.0f} s", file=sys.stderr)
        rows.append(row)
    body = table(rows, args, (load_start, os.getloadavg()[0]))
    print(body)
    if args.markdown:
        write_section(args.markdown, body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
