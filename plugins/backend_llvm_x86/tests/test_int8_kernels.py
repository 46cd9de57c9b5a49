"""8-bit convolution kernels (``nnvm.cpu.schedule_qconv``, the ``dot_u8s8`` intrinsic) per x86 target.

Each target is compiled explicitly, so the decision is checked whatever this machine is: ``vpdpbusd``
on zmm registers with AVX-512 VNNI (``znver5``, ``icelake-server``), its VEX form on ymm with AVX-VNNI
(``alderlake``), ``vpmaddwd`` on 16-bit values with AVX2 alone (``haswell``, never ``vpmaddubsw``). The
numbers are checked on every target this machine can run, exactly, against an int64 numpy convolution
and onnxruntime's requantization formula, on data that makes ``vpmaddubsw``'s int16 pair sums saturate
(255 x 127 + 255 x 127) had a kernel used it.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import nnvm
from nnvm import te
from nnvm.graph.builder import GraphBuilder
from nnvm.target import parse_target

KERNELS = {
    "llvm -mcpu=znver5": r"vpdpbusd\s+.*%zmm",
    "llvm -mcpu=icelake-server": r"vpdpbusd\s+.*%zmm",
    "llvm -mcpu=alderlake": r"vpdpbusd\s+.*%ymm",
    "llvm -mcpu=haswell": r"vpmaddwd\s+.*%ymm",
}
CASES = [  # data dtype, channels in, out, size, kernel, stride, padding, data zero point
    ("uint8", 16, 24, 9, 3, 1, 1, 7),
    ("uint8", 3, 20, 11, 7, 2, 3, 0),  # channels padded to 4, a large kernel, stride 2 (ResNet's first)
    ("int8", 8, 16, 6, 1, 1, 0, -5),  # signed data, moved to unsigned by the kernel
    ("int8", 2, 16, 10, 5, 1, 2, -7),  # read planar (words of 4 pixels of a row), signed, 5 = 4 + 1 wide
]
PLANAR = (1, 3)  # the cases with few channels and a wide window: read from NCHW, no layout transform


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
        assert "vpmaddubsw" not in asm, "vpmaddubsw's pair sums of u8 x s8 saturate"
    groups = [c["group"] for c in mod.plan["calls"]]
    for k in PLANAR:
        assert not any(f"x{k}" in n and "transform" in n for g in groups for n in g), \
            f"{target}: case {k} should read its NCHW input as it is: {groups}"
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


@pytest.mark.parametrize("isa", ["avx512vnni", "avxvnni", "avx2", "widened"])
def test_dot_u8s8_intrinsic_is_exact_in_every_form(isa):
    """The intrinsic alone, each form run by the reference interpreter and, where this CPU has the
    form's instructions, compiled for it and run:
    saturating bytes (255 against 127 and -128), two channel blocks, against int64 numpy and against the
    reference interpreter's run of the same program."""
    from nnvm_backend_llvm.intrinsics import DOT_ISAS, dot_u8s8

    lanes, m, nb, k4 = DOT_ISAS[isa], 3, 2, 5
    A = te.placeholder((2 * m, k4, 4), "uint8", name="A")
    B = te.placeholder((nb, k4, lanes, 4), "int8", name="B")
    q, r = te.reduce_axis((0, k4), name="q"), te.reduce_axis((0, 4), name="r")
    C = te.compute((nb, 2 * m, lanes), lambda t, i, j: te.sum(A[i, q, r].astype("int32")
                                                               * B[t, q, j, r].astype("int32"), axis=[q, r]),
                   name="C")
    s = te.create_schedule(C.op)
    t, i, j = C.op.axis
    io, ii = s[C].split(i, factor=m)
    s[C].reorder(io, t, ii, j)
    s[C].tensorize(t, dot_u8s8(m=m, k4=k4, nb=nb, isa=isa))
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, (2 * m, k4, 4)).astype(np.uint8)
    b = rng.integers(-128, 128, (nb, k4, lanes, 4)).astype(np.int8)
    a[0], b[0, :, 0], b[1, :, 1] = 255, 127, -128
    want = np.einsum("iqr,tqjr->tij", a.astype(np.int64), b.astype(np.int64)).astype(np.int32)
    _interpreted_and_run(s, (A, B, C), a, b, want, isa, f"dot_u8s8 {isa}")


