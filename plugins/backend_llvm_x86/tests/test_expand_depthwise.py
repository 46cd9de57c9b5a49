"""``expand_depthwise_nchwc`` (``nnvm/cpu/expand_depthwise.py``): a 1x1 expansion (+ bias, ReLU6 or ReLU)
and the depthwise convolution reading it, as one kernel. Models against onnxruntime (MobileNetV2's
shapes made small, stride 1 and 2, odd planes, batch 1 and 3, without bias or activation, a residual
after it, several bands and one), with the size rule forced on; the rule itself (strided, streaming
from memory), what must stay two convolutions, the switch, the op's evaluation against the two
convolutions', and both vector widths."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
import nnvm.cpu.expand_depthwise as expand_depthwise
from nnvm.compiler import optimized_graph
from nnvm.ops.registry import get_op


def _model(path, n, c, hw, wide, stride, act="relu6", bias=True, residual=False, seed=0, pads=1, dilation=1):
    """x -> Conv 1x1 c -> wide (+ bias) -> act -> depthwise 3x3 (stride) -> + bias -> ReLU6 [-> + shift]."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((wide, c, 1, 1)) * 0.4).astype(np.float32), "w1"),
             numpy_helper.from_array((rng.standard_normal((wide, 1, 3, 3)) * 0.4).astype(np.float32), "w2"),
             numpy_helper.from_array(rng.standard_normal(wide).astype(np.float32), "b2"),
             numpy_helper.from_array(np.array(0, np.float32), "lo"),
             numpy_helper.from_array(np.array(6, np.float32), "hi")]
    expand_in = ["x", "w1"]
    if bias:
        inits.append(numpy_helper.from_array(rng.standard_normal(wide).astype(np.float32), "b1"))
        expand_in.append("b1")
    nodes = [helper.make_node("Conv", expand_in, ["e"], kernel_shape=[1, 1])]
    if act == "relu6":
        nodes.append(helper.make_node("Clip", ["e", "lo", "hi"], ["a"]))
    elif act == "relu":
        nodes.append(helper.make_node("Relu", ["e"], ["a"]))
    else:
        nodes.append(helper.make_node("Identity", ["e"], ["a"]))
    nodes += [helper.make_node("Conv", ["a", "w2", "b2"], ["d"], kernel_shape=[3, 3], strides=[stride] * 2,
                               pads=[pads] * 4, group=wide, dilations=[dilation] * 2),
              helper.make_node("Clip", ["d", "lo", "hi"], ["r" if residual else "y"])]
    if residual:
        inits.append(numpy_helper.from_array(rng.standard_normal((wide, 1, 1)).astype(np.float32), "shift"))
        nodes.append(helper.make_node("Add", ["r", "shift"], ["y"]))
    graph = helper.make_graph(nodes, "expand_dw", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                                 [n, c, hw, hw])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), path)
    x = np.random.default_rng(seed + 1).standard_normal((n, c, hw, hw)).astype(np.float32)
    return path, x


@pytest.fixture
def always_pays(monkeypatch):
    """Fuse every expansion the pass can, whatever its size (the numbers do not depend on the rule)."""
    monkeypatch.setattr(expand_depthwise, "_pays", lambda target, graph, node: True)


def _ops(path, target="llvm"):
    graph, *_ = optimized_graph(path, target)
    return [nd.op for nd in graph.nodes]


# (batch, channels, plane, expanded channels, stride, activation, bias, widths where it fuses). 24 input
# channels at 16 lanes stay two convolutions: the data is in 16c blocks (the last one padded) and the
# expansion's weight in 8i blocks, and the fused kernel's tiles are written for equal blocks (``_expansion``).
CASES = [
    (1, 16, 28, 96, 2, "relu6", True, ("avx2", "avx512")),   # MobileNetV2's first expansion, a smaller plane
    (3, 24, 14, 144, 1, "relu6", True, ("avx2",)),           # stride 1, batch 3
    (1, 24, 15, 144, 2, "relu6", True, ("avx2",)),           # an odd plane: 8 x 8 out, a partial last tile
    (2, 32, 9, 192, 2, "relu", True, ("avx2", "avx512")),    # ReLU
    (1, 16, 12, 64, 2, "none", False, ("avx2", "avx512")),   # no bias, no activation
    (1, 8, 7, 48, 1, "relu6", True, ("avx2", "avx512")),     # the 7x7 plane
    (3, 32, 14, 192, 1, "relu6", True, ("avx2", "avx512")),  # stride 1, batch 3 at both widths
]


