"""nnvm.quantize on ONNX float models: the QDQ file it writes, checked against onnxruntime (which runs it)
and against the float model (top-1 agreement), and nnvm's own compile of that file against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import nnvm
from nnvm_testing.frontend_onnx.quantized import centred_model_path, generated_images

NNVM_PLUGINS = "onnx,llvm-x86"  # calibration runs the float model compiled for the host


def _session(model):
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1
    data = model if isinstance(model, str) else model.SerializeToString()
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def _inits(model) -> dict:
    return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}


@pytest.fixture(scope="module")
def resnet18():
    """The centred-head ResNet-18 (top-1 follows the input) quantized on 8 generated images."""
    path = centred_model_path("resnet18")
    return path, nnvm.quantize(path, generated_images(8, seed=2))


@pytest.fixture(scope="module")
def mobilenet_v2():
    path = centred_model_path("mobilenet_v2")
    return path, nnvm.quantize(path, generated_images(8, seed=2))


def test_resnet18_qdq_layout_is_what_onnxruntime_writes(resnet18):
    _, q = resnet18
    onnx.checker.check_model(q)
    inits = _inits(q)
    producer = {o: n for n in q.graph.node for o in n.output}
    ops = [n.op_type for n in q.graph.node]
    assert "BatchNormalization" not in ops and "Relu" not in ops  # folded; clamped by the uint8 Qs
    for node in (n for n in q.graph.node if n.op_type in ("Conv", "Gemm")):
        x, w, b = (producer[v] for v in node.input[:3])
        assert x.op_type == w.op_type == b.op_type == "DequantizeLinear", node.name
        x_scale, wq, w_scale = inits[x.input[1]], inits[w.input[0]], inits[w.input[1]]
        bq, b_scale = inits[b.input[0]], inits[b.input[1]]
        assert wq.dtype == np.int8 and np.abs(wq).max() == 127 and w_scale.shape == (wq.shape[0],), node.name
        assert bq.dtype == np.int32 and np.array_equal(b_scale, np.float32(x_scale) * w_scale), node.name
        assert inits[x.input[2]].dtype == np.uint8
    assert not any(n.op_type == "QuantizeLinear" and n.input[0] == "output" for n in q.graph.node)


def test_resnet18_qdq_matches_the_float_model_in_onnxruntime(resnet18):
    path, q = resnet18
    images = generated_images(24, seed=1)
    want = np.stack([_session(path).run(None, {"data": x})[0][0] for x in images])
    sess = _session(q)
    got = np.stack([sess.run(None, {"data": x})[0][0] for x in images])
    assert len(set(want.argmax(1))) >= 8, "the generated images' top-1 classes are degenerate"
    err = float(np.abs(got - want).max() / np.abs(want).max())
    agree = float(np.mean(got.argmax(1) == want.argmax(1)))
    assert err < 0.15 and agree >= 0.8, f"max rel err {err:.3f}, top-1 agreement {agree:.2f}"


@pytest.mark.parametrize("which", ["resnet18", "mobilenet_v2"])
def test_nnvm_runs_the_qdq_file_as_onnxruntime_does(which, request, tmp_path):
    """Every 8-bit tensor equal to onnxruntime's, or one quantization step away at the first that is
    not (a residual Add runs in float between its Q and DQ, as docs/quantization.md says), and the
    outputs close."""
    _, q = request.getfixturevalue(which)
    q = onnx.load_from_string(q.SerializeToString())
    names = [n.output[0] for n in q.graph.node if n.op_type == "QuantizeLinear"]
    q.graph.output.extend([onnx.ValueInfoProto(name=t) for t in names])
    path = str(tmp_path / "q.onnx")
    onnx.save(q, path)
    mod = nnvm.compile(path)
    sess = _session(path)
    for x in generated_images(2, seed=1):
        want, got = sess.run(None, {"data": x}), mod.run(x)
        steps = [int(np.abs(w.astype(np.int32) - g.astype(np.int32)).max())
                 for w, g in zip(want[1:], got[1:])]
        first = next((s for s in steps if s), 0)
        assert first <= 1, f"{which}: first differing tensor is {first} quantization steps away"
        err = float(np.abs(got[0] - want[0]).max() / np.abs(want[0]).max())
        assert err <= (1e-5 if not any(steps) else 0.1), f"{which}: output max rel err {err:.2e}"


def test_mobilenet_v2_depthwise_and_relu6_quantized(mobilenet_v2):
    _, q = mobilenet_v2
    onnx.checker.check_model(q)
    producer = {o: n for n in q.graph.node for o in n.output}
    convs = [n for n in q.graph.node if n.op_type == "Conv"]
    grouped = [n for n in convs if any(a.name == "group" and a.i > 1 for a in n.attribute)]
    assert len(convs) == 52 and len(grouped) == 17
    assert all(producer[n.input[1]].op_type == "DequantizeLinear" for n in convs)
    assert "Clip" not in [n.op_type for n in q.graph.node]  # Clip(0, 6): the Q's saturation


def _tiny(path=None, opset=13, initializers_as_inputs=False):
    """Conv -> BatchNormalization -> Relu -> Conv, + the first Conv's output (Add) -> GlobalAveragePool
    -> Flatten -> Gemm: seeded weights, 8x8 input."""
    rng = np.random.default_rng(0)
    arrays = {"w1": rng.normal(0, 0.5, (4, 3, 3, 3)), "w2": rng.normal(0, 0.5, (4, 4, 3, 3)),
              "g": rng.uniform(0.5, 1.5, 4), "b": rng.normal(0, 0.1, 4), "m": rng.normal(0, 0.1, 4),
              "v": rng.uniform(0.5, 1.5, 4), "fw": rng.normal(0, 0.5, (5, 4)), "fb": rng.normal(0, 0.1, 5)}
    inits = [numpy_helper.from_array(a.astype(np.float32), k) for k, a in arrays.items()]
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("BatchNormalization", ["c1", "g", "b", "m", "v"], ["bn"], name="bn"),
             helper.make_node("Relu", ["bn"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Add", ["c2", "r"], ["s"], name="add"),
             helper.make_node("GlobalAveragePool", ["s"], ["p"], name="gap"),
             helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fw", "fb"], ["y"], transB=1, name="fc")]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])]
    if initializers_as_inputs:
        inputs += [helper.make_tensor_value_info(t.name, t.data_type, t.dims) for t in inits]
    graph = helper.make_graph(nodes, "tiny", inputs, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                     [1, 5])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7
    return model


def _tiny_inputs(n, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal((1, 3, 8, 8)).astype(np.float32) for _ in range(n)]


@pytest.mark.parametrize("per_channel", [True, False])
@pytest.mark.parametrize("method", ["minmax", "percentile", "entropy"])
def test_tiny_model_every_method_close_to_float(method, per_channel):
    model = _tiny()
    q = nnvm.quantize(model, _tiny_inputs(16, 1), per_channel=per_channel, method=method)
    onnx.checker.check_model(q)
    scales = [_inits(q)[n.input[1]] for n in q.graph.node if n.op_type == "DequantizeLinear"
              and n.input[0].startswith("w")]
    assert scales and all(s.ndim == (1 if per_channel else 0) for s in scales)
    f, s = _session(model), _session(q)
    for x in _tiny_inputs(4, 2):
        want, got = f.run(None, {"x": x})[0], s.run(None, {"x": x})[0]
        err = float(np.abs(got - want).max() / np.abs(want).max())
        assert err < 0.1, f"{method}, per channel {per_channel}: max rel err {err:.3f}"


def test_old_opset_and_initializers_listed_as_inputs():
    model = _tiny(opset=11, initializers_as_inputs=True)
    q = nnvm.quantize(model.SerializeToString(), _tiny_inputs(4, 1))
    assert max(o.version for o in q.opset_import if o.domain == "") >= 13
    assert [i.name for i in q.graph.input] == ["x"]  # the float weights are gone, with their input entries
    onnx.checker.check_model(q)
    x = _tiny_inputs(1, 2)[0]
    want, got = _session(model).run(None, {"x": x})[0], _session(q).run(None, {"x": x})[0]
    assert np.abs(got - want).max() < 0.1 * np.abs(want).max()


def test_user_mistakes_are_one_sentence():
    model = _tiny()
    with pytest.raises(nnvm.CalibrationInputError, match="calibration input 1, input 'x': shape 1x3x4x4"):
        nnvm.quantize(model, [_tiny_inputs(1, 0)[0], np.zeros((1, 3, 4, 4), np.float32)])
    with pytest.raises(nnvm.CalibrationInputError, match="float64 where the model takes float32"):
        nnvm.quantize(model, [np.zeros((1, 3, 8, 8))])
    with pytest.raises(nnvm.Error, match="unknown calibration method 'kl'"):
        nnvm.quantize(model, _tiny_inputs(1, 0), method="kl")
    with pytest.raises(nnvm.Error, match="at least one calibration input"):
        nnvm.quantize(model, [])
    q = nnvm.quantize(model, _tiny_inputs(2, 0))
    with pytest.raises(nnvm.Error, match="quantized already"):
        nnvm.quantize(q, _tiny_inputs(2, 0))


def test_bias_correction_keeps_the_float_mean_of_the_logits(resnet18):
    """The logits' error averaged over inputs (its systematic part) is what bias correction removes:
    smaller with it than without, both measured against the float model."""
    from nnvm_frontend_onnx.quantizer import quantize_onnx

    path, corrected = resnet18
    plain = quantize_onnx(path, generated_images(8, seed=2), bias_correction=False)
    images = generated_images(12, seed=1)
    want = np.stack([_session(path).run(None, {"data": x})[0][0] for x in images])
    shift = {}
    for label, q in (("corrected", corrected), ("plain", plain)):
        sess = _session(q)
        got = np.stack([sess.run(None, {"data": x})[0][0] for x in images])
        shift[label] = float(np.sqrt(np.mean((got - want).mean(0) ** 2)))
    assert shift["corrected"] < 0.75 * shift["plain"], shift


@pytest.mark.parametrize("attrs,cin,groups", [
    ({"pads": [1, 1, 1, 1], "strides": [2, 2]}, 4, 1),
    ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, 4, 1),
    ({"pads": [0, 1, 2, 0], "dilations": [2, 1]}, 6, 3),
    ({}, 4, 1),
])
def test_bias_correction_is_the_mean_shift_onnxruntime_computes(attrs, cin, groups):
    """The correction of a Conv is exactly the mean output shift of its rounded weights, padding and
    borders included: onnxruntime's Conv with the dequantized weights less with the float ones."""
    from nnvm.calibration import quantize_weight
    from nnvm_frontend_onnx.quantizer import _bias_correction, _tap_means

    rng = np.random.default_rng(0)
    x = (rng.standard_normal((3, cin, 7, 9)) + 2).astype(np.float32)  # a large mean, as after a ReLU
    w = rng.standard_normal((6, cin // groups, 3, 3)).astype(np.float32)
    q, scale = quantize_weight(w, 0)
    node = helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[3, 3], group=groups, **attrs)

    def conv(weights):
        graph = helper.make_graph([node], "conv",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                                  [numpy_helper.from_array(weights, "w")])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
        model.ir_version = 8
        return _session(model).run(None, {"x": x})[0].astype(np.float64)

    want = (conv((q * scale.reshape(-1, 1, 1, 1)).astype(np.float32)) - conv(w)).mean((0, 2, 3))
    got = _bias_correction(node, w, q, scale, 0, _tap_means(node, [3, 3])(x))
    assert np.abs(got - want).max() < 1e-5 * max(np.abs(want).max(), 1.0), (got, want)


def test_two_inputs_matmul_and_gemm_without_transpose():
    """Samples as dicts by input name; MatMul and Gemm (transB=0) weights per column (axis 1); a Gemm
    without a bias gets one from bias correction; the tail after the last MatMul stays float."""
    rng = np.random.default_rng(4)
    inits = [numpy_helper.from_array(rng.normal(0, 0.3, (16, 12)).astype(np.float32), "w1"),
             numpy_helper.from_array(rng.normal(0, 0.3, (12, 6)).astype(np.float32), "w2")]
    nodes = [helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("MatMul", ["s", "w1"], ["m"]),
             helper.make_node("Relu", ["m"], ["r"]),
             helper.make_node("Gemm", ["r", "w2"], ["y"])]
    graph = helper.make_graph(nodes, "two", [helper.make_tensor_value_info(n, TensorProto.FLOAT, [4, 16])
                                             for n in ("a", "b")],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8

    def sample(seed):
        r = np.random.default_rng(seed)
        return {"a": r.standard_normal((4, 16)).astype(np.float32),
                "b": r.uniform(0, 1, (4, 16)).astype(np.float32)}

    q = nnvm.quantize(model, [sample(k) for k in range(8)])
    onnx.checker.check_model(q)
    producer = {o: n for n in q.graph.node for o in n.output}
    for op in ("MatMul", "Gemm"):
        (node,) = [n for n in q.graph.node if n.op_type == op]
        w_dq = producer[node.input[1]]
        assert w_dq.op_type == "DequantizeLinear" and w_dq.attribute[0].i == 1, op
    (gemm,) = [n for n in q.graph.node if n.op_type == "Gemm"]
    assert len(gemm.input) == 3 and producer[gemm.input[2]].op_type == "DequantizeLinear"
    assert "Relu" not in [n.op_type for n in q.graph.node]
    f, s = _session(model), _session(q)
    for k in (0, 1):  # calibration samples: no value beyond the min-max ranges, only rounding
        want, got = f.run(None, sample(k))[0], s.run(None, sample(k))[0]
        assert np.abs(got - want).max() < 0.05 * np.abs(want).max()
