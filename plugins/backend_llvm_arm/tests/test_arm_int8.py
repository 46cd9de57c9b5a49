"""8-bit kernels on Arm: the blocked int8 convolution, depthwise and dense kernels of the CPU layer over the
Arm forms of ``dot_u8s8`` (``usdot`` with ``+i8mm``, ``sdot`` with ``+dotprod``, the NEON form elsewhere).

Each target is named explicitly (``-mcpu``), so the instruction checks hold whatever this machine is; the
numbers come from running the code under qemu-user, exactly against an int64 numpy reference on data that
hits the corners of u8 x s8 (255 against 127 and -128, where ``sdot``'s ``a ^ 0x80`` and NEON's 16-bit
products would go wrong if they were not exact). The QDQ ResNet-18 and MobileNetV2 that onnxruntime's
quantizer writes (full size) run on a dot-product AArch64 CPU and on ARMv7 against onnxruntime's int8 output.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import nnvm
from nnvm.graph.builder import GraphBuilder
from nnvm_backend_llvm_arm.plugin import DOTPROD_CPUS, I8MM_CPUS

# target: (the instruction its 8-bit kernels multiply with, instructions that must not be there)
KERNELS = {
    "aarch64 -mcpu=neoverse-n2": ("usdot|sudot", ("sdot", "sadalp")),  # sudot: usdot by element
    "aarch64 -mcpu=neoverse-n1": ("sdot", ("usdot", "sadalp")),
    "aarch64 -mcpu=cortex-a72 -mattr=+dotprod": ("sdot", ("usdot", "sadalp")),
    "aarch64": ("sadalp", ("sdot", "usdot")),  # Cortex-A72: no dot product, the NEON form
    "aarch64 -mcpu=neoverse-n1 -mattr=-dotprod": ("sadalp", ("sdot", "usdot")),
    "armv7": ("vpadal.s16", ("sdot", "vsdot")),
}
# data dtype, channels in, out, size, kernel, stride, padding, groups, data zero point
CONVS = [
    ("uint8", 16, 24, 9, 3, 1, 1, 1, 7),
    ("uint8", 3, 20, 11, 7, 2, 3, 1, 0),  # read planar (NCHW, four pixels of a row per word): a stem
    ("int8", 8, 12, 6, 1, 1, 0, 1, -5),  # signed data
    ("uint8", 24, 24, 7, 3, 2, 1, 24, 9),  # depthwise: small values, requantized by 1 into int8 exactly
]


def count(asm: str, mnemonics: str) -> int:
    """Instructions of ``mnemonics`` (``usdot|sudot``) in ``asm``."""
    alternatives = "|".join(re.escape(m) for m in mnemonics.split("|"))
    return len(re.findall(rf"^\s*(?:{alternatives})\s", asm, re.M))


def _corner_data(rng, dtype, shape):
    info = np.iinfo(dtype)
    data = rng.integers(int(info.min), int(info.max) + 1, shape)
    data[..., ::2] = info.max  # 255: the largest products, where an inexact form would overflow
    data[..., 1::5] = info.min
    return data.astype(dtype)


def _int8_graph(rng):
    """Every 8-bit kernel once (``CONVS`` and a dense), int32 outputs; their inputs and int64 references."""
    b = GraphBuilder(name="int8_kernels")
    feeds, wants = {}, []
    for k, (dtype, c, o, hw, ks, stride, pad, groups, zp) in enumerate(CONVS):
        data = _corner_data(rng, dtype, (1, c, hw, hw))
        weight = rng.integers(-128, 128, (o, c // groups, ks, ks)).astype(np.int8)
        weight[: o // 2, ..., ::2] = 127
        weight[o // 2:, ..., 1::2] = -128
        if groups > 1:  # |acc| <= 9 * 3 * 2: an int8 requantize of scale 1 keeps it exactly
            data, weight = rng.integers(7, 13, data.shape).astype(dtype), weight % 5 - 2
        attrs = {"strides": (stride, stride), "padding": (pad,) * 4, "groups": groups, "data_zero_point": zp}
        x = b.input(f"x{k}", data.shape, dtype)
        y = b.node("qconv2d", [x, b.param(f"w{k}", weight)], attrs, name=f"conv{k}")[0]
        if groups > 1:  # (a depthwise qconv2d with no epilogue does not compile: see the report)
            unit = [b.param(f"s{k}", np.ones(o, np.float32)), b.param(f"b{k}", np.zeros(o, np.int32))]
            y = b.node("requantize", [y, *unit], {"zero_point": 0, "out_dtype": "int8"},
                       name=f"requantize{k}")[0]
        b.output(y)
        feeds[f"x{k}"] = data
        x64, w64 = data.astype(np.int64) - zp, weight.astype(np.int64)
        wants.append(_conv_reference(x64, w64, stride, pad, groups))
    data = _corner_data(rng, "uint8", (5, 72))
    weight = rng.integers(-128, 128, (40, 72)).astype(np.int8)
    weight[:, ::3] = -128
    x = b.input("xd", data.shape, "uint8")
    b.output(b.node("qdense", [x, b.param("wd", weight)], {"data_zero_point": 3}, name="dense")[0])
    feeds["xd"] = data
    wants.append((data.astype(np.int64) - 3) @ weight.astype(np.int64).T)
    return b.build(), feeds, wants


def _conv_reference(x, weight, stride, pad, groups):
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, w = x.shape
    o, cg, k, _ = weight.shape
    oh, ow = (h - k) // stride + 1, (w - k) // stride + 1
    out = np.zeros((n, o, oh, ow), np.int64)
    per = o // groups
    for g in range(groups):
        xs, ws = x[:, g * cg:(g + 1) * cg], weight[g * per:(g + 1) * per]
        for i in range(k):
            for j in range(k):
                patch = xs[:, :, i:i + stride * (oh - 1) + 1:stride, j:j + stride * (ow - 1) + 1:stride]
                out[:, g * per:(g + 1) * per] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out


@pytest.mark.parametrize("target", list(KERNELS))
def test_int8_kernels_per_arm_target(target, need_tools):
    """The blocked kernels take every 8-bit case (no float blocked layout on Arm: the 8-bit layout pass
    runs alone) with the target's dot product, and compute it exactly."""
    need_tools(target.split()[0])
    graph, feeds, wants = _int8_graph(np.random.default_rng(0))
    mod = nnvm.compile(graph, target=target, opt_level=3)
    asm = mod.library.assembly()
    used, absent = KERNELS[target]
    assert count(asm, used) > 0, f"{target}: no {used} in the int8 kernels"
    for name in absent:
        assert count(asm, name) == 0, f"{target}: {name} in the int8 kernels, expected {used} alone"
    kernels = [c["kernel"] for c in mod.plan["calls"]]
    for blocked in ("qconv2d_nchwc", "qdepthwise_nchwc", "qdense_packed"):
        assert any(blocked in k for k in kernels), f"{target}: no {blocked} kernel in {kernels}"
    outs = mod.run(**feeds)
    for k, (got, want) in enumerate(zip(outs, wants)):
        what = f"conv {CONVS[k]}" if k < len(CONVS) else "dense"
        bad = got != want
        assert got.shape == want.shape and not bad.any(), (
            f"{target} {what}: {int(bad.sum())} of {bad.size} int32 outputs differ, first got "
            f"{got[bad][0]} expected {want[bad][0]}")