@pytest.mark.parametrize("case", CASES, ids=[f"n{c[0]}c{c[1]}hw{c[2]}w{c[3]}s{c[4]}{c[5]}" for c in CASES])
def test_fused_matches_onnxruntime(tmp_path, always_pays, isa_target, case):
    """Fused (or kept apart) as the case says for the width's named CPU, and for the target code of that
    width runs for here, against onnxruntime; compiled only where this machine cannot run the width."""
    n, c, hw, wide, stride, act, bias, widths = case
    path, x = _model(str(tmp_path / "m.onnx"), n, c, hw, wide, stride, act, bias)
    fused = isa_target.isa in widths
    want_ops = (1, 0) if fused else (0, 2)
    ops = _ops(path, isa_target.decide)
    assert (ops.count("expand_depthwise_nchwc"), ops.count("conv2d_nchwc")) == want_ops, (isa_target, ops)
    mod = nnvm.compile(path, target=isa_target.run or isa_target.decide, tuning_log=False)
    ops = [nd.op for nd in mod.graph.nodes]
    assert (ops.count("expand_depthwise_nchwc"), ops.count("conv2d_nchwc")) == want_ops, (isa_target, ops)
    if isa_target.run is None:
        return  # an AVX2 machine: AVX-512 code compiled (above), run where the width is the host's
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    err = float(np.abs(mod.run(x)[0] - want).max() / np.abs(want).max())
    assert err < 1e-5, f"{case} for {isa_target.run}: max relative error {err:.2e}"


@pytest.mark.parametrize("config", [{"band": 2}, {"band": 14, "expand_blocks": 1, "expand_ow": 7},
                                    {"tile_rows": 1, "ow_block": 7}, {"expand_blocks": 2, "expand_ow": 2}])
def test_configs_match_onnxruntime(tmp_path, always_pays, monkeypatch, config):
    """Bands of 2 rows (halo rows computed by both bands beside a cut) up to the whole plane, other tiles."""
    path, x = _model(str(tmp_path / "m.onnx"), 2, 16, 28, 96, 2)
    build = expand_depthwise.build_expand_depthwise
    used = []

    def forced(group, fallback):
        used.append({**fallback, **config})
        return build(group, used[-1])

    monkeypatch.setattr(expand_depthwise, "build_expand_depthwise", forced)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = nnvm.compile(path, target="llvm", tuning_log=False).run(x)[0]
    assert used, "the template did not serve the group"
    assert float(np.abs(got - want).max() / np.abs(want).max()) < 1e-5, used[-1]


def test_dilated_depthwise(tmp_path, always_pays):
    """A dilated depthwise window (DeepLab's MobileNetV2 backbone: dilation 2, padding 2)."""
    path, x = _model(str(tmp_path / "m.onnx"), 1, 16, 21, 96, 2, pads=2, dilation=2)
    assert "expand_depthwise_nchwc" in _ops(path)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = nnvm.compile(path, target="llvm", tuning_log=False).run(x)[0]
    assert float(np.abs(got - want).max() / np.abs(want).max()) < 1e-5


def test_residual_after_it_and_groups(tmp_path, always_pays):
    """An epilogue past the depthwise one's bias and ReLU6 (an add) joins the fused kernel's group."""
    path, x = _model(str(tmp_path / "m.onnx"), 1, 16, 14, 96, 1, residual=True)
    mod = nnvm.compile(path, target="llvm", tuning_log=False)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    assert float(np.abs(mod.run(x)[0] - want).max() / np.abs(want).max()) < 1e-5
    ops = {nd.name: nd.op for nd in mod.graph.nodes}
    (fused,) = [g for g in mod.graph.groups if any(ops[name] == "expand_depthwise_nchwc" for name in g)]
    assert [ops[name] for name in fused] == ["expand_depthwise_nchwc", "add", "clip", "add"]


