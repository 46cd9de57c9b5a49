"""8-bit convolution kernels (``nnvm.cpu.schedule_qconv``, the ``dot_u8s8`` intrinsic) per x86 target.

Each target is compiled explicitly, so the decision is checked whatever this machine is: ``vpdpbusd``
on zmm registers with AVX-512 VNNI (``znver5``, ``icelake-server``), its VEX form on ymm with AVX-VNNI
(``alderlake``), ``vpmaddubsw`` + ``vpmaddwd`` with AVX2 alone (``haswell``). The numbers are checked
on every target this machine can run, exactly, against an int64 numpy convolution and onnxruntime's
requantization formula, on data that makes the AVX2 instruction's int16 pair sums saturate
(255 x 127 + 255 x 127) if the kernel let them.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import nnvm
from nnvm.graph.builder import GraphBuilder
from nnvm.target import parse_target

KERNELS = {
    "llvm -mcpu=znver5": r"vpdpbusd\s+.*%zmm",
    "llvm -mcpu=icelake-server": r"vpdpbusd\s+.*%zmm",
    "llvm -mcpu=alderlake": r"vpdpbusd\s+.*%ymm",
    "llvm -mcpu=haswell": r"vpmaddubsw\s+.*%ymm",
}
CASES = [  # data dtype, channels in, out, size, kernel, stride, padding, data zero point
    ("uint8", 16, 24, 9, 3, 1, 1, 7),
    ("uint8", 3, 20, 11, 7, 2, 3, 0),  # channels padded to 4, a large kernel, stride 2 (ResNet's first)
    ("int8", 8, 16, 6, 1, 1, 0, -5),  # signed data, moved to unsigned by the kernel
]


def _add_case(b: GraphBuilder, tag: str, case, rng):
    dtype, c, o, hw, k, stride, pad, zp = case
    info = np.iinfo(dtype)
    data = rng.integers(int(info.min), int(info.max) + 1, (1, c, hw, hw))
    data[..., ::2] = info.max  # saturating pairs for vpmaddubsw, had the kernel not split the bytes
    weight = rng.integers(-128, 128, (o, c, k, k)).astype(np.int8)
    weight[: o // 2, :, :, ::2] = 127
    scale = rng.uniform(1e-4, 1e-3, o).astype(np.float32)
    bias = rng.integers(-2000, 2000, o).astype(np.int32)
    x = b.input(f"x{tag}", data.shape, dtype)
    attrs = {"strides": (stride, stride), "padding": (pad,) * 4, "data_zero_point": zp}
    acc = b.node("qconv2d", [x, b.param(f"w{tag}", weight)], attrs, name=f"conv{tag}")[0]
    y = b.node("requantize", [acc, b.param(f"scale{tag}", scale), b.param(f"bias{tag}", bias)],
               {"zero_point": 3, "out_dtype": "uint8", "out_min": 3}, name=f"requantize{tag}")[0]
    b.output(y)
    return data.astype(dtype), (weight, scale, bias)


def _reference(case, data, params):
    """int64 convolution of the centred data, then onnxruntime's requantization in float32."""
    _, _, _, _, k, stride, pad, zp = case
    weight, scale, bias = params
    x = np.pad(data.astype(np.int64) - zp, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, w = x.shape
    oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
    acc = np.zeros((n, weight.shape[0], oh, ow), np.int64)
    for i in range(k):
        for j in range(k):
            patch = x[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
            acc += np.einsum("nchw,oc->nohw", patch, weight[:, :, i, j].astype(np.int64))
    v = (acc + bias.reshape(1, -1, 1, 1)).astype(np.float32) * scale.reshape(1, -1, 1, 1)
    return np.clip(np.rint(np.clip(v, 0 - 0, 255 - 3)) + 3, 3, 255).astype(np.uint8)


@pytest.mark.parametrize("target", list(KERNELS))
def test_int8_conv_kernels_per_target(target):
    rng = np.random.default_rng(0)
    b = GraphBuilder(name="qconv")
    made = [_add_case(b, str(k), case, rng) for k, case in enumerate(CASES)]
    mod = nnvm.compile(b.build(), target=target, opt_level=3)
    asm = mod.library.assembly()
    assert re.search(KERNELS[target], asm), f"{target}: no {KERNELS[target]!r} in the int8 convolution"
    if "haswell" in target:
        assert "vpdpbusd" not in asm, "haswell has no VNNI"
    parsed = parse_target(target)
    if not parsed.backend.host_can_run(parsed):
        return  # the decision above is checked; this machine cannot run the code
    outs = mod.run(**{f"x{k}": data for k, (data, _) in enumerate(made)})
    for case, (data, params), got in zip(CASES, made, outs):
        want = _reference(case, data, params)
        bad = got != want
        assert not bad.any(), (f"{target} {case}: {int(bad.sum())} of {bad.size} outputs differ, first got "
                               f"{got[bad][0]} expected {want[bad][0]}")


def test_no_packed_kernel_for_a_weight_zero_point():
    """A weight with a zero point is not what the packed kernel computes: the generic one runs it."""
    rng = np.random.default_rng(5)
    b = GraphBuilder(name="qconv_wzp")
    x = b.input("x", (1, 4, 5, 5), "uint8")
    w = b.param("w", rng.integers(-128, 128, (8, 4, 3, 3)).astype(np.int8))
    b.output(b.node("qconv2d", [x, w], {"padding": (1, 1, 1, 1), "weight_zero_point": 3})[0])
    mod = nnvm.compile(b.build(), target="llvm -mcpu=znver5", opt_level=3)
    assert "vpdpbusd" not in mod.library.assembly()
