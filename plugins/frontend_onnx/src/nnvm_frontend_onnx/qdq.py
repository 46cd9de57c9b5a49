"""QDQ models into quantized operators: the patterns onnxruntime's quantizer writes, found before
conversion and rewritten into the QOperator nodes they stand for, so the integer work runs in integers.

A QDQ model (``quantize_static(..., quant_format=QDQ)``) keeps float operators between
DequantizeLinear and QuantizeLinear pairs; onnxruntime fuses those back into integer kernels when it
loads the model, and so do we, in the same terms:

    DQ(x) -> Conv(DQ(w), DQ(int32 bias)) [-> Relu] -> Q      QLinearConv
    DQ(a) -> MatMul(DQ(b)) -> Q                                QLinearMatMul
    DQ(a) -> Gemm(DQ(b), DQ(int32 bias)) [-> Q]                com.microsoft QGemm (float out without Q)
    DQ(a), DQ(b) -> Add / Mul -> Q                             com.microsoft QLinearAdd / QLinearMul
    DQ(x) -> GlobalAveragePool -> Q                            com.microsoft QLinearGlobalAveragePool
    DQ(x) -> MaxPool -> Q, same scale and zero point           MaxPool of the quantized tensor

Scales and zero points must be initializers, activations per tensor, weights per tensor or per output
channel; a Relu before the Q is dropped only where the Q's zero point is its type's minimum (the Q's
saturation is then the Relu). Anything else is left as it is and runs in float, as before: correct,
only slower. The converters (``convert_quant``) lower the QOperator nodes onto ``nnvm.ops.quant``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

MICROSOFT = "com.microsoft"


class _Model:
    """The node list with who produces and who reads each value."""

    def __init__(self, nodes: list, initializer: Callable, outputs: set):
        self.nodes = nodes
        self.initializer = initializer  # value name -> np.ndarray, or None if not an initializer
        self.outputs = outputs
        self.producer = {o: node for node, _ in nodes for o in node.output if o}
        self.readers: dict[str, list] = {}
        for node, _ in nodes:
            for v in node.input:
                if v:
                    self.readers.setdefault(v, []).append(node)

    def only_reader(self, v: str):
        readers = self.readers.get(v, [])
        if len(readers) != 1 or v in self.outputs:
            return None
        return readers[0]

    def const(self, v: str):
        return self.initializer(v) if v else None


def _attr(node, name: str, default=None):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            return helper.get_attribute_value(a)
    return default


def _qparams(m: _Model, node, per_axis: int | None = None):
    """(scale array, zero point array or None) of a (De)QuantizeLinear whose scale and zero point are
    initializers: per tensor, or (``per_axis`` given) per channel along that axis. None otherwise."""
    if _attr(node, "block_size", 0):
        return None
    scale = m.const(node.input[1])
    zp = m.const(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    if scale is None or (len(node.input) > 2 and node.input[2] and zp is None):
        return None
    if scale.size != 1:
        if per_axis is None or scale.ndim != 1:
            return None
        if int(_attr(node, "axis", 1)) != per_axis:
            return None
    return scale, zp


def _activation_dq(m: _Model, v: str):
    """The per-tensor DequantizeLinear of an 8-bit activation producing ``v``, or None."""
    node = m.producer.get(v)
    if node is None or node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
        return None
    q = _qparams(m, node)
    if q is None or (q[1] is not None and str(q[1].dtype) not in ("uint8", "int8")):
        return None
    if q[1] is None and m.initializer(node.input[0]) is None:
        return None  # no zero point: the type is the input's, not known here; leave it
    return node


def _weight_dq(m: _Model, v: str, axis: int):
    """The DequantizeLinear of an 8-bit weight initializer producing ``v`` (per tensor or along
    ``axis``), or None."""
    node = m.producer.get(v)
    if node is None or node.op_type != "DequantizeLinear":
        return None
    w = m.const(node.input[0])
    if w is None or str(w.dtype) not in ("int8", "uint8") or _qparams(m, node, per_axis=axis) is None:
        return None
    return node


def _bias_dq(m: _Model, v: str, x_dq, w_dq):
    """The DequantizeLinear of an int32 bias at scale x_scale * w_scale, or None."""
    node = m.producer.get(v)
    if node is None or node.op_type != "DequantizeLinear" or m.const(node.input[0]) is None:
        return None
    if str(m.const(node.input[0]).dtype) != "int32":
        return None
    q = _qparams(m, node, per_axis=0)
    if q is None or (q[1] is not None and np.any(q[1] != 0)):
        return None
    want = np.float32(m.const(x_dq.input[1]).reshape(())) * m.const(w_dq.input[1]).astype(np.float32)
    if not np.allclose(q[0].astype(np.float32), want, rtol=1e-5, atol=0):
        return None
    return node


def _output_q(m: _Model, v: str, allow_relu: bool = True):
    """The per-tensor QuantizeLinear that is the only reader of ``v`` (through a Relu that its
    saturation makes redundant, if ``allow_relu``), and the Relu node or None."""
    node = m.only_reader(v)
    relu = None
    if allow_relu and node is not None and node.op_type == "Relu":
        relu, node = node, m.only_reader(node.output[0])
    if node is None or node.op_type != "QuantizeLinear" or node.domain not in ("", "ai.onnx"):
        return None, None
    q = _qparams(m, node)
    if q is None or q[1] is None or str(q[1].dtype) not in ("uint8", "int8"):
        return None, None
    if relu is not None and int(q[1].reshape(())) != int(np.iinfo(q[1].dtype).min):
        return None, None
    return node, relu


def _zp(node) -> str:
    return node.input[2] if len(node.input) > 2 else ""


def _make(op_type: str, inputs: list, outputs: list, like, domain: str = "", attributes=()):
    from onnx import helper

    node = helper.make_node(op_type, inputs, outputs, name=like.name, domain=domain)
    node.attribute.extend(attributes)
    return node


def _rewrite_conv(m: _Model, node):
    x_dq = _activation_dq(m, node.input[0])
    w_dq = _weight_dq(m, node.input[1], axis=0) if len(node.input) > 1 else None
    if x_dq is None or w_dq is None or not _zp(x_dq):
        return None
    bias = node.input[2] if len(node.input) > 2 else ""
    b_dq = _bias_dq(m, bias, x_dq, w_dq) if bias else None
    if bias and b_dq is None:
        return None
    q, relu = _output_q(m, node.output[0])
    if q is None:
        return None
    inputs = [x_dq.input[0], x_dq.input[1], _zp(x_dq), w_dq.input[0], w_dq.input[1], _zp(w_dq), q.input[1],
              _zp(q)] + ([b_dq.input[0]] if b_dq is not None else [])
    return _make("QLinearConv", inputs, [q.output[0]], node, attributes=node.attribute), [q, relu]


def _rewrite_matmul(m: _Model, node):
    a_dq = _activation_dq(m, node.input[0])
    b = m.producer.get(node.input[1])
    if a_dq is None or not _zp(a_dq) or b is None or m.const(b.input[0]) is None:
        return None
    if m.const(b.input[0]).ndim != 2 or _weight_dq(m, node.input[1], axis=1) is None:
        return None
    q, relu = _output_q(m, node.output[0], allow_relu=False)
    if q is None:
        return None
    inputs = [a_dq.input[0], a_dq.input[1], _zp(a_dq), b.input[0], b.input[1], _zp(b), q.input[1], _zp(q)]
    return _make("QLinearMatMul", inputs, [q.output[0]], node), [q]


def _rewrite_gemm(m: _Model, node):
    if int(_attr(node, "transA", 0)) or float(_attr(node, "beta", 1.0)) != 1.0:
        return None
    a_dq = _activation_dq(m, node.input[0])
    trans_b = int(_attr(node, "transB", 0))
    b_dq = _weight_dq(m, node.input[1], axis=0 if trans_b else 1)
    if a_dq is None or b_dq is None or not _zp(a_dq) or m.const(b_dq.input[0]).ndim != 2:
        return None
    bias = node.input[2] if len(node.input) > 2 else ""
    c_dq = _bias_dq(m, bias, a_dq, b_dq) if bias else None
    if bias and (c_dq is None or float(_attr(node, "alpha", 1.0)) != 1.0):
        return None
    q, _ = _output_q(m, node.output[0], allow_relu=False)
    inputs = [a_dq.input[0], a_dq.input[1], _zp(a_dq), b_dq.input[0], b_dq.input[1], _zp(b_dq),
              c_dq.input[0] if c_dq is not None else ""]
    if q is None:  # float output
        return _make("QGemm", inputs, [node.output[0]], node, MICROSOFT, node.attribute), []
    return _make("QGemm", inputs + [q.input[1], _zp(q)], [q.output[0]], node, MICROSOFT, node.attribute), [q]


def _rewrite_binary(m: _Model, node):
    dqs = [_activation_dq(m, v) for v in node.input[:2]]
    if any(d is None or not _zp(d) for d in dqs):
        return None
    if any(m.const(d.input[0]) is not None for d in dqs):
        return None  # a constant operand: leave it to the float path
    q, _ = _output_q(m, node.output[0], allow_relu=False)
    if q is None:
        return None
    inputs = [v for d in dqs for v in (d.input[0], d.input[1], _zp(d))] + [q.input[1], _zp(q)]
    return _make(f"QLinear{node.op_type}", inputs, [q.output[0]], node, MICROSOFT), [q]


def _rewrite_global_average_pool(m: _Model, node):
    x_dq = _activation_dq(m, node.input[0])
    if x_dq is None or not _zp(x_dq):
        return None
    q, _ = _output_q(m, node.output[0], allow_relu=False)
    if q is None:
        return None
    inputs = [x_dq.input[0], x_dq.input[1], _zp(x_dq), q.input[1], _zp(q)]
    return _make("QLinearGlobalAveragePool", inputs, [q.output[0]], node, MICROSOFT), [q]


def _rewrite_max_pool(m: _Model, node):
    """max commutes with a monotonic quantization: the pool of the quantized tensor is exact."""
    if len([o for o in node.output if o]) != 1:
        return None
    x_dq = _activation_dq(m, node.input[0])
    q, _ = _output_q(m, node.output[0], allow_relu=False)
    if x_dq is None or q is None or not _zp(x_dq):
        return None
    same = all(np.array_equal(m.const(a), m.const(b)) and m.const(a).dtype == m.const(b).dtype
               for a, b in ((x_dq.input[1], q.input[1]), (_zp(x_dq), _zp(q))))
    if not same:
        return None
    return _make("MaxPool", [x_dq.input[0]], [q.output[0]], node, attributes=node.attribute), [q]


REWRITES = {"Conv": _rewrite_conv, "MatMul": _rewrite_matmul, "Gemm": _rewrite_gemm, "Add": _rewrite_binary,
            "Mul": _rewrite_binary, "GlobalAveragePool": _rewrite_global_average_pool,
            "MaxPool": _rewrite_max_pool}


def fuse_qdq(nodes: list, initializer: Callable, outputs: list[str]) -> list:
    """``(node, name)`` pairs with the QDQ patterns above replaced by quantized nodes (the
    DequantizeLinear nodes nothing reads any more are left for the caller's liveness pass).
    ``initializer(name)`` is the array of an initializer, or None."""
    if not any(node.op_type == "DequantizeLinear" for node, _ in nodes):
        return nodes
    m = _Model(nodes, initializer, set(outputs))
    replaced: dict[int, object] = {}
    removed: set[int] = set()
    for node, _ in nodes:
        rewrite = REWRITES.get(node.op_type)
        if rewrite is None or node.domain not in ("", "ai.onnx") or id(node) in removed:
            continue
        result = rewrite(m, node)
        if result is None:
            continue
        new, absorbed = result
        replaced[id(node)] = new
        removed.update(id(n) for n in absorbed if n is not None)
    return [(replaced.get(id(node), node), name) for node, name in nodes if id(node) not in removed]