def test_kept_apart(tmp_path, always_pays, cpu_switch):
    """Channels that do not fill the last block (a depthwise over padded lanes), a wide tensor that is
    also a graph output, an unpadded depthwise of stride 1 fused, and ``cpu_switches={"expand_depthwise":
    "0"}``."""
    path, _ = _model(str(tmp_path / "a.onnx"), 1, 16, 14, 20, 2)  # 20 channels: 8 + 8 + 4
    assert "expand_depthwise_nchwc" not in _ops(path)
    path, x = _model(str(tmp_path / "b.onnx"), 1, 16, 14, 96, 1)
    model = onnx.load(path)
    model.graph.output.append(helper.make_tensor_value_info("a", TensorProto.FLOAT, None))
    onnx.save(model, path)
    assert "expand_depthwise_nchwc" not in _ops(path)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})
    got = nnvm.compile(path, target="llvm", tuning_log=False).run(x)
    for g, w in zip(got, want):
        assert float(np.abs(g - w).max() / np.abs(w).max()) < 1e-5
    path, x = _model(str(tmp_path / "c.onnx"), 1, 16, 14, 96, 1, pads=0)
    assert "expand_depthwise_nchwc" in _ops(path)
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = nnvm.compile(path, target="llvm", tuning_log=False).run(x)[0]
    assert float(np.abs(got - want).max() / np.abs(want).max()) < 1e-5
    cpu_switch("expand_depthwise", "0")
    assert "expand_depthwise_nchwc" not in _ops(str(tmp_path / "c.onnx"))


class _Signature:
    l3 = 32 * 2**20


class _Backend:
    def cpu_signature(self, target):
        return _Signature()


class _Target:
    backend = _Backend()


@pytest.mark.parametrize(("batch", "stride", "pays"), [(8, 2, True), (1, 2, False), (8, 1, False)])
def test_fused_where_the_wide_tensor_streams_and_the_depthwise_strides(tmp_path, batch, stride, pays):
    """MobileNetV2's 96 x 112 x 112 expansion on a 32 MB last-level cache: at batch 8 (38.5 MB, written
    and read back) fused; at batch 1 (4.8 MB) or under a stride-1 depthwise (its output as large) not."""
    path, _ = _model(str(tmp_path / "m.onnx"), batch, 16, 112, 96, stride)
    graph, *_ = optimized_graph(path, "llvm", disabled_passes=("fuse_expand_depthwise",))
    (depthwise,) = [nd for nd in graph.nodes if nd.op == "conv2d_nchwc" and nd.attrs.get("groups") == 96]
    assert expand_depthwise._pays(_Target(), graph, depthwise) is pays


def test_evaluation_matches_the_two_convolutions():
    """The op's numpy evaluation (constant folding's) against conv2d_nchwc's, bias, ReLU6, twice."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 2, 9, 9, 8)).astype(np.float32)
    w1 = rng.standard_normal((3, 2, 1, 1, 8, 8)).astype(np.float32)
    b1 = rng.standard_normal((1, 3, 1, 1, 8)).astype(np.float32)
    w2 = rng.standard_normal((3, 1, 3, 3, 1, 8)).astype(np.float32)
    conv = get_op("conv2d_nchwc")
    (wide,) = conv.evaluate([x, w1], conv.normalize_attrs({}))
    dw_attrs = {"strides": (2, 2), "padding": (1, 1, 1, 1), "dilation": (1, 1), "groups": 24}
    (want,) = conv.evaluate([np.clip(wide + b1, 0, 6), w2], conv.normalize_attrs(dict(dw_attrs)))
    op = get_op("expand_depthwise_nchwc")
    (got,) = op.evaluate([x, w1, b1, w2], op.normalize_attrs({**dw_attrs, "a_min": 0.0, "a_max": 6.0}))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", ["llvm -mcpu=haswell", "llvm -mcpu=skylake-avx512"],
                         ids=["avx2", "avx512"])
def test_either_vector_width(tmp_path, always_pays, target):
    """8 and 16 lanes: 96 channels in 12 or 6 blocks, the template's tiles from each register file."""
    path, _ = _model(str(tmp_path / "m.onnx"), 1, 16, 28, 96, 2)
    assert "expand_depthwise_nchwc" in _ops(path, target)
    assert nnvm.compile(path, target=target, tuning_log=False) is not None


def test_exported_module_runs_the_fused_kernel(tmp_path, always_pays):
    """The fused kernel is compiled code like any other: an exported module loads and gives the same
    numbers without the op (or the pass) on the loading side."""
    path, x = _model(str(tmp_path / "m.onnx"), 2, 16, 28, 96, 2)
    mod = nnvm.compile(path, target="llvm", tuning_log=False)
    assert any(nd.op == "expand_depthwise_nchwc" for nd in mod.graph.nodes)
    mod.export(str(tmp_path / "m.nnvm"))
    want = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    got = nnvm.load(str(tmp_path / "m.nnvm")).run(x)[0]
    assert float(np.abs(got - want).max() / np.abs(want).max()) < 1e-5
