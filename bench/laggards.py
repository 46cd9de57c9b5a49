"""The x86 laggards of issue 19, one operator (or one ShuffleNet unit) at a time, against onnxruntime.

Run: ``NNVM_NUM_THREADS=1 .venv/bin/python bench/laggards.py [case,case,...]`` (``REPEAT`` runs each,
default 40). Each case is a small ONNX model built here (fixed seeds) under ``$NNVM_CACHE_DIR/laggards``,
compiled with ``nnvm.compile(..., target="llvm")``; both runtimes get the same input and as many
threads as ``NNVM_NUM_THREADS`` says, their runs alternate, and the medians are printed with GFLOP/s,
the ratio and the slowest kernels (``nnvm bench --profile``'s per-kernel times). GFLOP/s count useful
multiply-adds only (not the zero padding of a partial block or of a block that straddles groups).
"""

from __future__ import annotations

import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm.bench import alternate_ms, onnxruntime_session, profile


def _save(path, nodes, inits, shape):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    weights = [numpy_helper.from_array(v, k) for k, v in inits.items()]
    graph = helper.make_graph(nodes, "g", [x], [y], weights)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def conv(path, n, c, hw, o, k, g, stride=1):
    """Conv (+ bias) + Relu; returns its multiply-adds x 2."""
    rng = np.random.default_rng(0)
    inits = {"w": rng.standard_normal((o, c // g, k, k)).astype(np.float32) * 0.1,
             "b": rng.standard_normal(o).astype(np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[k // 2] * 4, group=g,
                              strides=[stride] * 2),
             helper.make_node("Relu", ["c"], ["y"])]
    _save(path, nodes, inits, (n, c, hw, hw))
    oh = (hw + 2 * (k // 2) - k) // stride + 1
    return 2.0 * n * o * oh * oh * (c // g) * k * k


def dense(path, n, k, m):
    """Gemm (transB, bias): a classifier layer."""
    rng = np.random.default_rng(0)
    inits = {"w": rng.standard_normal((m, k)).astype(np.float32) * 0.01,
             "b": rng.standard_normal(m).astype(np.float32)}
    _save(path, [helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)], inits, (n, k))
    return 2.0 * n * k * m


def _bn(rng, inits, name, c):
    inits[name + "_s"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
    inits[name + "_b"] = rng.standard_normal(c).astype(np.float32) * 0.1
    inits[name + "_m"] = rng.standard_normal(c).astype(np.float32) * 0.1
    inits[name + "_v"] = rng.uniform(0.5, 1.5, c).astype(np.float32)
    return [name + k for k in ("_s", "_b", "_m", "_v")]


def shuffle_units(path, c=240, hw=28, g=3, units=2):
    """ShuffleNet v1 units: grouped 1x1 c -> c/4 + bn + relu, channel shuffle, depthwise 3x3 + bn,
    grouped 1x1 c/4 -> c + bn, residual add, relu."""
    rng = np.random.default_rng(0)
    inits, nodes, cur, flops, m = {}, [], "x", 0, c // 4
    for u in range(units):
        p = f"u{u}"
        inits[p + "w1"] = rng.standard_normal((m, c // g, 1, 1)).astype(np.float32) * 0.1
        inits[p + "wd"] = rng.standard_normal((m, 1, 3, 3)).astype(np.float32) * 0.3
        inits[p + "w2"] = rng.standard_normal((c, m // g, 1, 1)).astype(np.float32) * 0.1
        inits[p + "s1"] = np.array([1, g, m // g, hw, hw], np.int64)
        inits[p + "s2"] = np.array([1, m, hw, hw], np.int64)
        out = p + "y" if u < units - 1 else "y"
        nodes += [
            helper.make_node("Conv", [cur, p + "w1"], [p + "c1"], group=g),
            helper.make_node("BatchNormalization", [p + "c1"] + _bn(rng, inits, p + "bn1", m), [p + "n1"]),
            helper.make_node("Relu", [p + "n1"], [p + "r1"]),
            helper.make_node("Reshape", [p + "r1", p + "s1"], [p + "sh1"]),
            helper.make_node("Transpose", [p + "sh1"], [p + "t1"], perm=[0, 2, 1, 3, 4]),
            helper.make_node("Reshape", [p + "t1", p + "s2"], [p + "sh2"]),
            helper.make_node("Conv", [p + "sh2", p + "wd"], [p + "cd"], group=m, pads=[1] * 4),
            helper.make_node("BatchNormalization", [p + "cd"] + _bn(rng, inits, p + "bnd", m), [p + "nd"]),
            helper.make_node("Conv", [p + "nd", p + "w2"], [p + "c2"], group=g),
            helper.make_node("BatchNormalization", [p + "c2"] + _bn(rng, inits, p + "bn2", c), [p + "n2"]),
            helper.make_node("Add", [p + "n2", cur], [p + "a"]),
            helper.make_node("Relu", [p + "a"], [out]),
        ]
        cur = out
        flops += 2 * hw * hw * (2 * m * c // g + 9 * m)
    _save(path, nodes, inits, (1, c, hw, hw))
    return flops


CASES = {
    "shuffle_units_240": lambda p: shuffle_units(p),
    "shuffle_units_480": lambda p: shuffle_units(p, 480, 14),
    "gconv_240_g3": lambda p: conv(p, 1, 240, 28, 240, 1, 3),
    "gconv_480_g3": lambda p: conv(p, 1, 480, 14, 480, 1, 3),
    "gconv_240_60_g3": lambda p: conv(p, 1, 240, 28, 60, 1, 3),
    "gconv_60_240_g3": lambda p: conv(p, 1, 60, 28, 240, 1, 3),
    "resnext_3x3_g32": lambda p: conv(p, 1, 128, 56, 128, 3, 32),
    "squeezenet_1000": lambda p: conv(p, 1, 512, 13, 1000, 1, 1),
    "dense_9216_4096": lambda p: dense(p, 1, 9216, 4096),
    "dense_4096_4096": lambda p: dense(p, 1, 4096, 4096),
    "dense_4096_4096_b8": lambda p: dense(p, 8, 4096, 4096),
    "dense_1280_1000": lambda p: dense(p, 1, 1280, 1000),
    "conv_3x3_b2": lambda p: conv(p, 2, 64, 28, 64, 3, 1),
    "conv_3x3_s2": lambda p: conv(p, 1, 128, 28, 256, 3, 1, 2),
}


def main(argv) -> None:
    names = argv[0].split(",") if argv else list(CASES)
    repeat = int(os.environ.get("REPEAT", "40"))
    threads = int(os.environ.get("NNVM_NUM_THREADS", "2"))
    base = os.environ.get("NNVM_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "nnvm")
    os.makedirs(os.path.join(base, "laggards"), exist_ok=True)
    for name in names:
        path = os.path.join(base, "laggards", f"{name}.onnx")
        flops = CASES[name](path)
        mod = nnvm.compile(path, target="llvm", opt_level=3)
        sess, _ = onnxruntime_session(path, threads)
        x = np.random.default_rng(1).standard_normal(mod._inputs[0][1]).astype(np.float32)
        want = sess.run(None, {"x": x})[0]
        err = float(np.abs(mod.run(x)[0] - want).max() / np.abs(want).max())
        ours, theirs = alternate_ms([lambda mod=mod, x=x: mod.run(x),
                                     lambda sess=sess, x=x: sess.run(None, {"x": x})], repeat)
        rows = profile(mod, {mod._inputs[0][0]: x}, repeat)[:3]
        kernels = " ".join(f"{r['kernel'].split('_', 2)[-1][:20]}:{r['ms']:.3f}" for r in rows)
        print(f"{name:20s} nnvm {ours:7.3f} ms {flops / ours / 1e6:6.1f} GF/s | onnxruntime {theirs:7.3f} ms "
              f"{flops / theirs / 1e6:6.1f} GF/s | ratio {ours / theirs:5.2f} | err {err:.0e} | {kernels}",
              flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
