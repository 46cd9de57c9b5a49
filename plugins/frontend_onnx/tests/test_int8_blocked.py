"""The blocked int8 kernels (``qconv2d_nchwc``, ``qdense_packed``) against onnxruntime, exactly.

Hand-built ONNX ``QLinearConv`` / ``QLinearMatMul`` chains (per-channel int8 weights, int32 biases,
uint8 and int8 activations, zero points, strides, padding, 3 and 24 channels that pad to a block,
saturating bytes) run in onnxruntime and in nnvm on this machine: the 8-bit outputs must be equal.
Each test also checks the blocked kernels ran (not the im2col kernel, not the generic schedule), so
a silent fall back passes nothing.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

import nnvm

NNVM_PLUGINS = "onnx,llvm-x86"


def _onnxruntime(path: str, feeds: dict) -> list:
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]).run(None, feeds)


class _Chain:
    """A chain of QLinearConv nodes, each reading the previous output."""

    def __init__(self, rng, dtype: str, zp: int, shape: tuple):
        self.rng, self.inits, self.nodes = rng, [], []
        self.value, self.dtype, self.zp, self.channels = "x", dtype, zp, shape[1]
        self.scale = 0.02
        self.const("x_s", np.array(self.scale, np.float32))
        self.const("x_z", np.array(zp, dtype))
        self.out_types = {}

    def const(self, name, value):
        self.inits.append(numpy_helper.from_array(value, name))
        return name

    def conv(self, name: str, out: int, k: int, stride: int, pad: int, y_zp: int, y_dtype: str = "uint8",
             group: int = 1):
        rng, c = self.rng, self.channels
        w = rng.integers(-127, 128, (out, c // group, k, k)).astype(np.int8)
        w[: out // 2, :, :, ::2] = 127  # with 255-byte activations: AVX2's saturating pair sums
        w_scale = rng.uniform(0.002, 0.01, out).astype(np.float32)
        y_scale = float(self.scale * np.sqrt(c // group * k * k) * 0.004 * 40)
        ins = [self.value, f"{self.value}_s", f"{self.value}_z",
               self.const(f"{name}_w", w), self.const(f"{name}_ws", w_scale),
               self.const(f"{name}_wz", np.zeros(out, np.int8)),
               self.const(f"{name}_s", np.array(y_scale, np.float32)),
               self.const(f"{name}_z", np.array(y_zp, y_dtype)),
               self.const(f"{name}_b", rng.integers(-3000, 3000, out).astype(np.int32))]
        self.nodes.append(helper.make_node("QLinearConv", ins, [name], strides=[stride, stride],
                                           pads=[pad] * 4, group=group))
        self.value, self.channels, self.scale = name, out, y_scale
        self.out_types[name] = TensorProto.UINT8 if y_dtype == "uint8" else TensorProto.INT8
        return name

    def save(self, path: str, x_shape: tuple, outputs: list):
        elem = TensorProto.UINT8 if self.dtype == "uint8" else TensorProto.INT8
        graph = helper.make_graph(self.nodes, "chain", [helper.make_tensor_value_info("x", elem, x_shape)],
                                  [helper.make_tensor_value_info(o, self.out_types[o], None)
                                   for o in outputs], self.inits)
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)


def _kernels(mod) -> list:
    return [call["kernel"] for call in mod.plan["calls"]]


def _compare(path: str, feeds: dict, outputs: list, mod) -> None:
    want = _onnxruntime(path, feeds)
    got = mod.run(**feeds)
    for name, w, g in zip(outputs, want, got):
        assert g.dtype == w.dtype and g.shape == w.shape, f"{name}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        bad = g != w
        assert not bad.any(), (f"{name}: {int(bad.sum())} of {bad.size} values differ from onnxruntime, "
                               f"max |diff| {int(np.abs(g.astype(int) - w.astype(int)).max())}")


def test_qlinearconv_chain_matches_onnxruntime_exactly(tmp_path):
    """An RGB stem (3 channels: 4-byte pixels), 24 channels (a padded block), 64, a 1x1 and a strided
    convolution, read block to block; every intermediate output compared too."""
    rng = np.random.default_rng(0)
    shape = (1, 3, 19, 19)
    chain = _Chain(rng, "uint8", 7, shape)
    outs = [chain.conv("stem", 24, 3, 2, 1, 0),
            chain.conv("c2", 64, 3, 1, 1, 5),
            chain.conv("c3", 64, 1, 1, 0, 3),
            chain.conv("c4", 40, 3, 2, 1, 0)]
    path = str(tmp_path / "chain.onnx")
    chain.save(path, shape, outs)
    mod = nnvm.compile(path, target="llvm", opt_level=3)
    kernels = _kernels(mod)
    assert sum("qconv2d_nchwc" in k for k in kernels) == 4, kernels
    assert not any(k.endswith("_qconv2d") for k in kernels), kernels  # not the generic schedule
    x = rng.integers(0, 256, shape).astype(np.uint8)
    x[..., ::2] = 255
    _compare(path, {"x": x}, outs, mod)


def test_qlinearconv_int8_activations_match_onnxruntime_exactly(tmp_path):
    """Signed data (moved to uint8 by the kernel, its zero point with it) and a signed output."""
    rng = np.random.default_rng(1)
    shape = (2, 16, 9, 9)
    chain = _Chain(rng, "int8", -5, shape)
    outs = [chain.conv("a", 32, 3, 1, 1, -3, "int8"), chain.conv("b", 16, 3, 2, 0, 4, "int8")]
    path = str(tmp_path / "signed.onnx")
    chain.save(path, shape, outs)
    mod = nnvm.compile(path, target="llvm", opt_level=3)
    assert sum("qconv2d_nchwc" in k for k in _kernels(mod)) == 2, _kernels(mod)
    x = rng.integers(-128, 128, shape).astype(np.int8)
    x[..., ::2] = 127
    _compare(path, {"x": x}, outs, mod)


def test_qlinearmatmul_matches_onnxruntime_exactly(tmp_path):
    """QLinearMatMul as qdense_packed: a classifier row and 7 rows (a tile of rows and a ragged one), K
    not a multiple of 4, N not a multiple of the vector, uint8 and int8 data (and output: onnxruntime's
    kernels pair them)."""
    rng = np.random.default_rng(2)
    cases = ((1, 512, 1000, "uint8", 0), (7, 66, 37, "uint8", 131), (5, 64, 48, "int8", -9))
    for rows, k, n, dtype, zp in cases:
        w = rng.integers(-127, 128, (k, n)).astype(np.int8)
        inits = [numpy_helper.from_array(v, name) for name, v in (
            ("a_s", np.array(0.05, np.float32)), ("a_z", np.array(zp, dtype)), ("w", w),
            ("w_s", np.array(0.004, np.float32)), ("w_z", np.array(0, np.int8)),
            ("y_s", np.array(0.05 * 0.004 * np.sqrt(k) * 60, np.float32)), ("y_z", np.array(3, dtype)))]
        node = helper.make_node("QLinearMatMul", ["a", "a_s", "a_z", "w", "w_s", "w_z", "y_s", "y_z"], ["y"])
        elem = TensorProto.UINT8 if dtype == "uint8" else TensorProto.INT8
        graph = helper.make_graph([node], "mm", [helper.make_tensor_value_info("a", elem, [rows, k])],
                                  [helper.make_tensor_value_info("y", elem, [rows, n])], inits)
        path = str(tmp_path / f"mm{rows}.onnx")
        onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
        mod = nnvm.compile(path, target="llvm", opt_level=3)
        assert any("qdense_packed" in kern for kern in _kernels(mod)), _kernels(mod)
        info = np.iinfo(dtype)
        a = rng.integers(int(info.min), int(info.max) + 1, (rows, k)).astype(dtype)
        a[:, ::3] = info.max
        _compare(path, {"a": a}, ["y"], mod)


def test_mobilenet_block_matches_onnxruntime_exactly(tmp_path):
    """MobileNetV2's expand (1x1) -> depthwise 3x3 (stride 1 and 2) -> project (1x1), with zero points on
    the depthwise input, 24 channels (a padded block) and 144: ``qdepthwise_nchwc`` between the
    ``qconv2d_nchwc`` 1x1s."""
    rng = np.random.default_rng(3)
    shape = (1, 24, 14, 14)
    chain = _Chain(rng, "uint8", 9, shape)
    outs = [chain.conv("expand", 144, 1, 1, 0, 11),
            chain.conv("dw1", 144, 3, 1, 1, 0, group=144),
            chain.conv("dw2", 144, 3, 2, 1, 2, group=144),
            chain.conv("project", 24, 1, 1, 0, 120)]
    path = str(tmp_path / "mbblock.onnx")
    chain.save(path, shape, outs)
    mod = nnvm.compile(path, target="llvm", opt_level=3)
    kernels = _kernels(mod)
    assert sum("qdepthwise_nchwc" in k for k in kernels) == 2, kernels
    assert sum("qconv2d_nchwc" in k for k in kernels) == 2, kernels
    x = rng.integers(0, 256, shape).astype(np.uint8)
    x[..., ::2] = 255
    _compare(path, {"x": x}, outs, mod)


def test_prime_width_matches_onnxruntime_exactly(tmp_path):
    """13-pixel rows (a prime: no tile divides them, so the accumulators are computed for 14 and the
    extra pixel is never stored): a planar 7x7 stem, a padded 3x3, an unpadded 1x1."""
    rng = np.random.default_rng(4)
    shape = (1, 3, 25, 25)
    chain = _Chain(rng, "uint8", 6, shape)
    outs = [chain.conv("stem", 32, 7, 2, 3, 0), chain.conv("c3", 48, 3, 1, 1, 2),
            chain.conv("c1", 40, 1, 1, 0, 0)]
    path = str(tmp_path / "prime.onnx")
    chain.save(path, shape, outs)
    mod = nnvm.compile(path, target="llvm", opt_level=3)
    assert sum("qconv2d_nchwc" in k for k in _kernels(mod)) == 3, _kernels(mod)
    x = rng.integers(0, 256, shape).astype(np.uint8)
    x[..., ::2] = 255
    _compare(path, {"x": x}, outs, mod)