@pytest.mark.parametrize("cpu", sorted(DOTPROD_CPUS | I8MM_CPUS))
def test_dot_product_cpus_compile_their_instruction(cpu):
    """Each CPU the Arm plugin credits with ``+dotprod`` or ``+i8mm`` by name has it in LLVM (a wrong
    entry would not compile): compile only, the instruction checked in the assembly."""
    b = GraphBuilder(name="qconv")
    x = b.input("x", (1, 8, 6, 6), "uint8")
    w = b.param("w", np.random.default_rng(1).integers(-128, 128, (8, 8, 3, 3)).astype(np.int8))
    b.output(b.node("qconv2d", [x, w], {"padding": (1, 1, 1, 1), "data_zero_point": 1})[0])
    asm = nnvm.compile(b.build(), target=f"aarch64 -mcpu={cpu}", opt_level=3).library.assembly()
    want = "usdot|sudot" if cpu in I8MM_CPUS else "sdot"
    assert count(asm, want) > 0, f"aarch64 -mcpu={cpu}: no {want} in the int8 convolution"


QDQ_TARGETS = ("aarch64 -mcpu=neoverse-n1", "armv7")


@pytest.mark.slow
@pytest.mark.parametrize("target", QDQ_TARGETS)
@pytest.mark.parametrize("model", ["resnet18", "mobilenet_v2"])
def test_qdq_model_matches_onnxruntime_int8(model, target, need_tools):
    """onnxruntime's QDQ model (static, per-channel int8 weights, uint8 activations), full size, on Arm
    under qemu: every output within one quantization step of onnxruntime's int8 output (the step: the
    scale of the model's last DequantizeLinear), the same top-1, and the integer kernels used."""
    import onnx
    import onnxruntime as ort
    from onnx import numpy_helper

    from nnvm_testing.frontend_onnx.quantized import calibration_inputs, quantized_model_path

    need_tools(target.split()[0])
    path = quantized_model_path(model, "qdq")
    proto = onnx.load(path)
    (last,) = [n for n in proto.graph.node if n.output[0] == proto.graph.output[0].name]
    assert last.op_type == "DequantizeLinear", last.op_type
    step = float(next(numpy_helper.to_array(t) for t in proto.graph.initializer if t.name == last.input[1]))
    mod = nnvm.compile(path, target=target, opt_level=3)
    asm = mod.library.assembly()
    dot = "sdot" if target.startswith("aarch64") else "vpadal.s16"
    assert count(asm, dot) > 0, f"{model} on {target}: no {dot}, the integer kernels were not used"
    feeds = calibration_inputs(path, count=1, seed=1)[0]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    (want,) = ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]).run(None, feeds)
    (got,) = mod.run(**feeds)
    worst = float(np.abs(got.astype(np.float64) - want).max())
    assert worst <= step * 1.0001, f"{model} on {target}: off by {worst:.4g}, more than one step ({step:.4g})"
    assert got.argmax() == want.argmax(), f"{model} on {target}: top-1 differs from onnxruntime's"


@pytest.mark.parametrize("target, recorded", [
    ("aarch64 -mcpu=neoverse-n1", {"dotprod"}), ("aarch64 -mcpu=neoverse-n2", {"i8mm"}),
    ("aarch64 -mcpu=cortex-a72 -mattr=+dotprod", {"dotprod"}), ("aarch64", set()),
    ("aarch64 -mcpu=neoverse-n1 -mattr=-dotprod", set())])
def test_an_export_records_the_dot_product_it_uses(target, recorded):
    """The ISA extensions an export's footer records (a loader on a board without them refuses it)
    include the dot product of a CPU named by ``-mcpu`` alone, whose feature string is empty."""
    from nnvm.target import parse_target

    parsed = parse_target(target)
    features = set(parsed.backend.code_features(parsed.backend.resolve(parsed)))
    assert features & {"dotprod", "i8mm"} == recorded, f"{target}: records {sorted(features)}"