def _interpreted_and_run(s, tensors, a, b, want, isa, what):
    """The tensorized product through the TIR interpreter, and compiled and run where the host has the
    instructions ``isa`` names: both equal to ``want``."""
    from nnvm.tir.interpreter import run_primfunc

    interpreted = np.zeros(want.shape, np.int32)
    run_primfunc(nnvm.lower(s, list(tensors)), [a, b, interpreted])
    np.testing.assert_array_equal(interpreted, want)
    needs = {"avx512vnni": "avx512vnni", "avxvnni": "avxvnni", "avx2": "avx2"}.get(isa)
    host = parse_target("llvm")
    if needs is None or needs in host.backend.code_features(host.backend.resolve(host)):
        f = nnvm.build(s, list(tensors), target="llvm")
        got = np.zeros(want.shape, np.int32)
        f(a, b, got)
        np.testing.assert_array_equal(got, want, err_msg=what)


def _blocked_chain():
    """conv -> requantize(ReLU) -> conv -> requantize, + a residual (dequantize, add, quantize) of the
    first output, -> a classifier qdense: what a quantized ResNet block and its head compile to."""
    rng = np.random.default_rng(7)
    b = GraphBuilder(name="qblock")
    x = b.input("x", (1, 16, 14, 14), "uint8")

    def conv(name, data, zp):
        channels = 16 if name == "c1" else 32
        w = b.param(f"{name}_w", rng.integers(-127, 128, (32, channels, 3, 3)).astype(np.int8))
        acc = b.node("qconv2d", [data, w], {"padding": (1, 1, 1, 1), "data_zero_point": zp}, name=name)[0]
        scale = b.param(f"{name}_s", rng.uniform(1e-4, 1e-3, 32).astype(np.float32))
        bias = b.param(f"{name}_b", rng.integers(-2000, 2000, 32).astype(np.int32))
        return b.node("requantize", [acc, scale, bias], {"zero_point": 0, "out_dtype": "uint8", "out_min": 0},
                      name=f"{name}_rq")[0]

    y1 = conv("c1", x, 3)
    y2 = conv("c2", y1, 0)
    d1 = b.node("dequantize", [y1], {"scale": 0.1, "zero_point": 0}, name="res_d1")[0]
    d2 = b.node("dequantize", [y2], {"scale": 0.2, "zero_point": 0}, name="res_d2")[0]
    s = b.node("add", [d1, d2], name="res_add")[0]
    y3 = b.node("quantize", [s], {"scale": 0.3, "zero_point": 0, "out_dtype": "uint8"}, name="res_q")[0]
    flat = b.node("reshape", [y3], {"newshape": (1, 32 * 14 * 14)}, name="flat")[0]
    fc = b.param("fc_w", rng.integers(-127, 128, (10, 32 * 14 * 14)).astype(np.int8))
    b.output(b.node("qdense", [flat, fc], {"data_zero_point": 0}, name="fc")[0])
    return b.build()


@pytest.mark.parametrize("target", list(KERNELS))
def test_blocked_int8_kernels_chosen_per_target(target):
    """Compiled for each x86 target: both convolutions are ``qconv2d_nchwc`` (no im2col kernel), the
    second reads the first's uint8 bytes with no layout transform between them, the requantize and the
    residual add run in the second convolution's kernel, the classifier is ``qdense_packed``, all with
    the target's form of ``dot_u8s8`` (``vpdpbusd`` zmm / ymm, the exact ``vpmaddubsw`` form on AVX2)."""
    mod = nnvm.compile(_blocked_chain(), target=target, opt_level=3)
    calls = mod.plan["calls"]
    kernels = [c["kernel"] for c in calls]
    convs = [c for c in calls if "qconv2d_nchwc" in c["kernel"]]
    assert len(convs) == 2 and not any(k.endswith("_qconv2d") for k in kernels), kernels
    c2 = next(c for c in convs if "c2" in c["group"])
    # the shortcut's dequantize too: the kernel reads its uint8 bytes, no float32 copy in between
    assert {"c2_rq", "res_d1", "res_add", "res_q"} <= set(c2["group"]), c2["group"]
    between = [c for c in calls if "layout_transform" in c["kernel"] and "c1" not in c["group"]
               and any(n.startswith(("c1", "c2", "res")) for n in c["group"])]
    assert not between, f"{target}: layout transforms between the convolutions: {between}"
    assert any("qdense_packed" in k for k in kernels), kernels
    asm = mod.library.assembly()
    assert re.search(KERNELS[target], asm), f"{target}: no {KERNELS[target]!r}"
    if "haswell" in target:
        assert "vpdpbusd" not in asm, "haswell has no VNNI"
        assert "vpmaddubsw" not in asm, "vpmaddubsw's pair sums of u8 x s8 saturate"


@pytest.mark.parametrize("target", list(KERNELS))
def test_blocked_depthwise_between_blocked_convolutions(target):
    """Expand (1x1) -> depthwise -> project (1x1), compiled for each x86 target: the depthwise one is
    ``qdepthwise_nchwc`` in the channel blocks of the 1x1s around it, so no layout transform runs
    between the three, and each requantize runs in its convolution's kernel."""
    rng = np.random.default_rng(9)
    b = GraphBuilder(name="qmb")
    x = b.input("x", (1, 24, 10, 10), "uint8")

    def layer(name, data, out, channels, k, groups, zp):
        w = b.param(f"{name}_w", rng.integers(-127, 128, (out, channels // groups, k, k)).astype(np.int8))
        attrs = {"padding": ((k - 1) // 2,) * 4, "groups": groups, "data_zero_point": zp}
        acc = b.node("qconv2d", [data, w], attrs, name=name)[0]
        scale = b.param(f"{name}_s", rng.uniform(1e-4, 1e-3, out).astype(np.float32))
        attrs = {"zero_point": 4, "out_dtype": "uint8"}
        return b.node("requantize", [acc, scale], attrs, name=f"{name}_rq")[0]

    y = layer("expand", x, 96, 24, 1, 1, 3)
    y = layer("dw", y, 96, 96, 3, 96, 4)
    b.output(layer("project", y, 24, 96, 1, 1, 4))
    mod = nnvm.compile(b.build(), target=target, opt_level=3)
    calls = mod.plan["calls"]
    dw = [c for c in calls if "qdepthwise_nchwc" in c["kernel"]]
    assert len(dw) == 1 and "dw_rq" in dw[0]["group"], [(c["kernel"], c["group"]) for c in calls]
    assert sum("qconv2d_nchwc" in c["kernel"] for c in calls) == 2
    transforms = [c["group"] for c in calls if "layout_transform" in c["kernel"]]
    assert len(transforms) == 2, f"{target}: only the input's and the output's transforms: {transforms}"


def test_blocked_depthwise_as_the_graphs_output():
    """A depthwise ``qconv2d`` with nothing after it (its int32 sums are the graph's output, as ONNX's
    ``ConvInteger`` writes): ``qdepthwise_nchwc`` accumulates in a local tile copied out (it failed to
    schedule, "compute_at its own loop"), exact against numpy."""
    rng = np.random.default_rng(4)
    b = GraphBuilder(name="qdw")
    x = b.input("x", (1, 32, 9, 9), "uint8")
    w = rng.integers(-127, 128, (32, 1, 3, 3)).astype(np.int8)
    attrs = {"padding": (1, 1, 1, 1), "groups": 32, "data_zero_point": 3}
    b.output(b.node("qconv2d", [x, b.param("w", w)], attrs, name="dw")[0])
    mod = nnvm.compile(b.build(), target="llvm", opt_level=3)
    assert any("qdepthwise_nchwc" in c["kernel"] for c in mod.plan["calls"]), mod.plan["calls"]
    data = rng.integers(0, 256, (1, 32, 9, 9)).astype(np.uint8)
    padded = np.pad(data.astype(np.int64) - 3, ((0, 0), (0, 0), (1, 1), (1, 1)))
    want = np.zeros((1, 32, 9, 9), np.int64)
    for i in range(3):
        for j in range(3):
            want += padded[:, :, i:i + 9, j:j + 9] * w[None, :, 0, i, j, None, None]
    np.testing.assert_array_equal(mod.run(x=data)[0], want.astype(np.int32))


@pytest.mark.parametrize("isa", ["avx512vnni", "avxvnni", "avx2", "widened"])
def test_dot_u8s8_window_form_is_exact(isa):
    """``window=(kh, kw)``: two more reduction axes inside one call, the activation read through a
    convolution's strides (rows of a padded image, pixels ``stride`` apart), saturating bytes; run by
    the reference interpreter and, where this CPU has the form's instructions, compiled and run."""
    from nnvm_backend_llvm.intrinsics import DOT_ISAS, dot_u8s8

    lanes, m, nb, k4, kh, kw, stride = DOT_ISAS[isa], 3, 2, 2, 3, 2, 2
    width = (m - 1) * stride + kw
    A = te.placeholder((kh, width, k4 * 4), "uint8", name="A")
    B = te.placeholder((nb, kh * kw * k4, lanes, 4), "int8", name="B")
    u, v = te.reduce_axis((0, kh), name="u"), te.reduce_axis((0, kw), name="v")
    q, r = te.reduce_axis((0, k4), name="q"), te.reduce_axis((0, 4), name="r")
    C = te.compute((nb, m, lanes), lambda t, i, j: te.sum(
        A[u, i * stride + v, q * 4 + r].astype("int32") * B[t, (u * kw + v) * k4 + q, j, r].astype("int32"),
        axis=[u, v, q, r]), name="C")
    s = te.create_schedule(C.op)
    s[C].tensorize(C.op.axis[0], dot_u8s8(m=m, k4=k4, nb=nb, isa=isa, window=(kh, kw)))
    rng = np.random.default_rng(4)
    a = rng.integers(0, 256, (kh, width, k4 * 4)).astype(np.uint8)
    b = rng.integers(-128, 128, (nb, kh * kw * k4, lanes, 4)).astype(np.int8)
    a[:, ::2] = 255
    b[0, :, 0] = 127
    windows = np.stack([a[:, i * stride:i * stride + kw] for i in range(m)])  # [m, kh, kw, 4*k4]
    want = np.einsum("iuvc,tuvjc->tij", windows.reshape(m, kh, kw, k4 * 4).astype(np.int64),
                     b.reshape(nb, kh, kw, k4, lanes, 4).transpose(0, 1, 2, 4, 3, 5)
                     .reshape(nb, kh, kw, lanes, k4 * 4).astype(np.int64)).astype(np.int32)
    _interpreted_and_run(s, (A, B, C), a, b, want, isa, f"dot_u8s8 {isa} window")


def _dynamic_dense(k: int, rng):
    """What a dynamically quantized transformer's MatMulInteger compiles to: uint8 tokens [1, 13, K]
    with their zero point a run-time scalar (DynamicQuantizeLinear's), an int8 weight [40, K], the int32
    product cast to float32, times a run-time scale, plus a bias."""
    b = GraphBuilder(name=f"qdense_dynamic{k}")
    x, zp = b.input("x", (1, 13, k), "uint8"), b.input("zp", (), "uint8")
    scale = b.input("scale", (), "float32")
    w = rng.integers(-128, 128, (40, k)).astype(np.int8)
    w[:20, ::2] = 127  # saturating pairs for vpmaddubsw, had the kernel not split the bytes
    bias = rng.standard_normal(40).astype(np.float32)
    acc = b.node("qdense", [x, b.param("w", w), zp], name="mm")[0]
    y = b.node("multiply", [b.node("cast", [acc], {"dtype": "float32"}, name="to_float")[0], scale],
               name="dequantize")[0]
    b.output(b.node("add", [y, b.param("bias", bias)], name="bias_add")[0])
    return b.build(), w, bias


@pytest.mark.parametrize("target", list(KERNELS))
@pytest.mark.parametrize("k", [64, 70])
def test_qdense_with_a_run_time_zero_point(target, k):
    """The qdense of a zero point read at run time runs as ``qdense_packed`` over [1, 13, K] as it is (no
    reshape kernel), the cast, the scale and the bias in its kernel; exact in int32 against numpy (a
    ragged K = 70 pads with the zero point) for every zero point, 0 and 255 included (the float32 epilogue
    within one rounding)."""
    rng = np.random.default_rng(k)
    graph, w, bias = _dynamic_dense(k, rng)
    mod = nnvm.compile(graph, target=target, opt_level=3)
    calls = mod.plan["calls"]
    (packed,) = [c for c in calls if "qdense_packed" in c["kernel"]]
    assert {"mm", "to_float", "dequantize", "bias_add"} <= set(packed["group"]), packed["group"]
    assert not any("reshape" in c["kernel"] for c in calls), [c["kernel"] for c in calls]
    assert re.search(KERNELS[target], mod.library.assembly()), f"{target}: no {KERNELS[target]!r}"
    parsed = parse_target(target)
    if not parsed.backend.host_can_run(parsed):
        return
    x = rng.integers(0, 256, (1, 13, k)).astype(np.uint8)
    x[..., ::2] = 255
    scale = np.float32(3e-5)
    for zp in (0, 1, 117, 255):
        (got,) = mod.run(x=x, zp=np.asarray(zp, np.uint8), scale=np.asarray(scale))
        acc = (x.astype(np.int64) - zp) @ w.astype(np.int64).T
        product = acc.astype(np.int32).astype(np.float32) * scale
        # the bias add may be contracted into an FMA (one rounding instead of two): half an ulp more; an
        # accumulator off by one would be off by the scale, 3e-5, several times this
        allowed = np.finfo(np.float32).eps * (np.abs(product) + np.abs(bias))
        err = np.abs(got - (product + bias))
        assert (err <= allowed).all(), f"{target}, zero point {zp}: max error {err.max()}"


def test_int8_kernels_count_their_operations():
    """The profile's GFLOPS of the int8 kernels (it showed 0 for them): 2 x the multiply-adds of each
    convolution and dense, as for float ones, on the blocked kernels the layout pass made."""
    from nnvm.lowering import group_flops

    mod = nnvm.compile(_blocked_chain(), target="llvm -mcpu=znver5", opt_level=3)
    flops = {c["kernel"]: group_flops(mod.graph, c["group"]) for c in mod.plan["calls"]}
    conv = 2 * 14 * 14 * 32 * 9
    want = sorted([conv * 16, conv * 32, 2 * 10 * 32 * 14 * 14])  # c1 (16 in), c2 (32 in), the classifier
    assert sorted(f for k, f in flops.items() if "qconv2d_nchwc" in k or "qdense_packed" in k) == want, flops


@pytest.mark.parametrize("units, outputs_outer", [(3072, True), (16, False)])
def test_qdense_reads_the_larger_operand_once(units, outputs_outer):
    """128 token rows by a weight [units, 768]: a feed-forward weight (2.4 MB, over L2) has the output
    blocks as the outer loop, so it is read once for all the rows rather than once per tile of rows; a
    weight smaller than the rows keeps the rows outer."""
    b = GraphBuilder(name="qdense_order")
    x = b.input("x", (1, 128, 768), "uint8")
    w = b.param("w", np.zeros((units, 768), np.int8))
    b.output(b.node("qdense", [x, w, b.input("zp", (), "uint8")], name="mm")[0])
    graph, target, _, _ = nnvm.compiler.optimized_graph(b.build(), "llvm -mcpu=znver5")
    (k, group) = next((k, g) for k, g in enumerate(graph.groups) if "mm" in g)
    members = [n for n in graph.nodes if n.name in group]
    template = nnvm.compiler.schedule_template(target, nnvm.compiler.group_compute(graph, k, members))
    assert template.name == "cpu.qdense.packed" and template.fallback["outputs_outer"] is outputs_outer


def _kernel_assembly(asm: str, kernel: str) -> str:
    """The assembly of ``kernel`` and its parallel bodies (``kernel.par1``, ...)."""
    bodies = re.findall(rf"^{re.escape(kernel)}(?:\.par\d+)?:$(.*?)^\.Lfunc_end", asm, flags=re.M | re.S)
    return "".join(bodies)


@pytest.mark.parametrize("target", ["llvm -mcpu=znver5", "llvm -mcpu=haswell"])
def test_int8_epilogues_convert_once_per_stored_vector(target):
    """Each stored vector of uint8 is converted once, by a rounding convert (``vcvtps2dq``, codegen's
    ``rounding_convert``) where ``vrndscaleps``/``vroundps`` and a truncating ``vcvttps2dq`` took two; in
    the residual kernel the requantize read back by the shortcut's dequantize is never converted to uint8
    and back (``simplify._float_of_int``): two int-to-float converts a vector (the sums and the
    shortcut's bytes), where the round trip added a third. With AVX-512 each is one ``vpmovdb`` store.
    The numbers are checked exactly against numpy and onnxruntime by the tests that run these kernels."""
    mod = nnvm.compile(_blocked_chain(), target=target, opt_level=3)
    asm = mod.library.assembly()
    for conv in ("c1", "c2"):
        call = next(c for c in mod.plan["calls"] if conv in c["group"] and "qconv2d_nchwc" in c["kernel"])
        code = _kernel_assembly(asm, call["kernel"])
        ops = ("vpmovdb", "vcvtps2dq", "vcvttps2dq", "vcvtdq2ps")
        count = {op: len(re.findall(rf"{op}\s", code)) for op in ops}
        vectors = count["vcvtps2dq"]
        assert vectors and not count["vcvttps2dq"], f"{target} {conv}: {count}"
        assert count["vcvtdq2ps"] == vectors * (2 if conv == "c2" else 1), f"{target} {conv}: {count}"
        if "znver5" in target:
            assert count["vpmovdb"] == vectors, f"{target} {conv}: {count}"


ROWS_CASES = [  # (channels in, out, size, kernel, rows outer?): a 1x1 on a large plane, a 3x3 on a small one
    (16, 16, 20, 1, True),  # weight 16 x 16 bytes, data 20 x 20 x 16
    (64, 64, 4, 3, False),  # weight 64 x 9 x 64 bytes, data 4 x 4 x 64
]


def test_rows_outer_where_the_weight_is_the_smaller_operand():
    """By default (``qconv_rows_outer=1``) the fallback runs rows outside channel blocks where the weight
    is smaller than the data, channel blocks outside rows elsewhere; ``0`` keeps channel blocks outside
    everywhere (decided for znver5). Both orders give numpy's numbers exactly, run here."""
    from nnvm.options import Options, activated

    rng = np.random.default_rng(11)
    for c, o, hw, k, rows in ROWS_CASES:
        case = ("uint8", c, o, hw, k, 1, (k - 1) // 2, 5)
        b = GraphBuilder(name="qrows")
        data, params = _add_case(b, "0", case, rng)
        graph = b.build()
        for value, want in (("0", False), ("1", rows)):
            with activated(Options(cpu_switches={"qconv_rows_outer": value})):
                opt, target, _, _ = nnvm.compiler.optimized_graph(graph, "llvm -mcpu=znver5")
                k_conv, group = next((i, g) for i, g in enumerate(opt.groups) if "conv0" in g)
                members = [n for n in opt.nodes if n.name in group]
                compute = nnvm.compiler.group_compute(opt, k_conv, members)
                template = nnvm.compiler.schedule_template(target, compute)
                assert template.fallback["rows_outer"] is want, (case, value, template.fallback)
                got = nnvm.compile(graph, target="llvm", opt_level=3).run(x0=data)[0]
            np.testing.assert_array_equal(got, _reference(case, data, params), err_msg=f"{case} rows {value}")


@pytest.mark.parametrize("target", ["llvm -mcpu=znver5", "llvm -mcpu=haswell"])
def test_int8_convolutions_prefetch_the_next_weight_block(target):
    """``cpu.qconv2d_nchwc``'s fallback prefetches, in each dot step, the line of the next channel block's
    weight that the next call reads (``dot_u8s8(prefetch=True)``), into L2: a ``prefetcht1`` in both
    convolutions' kernels, VNNI or AVX2 (the numbers are checked by every test that runs these kernels)."""
    mod = nnvm.compile(_blocked_chain(), target=target, opt_level=3)
    asm = mod.library.assembly()
    convs = [c for c in mod.plan["calls"] if "qconv2d_nchwc" in c["kernel"]]
    assert len(convs) == 2
    for call in convs:
        assert re.search(r"prefetcht1\s", _kernel_assembly(asm, call["kernel"])), (target, call["group"])
